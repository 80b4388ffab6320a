package layout

import (
	"errors"
	"slices"
)

// affinity is rank-affine mode: the shards are dealt to the W ranks once,
// by the seed alone, so each rank reads the same shards in every epoch and
// a node's disk tier needs only about 1/W of the dataset. Within its pool
// (the samples of its shards) a rank's batches are arranged exactly as the
// global order arranges the dataset: each batch holds ⌊B·π_c⌋ or ⌈B·π_c⌉
// samples of stratum c, where π is the pool's own class mix (which mirrors
// the dataset's, as ingest places samples into shards by a stratified
// shuffle); draws and batch order change every epoch. Every rank gets
// T = min over ranks of ⌊pool/B⌋ batches (drop), or the max of ⌈pool/B⌉ with
// recycling (pad).
type affinity struct {
	in    *Input
	p     Params
	pools [][]int32 // per rank, the samples of its shards in shard order
	steps int
}

// AffinityShards deals the shards to the ranks, the same in every epoch: a
// seeded shard order, each shard to the rank with the fewest samples so far,
// so the pools differ in size by at most one shard.
func AffinityShards(in *Input, seed uint64, world int) [][]int {
	shards := make([]int, in.NumShards)
	for i := range shards {
		shards[i] = i
	}
	rngOf(seed, tagAffinity).Shuffle(len(shards), func(i, j int) { shards[i], shards[j] = shards[j], shards[i] })
	out := make([][]int, world)
	size := make([]int, world)
	for _, sh := range shards {
		r := 0
		for k := 1; k < world; k++ {
			if size[k] < size[r] {
				r = k
			}
		}
		out[r] = append(out[r], sh)
		size[r] += len(in.shardMembers[sh])
	}
	for _, o := range out {
		slices.Sort(o)
	}
	return out
}

func newAffinity(in *Input, p Params) (*affinity, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if in.shardMembers == nil {
		return nil, errors.New("affinity needs the samples' shards")
	}
	if in.N() == 0 {
		return nil, errors.New("the dataset has no samples")
	}
	a := &affinity{in: in, p: p}
	minT, maxT := -1, 0
	for _, shards := range AffinityShards(in, p.Seed, p.World) {
		var pool []int32
		for _, sh := range shards {
			pool = append(pool, in.shardMembers[sh]...)
		}
		a.pools = append(a.pools, pool)
		if t := len(pool) / p.Batch; minT < 0 || t < minT {
			minT = t
		}
		maxT = max(maxT, (len(pool)+p.Batch-1)/p.Batch)
	}
	a.steps = minT
	if p.Tail == Pad {
		a.steps = maxT
	}
	return a, nil
}

func affinityOrder(in *Input, p Params) (*RankOrder, error) {
	a, err := newAffinity(in, p)
	if err != nil {
		return nil, err
	}
	o := &RankOrder{Params: p, Batches: a.steps, Samples: MakePositions(a.steps * p.Batch)}
	if a.steps == 0 {
		return o, nil
	}
	pool := a.pools[p.Rank]
	byStratum := make([][]int32, in.NumStrata)
	for _, s := range pool {
		byStratum[in.Stratum[s]] = append(byStratum[in.Stratum[s]], s)
	}
	avail := make([]int, in.NumStrata)
	for c := range byStratum {
		avail[c] = len(byStratum[c])
	}
	slots := a.steps * p.Batch
	var counts []int
	if slots <= len(pool) {
		counts = apportionInt(slots, avail)
	} else {
		// pad: every sample once, the rest recycled in proportion.
		counts = apportionInt(slots-len(pool), avail)
		for c := range counts {
			counts[c] += avail[c]
		}
	}
	seed := seedOf(p.Seed, uint64(p.Epoch), uint64(p.Rank), tagAffinity)
	perms := make([][][]int32, in.NumStrata)
	draw := func(c, k int) int64 {
		mem := byStratum[c]
		dc, pos := k/len(mem), k%len(mem)
		for len(perms[c]) <= dc {
			perm := slices.Clone(mem)
			rngOf(seed, tagDraws, uint64(c), uint64(len(perms[c]))).Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
			perms[c] = append(perms[c], perm)
		}
		return int64(perms[c][dc][pos])
	}
	arr := newArrangement(counts, a.steps, rngOf(seed, tagStrataOrder), seed, false, draw)
	batch := make([]int64, 0, p.Batch)
	for j := 0; j < a.steps; j++ {
		batch = arr.batch(j, batch[:0])
		o.Samples.AppendAll(batch)
	}
	return o, nil
}
