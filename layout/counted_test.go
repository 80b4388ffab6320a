package layout

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// An Input built from per-shard counts computes exactly the order of the
// same samples given row by row (numbered shard by shard, stratum by
// stratum within a shard), so every property test of the global order
// holds for it too; and it answers strata and member lookups alike.
func TestCountInputMatchesRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 40; trial++ {
		shards, strata := 1+rng.IntN(30), 1+rng.IntN(12)
		counts := make([][]int, shards)
		var stratum, shard []uint32
		for s := range counts {
			counts[s] = make([]int, strata)
			for c := range counts[s] {
				if rng.IntN(4) > 0 { // some strata absent from some shards
					counts[s][c] = rng.IntN(40)
				}
				for k := 0; k < counts[s][c]; k++ {
					stratum = append(stratum, uint32(c))
					shard = append(shard, uint32(s))
				}
			}
		}
		if len(stratum) == 0 {
			continue
		}
		rows, err := NewInput(stratum, strata, shard, shards)
		if err != nil {
			t.Fatal(err)
		}
		cnt, err := NewCountInput(counts, strata)
		if err != nil {
			t.Fatal(err)
		}
		if rows.N() != cnt.N() {
			t.Fatalf("trial %d: N %d vs %d", trial, rows.N(), cnt.N())
		}
		for c := 0; c < strata; c++ {
			if rows.Count(c) != cnt.Count(c) {
				t.Fatalf("trial %d: stratum %d counts %d vs %d", trial, c, rows.Count(c), cnt.Count(c))
			}
			for k := 0; k < rows.Count(c); k++ {
				if a, b := rows.member(c, k), cnt.member(c, k); a != b {
					t.Fatalf("trial %d: stratum %d member %d: %d vs %d", trial, c, k, a, b)
				}
			}
		}
		for s := int64(0); s < int64(rows.N()); s++ {
			if rows.StratumOf(s) != cnt.StratumOf(s) {
				t.Fatalf("trial %d: sample %d stratum %d vs %d", trial, s, rows.StratumOf(s), cnt.StratumOf(s))
			}
		}
		batch := 1 + rng.IntN(16)
		world := 1 + rng.IntN(3)
		p := Params{Seed: uint64(trial), World: world, Batch: batch, Alpha: []float64{0, 0.5, 1}[trial%3], Tail: Tail(trial % 2), Epoch: trial % 3}
		for r := 0; r < world; r++ {
			p.Rank = r
			a, errA := Order(rows, p)
			b, errB := Order(cnt, p)
			if (errA == nil) != (errB == nil) {
				t.Fatalf("trial %d: errors differ: %v / %v", trial, errA, errB)
			}
			if errA == nil && (a.Batches != b.Batches || !slices.Equal(a.Samples.Int64s(), b.Samples.Int64s())) {
				t.Fatalf("trial %d rank %d: orders differ", trial, r)
			}
		}
	}
}

// Counts-only input refuses what needs per-sample rows, by name.
func TestCountInputRefuses(t *testing.T) {
	in, err := NewCountInput([][]int{{3, 4}, {5, 0}}, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []Params{
		{World: 1, Batch: 2, Alpha: 1, Window: 1},
		{World: 1, Batch: 2, Alpha: 1, Affinity: true},
		{World: 1, Batch: 2, Alpha: 1, Version: 1},
	} {
		if _, err := Order(in, p); err == nil {
			t.Errorf("%+v: computed from counts alone", p)
		}
	}
	if _, err := NewCountInput([][]int{{3}}, 2); err == nil {
		t.Error("a shard with too few stratum counts was accepted")
	}
	if _, err := NewCountInput([][]int{{-1, 2}}, 2); err == nil {
		t.Error("a negative count was accepted")
	}
}

// The even model answers exactly as per-shard counts of the same even
// spread do, and so computes the same order.
func TestEvenCountInputMatchesCounts(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := 0; trial < 40; trial++ {
		shards, strata := 1+rng.IntN(40), 1+rng.IntN(30)
		perStratum := make([]int, strata)
		for c := range perStratum {
			perStratum[c] = rng.IntN(200)
		}
		perStratum[0]++ // at least one sample
		rows := make([][]int, shards)
		for s := range rows {
			rows[s] = make([]int, strata)
			for c, n := range perStratum {
				rows[s][c] = (s+1)*n/shards - s*n/shards
			}
		}
		want, err := NewCountInput(rows, strata)
		if err != nil {
			t.Fatal(err)
		}
		got, err := NewEvenCountInput(perStratum, shards)
		if err != nil {
			t.Fatal(err)
		}
		if got.N() != want.N() {
			t.Fatalf("trial %d: N %d, want %d", trial, got.N(), want.N())
		}
		for c := 0; c < strata; c++ {
			for k := 0; k < want.Count(c); k++ {
				if a, b := got.member(c, k), want.member(c, k); a != b {
					t.Fatalf("trial %d: stratum %d member %d: %d, want %d", trial, c, k, a, b)
				}
			}
		}
		for s := int64(0); s < int64(want.N()); s++ {
			if got.StratumOf(s) != want.StratumOf(s) {
				t.Fatalf("trial %d: sample %d stratum %d, want %d", trial, s, got.StratumOf(s), want.StratumOf(s))
			}
		}
		p := Params{Seed: rng.Uint64(), World: 1 + rng.IntN(4), Batch: 1 + rng.IntN(16), Alpha: 1}
		a, err1 := Order(want, p)
		b, err2 := Order(got, p)
		if err1 != nil || err2 != nil || !slices.Equal(a.Samples.Int64s(), b.Samples.Int64s()) {
			t.Fatalf("trial %d: orders differ (%v, %v)", trial, err1, err2)
		}
	}
}
