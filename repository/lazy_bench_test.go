package repository

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/manifest"
)

// BenchmarkLazyPinRankEpoch_2M_1000shards_W1024: issue 13's "bytes per
// sample resident on a node" for a format-2 dataset of 2M samples (50-150
// kB, ImageNet-like 26-byte keys, random checksums, 100 classes) in 1,000 shards, RS(4,2) with
// 64 KiB blocks. One rank of 1,024 pins its epoch of the global shuffle:
// every shard's index is fetched from a local store, and a copy of the
// rank's rows is kept. Reported per sample of the rank and per sample of
// the dataset: the rows pinned, and the live heap with the catalog and
// the pin (which includes the 64 whole shards kept unpinned and the block
// checksums of every shard the rank reads, 9 bytes per 100 kB sample).
func BenchmarkLazyPinRankEpoch_2M_1000shards_W1024(b *testing.B) {
	const n, shards, strata, world = 2_000_000, 1000, 100, 1024
	dir := b.TempDir()
	st, err := backend.NewLocal(dir)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	top := &manifest.Top{Header: manifest.Header{Name: "big", IngestID: "x", Data: 4, Parity: 2, BlockSize: 64 << 10, ShardSize: 1 << 30, Stores: []string{"s"}, LabelFields: []string{"label"}}}
	for c := range strata {
		top.Strata = append(top.Strata, manifest.Stratum{Name: fmt.Sprintf("c%03d", c), Labels: []string{fmt.Sprint(c)}, Count: n / strata})
	}
	per := n / shards
	row := make([]int, strata)
	rng := rand.New(rand.NewPCG(1, 2)) // checksums, sizes and key numbers as random as real ones
	for s := range shards {
		x := &manifest.ShardIndex{Shard: s}
		for c := range strata {
			row[c] = per / strata
			var keys []string
			for range per / strata {
				keys = append(keys, fmt.Sprintf("c%03d/n%08d_%d.JPEG", c, rng.IntN(1e8), rng.IntN(1e5)))
			}
			slices.Sort(keys)
			for _, k := range keys {
				x.Keys = append(x.Keys, k)
				x.Stratum = append(x.Stratum, uint32(c))
				x.Size = append(x.Size, uint32(50_000+rng.IntN(100_000)))
				x.Sum = append(x.Sum, rng.Uint32())
			}
		}
		var size int64
		for _, v := range x.Size {
			size += int64(v)
		}
		frag := (size + 3) / 4
		x.Sums = make([]uint32, 6*((frag+(64<<10)-1)/(64<<10)))
		enc, err := manifest.EncodeIndex(x)
		if err != nil {
			b.Fatal(err)
		}
		if err := st.Put(ctx, IndexKey("big", "x", s), enc); err != nil {
			b.Fatal(err)
		}
		top.Shards = append(top.Shards, manifest.TopShard{Size: size, NumSamples: per, IndexSize: int64(len(enc)), IndexSum: manifest.IndexSum(enc)})
		top.SetCounts(s, row)
	}
	in, err := TopInput(top)
	if err != nil {
		b.Fatal(err)
	}
	o, err := layout.Order(in, layout.Params{Seed: 1, World: world, Rank: 7, Batch: 32, Alpha: 0.5})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var pinned, heap, touched, sums, recent float64
	for b.Loop() {
		b.StopTimer()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		l, err := newLazyCatalog(top, []backend.Store{st}, slog.New(slog.DiscardHandler))
		if err != nil {
			b.Fatal(err)
		}
		p, err := l.Pin(ctx, o.Samples)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap = float64(after.HeapAlloc) - float64(before.HeapAlloc)
		pinned = float64(p.Bytes())
		if l.IndexLoads.Load() != int64(len(p.rows)) {
			b.Fatalf("%d indexes fetched for a rank whose samples lie in %d shards", l.IndexLoads.Load(), len(p.rows))
		}
		touched = float64(len(p.rows))
		sums = 0
		for _, r := range p.rows {
			sums += float64(4 * len(r.sums))
		}
		recent = 0
		for _, r := range l.recent.Values() {
			recent += float64(r.bytes() + int64(4*len(r.sums)))
		}
		runtime.KeepAlive(p)
		runtime.KeepAlive(l)
		b.StartTimer()
	}
	b.ReportMetric(float64(o.Samples.Len()), "rank-samples")
	b.ReportMetric(touched, "shards-read")
	b.ReportMetric(pinned/float64(o.Samples.Len()), "pinned-B/rank-sample")
	b.ReportMetric(heap/float64(o.Samples.Len()), "heap-B/rank-sample")
	b.ReportMetric(heap/n, "heap-B/dataset-sample")
	b.ReportMetric(sums/n, "blocksums-B/dataset-sample")
	var stored int64
	for _, sh := range top.Shards {
		stored += sh.IndexSize
	}
	b.ReportMetric(float64(stored)/n, "index-objects-B/dataset-sample")
	b.ReportMetric(recent/n, "unpinned-shards-B/dataset-sample")
}
