package layout

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// timeInput is a random input whose strata are (class, time bucket)
// pairs, with each stratum's bucket start in Recency.Start (days apart, so
// windows and half-lives in days cut them).
func timeInput(t testing.TB, rng *rand.Rand) (*Input, []int64) {
	t.Helper()
	classes, buckets := 1+rng.IntN(6), 1+rng.IntN(14)
	const day = 86400
	width := int64(1+rng.IntN(30)) * day
	var stratum []uint32
	var start []int64
	for b := 0; b < buckets; b++ {
		for c := 0; c < classes; c++ {
			// More data in recent buckets, rare classes rarer.
			n := 1 + rng.IntN(20*(b+1)/(c+1))
			for range n {
				stratum = append(stratum, uint32(len(start)))
			}
			start = append(start, 1_700_000_000/width*width+int64(b)*width)
		}
	}
	rng.Shuffle(len(stratum), func(i, j int) { stratum[i], stratum[j] = stratum[j], stratum[i] })
	in, err := NewInput(stratum, len(start), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	return in, start
}

func randomRecency(rng *rand.Rand, start []int64) *Recency {
	const day = 86400
	r := &Recency{Start: start}
	if rng.IntN(3) > 0 {
		r.HalfLife = int64(1+rng.IntN(120)) * day
	}
	if rng.IntN(2) == 0 {
		r.Window = int64(1+rng.IntN(200)) * day
		if rng.IntN(2) == 0 {
			r.Step = int64(1+rng.IntN(60)) * day
		}
	}
	if rng.IntN(4) == 0 {
		r.AsOf = slices.Min(start) + rng.Int64N(slices.Max(start)-slices.Min(start)+1)
	}
	return r
}

// checkWeighted checks every batch of every rank against the weighted
// targets: ⌊B·π_c⌋..⌈B·π_c⌉ of each stratum, none of a stratum of weight
// 0, the same number of batches on every rank, and with α=1 and no decay
// no sample twice.
func checkWeighted(in *Input, p Params, orders []*RankOrder) error {
	pi := TargetsOf(in, p)
	once := p.Alpha == 1 && p.Tail == Drop && p.MinShare == 0 && !slices.ContainsFunc(p.Weights, func(w float64) bool { return w > 0 && w < 1 })
	seen := make([]bool, in.N())
	for r, o := range orders {
		if o.Batches != orders[0].Batches {
			return fmt.Errorf("rank %d has %d batches, rank 0 has %d", r, o.Batches, orders[0].Batches)
		}
		for b := 0; b < o.Batches; b++ {
			counts := make([]int, in.NumStrata)
			for _, s := range o.BatchSamples(b).All() {
				c := in.StratumOf(s)
				if p.Weights[c] == 0 {
					return fmt.Errorf("rank %d batch %d: sample %d of stratum %d, which has weight 0", r, b, s, c)
				}
				if once && seen[s] {
					return fmt.Errorf("rank %d batch %d: sample %d twice", r, b, s)
				}
				seen[s] = true
				counts[c]++
			}
			for c, x := range counts {
				lo, hi := math.Floor(float64(p.Batch)*pi[c]-1e-9), math.Ceil(float64(p.Batch)*pi[c]+1e-9)
				if float64(x) < lo || float64(x) > hi {
					return fmt.Errorf("rank %d batch %d: stratum %d has %d, want %v..%v (π=%.4g)", r, b, c, x, lo, hi, pi[c])
				}
			}
		}
	}
	return nil
}

// Time weights and windows: per-batch bounds against the re-weighted
// target for every batch of every rank, W-independence, and a new order
// every epoch, over random datasets, half-lives, windows and α.
func TestPropertyRecency(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 1))
	for i := 0; i < cases(t); i++ {
		in, start := timeInput(t, rng)
		grouped := rng.IntN(2) == 0
		if grouped {
			groupByStart(t, in, start)
		}
		rec := randomRecency(rng, start)
		p := Params{Seed: rng.Uint64(), World: 1 + rng.IntN(8), Batch: 1 + rng.IntN(64), Alpha: []float64{1, 1, 0.5, 0, rng.Float64()}[rng.IntN(5)],
			Tail: []Tail{Drop, Pad}[rng.IntN(2)], Version: 1 + rng.IntN(2)}
		var prev []int64
		for e := 0; e < 3; e++ {
			p.Epoch = e
			w, from, to, err := rec.Weights(e)
			if err != nil {
				// Only a window over a gap in the data may hold no sample.
				if !strings.Contains(err.Error(), "holds no sample") || slices.ContainsFunc(start, func(s int64) bool { return s >= from && s <= to }) {
					t.Fatalf("case %d epoch %d: %v", i, e, err)
				}
				break
			}
			p.Weights = w
			orders := allRanks(t, in, p)
			if err := checkWeighted(in, p, orders); err != nil {
				t.Fatalf("case %d epoch %d (%+v, W=%d B=%d α=%v): %v", i, e, *rec, p.World, p.Batch, p.Alpha, err)
			}
			if err := groupSpreadIf(grouped, in, orders); err != nil {
				t.Fatalf("case %d epoch %d (%+v, W=%d B=%d α=%v): %v", i, e, *rec, p.World, p.Batch, p.Alpha, err)
			}
			for c, x := range w {
				if (x > 0) != (start[c] >= from && start[c] <= to) {
					t.Fatalf("case %d epoch %d: stratum %d at %d has weight %v, window %d..%d", i, e, c, start[c], x, from, to)
				}
			}
			g := globalOf(t, in, p, orders)
			if !slices.Equal(interleaved(orders), g) {
				t.Fatalf("case %d epoch %d: interleaved ranks differ from the global order", i, e)
			}
			if len(g) > 2*p.Batch && slices.Equal(g, prev) {
				t.Fatalf("case %d: epoch %d repeats the order of epoch %d", i, e, e-1)
			}
			prev = g
		}
	}
}

// groupByStart groups in's strata by time bucket, as a dataset cut into
// time buckets is (repository.OrderInput).
func groupByStart(t testing.TB, in *Input, start []int64) {
	t.Helper()
	distinct := slices.Compact(slices.Sorted(slices.Values(start)))
	group := make([]int, len(start))
	for c, s := range start {
		group[c], _ = slices.BinarySearch(distinct, s)
	}
	if err := in.SetGroups(group, len(distinct)); err != nil {
		t.Fatal(err)
	}
}

// checkGroupSpread checks that every batch of the epoch (all ranks) holds
// each group within one sample of every other batch: every month in every
// batch once its share reaches one.
func checkGroupSpread(in *Input, orders []*RankOrder) error {
	lo, hi := make([]int, in.NumGroups), make([]int, in.NumGroups)
	for g := range lo {
		lo[g] = math.MaxInt
	}
	counts := make([]int, in.NumGroups)
	for _, o := range orders {
		for b := 0; b < o.Batches; b++ {
			clear(counts)
			for _, s := range o.BatchSamples(b).All() {
				counts[in.Group[in.StratumOf(s)]]++
			}
			for g, n := range counts {
				lo[g], hi[g] = min(lo[g], n), max(hi[g], n)
			}
		}
	}
	for g := range lo {
		if hi[g]-lo[g] > 1 {
			return fmt.Errorf("time group %d: batches hold %d to %d of it", g, lo[g], hi[g])
		}
	}
	return nil
}

func groupSpreadIf(grouped bool, in *Input, orders []*RankOrder) error {
	if !grouped {
		return nil
	}
	return checkGroupSpread(in, orders)
}

// The mutation check: checkWeighted catches a batch that breaks the bound
// (two samples swapped between batches across strata), and a sample of a
// bucket outside the window.
func TestCheckWeightedCatchesBrokenBatches(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 2))
	caught := 0
	for i := 0; i < 50; i++ {
		in, start := timeInput(t, rng)
		rec := &Recency{Start: start, HalfLife: 30 * 86400}
		p := Params{Seed: uint64(i), World: 1, Batch: 16, Alpha: 1}
		p.Weights, _, _, _ = rec.Weights(0)
		orders := allRanks(t, in, p)
		if err := checkWeighted(in, p, orders); err != nil {
			t.Fatal(err)
		}
		o := orders[0]
		if o.Batches < 2 {
			continue
		}
		// Move every sample of batch 1's most common stratum into batch 0.
		all := o.Samples.Int64s()
		b0, b1 := all[:p.Batch], all[p.Batch:2*p.Batch]
		moved, x := 0, in.StratumOf(b1[0])
		for k, s := range b1 {
			if k < len(b0) && in.StratumOf(s) == x && in.StratumOf(b0[k]) != x {
				b0[k], b1[k] = b1[k], b0[k]
				moved++
			}
		}
		if moved < 2 {
			continue
		}
		o.Samples = PositionsOf(all...)
		if err := checkWeighted(in, p, orders); err == nil {
			t.Fatalf("case %d: moving %d samples between batches passed the check", i, moved)
		}
		caught++
	}
	if caught < 10 {
		t.Fatalf("only %d cases could be mutated", caught)
	}
	// Without grouping, the spread check fails somewhere: it can fail.
	spread := 0
	for i := 0; i < 30; i++ {
		in, start := timeInput(t, rng)
		p := Params{Seed: uint64(i), World: 2, Batch: 32, Alpha: 1}
		p.Weights, _, _, _ = (&Recency{Start: start, HalfLife: 20 * 86400}).Weights(0)
		orders := allRanks(t, in, p)
		groupByStart(t, in, start) // groups known to the check, not to the order
		if checkGroupSpread(in, orders) != nil {
			spread++
		}
	}
	if spread == 0 {
		t.Fatal("no ungrouped order broke the time-group spread: the check cannot fail")
	}
	in, start := timeInput(t, rand.New(rand.NewPCG(3, 3)))
	p := Params{World: 1, Batch: 4, Alpha: 1}
	p.Weights, _, _, _ = (&Recency{Start: start}).Weights(0)
	orders := allRanks(t, in, p)
	p.Weights = slices.Clone(p.Weights)
	p.Weights[in.StratumOf(orders[0].Samples.At(0))] = 0
	if checkWeighted(in, p, orders) == nil {
		t.Fatal("a sample of a stratum of weight 0 passed the check")
	}
}

// Half-life: a bucket one half-life older gets half the weight; a window
// reads the buckets that start in it, and a step slides it forward until
// it reaches the newest (or --as-of).
func TestRecencyWeightsAndWindows(t *testing.T) {
	const day = 86400
	start := []int64{0, 30 * day, 60 * day, 90 * day, 90 * day}
	w, _, _, err := (&Recency{Start: start, HalfLife: 30 * day}).Weights(0)
	if err != nil || !slices.Equal(w, []float64{0.125, 0.25, 0.5, 1, 1}) {
		t.Fatalf("half-life weights %v %v", w, err)
	}
	w, _, _, _ = (&Recency{Start: start, Window: 45 * day}).Weights(7)
	if !slices.Equal(w, []float64{0, 0, 1, 1, 1}) {
		t.Fatalf("fixed 45-day window %v", w)
	}
	w, _, _, _ = (&Recency{Start: start, Window: 45 * day, AsOf: 40 * day}).Weights(0)
	if !slices.Equal(w, []float64{1, 1, 0, 0, 0}) {
		t.Fatalf("window as of day 40: %v", w)
	}
	r := &Recency{Start: start, Window: 31 * day, Step: 30 * day}
	for e, want := range [][]float64{{1, 1, 0, 0, 0}, {0, 1, 1, 0, 0}, {0, 0, 1, 1, 1}, {0, 0, 1, 1, 1}, {0, 0, 1, 1, 1}} {
		if w, _, _, _ := r.Weights(e); !slices.Equal(w, want) {
			t.Fatalf("sliding window epoch %d: %v, want %v", e, w, want)
		}
	}
	if _, _, _, err := (&Recency{Start: []int64{0, 100 * day}, Window: 10 * day, Step: 10 * day}).Weights(3); err == nil {
		t.Fatal("a window over a gap in the data was accepted")
	} else if want := "holds no sample"; !strings.Contains(err.Error(), want) {
		t.Fatalf("%v does not say %q", err, want)
	}
	for _, bad := range []*Recency{{Start: start, HalfLife: -1}, {Start: start, Step: day}, {}} {
		if _, _, _, err := bad.Weights(0); err == nil {
			t.Fatalf("%+v accepted", bad)
		}
	}
}
