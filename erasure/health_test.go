package erasure

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/faultstore"
)

type countMetrics struct {
	nopMetrics
	hedged, degraded atomic.Int64
	down             [16]atomic.Bool
	markedDown       [16]atomic.Int64 // times each store was marked down
	reads            [16]atomic.Int64
	kinds            [NumReadKinds]atomic.Int64
	rebuilt          [16]atomic.Int64 // degraded reads that rebuilt the store's fragment
	mu               sync.Mutex
	reasons          map[string]int
}

func (m *countMetrics) BackendRead(s, sh, n int, d, ttfb time.Duration, kind ReadKind, err error) {
	m.reads[s].Add(1)
	m.kinds[kind].Add(1)
}

// allReads is the GETs counted on every store.
func (m *countMetrics) allReads() int64 {
	var n int64
	for i := range m.reads {
		n += m.reads[i].Load()
	}
	return n
}

func (m *countMetrics) HedgedRead(reason string) {
	m.hedged.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.reasons == nil {
		m.reasons = map[string]int{}
	}
	m.reasons[reason]++
}

// hedgesFor is how many hedges were for reason.
func (m *countMetrics) hedgesFor(reason string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reasons[reason]
}

func (m *countMetrics) DegradedRead(stores []int) {
	m.degraded.Add(1)
	for _, s := range stores {
		m.rebuilt[s].Add(1)
	}
}
func (m *countMetrics) StoreState(s int, down bool) {
	m.down[s].Store(down)
	if down {
		m.markedDown[s].Add(1)
	}
}

// faultyShard is testShard with every store wrapped in a Faulty.
func faultyShard(t *testing.T, p Params, data []byte, opts HealthOptions) (*Reader, *Shard, []*faultstore.Faulty, *countMetrics) {
	t.Helper()
	r, sh, _ := testShard(t, p, 0, data)
	var faulty []*faultstore.Faulty
	var stores []backend.Store
	for _, s := range r.stores {
		f := faultstore.New(s.Unwrap())
		faulty = append(faulty, f)
		stores = append(stores, f)
	}
	m := &countMetrics{}
	r2, err := NewReader(r.codec, stores, fragKey, ReaderOptions{Metrics: m, Health: opts})
	if err != nil {
		t.Fatal(err)
	}
	return r2, sh, faulty, m
}

// TestHedgeAroundHungStore: the store holding the data fragment hangs for a
// minute; the read must finish well inside its 30 s context by decoding from
// parity, and count a hedge.
func TestHedgeAroundHungStore(t *testing.T) {
	p := Params{4, 2, 256}
	data := bytes.Repeat([]byte("hedge me "), 1000)
	r, sh, faulty, m := faultyShard(t, p, data, HealthOptions{HedgeFloor: 20 * time.Millisecond})
	faulty[p.Placement(0, 0)].SetDelay(time.Minute, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, exact := range []bool{false, true} {
		var got []byte
		var err error
		if exact {
			got, err = readExact(ctx, r, sh, 10, 500, func(b []byte) bool { return bytes.Equal(b, data[10:510]) })
		} else {
			got, err = r.ReadRange(ctx, sh, 10, 500)
		}
		if err != nil || !bytes.Equal(got, data[10:510]) {
			t.Fatalf("exact=%v: read around a hung store: %v", exact, err)
		}
	}
	if m.hedged.Load() == 0 || m.degraded.Load() == 0 {
		t.Fatalf("hedged %d, degraded %d: want both > 0", m.hedged.Load(), m.degraded.Load())
	}
	// Every hedge was for a store that never answered, and every degraded
	// read rebuilt the hung store's fragment, no other.
	if n := m.hedgesFor(HedgeNoFirstByte); n != int(m.hedged.Load()) {
		t.Fatalf("%d of %d hedges for %s", n, m.hedged.Load(), HedgeNoFirstByte)
	}
	hung := p.Placement(0, 0)
	for s := range p.Total() {
		if got, want := m.rebuilt[s].Load(), map[bool]int64{true: m.degraded.Load()}[s == hung]; got != want {
			t.Fatalf("store %d rebuilt in %d degraded reads, want %d (the hung store is %d)", s, got, want, hung)
		}
	}
}

// TestStoreMarkedDownAndBack: a store that keeps failing is marked down and
// skipped; once it recovers, a probe after the backoff brings it back.
func TestStoreMarkedDownAndBack(t *testing.T) {
	p := Params{4, 2, 256}
	data := bytes.Repeat([]byte("health "), 2000)
	r, sh, faulty, m := faultyShard(t, p, data, HealthOptions{MinBackoff: 50 * time.Millisecond})
	store := p.Placement(0, 0)
	faulty[store].SetDown(true)
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		got, err := r.ReadRange(ctx, sh, 0, 1000)
		if err != nil || !bytes.Equal(got, data[:1000]) {
			t.Fatalf("read %d with store down: %v", i, err)
		}
	}
	if !r.StoreDown(store) || !m.down[store].Load() {
		t.Fatal("a store failing every read was not marked down")
	}
	faulty[store].SetDown(false)
	deadline := time.Now().Add(10 * time.Second)
	for r.StoreDown(store) || m.down[store].Load() {
		if time.Now().After(deadline) {
			t.Fatal("store did not come back after recovering")
		}
		time.Sleep(20 * time.Millisecond)
		if _, err := r.ReadRange(ctx, sh, 0, 1000); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMissingObjectsAreNotStoreFaults: missing objects do not mark a store
// down; only unavailability, and wrong bytes, do.
func TestMissingObjectsAreNotStoreFaults(t *testing.T) {
	p := Params{4, 2, 256}
	data := bytes.Repeat([]byte("x"), 4096)
	r, sh, _, _ := faultyShard(t, p, data, HealthOptions{})
	store := p.Placement(0, 0)
	if err := r.stores[store].Delete(context.Background(), fragKey(0, 0)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		// The store answers "no such object": each read names it for healing.
		if got, err := r.ReadRange(context.Background(), sh, 0, 100); !served(err, 0, store) || err == nil || !bytes.Equal(got, data[:100]) {
			t.Fatalf("read %d: %v", i, err)
		}
	}
	if r.StoreDown(store) {
		t.Fatal("a missing object marked the store down")
	}
}

// Issue 23 item 7: a store that served flipped bytes stayed "healthy" after
// 1,345 checksum failures, so reads kept going to it first. Checksum
// failures count in its health: it is marked down, a probe (which it
// answers) does not bring it back for long, and a read that verifies does.
func TestCorruptingStoreIsMarkedDown(t *testing.T) {
	p := Params{4, 2, 256}
	data := bytes.Repeat([]byte("abcdefgh"), 512)
	r, sh, faulty, m := faultyShard(t, p, data, HealthOptions{MinBackoff: 20 * time.Millisecond, MaxBackoff: time.Second})
	store := p.Placement(0, 0)
	faulty[store].SetFlipBits(true)
	for i := 0; i < 10; i++ {
		// Served; named for healing when its bytes were read and failed.
		if got, err := r.ReadRange(context.Background(), sh, 0, 100); !served(err, 0, store) || !bytes.Equal(got, data[:100]) {
			t.Fatalf("read %d: %v", i, err)
		}
	}
	// Marked down, counted rather than sampled: with a 20 ms backoff on a
	// busy machine, the background probe may have brought it back for a
	// moment after the last read (the next read sends it down again).
	if m.markedDown[store].Load() == 0 {
		t.Fatal("10 reads with checksum failures: the store was never marked down")
	}
	if n := m.reads[store].Load(); n >= 10 {
		t.Fatalf("10 reads with checksum failures: the corrupting store was read %d times, want it skipped once marked down", n)
	}
	// Past each backoff its probe answers; the first read that goes to it
	// again fails its checksum and sends it down at once, for longer.
	reads := 0
	m.reads[store].Store(0)
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		if got, err := r.ReadRange(context.Background(), sh, 0, 100); !served(err, 0, store) || !bytes.Equal(got, data[:100]) {
			t.Fatalf("read while corrupting: %v", err)
		}
		reads++
	}
	if n := m.reads[store].Load(); n > 40 {
		t.Fatalf("%d reads over 3 s: the corrupting store was read %d times, want it mostly skipped", reads, n)
	}
	// Healed: once its backoff ends, a read that verifies brings it back.
	faulty[store].SetFlipBits(false)
	back := false
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && !back; {
		time.Sleep(20 * time.Millisecond)
		r.ReadRange(context.Background(), sh, 0, 100)
		back = !r.StoreDown(store)
	}
	if !back {
		t.Fatal("the healed store was not back within 5 s")
	}
}

// TestSlowIsNotLost: with one store down and one corrupting, a third that is
// merely slower than the hedge deadline still holds the k-th fragment: the
// read must wait for it rather than fail.
func TestSlowIsNotLost(t *testing.T) {
	p := Params{4, 2, 256}
	data := bytes.Repeat([]byte("slow but intact "), 800)
	r, sh, faulty, _ := faultyShard(t, p, data, HealthOptions{HedgeFloor: 5 * time.Millisecond})
	faulty[p.Placement(0, 0)].SetDown(true)
	faulty[p.Placement(0, 1)].SetFlipBits(true)
	faulty[p.Placement(0, 2)].SetDelay(100*time.Millisecond, 0)
	for _, rg := range [][2]int64{{0, 3000}, {3200, 3000}, {6400, 2000}} {
		got, err := readExact(context.Background(), r, sh, rg[0], rg[1], func(b []byte) bool { return bytes.Equal(b, data[rg[0]:rg[0]+rg[1]]) })
		if !served(err, 0, p.Placement(0, 1)) || !bytes.Equal(got, data[rg[0]:rg[0]+rg[1]]) {
			t.Fatalf("range %v: %v", rg, err)
		}
	}
}

// Issue 46 item 3: every GET is counted under why it was made. A prefetch
// context's healthy reads are prefetch; with the data fragment's store
// down, its rebuild is degraded; with it hung, the race is hedge. The
// kinds add up to the GETs.
func TestReadKinds(t *testing.T) {
	p := Params{4, 2, 256}
	data := bytes.Repeat([]byte("kinds "), 1000)
	r, sh, faulty, m := faultyShard(t, p, data, HealthOptions{HedgeFloor: 20 * time.Millisecond, MinBackoff: time.Hour})
	ctx, cancel := context.WithTimeout(WithReadKind(context.Background(), ReadPrefetch), 30*time.Second)
	defer cancel()
	read := func(stage string) {
		t.Helper()
		for _, exact := range []bool{false, true} {
			var got []byte
			var err error
			if exact {
				got, err = readExact(ctx, r, sh, 10, 500, func(b []byte) bool { return bytes.Equal(b, data[10:510]) })
			} else {
				got, err = r.ReadRange(ctx, sh, 10, 500)
			}
			if err != nil || !bytes.Equal(got, data[10:510]) {
				t.Fatalf("%s, exact=%v: %v", stage, exact, err)
			}
		}
	}
	read("healthy")
	if m.kinds[ReadPrefetch].Load() != m.allReads() || m.allReads() == 0 {
		t.Fatalf("healthy: %d GETs, %d of them prefetch; want all", m.allReads(), m.kinds[ReadPrefetch].Load())
	}
	faulty[p.Placement(0, 0)].SetDelay(time.Minute, 0)
	read("hung")
	if m.kinds[ReadHedge].Load() == 0 {
		t.Fatalf("a hung store: no hedge GETs counted (kinds %v)", m.kindCounts())
	}
	faulty[p.Placement(0, 0)].SetDelay(0, 0)
	faulty[p.Placement(0, 0)].SetDown(true)
	before := m.kinds[ReadDegraded].Load()
	for range 4 {
		read("down")
	}
	if m.kinds[ReadDegraded].Load() == before {
		t.Fatalf("a store down: no degraded GETs counted (kinds %v)", m.kindCounts())
	}
	var sum int64
	for k := range NumReadKinds {
		sum += m.kinds[k].Load()
	}
	if sum != m.allReads() || m.kinds[ReadDemand].Load() != 0 {
		t.Fatalf("kinds %v add up to %d of %d GETs; none was demand", m.kindCounts(), sum, m.allReads())
	}
}

func (m *countMetrics) kindCounts() map[string]int64 {
	out := map[string]int64{}
	for k := range NumReadKinds {
		out[k.String()] = m.kinds[k].Load()
	}
	return out
}
