package layout

import (
	"math/rand/v2"
	"runtime"
	"testing"
)

var raceEnabled = false

// syntheticInput is n samples in nStrata strata with counts falling
// geometrically, shuffled, 640 samples per shard.
func syntheticInput(tb testing.TB, n, nStrata int) *Input {
	rng := rand.New(rand.NewPCG(1, 1))
	stratum := make([]uint32, n)
	for i := range stratum {
		// Zipf-like skew: stratum ~ floor(nStrata * u^3).
		u := rng.Float64()
		stratum[i] = uint32(float64(nStrata) * u * u * u)
	}
	shard := make([]uint32, n)
	for i := range shard {
		shard[i] = uint32(i / 640)
	}
	in, err := NewInput(stratum, nStrata, shard, (n+639)/640)
	if err != nil {
		tb.Fatal(err)
	}
	return in
}

// BenchmarkPlan_10M_1000strata_W64: one rank's epoch of a 10M-sample dataset.
func BenchmarkPlan_10M_1000strata_W64(b *testing.B) {
	in := syntheticInput(b, 10_000_000, 1000)
	p := Params{Seed: 1, World: 64, Rank: 17, Batch: 256, Alpha: 1}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Order(in, p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlan_10M_1000strata_W64_version4 is the order before every
// field was balanced (order version 5, marginal.go): the ratio of the two
// is what version 5's deal costs a rank-epoch.
func BenchmarkPlan_10M_1000strata_W64_version4(b *testing.B) {
	in := syntheticInput(b, 10_000_000, 1000)
	p := Params{Seed: 1, World: 64, Rank: 17, Batch: 256, Alpha: 1, Version: 4}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Order(in, p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlan_10M_1000strata_W64_fields is the same rank-epoch with
// the 1,000 strata tuples of three fields (10 x 10 x 10): order version
// 5 deals their extras by controlled rounding (marginal.go).
func BenchmarkPlan_10M_1000strata_W64_fields(b *testing.B) { benchmarkFields(b, 64) }

// BenchmarkPlan_10M_1000strata_W8_fields: a rank of 8 reads every 8th
// batch, so the walks of its batches share most of their splits.
func BenchmarkPlan_10M_1000strata_W8_fields(b *testing.B) { benchmarkFields(b, 8) }

func benchmarkFields(b *testing.B, world int) {
	in := syntheticInput(b, 10_000_000, 1000)
	values := make([][]uint32, in.NumStrata)
	for c := range values {
		values[c] = []uint32{uint32(c % 10), uint32(c / 10 % 10), uint32(c / 100)}
	}
	if err := in.SetFields(values); err != nil {
		b.Fatal(err)
	}
	p := Params{Seed: 1, World: world, Rank: 17 % world, Batch: 256, Alpha: 1}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Order(in, p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPlan_10M_1000strata_W64_window(b *testing.B) {
	in := syntheticInput(b, 10_000_000, 1000)
	p := Params{Seed: 1, World: 64, Rank: 17, Batch: 256, Alpha: 1, Window: 8}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Order(in, p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkNewInput_10M(b *testing.B) {
	in := syntheticInput(b, 10_000_000, 1000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NewInput(in.Stratum, in.NumStrata, in.Shard, in.NumShards); err != nil {
			b.Fatal(err)
		}
	}
}

// countsInput is n samples in shards of about n/shards, nStrata strata with
// counts falling geometrically, each shard holding its share of every
// stratum (as ingest's stratified placement gives): counts only.
func countsInput(tb testing.TB, n, shards, nStrata int) *Input {
	w := make([]float64, nStrata)
	sum := 0.0
	for c := range w {
		w[c] = 1 / float64(c+1)
		sum += w[c]
	}
	counts := make([][]int, shards)
	left := n
	for s := range counts {
		size := left / (shards - s)
		left -= size
		counts[s] = apportionFloat(size, func() []float64 {
			pi := make([]float64, nStrata)
			for c := range pi {
				pi[c] = w[c] / sum
			}
			return pi
		}())
	}
	in, err := NewCountInput(counts, nStrata)
	if err != nil {
		tb.Fatal(err)
	}
	return in
}

// BenchmarkRankEpoch_100M_10000shards_W1024: issue 13's target, one rank's
// epoch of 100M samples in 10,000 shards (1,000 strata) with W=1,024, from
// counts alone with order version 2: the input's size and the order's time
// and memory are reported.
func BenchmarkRankEpoch_100M_10000shards_W1024(b *testing.B) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	in := countsInput(b, 100_000_000, 10_000, 1000)
	runtime.GC()
	runtime.ReadMemStats(&after)
	p := Params{Seed: 1, World: 1024, Rank: 17, Batch: 256, Alpha: 1}
	b.ReportAllocs()
	var o *RankOrder
	for b.Loop() {
		var err error
		if o, err = Order(in, p); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(o.Samples.Len()), "samples/rank")
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "input-MiB")
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(in.N()), "input-B/sample")
}
