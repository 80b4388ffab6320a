package prefetch

import (
	"context"
	"testing"
	"time"

	"github.com/shardfs/shardfs/cache"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/internal/testds"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/metrics"
	"github.com/shardfs/shardfs/repository"
)

func (s *stream) isRunning() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running
}

// TestPumpStopsWhenIdle: a rank-epoch nobody reads stops costing a goroutine,
// and reading it again starts prefetching again.
func TestPumpStopsWhenIdle(t *testing.T) {
	met := metrics.New(make([]string, 6))
	ds := testds.New(t, synth.Spec{Counts: []int{20, 10}, MinSize: 100, MaxSize: 2000, Seed: 1}, met)
	in, _ := repository.LayoutInput(ds.Manifest)
	cat := repository.ManifestCatalog{M: ds.Manifest}
	o, err := layout.Order(in, layout.Params{World: 1, Batch: 5, Alpha: 1})
	if err != nil {
		t.Fatal(err)
	}
	m := layout.NewMembers(o, cat)
	r := New(ds, cat, cache.New(1<<20, nil), met, DefaultConfig(), nil)
	defer r.Close()
	h := r.Open(m.Epoch())
	buf := make([]byte, 4096)
	if _, err := h.ReadAt(context.Background(), buf, 0); err != nil {
		t.Fatal(err)
	}
	st := h.st
	h.Close()
	deadline := time.Now().Add(20 * time.Second)
	for st.isRunning() {
		if time.Now().After(deadline) {
			t.Fatal("pump still running 20s after the last handle closed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r.Streams() != 0 {
		t.Fatalf("%d streams kept after the pump stopped, want 0", r.Streams())
	}
	h = r.Open(m.Batch(1))
	defer h.Close()
	if !h.st.isRunning() {
		t.Fatal("opening the rank-epoch again did not start prefetching again")
	}
}

// TestThousandEpochsLeaveNoStreams: opening and closing files of 1,000
// rank-epochs (a long run's epochs) leaves no stream, and no pinned order,
// behind once they go idle.
func TestThousandEpochsLeaveNoStreams(t *testing.T) {
	met := metrics.New(make([]string, 6))
	ds := testds.New(t, synth.Spec{Counts: []int{20, 10}, MinSize: 100, MaxSize: 2000, Seed: 1}, met)
	in, _ := repository.LayoutInput(ds.Manifest)
	cat := repository.ManifestCatalog{M: ds.Manifest}
	cfg := DefaultConfig()
	cfg.IdleAfter = 200 * time.Millisecond
	r := New(ds, cat, cache.New(1<<20, nil), met, cfg, nil)
	defer r.Close()
	buf := make([]byte, 4096)
	for e := 0; e < 1000; e++ {
		o, err := layout.Order(in, layout.Params{World: 1, Batch: 5, Alpha: 1, Epoch: e})
		if err != nil {
			t.Fatal(err)
		}
		h := r.Open(layout.NewMembers(o, cat).Batch(0))
		if _, err := h.ReadAt(context.Background(), buf, 0); err != nil {
			t.Fatal(err)
		}
		h.Close()
	}
	if r.Streams() == 0 {
		t.Fatal("no stream right after 1,000 opens: the count is not tracking streams")
	}
	deadline := time.Now().Add(30 * time.Second)
	for r.Streams() > 0 || met.PrefetchStreams.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d streams (metric %d) still kept 30s after 1,000 rank-epochs were closed", r.Streams(), met.PrefetchStreams.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
