package layout

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
)

// countIndex stands in for the per-sample columns when only counts are
// known: how many samples of each stratum each shard holds. Samples are
// numbered shard by shard and, within a shard, stratum by stratum, so
// stratum c's k-th member is found by a binary search over the shards in
// c's prefix sums: O(log S) a lookup, S·C numbers in all, nothing per
// sample. It is what lets the order of a billion samples be computed on
// one node: with order version 2 the order itself is O(1) per stratum.
// The prefix sums take 4 bytes while every stratum has under 2^31
// samples, 8 once one has more.
type countIndex[T int32 | int64] struct {
	n          int
	shardFirst []int64 // [S+1]: first sample of each shard
	inShard    []int32 // [S·(C+1)]: first position of each stratum within shard s at s·(C+1)+c
	prefix     [][]T   // [C][S+1]: members of stratum c in shards before s
}

// NewCountInput builds an Input from per-shard counts, counts[s][c] being
// the samples of stratum c in shard s; see countIndex for how samples are
// numbered. Only the global order (no window, no affinity) can be computed
// from it, with order version 2.
func NewCountInput(counts [][]int, numStrata int) (*Input, error) {
	for s, row := range counts {
		if len(row) != numStrata {
			return nil, fmt.Errorf("shard %d: %d stratum counts for %d strata", s, len(row), numStrata)
		}
	}
	return NewCountInputFunc(len(counts), numStrata, func(s int, row []int) { copy(row, counts[s]) })
}

// NewCountInputFunc is NewCountInput with shard s's counts written into row
// by fill, so that the counts need not all be held at once. fill is called
// twice for each shard, and must give the same counts both times.
func NewCountInputFunc(shards, numStrata int, fill func(s int, row []int)) (*Input, error) {
	if numStrata < 1 {
		return nil, errors.New("counts-only input needs at least one stratum")
	}
	row := make([]int, numStrata)
	perStratum := make([]int64, numStrata)
	var total int64
	for s := 0; s < shards; s++ {
		clear(row)
		fill(s, row)
		for c, k := range row {
			if k < 0 || k > math.MaxInt32 {
				return nil, fmt.Errorf("shard %d: stratum %d has %d samples", s, c, k)
			}
			perStratum[c] += int64(k)
			total += int64(k)
		}
		if total > maxSamples {
			return nil, fmt.Errorf("more than %d samples", int64(maxSamples))
		}
	}
	var ix counts
	var err error
	if slices.Max(perStratum) <= math.MaxInt32 {
		ix, err = newCountIndex[int32](shards, numStrata, fill)
	} else {
		ix, err = newCountIndex[int64](shards, numStrata, fill)
	}
	if err != nil {
		return nil, err
	}
	return &Input{NumStrata: numStrata, NumShards: shards, counted: ix}, nil
}

func newCountIndex[T int32 | int64](shards, numStrata int, fill func(s int, row []int)) (*countIndex[T], error) {
	w := numStrata + 1
	ix := &countIndex[T]{shardFirst: make([]int64, shards+1), inShard: make([]int32, shards*w), prefix: make([][]T, numStrata)}
	for c := range ix.prefix {
		ix.prefix[c] = make([]T, shards+1)
	}
	row := make([]int, numStrata)
	var total int64
	for s := 0; s < shards; s++ {
		clear(row)
		fill(s, row)
		var in int64
		for c, k := range row {
			ix.inShard[s*w+c] = int32(in)
			in += int64(k)
			if in > math.MaxInt32 {
				return nil, fmt.Errorf("shard %d: more than %d samples", s, math.MaxInt32)
			}
			ix.prefix[c][s+1] = ix.prefix[c][s] + T(k)
		}
		ix.inShard[s*w+numStrata] = int32(in)
		total += in
		ix.shardFirst[s+1] = total
	}
	ix.n = int(total)
	return ix, nil
}

// maxSamples is the most samples an input may hold: positions are int64,
// and 2^62 leaves every sum of two of them (and a batch's worth past
// them) without overflow.
const maxSamples = 1 << 62

// counts is what the order needs of a counts-only input.
type counts interface {
	samples() int
	count(c int) int
	member(c, k int) int64
	stratumOf(x int64) uint32
	split(x int64) (unit, stratum int, k int64)
}

// Split is where sample x of a counts-only input lies: its unit (the
// shard whose counts the input was built from; for a format-3 root, the
// group of shards), its stratum, and which of the stratum's members in
// that unit it is (0 the first).
func (in *Input) Split(x int64) (unit, stratum int, k int64, err error) {
	if in.counted == nil {
		return 0, 0, 0, errors.New("Split needs a counts-only input")
	}
	if x < 0 || x >= int64(in.counted.samples()) {
		return 0, 0, 0, fmt.Errorf("sample %d of %d", x, in.counted.samples())
	}
	unit, stratum, k = in.counted.split(x)
	return unit, stratum, k, nil
}

func (ix *countIndex[T]) split(x int64) (unit, stratum int, k int64) {
	s := sort.Search(len(ix.shardFirst)-1, func(s int) bool { return ix.shardFirst[s+1] > x })
	c := int(ix.stratumOf(x))
	return s, c, x - ix.shardFirst[s] - int64(ix.inShard[s*(len(ix.prefix)+1)+c])
}

func (ix *countIndex[T]) samples() int    { return ix.n }
func (ix *countIndex[T]) count(c int) int { return int(ix.prefix[c][len(ix.prefix[c])-1]) }

// member is stratum c's k-th sample, 0 <= k < count(c).
func (ix *countIndex[T]) member(c, k int) int64 {
	pre := ix.prefix[c]
	// The shard s with pre[s] <= k < pre[s+1].
	s := sort.Search(len(pre)-1, func(s int) bool { return int64(pre[s+1]) > int64(k) })
	return ix.shardFirst[s] + int64(ix.inShard[s*(len(ix.prefix)+1)+c]) + int64(k) - int64(pre[s])
}

func (ix *countIndex[T]) stratumOf(x int64) uint32 {
	s := sort.Search(len(ix.shardFirst)-1, func(s int) bool { return ix.shardFirst[s+1] > x })
	pos := int32(x - ix.shardFirst[s])
	w := len(ix.prefix) + 1
	row := ix.inShard[s*w : (s+1)*w]
	c := sort.Search(len(row)-1, func(c int) bool { return row[c+1] > pos })
	return uint32(c)
}

// evenIndex models a dataset whose strata are spread evenly over its
// shards, as ingest's stratified placement spreads them: shard s holds
// ⌊(s+1)·perStratum/S⌋ − ⌊s·perStratum/S⌋ samples of stratum c. It holds O(S + C)
// numbers, so a plan of a billion samples in thousands of strata fits in
// a few MiB; a lookup costs O(C). Samples are numbered as in countIndex.
type evenIndex struct {
	n          int
	perStratum []int64
	shards     int64
	shardFirst []int64 // [S+1]
}

// NewEvenCountInput builds a counts-only Input of shards shards holding
// counts[c] samples of stratum c each, spread evenly (see evenIndex).
func NewEvenCountInput(counts []int, shards int) (*Input, error) {
	if len(counts) < 1 || shards < 1 {
		return nil, errors.New("an even counts input needs at least one stratum and one shard")
	}
	ix := &evenIndex{perStratum: make([]int64, len(counts)), shards: int64(shards), shardFirst: make([]int64, shards+1)}
	var total int64
	for c, k := range counts {
		if k < 0 {
			return nil, fmt.Errorf("stratum %d has %d samples", c, k)
		}
		ix.perStratum[c] = int64(k)
		total += int64(k)
	}
	if total > maxSamples || total > 0 && int64(shards) > math.MaxInt64/total {
		// member and in multiply a count by the shard count.
		return nil, fmt.Errorf("%d samples in %d shards: the even model's products overflow 64 bits", total, shards)
	}
	ix.n = int(total)
	for s := 0; s < shards; s++ {
		ix.shardFirst[s+1] = ix.shardFirst[s] + ix.before(int64(s), len(counts))
	}
	in := &Input{NumStrata: len(counts), NumShards: shards, counted: ix}
	in.SetShardRuns(ix.runs) // its units are shards
	return in, nil
}

// runs lists the shards holding samples [lo, hi), with their counts.
func (ix *evenIndex) runs(lo, hi int64) ([]ShardRun, error) {
	var out []ShardRun
	s := sort.Search(int(ix.shards), func(s int) bool { return ix.shardFirst[s+1] > lo })
	for ; s < int(ix.shards) && ix.shardFirst[s] < hi; s++ {
		row := make([]int, len(ix.perStratum))
		for c := range row {
			row[c] = int(ix.in(int64(s), c))
		}
		out = append(out, ShardRun{First: ix.shardFirst[s], Counts: row})
	}
	return out, nil
}

// in is stratum c's count in shard s.
func (ix *evenIndex) in(s int64, c int) int64 {
	return (s+1)*ix.perStratum[c]/ix.shards - s*ix.perStratum[c]/ix.shards
}

// before is the samples of strata below c in shard s.
func (ix *evenIndex) before(s int64, c int) int64 {
	var n int64
	for x := 0; x < c; x++ {
		n += ix.in(s, x)
	}
	return n
}

func (ix *evenIndex) samples() int    { return ix.n }
func (ix *evenIndex) count(c int) int { return int(ix.perStratum[c]) }

func (ix *evenIndex) member(c, k int) int64 {
	n := ix.perStratum[c]
	// The shard s with ⌊s·n/S⌋ <= k < ⌊(s+1)·n/S⌋.
	s := ((int64(k)+1)*ix.shards+n-1)/n - 1
	return ix.shardFirst[s] + ix.before(s, c) + int64(k) - s*n/ix.shards
}

func (ix *evenIndex) split(x int64) (unit, stratum int, k int64) {
	s := sort.Search(len(ix.shardFirst)-1, func(s int) bool { return ix.shardFirst[s+1] > x })
	c := int(ix.stratumOf(x))
	return s, c, x - ix.shardFirst[s] - ix.before(int64(s), c)
}

func (ix *evenIndex) stratumOf(x int64) uint32 {
	s := sort.Search(len(ix.shardFirst)-1, func(s int) bool { return ix.shardFirst[s+1] > x })
	pos := x - ix.shardFirst[s]
	for c := range ix.perStratum {
		pos -= ix.in(int64(s), c)
		if pos < 0 {
			return uint32(c)
		}
	}
	return uint32(len(ix.perStratum) - 1)
}
