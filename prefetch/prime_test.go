package prefetch

import (
	"testing"
	"time"

	"github.com/shardfs/shardfs/cache"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/internal/testds"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/metrics"
	"github.com/shardfs/shardfs/repository"
)

// TestPrimeFetchesTheFirstBatchesBeforeAnyReader: a primed rank-epoch has
// its first batches cached before any file of it is opened, within the
// lead; a reader of another rank leaves the primer alone, a reader of its
// rank ends it, and members before where that reader started are nobody's
// next use.
func TestPrimeFetchesTheFirstBatchesBeforeAnyReader(t *testing.T) {
	met := metrics.New(make([]string, 6))
	ds := testds.New(t, synth.Spec{Counts: []int{120, 60, 20}, MinSize: 2000, MaxSize: 4000, Seed: 3}, met)
	in, _ := repository.LayoutInput(ds.Manifest)
	cat := repository.ManifestCatalog{M: ds.Manifest}
	members := func(rank int) *layout.Members {
		o, err := layout.Order(in, layout.Params{World: 2, Rank: rank, Batch: 10, Alpha: 1, Seed: 4})
		if err != nil {
			t.Fatal(err)
		}
		return layout.NewMembers(o, cat)
	}
	m0, m1 := members(0), members(1)
	batchBytes := m0.Offset(10) - m0.Offset(0)
	cfg := DefaultConfig()
	cfg.Budget, cfg.MinLead = 3*batchBytes, 3*batchBytes
	c := cache.New(64<<20, nil)
	r := New(ds, cat, c, met, cfg, nil)
	defer r.Close()

	r.Prime(m0.Batch(0), time.Minute)
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < 20; i++ { // batches 0 and 1
		for !c.Contains(cache.Key{Sample: int64(m0.Sample(i))}) {
			if time.Now().After(deadline) {
				t.Fatalf("member %d of the primed rank-epoch not fetched within 10s", i)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if n := met.PrefetchBytes.Load(); n > 2*cfg.Budget {
		t.Fatalf("priming fetched %d bytes with a lead of %d", n, cfg.Budget)
	}
	if met.BytesServed.Load() != 0 {
		t.Fatalf("priming served %d bytes: it reads nothing", met.BytesServed.Load())
	}

	h1 := r.Open(m1.Batch(0)) // another rank's reader
	defer h1.Close()
	time.Sleep(50 * time.Millisecond)
	if r.Primed() != 1 {
		t.Fatalf("a reader of rank 1 ended rank 0's priming: %d primers open", r.Primed())
	}
	h0 := r.Open(m0.Batch(3)) // rank 0's job starts at batch 3
	defer h0.Close()
	for r.Primed() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("a reader of rank 0 did not end its priming")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Batch 0's members lie before where the reader started: no next use
	// (a primer moves no frontier), so the cache may evict them first.
	if u := r.nextUse(cache.Key{Sample: int64(m0.Sample(0))}); u != cache.NoUse && !sampleIn(m1, m0.Sample(0)) {
		t.Fatalf("member 0, before the reader at batch 3, has next use %d; want none", u)
	}
}

// TestPrimeEndsAfterHold: nobody comes, so the primer closes after hold
// and its stream is dropped as any idle one is.
func TestPrimeEndsAfterHold(t *testing.T) {
	met := metrics.New(make([]string, 6))
	ds := testds.New(t, synth.Spec{Counts: []int{40, 20}, MinSize: 2000, MaxSize: 4000, Seed: 5}, met)
	in, _ := repository.LayoutInput(ds.Manifest)
	cat := repository.ManifestCatalog{M: ds.Manifest}
	o, err := layout.Order(in, layout.Params{World: 1, Batch: 10, Alpha: 1, Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	m := layout.NewMembers(o, cat)
	cfg := DefaultConfig()
	cfg.IdleAfter = 100 * time.Millisecond
	r := New(ds, cat, cache.New(64<<20, nil), met, cfg, nil)
	defer r.Close()
	r.Prime(m.Batch(0), 200*time.Millisecond)
	if r.Primed() != 1 || r.Streams() != 1 {
		t.Fatalf("primed %d, streams %d; want 1 and 1", r.Primed(), r.Streams())
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.Primed() != 0 || r.Streams() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after its hold: primed %d, streams %d; want 0 and 0", r.Primed(), r.Streams())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func sampleIn(m *layout.Members, s int) bool {
	for i := 0; i < m.Len(); i++ {
		if m.Sample(i) == s {
			return true
		}
	}
	return false
}
