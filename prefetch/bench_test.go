package prefetch_test

import (
	"context"
	"io"
	"syscall"
	"testing"

	"github.com/shardfs/shardfs/cache"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/internal/testds"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/metrics"
	"github.com/shardfs/shardfs/prefetch"
	"github.com/shardfs/shardfs/repository"
)

// benchEpoch reads one rank-epoch's batch files in 128 KiB reads, as a
// DataLoader does through FUSE, with the given memory cache; a cache
// smaller than the epoch makes every pass evict, so the ranker (the
// order's next uses) runs on every insert.
func benchEpoch(b *testing.B, cacheSize int64) {
	met := metrics.New(make([]string, 6))
	ds := testds.New(b, synth.Spec{Counts: []int{300, 200, 100}, MinSize: 50_000, MaxSize: 150_000, Seed: 21}, met)
	in, err := repository.LayoutInput(ds.Manifest)
	if err != nil {
		b.Fatal(err)
	}
	o, err := layout.Order(in, layout.Params{Seed: 1, World: 1, Batch: 20, Alpha: 1})
	if err != nil {
		b.Fatal(err)
	}
	cat := repository.ManifestCatalog{M: ds.Manifest}
	m := layout.NewMembers(o, cat)
	cfg := prefetch.DefaultConfig()
	cfg.Budget, cfg.MinLead = cacheSize/2, cacheSize/4
	r := prefetch.New(ds, cat, cache.New(cacheSize, nil), met, cfg, nil)
	defer r.Close()
	ctx := context.Background()
	buf := make([]byte, 128<<10)
	pass := func() int64 {
		var n int64
		for bt := 0; bt < o.Batches; bt++ {
			f := m.Batch(bt)
			h := r.Open(f)
			for off := int64(0); off < f.Size(); {
				k, err := h.ReadAt(ctx, buf, off)
				off += int64(k)
				if err != nil && err != io.EOF {
					b.Fatal(err)
				}
			}
			h.Close()
			n += f.Size()
		}
		return n
	}
	size := pass()
	b.SetBytes(size)
	b.ReportAllocs()
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	b.ResetTimer()
	for range b.N {
		pass()
	}
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	// Minor page faults per GB served: memory touched for the first time
	// (fresh heap the GC took back, or never had).
	b.ReportMetric(float64(after.Minflt-before.Minflt)/(float64(size)*float64(b.N)/1e9), "minflt/GB")
}

// The epoch held in memory: every read a hit.
func BenchmarkEpoch_600x110kB_FromMemory(b *testing.B) { benchEpoch(b, 256<<20) }

// A cache of a third of the epoch: evictions ranked by next use.
func BenchmarkEpoch_600x110kB_Thrash(b *testing.B) { benchEpoch(b, 24<<20) }
