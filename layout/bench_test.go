package layout

import (
	"math/rand/v2"
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
