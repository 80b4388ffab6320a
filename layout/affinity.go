package layout

import (
	"errors"
	"fmt"
	"math/bits"
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
//
// Order version 3 deals each rank a contiguous range of the samples,
// numbered shard by shard, instead of whole shards: rank r's pool is
// samples [⌊r·N/W⌋, ⌊(r+1)·N/W⌋) (AffinityRange). A rank's shards are one
// run (the first and last shared with its neighbours at most), so it needs
// the counts of its own run only: a format-3 dataset's rank reads the one
// or two group objects of its run, not every shard's counts. Ingest's
// stratified placement makes any run of an ingest's shards mirror that
// ingest's mix; a dataset of several ingests (appends) or a mix of
// datasets is cut into segments (SetSegments), and a rank gets its range
// of every segment, so its pool mirrors each. The pools differ by at most
// one sample a segment. Within its pool a rank's batches are arranged as
// in versions 1 and 2.
type affinity struct {
	in    *Input
	p     Params
	pools [][]int32 // per rank, the samples of its shards in shard order (versions 1 and 2)
	steps int
}

// AffinityRange is rank's share of a segment of n samples in rank-affine
// orders of version 3: its samples [lo, hi), from the segment's first.
func AffinityRange(n int64, world, rank int) (lo, hi int64) {
	at := func(r int) int64 {
		// ⌊r·n/W⌋ in 128 bits: r·n passes 2^63 for n near 2^62.
		h, l := bits.Mul64(uint64(r), uint64(n))
		q, _ := bits.Div64(h, l, uint64(world))
		return int64(q)
	}
	return at(rank), at(rank + 1)
}

// SetSegments cuts the samples into segments that rank-affine orders of
// version 3 deal apart (see affinity): starts are the first samples of the
// segments after the first, ascending.
func (in *Input) SetSegments(starts []int64) error {
	n := int64(in.N())
	for i, x := range starts {
		if x <= 0 || x >= n || i > 0 && x <= starts[i-1] {
			return fmt.Errorf("segments starting at %v: each must start within the %d samples, ascending", starts, n)
		}
	}
	in.segments = starts
	return nil
}

// AffinityRanges is rank's pool in rank-affine orders of version 3: its
// range of each segment of in, as samples [lo, hi).
func AffinityRanges(in *Input, world, rank int) [][2]int64 {
	bounds := append(append([]int64{0}, in.segments...), int64(in.N()))
	out := make([][2]int64, 0, len(bounds)-1)
	for i := range len(bounds) - 1 {
		lo, hi := AffinityRange(bounds[i+1]-bounds[i], world, rank)
		out = append(out, [2]int64{bounds[i] + lo, bounds[i] + hi})
	}
	return out
}

// ShardRun is a shard's part in a range of samples: its first sample and
// its count per stratum; its samples are stored stratum by stratum.
type ShardRun struct {
	First  int64
	Counts []int
}

// SetShardRuns gives a counts-only input the shards that rank-affine
// orders of version 3 read: runs lists, in shard order, the shards holding
// samples [lo, hi). A counts-only input needs it for them; one with
// per-sample columns has its shards already.
func (in *Input) SetShardRuns(runs func(lo, hi int64) ([]ShardRun, error)) { in.shardRuns = runs }

// rangeAffine reports whether p's affinity deals sample ranges (version 3).
func rangeAffine(p Params) bool { return p.OrderVersion() >= 3 }

// rangeSteps is T of a rank-affine order of version 3, from the segments'
// sizes alone: with one segment the pools hold ⌊N/W⌋ or ⌈N/W⌉ samples.
func rangeSteps(in *Input, p Params) (int, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	if in.N() == 0 {
		return 0, errors.New("the dataset has no samples")
	}
	b := int64(p.Batch)
	pools := func(pool int64) int {
		if p.Tail == Pad {
			return int((pool + b - 1) / b)
		}
		return int(pool / b)
	}
	if len(in.segments) == 0 {
		// One segment: the pools hold ⌊N/W⌋ or ⌈N/W⌉.
		n, w := int64(in.N()), int64(p.World)
		if p.Tail == Pad {
			return pools((n + w - 1) / w), nil
		}
		return pools(n / w), nil
	}
	steps := -1
	for r := range p.World {
		var pool int64
		for _, x := range AffinityRanges(in, p.World, r) {
			pool += x[1] - x[0]
		}
		t := pools(pool)
		if steps < 0 || p.Tail == Pad && t > steps || p.Tail != Pad && t < steps {
			steps = t
		}
	}
	return steps, nil
}

// rangePool is rank p.Rank's pool in version 3, by stratum, each stratum's
// members ascending.
func rangePool(in *Input, p Params) ([][]int64, error) {
	byStratum := make([][]int64, in.NumStrata)
	for _, x := range AffinityRanges(in, p.World, p.Rank) {
		if err := in.addRange(byStratum, x[0], x[1]); err != nil {
			return nil, fmt.Errorf("rank %d's pool: %w", p.Rank, err)
		}
	}
	return byStratum, nil
}

// addRange appends samples [lo, hi) to byStratum, stratum by stratum.
func (in *Input) addRange(byStratum [][]int64, lo, hi int64) error {
	if lo >= hi {
		return nil
	}
	switch {
	case in.Stratum != nil:
		for x := lo; x < hi; x++ {
			c := in.Stratum[x]
			byStratum[c] = append(byStratum[c], x)
		}
		return nil
	case in.shardRuns == nil:
		return errors.New("affinity needs the samples' shards: a counts-only input needs SetShardRuns")
	}
	runs, err := in.shardRuns(lo, hi)
	if err != nil {
		return err
	}
	got := int64(0)
	for _, run := range runs {
		if len(run.Counts) != in.NumStrata {
			return fmt.Errorf("a shard's counts of %d strata, for %d", len(run.Counts), in.NumStrata)
		}
		at := run.First
		for c, k := range run.Counts {
			for x := max(at, lo); x < min(at+int64(k), hi); x++ {
				byStratum[c] = append(byStratum[c], x)
				got++
			}
			at += int64(k)
		}
	}
	if got != hi-lo {
		return fmt.Errorf("%d samples in the shard runs of samples [%d, %d)", got, lo, hi)
	}
	return nil
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
	var steps int
	var byStratum [][]int64
	var err error
	if rangeAffine(p) {
		if steps, err = rangeSteps(in, p); err != nil {
			return nil, err
		}
		if steps > 0 {
			if byStratum, err = rangePool(in, p); err != nil {
				return nil, err
			}
		}
	} else {
		a, err := newAffinity(in, p)
		if err != nil {
			return nil, err
		}
		steps = a.steps
		byStratum = make([][]int64, in.NumStrata)
		for _, s := range a.pools[p.Rank] {
			byStratum[in.Stratum[s]] = append(byStratum[in.Stratum[s]], int64(s))
		}
	}
	o := &RankOrder{Params: p, Batches: steps, Samples: MakePositions(steps * p.Batch)}
	if steps == 0 {
		return o, nil
	}
	pool := 0
	for _, m := range byStratum {
		pool += len(m)
	}
	avail := make([]int, in.NumStrata)
	for c := range byStratum {
		avail[c] = len(byStratum[c])
	}
	slots := steps * p.Batch
	var counts []int
	if slots <= pool {
		counts = apportionInt(slots, avail)
	} else {
		// pad: every sample once, the rest recycled in proportion.
		counts = apportionInt(slots-pool, avail)
		for c := range counts {
			counts[c] += avail[c]
		}
	}
	seed := seedOf(p.Seed, uint64(p.Epoch), uint64(p.Rank), tagAffinity)
	perms := make([][][]int64, in.NumStrata)
	draw := func(c, k int) int64 {
		mem := byStratum[c]
		dc, pos := k/len(mem), k%len(mem)
		for len(perms[c]) <= dc {
			perm := slices.Clone(mem)
			rngOf(seed, tagDraws, uint64(c), uint64(len(perms[c]))).Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
			perms[c] = append(perms[c], perm)
		}
		return perms[c][dc][pos]
	}
	arr := newArrangement(counts, steps, rngOf(seed, tagStrataOrder), seed, false, draw)
	batch := make([]int64, 0, p.Batch)
	for j := 0; j < steps; j++ {
		batch = arr.batch(j, batch[:0])
		o.Samples.AppendAll(batch)
	}
	return o, nil
}
