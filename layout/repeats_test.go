package layout_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/shardfs/shardfs/layout"
)

// repeatsIn counts the batches of one rank's order that hold a sample
// twice, where the sample's stratum has at least as many members as the
// batch holds of it (a repeat the order could have avoided), and all
// batches.
func repeatsIn(t *testing.T, in *layout.Input, stratum []uint32, counts []int, p layout.Params) (avoidable, batches int) {
	t.Helper()
	o, err := layout.Order(in, p)
	if err != nil {
		t.Fatal(err)
	}
	var all []int64
	for _, x := range o.Samples.All() {
		all = append(all, x)
	}
	for b := 0; b < o.Batches; b++ {
		batch := all[b*p.Batch : (b+1)*p.Batch]
		quota := map[uint32]int{}
		seen := map[int64]int{}
		for _, x := range batch {
			quota[stratum[x]]++
			seen[x]++
		}
		for x, k := range seen {
			if k > 1 && quota[stratum[x]] <= counts[stratum[x]] {
				avoidable++
				break
			}
		}
	}
	return avoidable, o.Batches
}

// Order version 4 puts no sample twice in one batch unless its stratum has
// fewer members than the batch's quota of it, over random long-tailed
// inputs, α in [0, 1], epoch sizes past the data, pad and drop, window
// mode, batch sizes and world sizes; version 3, which draws without
// mending the seams between a stratum's draw cycles, does.
func TestNoAvoidableRepeatInABatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 7))
	var v3, v4, total int
	for trial := 0; trial < 200; trial++ {
		strata := 2 + rng.IntN(10)
		counts := make([]int, strata)
		var stratum []uint32
		for c := range counts {
			// Long-tailed: stratum c holds about 2000·0.5^c members, at least 1.
			counts[c] = max(1, int(2000*math.Pow(0.5, float64(c))*(0.5+rng.Float64())))
			for range counts[c] {
				stratum = append(stratum, uint32(c))
			}
		}
		rng.Shuffle(len(stratum), func(i, j int) { stratum[i], stratum[j] = stratum[j], stratum[i] })
		counts = make([]int, strata)
		for _, c := range stratum {
			counts[c]++
		}
		shard := make([]uint32, len(stratum))
		for i := range shard {
			shard[i] = uint32(i / 100)
		}
		in, err := layout.NewInput(stratum, strata, shard, (len(stratum)+99)/100)
		if err != nil {
			t.Fatal(err)
		}
		p := layout.Params{Seed: rng.Uint64(), World: 1 + rng.IntN(4), Batch: 8 + rng.IntN(120), Alpha: []float64{0, 0.25, 0.5, 1, rng.Float64()}[rng.IntN(5)], Epoch: rng.IntN(3)}
		if rng.IntN(3) == 0 {
			p.Tail = layout.Pad
		}
		switch rng.IntN(3) {
		case 0: // window mode reads each sample once an epoch, at α = 1
			// (its padded last batch recycles the last window's samples,
			// and may repeat one: outside version 4's promise)
			p.Window, p.Alpha, p.Tail = 1+rng.IntN(4), 1, layout.Drop
		case 1: // an epoch longer than the data recycles every stratum
			p.EpochSize = len(stratum) * (1 + rng.IntN(3))
		default: // stratum weights (as a run's feedback sets them)
			p.Weights = make([]float64, strata)
			for c := range p.Weights {
				p.Weights[c] = 0.1 + 5*rng.Float64()
			}
		}
		for r := 0; r < p.World; r++ {
			p.Rank = r
			p.Version = 3
			a3, _ := repeatsIn(t, in, stratum, counts, p)
			p.Version = 4
			a4, n := repeatsIn(t, in, stratum, counts, p)
			v3, v4, total = v3+a3, v4+a4, total+n
			if a4 > 0 {
				t.Errorf("trial %d (strata %v, %+v): order version 4 has %d of %d batches with an avoidable repeat", trial, counts, p, a4, n)
			}
		}
	}
	t.Logf("batches with an avoidable repeat: version 3 %d of %d, version 4 %d", v3, total, v4)
	if v3 == 0 {
		t.Fatalf("version 3 made no avoidable repeat in %d batches: the inputs do not exercise the seams", total)
	}
}

// On the study's data (examples/study: digits thinned to these class
// counts, batches of 32, α = 0, 30 epochs, 5 seeds), order version 3 put a
// sample twice in a share of the batches; version 4 in none.
func TestStudyRepeats(t *testing.T) {
	counts := []int{125, 90, 65, 46, 33, 24, 17, 12, 9, 6}
	var stratum, shard []uint32
	for c, n := range counts {
		for range n {
			stratum = append(stratum, uint32(c))
			shard = append(shard, 0)
		}
	}
	in, err := layout.NewInput(stratum, len(counts), shard, 1)
	if err != nil {
		t.Fatal(err)
	}
	rate := map[int]float64{}
	for _, v := range []int{3, 4} {
		repeats, batches := 0, 0
		for seed := uint64(0); seed < 5; seed++ {
			for e := 0; e < 30; e++ {
				a, n := repeatsIn(t, in, stratum, counts, layout.Params{Seed: seed, Epoch: e, World: 1, Batch: 32, Alpha: 0, Version: v})
				repeats, batches = repeats+a, batches+n
			}
		}
		rate[v] = float64(repeats) / float64(batches)
		t.Logf("order version %d: %d of %d batches (%.1f%%) hold a sample twice", v, repeats, batches, 100*rate[v])
	}
	if rate[4] != 0 || rate[3] == 0 {
		t.Fatalf("batches with a sample twice: version 3 %.3f, version 4 %.3f; want some, then none", rate[3], rate[4])
	}
}
