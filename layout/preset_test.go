package layout_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/shardfs/shardfs/layout"
)

func TestPresetSchedule(t *testing.T) {
	for _, tc := range []struct {
		preset string
		alphas []float64 // by epoch
	}{
		{"decoupled:10", []float64{1, 1, 1, 1, 1, 1, 1, 1, 0, 0}},
		{"decoupled:2", []float64{1, 0}},
		{"decoupled:3", []float64{1, 1, 0}},
		{"decoupled:30:0.1", append(slices.Repeat([]float64{1}, 27), 0, 0, 0)},
		{"decoupled:4:0.9", []float64{1, 0, 0, 0}},
	} {
		pts, err := layout.PresetSchedule(tc.preset)
		if err != nil {
			t.Fatalf("%s: %v", tc.preset, err)
		}
		s := &layout.Spec{AlphaPoints: pts, Preset: tc.preset}
		var got []float64
		for e := range tc.alphas {
			got = append(got, s.AlphaAt(e))
		}
		if !slices.Equal(got, tc.alphas) || s.AlphaAt(len(tc.alphas)+5) != 0 {
			t.Errorf("%s: alpha by epoch %v, want %v (and 0 after)", tc.preset, got, tc.alphas)
		}
	}
	for _, bad := range []string{"decoupled", "decoupled:1", "decoupled:x", "decoupled:10:0", "decoupled:10:1", "decoupled:10:0.2:1", "annealed:10"} {
		if _, err := layout.PresetSchedule(bad); err == nil {
			t.Errorf("preset %q accepted", bad)
		}
	}
}

// WithMinShare keeps the shares a distribution, gives every positive one
// at least q, raises the smallest ones only, and keeps the others' ratios.
func TestWithMinShare(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 2000; trial++ {
		k := 1 + rng.IntN(12)
		pi := make([]float64, k)
		sum := 0.0
		for c := range pi {
			if rng.IntN(6) > 0 {
				pi[c] = math.Pow(rng.Float64(), 4) + 1e-9
				sum += pi[c]
			}
		}
		if sum == 0 {
			continue
		}
		positive := 0
		for c := range pi {
			pi[c] /= sum
			if pi[c] > 0 {
				positive++
			}
		}
		q := rng.Float64() / float64(positive)
		out := layout.WithMinShare(pi, q)
		total := 0.0
		var kept []int
		for c := range out {
			total += out[c]
			switch {
			case pi[c] == 0 && out[c] != 0:
				t.Fatalf("pi %v q %v: stratum %d of share 0 got %v", pi, q, c, out[c])
			case pi[c] > 0 && out[c] < q-1e-12:
				t.Fatalf("pi %v q %v: stratum %d got %v, below q", pi, q, c, out[c])
			case pi[c] > 0 && out[c] != q:
				kept = append(kept, c)
			}
		}
		// The raised are the smallest shares: none raised above one kept.
		for c := range out {
			for _, d := range kept {
				if out[c] == q && pi[c] > 0 && !slices.Contains(kept, c) && pi[c] > pi[d] {
					t.Fatalf("pi %v q %v: stratum %d raised to q, but the smaller %d was not", pi, q, c, d)
				}
			}
		}
		if math.Abs(total-1) > 1e-9 {
			t.Fatalf("pi %v q %v: shares sum to %v", pi, q, total)
		}
		for i := 1; i < len(kept); i++ {
			a, b := kept[0], kept[i]
			if r1, r2 := out[a]/out[b], pi[a]/pi[b]; math.Abs(r1-r2) > 1e-9*r2 {
				t.Fatalf("pi %v q %v: strata %d and %d not raised changed ratio %v -> %v", pi, q, a, b, r2, r1)
			}
		}
	}
}

// With a minimum share every batch holds each stratum within one sample of
// B·π'_c, π' the shares WithMinShare gives, and the epoch gives each
// stratum at least ⌊q·M·B⌋ of its slots.
func TestMinShareOrder(t *testing.T) {
	counts := []int{3000, 900, 200, 40, 12}
	var stratum, shard []uint32
	for c, n := range counts {
		for range n {
			stratum = append(stratum, uint32(c))
			shard = append(shard, uint32(len(shard)/100))
		}
	}
	in, err := layout.NewInput(stratum, len(counts), shard, int(shard[len(shard)-1])+1)
	if err != nil {
		t.Fatal(err)
	}
	for _, alpha := range []float64{1, 0.5} {
		p := layout.Params{Seed: 9, World: 2, Batch: 50, Alpha: alpha, MinShare: 0.08}
		pi := layout.TargetsOf(in, p)
		for c := range pi {
			if pi[c] < 0.08-1e-12 {
				t.Fatalf("alpha %v: stratum %d's target %v is below the minimum share", alpha, c, pi[c])
			}
		}
		total := make([]int, len(counts))
		slots := 0
		for r := 0; r < p.World; r++ {
			p.Rank = r
			o, err := layout.Order(in, p)
			if err != nil {
				t.Fatal(err)
			}
			var batch []int64
			for _, x := range o.Samples.All() {
				batch = append(batch, x)
				if len(batch) < p.Batch {
					continue
				}
				per := make([]int, len(counts))
				for _, s := range batch {
					per[stratum[s]]++
					total[stratum[s]]++
				}
				for c, n := range per {
					if want := float64(p.Batch) * pi[c]; float64(n) < math.Floor(want) || float64(n) > math.Ceil(want) {
						t.Fatalf("alpha %v: a batch holds %d of stratum %d, target %.2f", alpha, n, c, want)
					}
				}
				slots += len(batch)
				batch = batch[:0]
			}
		}
		for c, n := range total {
			if floor := int(0.08 * float64(slots)); n < floor-p.World {
				t.Errorf("alpha %v: stratum %d has %d of %d slots, below the minimum share's %d", alpha, c, n, slots, floor)
			}
		}
	}
	p := layout.Params{Seed: 1, World: 1, Batch: 10, Alpha: 1, MinShare: 0.3}
	if _, err := (&layout.Spec{Base: p, ResumeEpoch: -1}).Bind(in); err == nil {
		t.Fatal("a minimum share of 0.3 for 5 strata was accepted")
	}
}
