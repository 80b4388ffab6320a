package layout_test

import (
	"fmt"
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
// In order version 2 the shards are dealt whole; in version 3 a rank reads
// its range of samples (AffinityRange), its pool within one sample of every
// other's, and the same range from a counts-only input with its shard runs.
func TestAffinityProperties(t *testing.T) {
	for _, v := range []int{2, 3} {
		t.Run(fmt.Sprint("version ", v), func(t *testing.T) { checkAffinity(t, v) })
	}
}

func checkAffinity(t *testing.T, version int) {
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
		if version == 3 {
			world = 1 + rng.IntN(64)
			in = stratumOrdered(t, in)
		}
		shardsOf := layout.AffinityShards(in, 7, world)
		var counted *layout.Input
		if version == 3 {
			counted = countedTwin(t, in)
		}
		if version == 3 && rng.IntN(2) == 0 {
			// Segments, as an append or a mix makes: 1 to 3 cuts.
			var starts []int64
			for x := int64(0); len(starts) < 3; {
				if x += 1 + rng.Int64N(int64(in.N())/2); x >= int64(in.N()) {
					break
				}
				starts = append(starts, x)
			}
			if err := in.SetSegments(starts); err != nil {
				t.Fatal(err)
			}
			if err := counted.SetSegments(starts); err != nil {
				t.Fatal(err)
			}
		}
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
				p := layout.Params{Seed: 7, Epoch: e, World: world, Rank: r, Batch: batch, Alpha: 1, Tail: tail, Affinity: true, Version: version}
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
				ranges := layout.AffinityRanges(in, world, r)
				inPool := func(s int64) bool {
					for _, x := range ranges {
						if s >= x[0] && s < x[1] {
							return true
						}
					}
					return false
				}
				if version == 3 {
					var size int64
					for _, x := range ranges {
						size += x[1] - x[0]
					}
					if least := int64(in.N() / world); size < least-int64(len(ranges)) || size > least+int64(len(ranges)) {
						t.Fatalf("case %d: rank %d's pool of %d samples in %d segments, %d for each of %d ranks", cs, r, size, len(ranges), in.N(), world)
					}
					co, err := layout.Order(counted, p)
					if err != nil || !slices.Equal(co.Samples.Int64s(), o.Samples.Int64s()) {
						t.Fatalf("case %d: rank %d's order from the counts and shard runs differs from the per-sample input's (%v)", cs, r, err)
					}
				}
				for _, s := range o.Samples.All() {
					if prev, ok := owner[s]; ok && prev != r {
						t.Fatalf("case %d epoch %d: sample %d on ranks %d and %d", cs, e, s, prev, r)
					}
					owner[s] = r
					if version == 3 {
						if !inPool(s) {
							t.Fatalf("case %d epoch %d: rank %d read sample %d, its ranges are %v", cs, e, r, s, ranges)
						}
					} else if seenShard[int(in.Shard[s])] != r {
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

// stratumOrdered is in with each shard's samples stored stratum by
// stratum, as formats 2 and 3 store them (randomSharded's are not).
func stratumOrdered(t *testing.T, in *layout.Input) *layout.Input {
	t.Helper()
	order := make([]int, in.N())
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if in.Shard[a] != in.Shard[b] {
			return int(in.Shard[a]) - int(in.Shard[b])
		}
		return int(in.Stratum[a]) - int(in.Stratum[b])
	})
	stratum, shard := make([]uint32, len(order)), make([]uint32, len(order))
	for i, x := range order {
		stratum[i], shard[i] = in.Stratum[x], in.Shard[x]
	}
	out, err := layout.NewInput(stratum, in.NumStrata, shard, in.NumShards)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// countedTwin is in, whose shards hold their samples stratum by stratum,
// as a counts-only input with its shard runs: the same samples, numbered
// the same.
func countedTwin(t *testing.T, in *layout.Input) *layout.Input {
	t.Helper()
	rows := make([][]int, in.NumShards)
	for s := range rows {
		rows[s] = make([]int, in.NumStrata)
	}
	for x := range in.N() {
		rows[in.Shard[x]][in.Stratum[x]]++
	}
	counted, err := layout.NewCountInput(rows, in.NumStrata)
	if err != nil {
		t.Fatal(err)
	}
	first := make([]int64, len(rows)+1)
	for s, row := range rows {
		first[s+1] = first[s]
		for _, k := range row {
			first[s+1] += int64(k)
		}
	}
	counted.SetShardRuns(func(lo, hi int64) ([]layout.ShardRun, error) {
		var runs []layout.ShardRun
		for s := range rows {
			if first[s+1] > lo && first[s] < hi {
				runs = append(runs, layout.ShardRun{First: first[s], Counts: rows[s]})
			}
		}
		return runs, nil
	})
	return counted
}
