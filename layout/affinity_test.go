package layout_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/shardfs/shardfs/layout"
)

// randomSharded builds an input of n samples in k strata, cut into shards of
// about perShard samples that mirror the class mix (as ingest places them).
func randomSharded(rng *rand.Rand, n, k, perShard int) *layout.Input {
	stratum := make([]uint32, n)
	for i := range stratum {
		// Imbalanced: stratum c is drawn with weight 1/(c+1).
		x := rng.Float64() * float64(harmonic(k))
		c := 0
		for acc := 1.0; acc < x && c < k-1; acc += 1 / float64(c+2) {
			c++
		}
		stratum[i] = uint32(c)
	}
	shard := make([]uint32, n)
	for i := range shard {
		shard[i] = uint32(i / perShard)
	}
	in, err := layout.NewInput(stratum, k, shard, (n+perShard-1)/perShard)
	if err != nil {
		panic(err)
	}
	return in
}

func harmonic(k int) float64 {
	h := 0.0
	for i := 1; i <= k; i++ {
		h += 1 / float64(i)
	}
	return h
}

// TestAffinityProperties: ranks are disjoint, have equal batch counts, read
// only their own shards (the same in every epoch), batches are stratified
// (each stratum's count per batch varies by at most one), totals follow each
// rank's pool mix, the order changes every epoch, and it is deterministic.
func TestAffinityProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	cases := 60
	if testing.Short() {
		cases = 10
	}
	for cs := 0; cs < cases; cs++ {
		n := 200 + rng.IntN(20_000)
		k := 1 + rng.IntN(12)
		perShard := 20 + rng.IntN(500)
		in := randomSharded(rng, n, k, perShard)
		world := 1 + rng.IntN(min(16, in.NumShards))
		batch := 1 + rng.IntN(64)
		tail := layout.Drop
		if rng.IntN(3) == 0 {
			tail = layout.Pad
		}
		shardsOf := layout.AffinityShards(in, 7, world)
		seenShard := map[int]int{}
		for r, shs := range shardsOf {
			for _, sh := range shs {
				if prev, dup := seenShard[sh]; dup {
					t.Fatalf("case %d: shard %d dealt to ranks %d and %d", cs, sh, prev, r)
				}
				seenShard[sh] = r
			}
		}
		if len(seenShard) != in.NumShards {
			t.Fatalf("case %d: %d of %d shards dealt", cs, len(seenShard), in.NumShards)
		}
		var first [][]int64
		for e := 0; e < 2; e++ {
			owner := map[int64]int{}
			steps := -1
			for r := 0; r < world; r++ {
				p := layout.Params{Seed: 7, Epoch: e, World: world, Rank: r, Batch: batch, Alpha: 1, Tail: tail, Affinity: true}
				o, err := layout.Order(in, p)
				if err != nil {
					t.Fatal(err)
				}
				st, _ := layout.Steps(in, p)
				if steps < 0 {
					steps = o.Batches
				}
				if o.Batches != steps || st != steps || o.Samples.Len() != steps*batch {
					t.Fatalf("case %d: rank %d has %d batches (Steps %d, %d slots), rank 0 %d", cs, r, o.Batches, st, o.Samples.Len(), steps)
				}
				for _, s := range o.Samples.All() {
					if prev, ok := owner[s]; ok && prev != r {
						t.Fatalf("case %d epoch %d: sample %d on ranks %d and %d", cs, e, s, prev, r)
					}
					owner[s] = r
					if seenShard[int(in.Shard[s])] != r {
						t.Fatalf("case %d epoch %d: rank %d read shard %d of rank %d", cs, e, r, in.Shard[s], seenShard[int(in.Shard[s])])
					}
				}
				if tail == layout.Drop {
					checkUnique(t, o.Samples.Int64s())
				}
				// Stratified: per stratum, counts over batches differ by at most one.
				lo, hi := make([]int, k), make([]int, k)
				for c := range lo {
					lo[c] = batch + 1
				}
				for b := 0; b < o.Batches; b++ {
					cnt := make([]int, k)
					for _, s := range o.BatchSamples(b).All() {
						cnt[in.Stratum[s]]++
					}
					for c := range cnt {
						lo[c], hi[c] = min(lo[c], cnt[c]), max(hi[c], cnt[c])
					}
				}
				for c := range lo {
					if o.Batches > 0 && hi[c]-lo[c] > 1 {
						t.Fatalf("case %d: rank %d stratum %d: %d..%d per batch", cs, r, c, lo[c], hi[c])
					}
				}
				o2, _ := layout.Order(in, p)
				if !slices.Equal(o.Samples.Int64s(), o2.Samples.Int64s()) {
					t.Fatalf("case %d: not deterministic", cs)
				}
				if e == 0 {
					first = append(first, o.Samples.Int64s())
				} else if steps*batch > 1 && slices.Equal(first[r], o.Samples.Int64s()) {
					t.Fatalf("case %d: rank %d reads the same order in epochs 0 and 1", cs, r)
				}
			}
		}
	}
}

func checkUnique(t *testing.T, s []int64) {
	t.Helper()
	seen := map[int64]bool{}
	for _, x := range s {
		if seen[x] {
			t.Fatalf("sample %d twice in one rank-epoch with tail=drop", x)
		}
		seen[x] = true
	}
}

func TestAffinityRefusesOtherModes(t *testing.T) {
	in := randomSharded(rand.New(rand.NewPCG(1, 2)), 500, 3, 50)
	for _, p := range []layout.Params{
		{World: 2, Batch: 8, Alpha: 1, Affinity: true, Window: 2},
		{World: 2, Batch: 8, Alpha: 0.5, Affinity: true},
		{World: 2, Batch: 8, Alpha: 1, Affinity: true, EpochSize: 100},
	} {
		if _, err := layout.Order(in, p); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
}
