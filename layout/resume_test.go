package layout_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/shardfs/shardfs/layout"
)

// TestElasticResume: W1 ranks consume N global batches of an epoch; W2 ranks
// resume with Skip = N. The two parts together are exactly G[0 : N+T'·W2]:
// no batch twice, the same batches a single rank would read in that order,
// equal batch counts on the new ranks, and nothing else changes.
func TestElasticResume(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	cases := 80
	if testing.Short() {
		cases = 15
	}
	checked := 0
	for cs := 0; cs < cases; cs++ {
		in := randomSharded(rng, 300+rng.IntN(8000), 1+rng.IntN(10), 30+rng.IntN(300))
		batch := 1 + rng.IntN(48)
		base := layout.Params{Seed: uint64(cs), Epoch: rng.IntN(3), Batch: batch, Alpha: []float64{1, 0.5, 0}[rng.IntN(3)]}
		if rng.IntN(4) == 0 {
			base.Alpha, base.Window = 1, 1+rng.IntN(4)
		}
		w1, w2 := 1+rng.IntN(8), 1+rng.IntN(8)
		p1 := base
		p1.World = w1
		t1, err := layout.Steps(in, p1)
		if err != nil {
			t.Fatal(err)
		}
		if t1 == 0 {
			continue
		}
		consumed := rng.IntN(t1 + 1) // steps each old rank finished
		n := consumed * w1
		// The full stream G, as one rank of W=1 reads it.
		g := base
		g.World = 1
		gm, _ := layout.Steps(in, g)
		full, err := layout.GlobalBatches(in, g, gm)
		if err != nil {
			t.Fatal(err)
		}
		// Old part: the first `consumed` steps of every old rank, step-interleaved.
		var old []int64
		orders := make([]*layout.RankOrder, w1)
		for r := range orders {
			p := p1
			p.Rank = r
			orders[r], _ = layout.Order(in, p)
		}
		for step := 0; step < consumed; step++ {
			for r := 0; r < w1; r++ {
				old = append(old, orders[r].BatchSamples(step).Int64s()...)
			}
		}
		// New part: W2 ranks with Skip = n.
		p2 := base
		p2.World, p2.Skip = w2, n
		t2, err := layout.Steps(in, p2)
		if err != nil {
			t.Fatal(err)
		}
		if want := (gm - n) / w2; t2 != want {
			t.Fatalf("case %d: %d steps after resuming at %d of %d with W=%d, want %d", cs, t2, n, gm, w2, want)
		}
		news := make([]*layout.RankOrder, w2)
		for r := range news {
			p := p2
			p.Rank = r
			news[r], _ = layout.Order(in, p)
			if news[r].Batches != t2 {
				t.Fatalf("case %d: rank %d has %d batches, want %d", cs, r, news[r].Batches, t2)
			}
		}
		resumed := slices.Clone(old)
		for step := 0; step < t2; step++ {
			for r := 0; r < w2; r++ {
				resumed = append(resumed, news[r].BatchSamples(step).Int64s()...)
			}
		}
		if want := full[:(n+t2*w2)*batch]; !slices.Equal(resumed, want) {
			t.Fatalf("case %d (W %d -> %d, resume at %d of %d): old part + new part is not G[0:%d]", cs, w1, w2, n, gm, n+t2*w2)
		}
		if gm-(n+t2*w2) >= w2 {
			t.Fatalf("case %d: %d batches of G left out, want fewer than W=%d", cs, gm-(n+t2*w2), w2)
		}
		checked++
		// The next epoch is as usual.
		next := p2
		next.Epoch, next.Skip, next.Rank = p2.Epoch+1, 0, 0
		a, _ := layout.Order(in, next)
		fresh := base
		fresh.Epoch, fresh.World = base.Epoch+1, w2
		b, _ := layout.Order(in, fresh)
		if !slices.Equal(a.Samples.Int64s(), b.Samples.Int64s()) {
			t.Fatalf("case %d: the epoch after a resume differs from a plain one", cs)
		}
	}
	if checked < cases/2 {
		t.Fatalf("only %d of %d random cases had batches to resume in", checked, cases)
	}
	in := randomSharded(rng, 500, 3, 50)
	if _, err := layout.Order(in, layout.Params{World: 1, Batch: 8, Alpha: 1, Skip: 1000}); err == nil {
		t.Fatal("resuming past the end of the epoch accepted")
	}
}
