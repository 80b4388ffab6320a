package repository

import (
	"runtime"
	"testing"

	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/manifest"
)

// BenchmarkTopToRankEpoch_100M_10000shards_W1024: issue 13's target from the
// stored bytes on: decode the top-level manifest of 100M samples in 10,000
// shards (1,000 strata), build the order's input from its class counts,
// and compute rank 17 of 1,024's epoch. Reports what stays on the heap per
// sample of the dataset (the node's resident metadata) and per op.
func BenchmarkTopToRankEpoch_100M_10000shards_W1024(b *testing.B) {
	const n = 100_000_000
	enc, err := manifest.EncodeTop(synth.BigTop(n, 10_000, 1000))
	if err != nil {
		b.Fatal(err)
	}
	p := layout.Params{Seed: 1, World: 1024, Rank: 17, Batch: 256, Alpha: 1}
	b.ReportAllocs()
	var heap float64
	for b.Loop() {
		b.StopTimer()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		top, err := manifest.DecodeTop(enc)
		if err != nil {
			b.Fatal(err)
		}
		in, err := TopInput(top)
		if err != nil {
			b.Fatal(err)
		}
		o, err := layout.Order(in, p)
		if err != nil || o.Samples.Len() != n/1024/256*256 {
			b.Fatalf("order: %v, %d samples", err, o.Samples.Len())
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap = float64(after.HeapAlloc - before.HeapAlloc)
		runtime.KeepAlive(top)
		runtime.KeepAlive(in)
		runtime.KeepAlive(o)
		b.StartTimer()
	}
	b.ReportMetric(heap/(1<<20), "resident-MiB")
	b.ReportMetric(heap/n, "resident-B/sample")
}
