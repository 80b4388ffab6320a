package layout

import (
	"math"
	"math/rand/v2"
	"testing"
)

// mixInput builds an input of several datasets, each with its own classes.
func mixInput(t *testing.T, rng *rand.Rand, datasets int) (*Input, []int) {
	t.Helper()
	var stratum []uint32
	var group []int
	for d := 0; d < datasets; d++ {
		classes := 1 + rng.IntN(5)
		for c := 0; c < classes; c++ {
			n := 1 + rng.IntN(300)
			if rng.IntN(3) == 0 {
				n = 1 + rng.IntN(8) // rare classes, recycled within an epoch
			}
			for range n {
				stratum = append(stratum, uint32(len(group)))
			}
			group = append(group, d)
		}
	}
	in, err := NewInput(stratum, len(group), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.SetGroups(group, datasets); err != nil {
		t.Fatal(err)
	}
	return in, group
}

// TestMixBounds: for mixes of 2 to 5 datasets with random sizes, weights and
// α, every batch of every rank holds dataset g in ⌊B·w_g⌋..⌈B·w_g⌉, each
// class within one of its own per-batch share of the cycle, ranks hold
// equal batch counts, and a dataset smaller than its share is recycled.
func TestMixBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	cases := 0
	for trial := 0; trial < 200; trial++ {
		datasets := 2 + trial%4
		in, group := mixInput(t, rng, datasets)
		mix := make([]float64, datasets)
		for g := range mix {
			mix[g] = 0.05 + rng.Float64()
		}
		sum := 0.0
		for _, w := range mix {
			sum += w
		}
		alpha := []float64{0, 0.5, 1}[trial%3]
		p := Params{Seed: uint64(trial), Epoch: trial % 3, World: 1 + trial%3, Batch: 4 + rng.IntN(60), Alpha: alpha, Mix: mix}
		if in.N()/p.Batch < p.World {
			continue
		}
		cases++
		var steps int
		for r := 0; r < p.World; r++ {
			p.Rank = r
			o, err := Order(in, p)
			if err != nil {
				t.Fatalf("trial %d: %v", trial, err)
			}
			if r == 0 {
				steps = o.Batches
			} else if o.Batches != steps {
				t.Fatalf("trial %d: rank %d has %d batches, rank 0 %d", trial, r, o.Batches, steps)
			}
			for b := 0; b < o.Batches; b++ {
				per := make([]int, datasets)
				for _, s := range o.BatchSamples(b).All() {
					per[group[in.Stratum[s]]]++
				}
				for g, n := range per {
					want := float64(p.Batch) * mix[g] / sum
					if n < int(math.Floor(want)) || n > int(math.Ceil(want)) {
						t.Fatalf("trial %d (B=%d, α=%v, weights %v): rank %d batch %d holds %d of dataset %d, want %v..%v",
							trial, p.Batch, alpha, mix, r, b, n, g, math.Floor(want), math.Ceil(want))
					}
				}
			}
		}
		// Classes: over the whole global cycle, each class's count is its
		// share of its dataset's slots, and per batch within one of that.
		m := in.N() / p.Batch
		counts := apportionMix(in, mix, alpha, m*p.Batch)
		g, err := GlobalBatches(in, Params{Seed: p.Seed, Epoch: p.Epoch, World: 1, Batch: p.Batch, Alpha: alpha, Mix: mix}, m)
		if err != nil {
			t.Fatal(err)
		}
		seen := make([]int, in.NumStrata)
		for b := 0; b < m; b++ {
			per := make([]int, in.NumStrata)
			for _, s := range g[b*p.Batch : (b+1)*p.Batch] {
				per[in.Stratum[s]]++
			}
			for c, n := range per {
				lo, hi := counts[c]/m, (counts[c]+m-1)/m
				if n < lo || n > hi {
					t.Fatalf("trial %d: batch %d holds %d of class %d, want %d..%d", trial, b, n, c, lo, hi)
				}
				seen[c] += n
			}
		}
		for c, n := range seen {
			if n != counts[c] {
				t.Fatalf("trial %d: class %d appears %d times in a cycle, apportioned %d", trial, c, n, counts[c])
			}
			if n > in.Count(c) && in.Count(c) > 0 {
				// Recycled: every sample of the class appears before any twice.
				cnt := map[int64]int{}
				for _, s := range g {
					if int(in.Stratum[s]) == c {
						cnt[s]++
					}
				}
				if len(cnt) != in.Count(c) {
					t.Fatalf("trial %d: class %d drawn %d times but only %d of its %d samples appear", trial, c, n, len(cnt), in.Count(c))
				}
			}
		}
	}
	if cases < 150 {
		t.Fatalf("only %d of 200 trials ran", cases)
	}
}

// TestMixRefusals: a mix needs weights for exactly the datasets present,
// each > 0, and the global order.
func TestMixRefusals(t *testing.T) {
	in, _ := mixInput(t, rand.New(rand.NewPCG(1, 1)), 3)
	for _, p := range []Params{
		{World: 1, Batch: 8, Alpha: 1, Mix: []float64{1, 1}},
		{World: 1, Batch: 8, Alpha: 1, Mix: []float64{1, 0, 1}},
		{World: 1, Batch: 8, Alpha: 1, Mix: []float64{1, math.NaN(), 1}},
		{World: 1, Batch: 8, Alpha: 1, Mix: []float64{1, 1, 1}, Affinity: true},
	} {
		if _, err := Order(in, p); err == nil {
			t.Errorf("mix %v (affinity %v) accepted", p.Mix, p.Affinity)
		}
	}
	plain, _ := NewInput([]uint32{0, 0, 1}, 2, nil, 0)
	if _, err := Order(plain, Params{World: 1, Batch: 1, Alpha: 1, Mix: []float64{1}}); err == nil {
		t.Error("a mix over an input without datasets accepted")
	}
}
