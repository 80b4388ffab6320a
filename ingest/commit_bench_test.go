package ingest

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/synth"
)

// The commit's memory: a distributed ingest of 40,000 small samples in 32
// parts, then Commit, with the live heap sampled every millisecond. A
// commit of metadata format 2 or 3 keeps per shard its counts, not its
// rows (thin), so its peak heap follows the shards, not the samples.
func BenchmarkCommit_40kSamples_32Parts(b *testing.B) {
	for _, format := range []int{1, 2} {
		b.Run(map[int]string{1: "format1", 2: "format2"}[format], func(b *testing.B) {
			ctx := context.Background()
			dir := b.TempDir()
			if _, err := synth.Write(dir, synth.Imbalanced(40_000, 4, 0.6, 50, 200, 3)); err != nil {
				b.Fatal(err)
			}
			src, err := Scan(dir, nil)
			if err != nil {
				b.Fatal(err)
			}
			var peak float64
			for i := range b.N {
				opts := Options{Name: "ds", Stores: localStores(b, b.TempDir(), 3), Data: 2, Parity: 1, ShardSize: 64 << 10, Seed: 9, BlockSize: 4096, Format: format}
				for p := range 32 {
					if _, err := RunPart(ctx, src, opts, Part{p, 32}, "job"); err != nil {
						b.Fatal(err)
					}
				}
				runtime.GC()
				var base runtime.MemStats
				runtime.ReadMemStats(&base)
				var top atomic.Uint64
				stop := make(chan struct{})
				var wg sync.WaitGroup
				wg.Add(1)
				go func() {
					defer wg.Done()
					var ms runtime.MemStats
					for {
						select {
						case <-stop:
							return
						case <-time.After(time.Millisecond):
						}
						runtime.ReadMemStats(&ms)
						if ms.HeapAlloc > top.Load() {
							top.Store(ms.HeapAlloc)
						}
					}
				}()
				if _, err := Commit(ctx, CommitOptions{Name: "ds", Stores: opts.Stores}); err != nil {
					b.Fatal(err)
				}
				close(stop)
				wg.Wait()
				if i == 0 || float64(top.Load()-base.HeapAlloc) > peak {
					peak = float64(top.Load()) - float64(base.HeapAlloc)
				}
			}
			b.ReportMetric(peak/(1<<20), "peak-heap-MiB")
		})
	}
}
