package metrics

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardfs/shardfs/erasure"
)

// A snapshot taken while GETs land says as many bytes fetched as its
// stores served, and as many GETs by kind as its stores' requests:
// stats.json's totals and its stores' counts are one reading, not two
// taken a moment apart (CI at e17e8e3: "bytes fetched 50523031, the
// stores served 50567670", a mount prefetching while the test read its
// stats).
func TestSnapshotTotalsAreItsStores(t *testing.T) {
	m := New([]string{"s0", "s1", "s2"})
	var stop atomic.Bool
	var wg sync.WaitGroup
	for s := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				m.BackendRead(s, 0, 4096, time.Millisecond, time.Millisecond, erasure.ReadPrefetch, nil)
				m.BackendRead(s, 0, 4096, time.Millisecond, time.Millisecond, erasure.ReadDemand, nil)
			}
		}()
	}
	defer func() { stop.Store(true); wg.Wait() }()
	deadline := time.Now().Add(2 * time.Second)
	var snaps int
	for ; time.Now().Before(deadline); snaps++ {
		s := m.Snapshot()
		var stores, requests, kinds int64
		for _, st := range s.Stores {
			stores += st.Bytes
			requests += st.Requests
		}
		for _, n := range s.GETsByKind {
			kinds += n
		}
		if s.BytesFetched != stores {
			t.Fatalf("snapshot %d: bytes fetched %d, its stores served %d", snaps, s.BytesFetched, stores)
		}
		if kinds != requests || len(s.GETsByKind) != int(erasure.NumReadKinds) {
			t.Fatalf("snapshot %d: GETs by kind %v add up to %d, its stores counted %d requests", snaps, s.GETsByKind, kinds, requests)
		}
	}
	if m.fetched() == 0 {
		t.Fatalf("no GET landed in %d snapshots: the test measured nothing", snaps)
	}
}
