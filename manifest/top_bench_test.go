package manifest_test

import (
	"runtime"
	"testing"

	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/manifest"
)

// BenchmarkTopDecode_100M_10000shards: issue 13's target, the top-level
// manifest of 100M samples in 10,000 shards (1,000 strata) decodes in under
// 1 s and 64 MiB. Reports the encoded size and the decoded heap.
func BenchmarkTopDecode_100M_10000shards(b *testing.B) {
	enc, err := manifest.EncodeTop(synth.BigTop(100_000_000, 10_000, 1000))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(enc)))
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
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap = float64(after.HeapAlloc-before.HeapAlloc) / (1 << 20)
		runtime.KeepAlive(top)
		b.StartTimer()
	}
	b.ReportMetric(float64(len(enc))/(1<<20), "encoded-MiB")
	b.ReportMetric(heap, "decoded-MiB")
}
