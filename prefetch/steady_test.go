package prefetch_test

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/shardfs/shardfs/cache"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/internal/testds"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/metrics"
	"github.com/shardfs/shardfs/prefetch"
	"github.com/shardfs/shardfs/repository"
)

// The steady state of issue 25, in process: 8 DataLoader-style workers
// take batch files in stripes (worker w reads batches w, w+8, ...), each
// pausing between two files as a trainer does, through a cache a third of
// the epoch, with store latency. Epoch 0 fills the cache; epoch 1 is
// measured: the bytes fetched from the stores over the bytes served, the
// chunks evicted before any reader took them, and the reads that waited.
func BenchmarkSteadyState_8StridingWorkers(b *testing.B) {
	for _, window := range []int{0, 4} {
		name := "global"
		if window > 0 {
			name = "window4"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				steadyState(b, window)
			}
		})
	}
}

func steadyState(b *testing.B, window int) {
	met := metrics.New(make([]string, 6))
	ds := testds.New(b, synth.Spec{Counts: []int{2000, 1200, 800}, MinSize: 50_000, MaxSize: 150_000, Seed: 31}, met)
	for _, f := range ds.Faulty {
		f.SetDelay(20*time.Millisecond, 5*time.Millisecond)
	}
	in, err := repository.LayoutInput(ds.Manifest)
	if err != nil {
		b.Fatal(err)
	}
	cat := repository.ManifestCatalog{M: ds.Manifest}
	epochBytes := ds.Manifest.TotalBytes()
	c := cache.New(epochBytes/3, nil)
	cfg := prefetch.DefaultConfig()
	cfg.Budget, cfg.MinLead, cfg.InFlight = epochBytes/6, epochBytes/12, 16<<20
	r := prefetch.New(ds, cat, c, met, cfg, nil)
	defer r.Close()
	ctx := context.Background()
	readEpoch := func(e int) time.Duration {
		o, err := layout.Order(in, layout.Params{Seed: 5, Epoch: e, World: 1, Batch: 32, Alpha: 1, Window: window})
		if err != nil {
			b.Fatal(err)
		}
		m := layout.NewMembers(o, cat)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var waited time.Duration
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, 128<<10)
				for bt := w; bt < o.Batches; bt += 8 {
					f := m.Batch(bt)
					h := r.Open(f)
					for off := int64(0); off < f.Size(); {
						start := time.Now()
						n, err := h.ReadAt(ctx, buf, off)
						mu.Lock()
						if d := time.Since(start); d > time.Millisecond {
							waited += d
						}
						mu.Unlock()
						off += int64(n)
						if err != nil && err != io.EOF {
							b.Error(err)
							h.Close()
							return
						}
					}
					h.Close()
					time.Sleep(400 * time.Millisecond) // the trainer: 8 workers of 32 samples at 640 samples/s
				}
			}()
		}
		wg.Wait()
		return waited
	}
	readEpoch(0)
	before := met.Snapshot()
	unread0 := c.EvictedUnread.Load()
	waited := readEpoch(1)
	after := met.Snapshot()
	served := after.BytesServed - before.BytesServed
	b.ReportMetric(100*float64(after.BytesFetched-before.BytesFetched)/float64(served), "%fetched")
	b.ReportMetric(float64(c.EvictedUnread.Load()-unread0), "evicted_unread")
	b.ReportMetric(waited.Seconds(), "s_waited")
}
