package layout

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// countIndex stands in for the per-sample columns when only counts are
// known: how many samples of each stratum each shard holds. Samples are
// numbered shard by shard and, within a shard, stratum by stratum, so
// stratum c's k-th member is found by a binary search over the shards in
// c's prefix sums: O(log S) a lookup, S·C numbers in all, nothing per
// sample. It is what lets the order of a billion samples be computed on
// one node: with order version 2 the order itself is O(1) per stratum.
type countIndex struct {
	n          int
	shardFirst []int64   // [S+1]: first sample of each shard
	inShard    []int32   // [S·(C+1)]: first position of each stratum within shard s at s·(C+1)+c
	prefix     [][]int32 // [C][S+1]: members of stratum c in shards before s (N < 2^31)
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
// by fill, so that the counts need not all be held at once.
func NewCountInputFunc(shards, numStrata int, fill func(s int, row []int)) (*Input, error) {
	if numStrata < 1 {
		return nil, errors.New("counts-only input needs at least one stratum")
	}
	w := numStrata + 1
	ix := &countIndex{shardFirst: make([]int64, shards+1), inShard: make([]int32, shards*w), prefix: make([][]int32, numStrata)}
	for c := range ix.prefix {
		ix.prefix[c] = make([]int32, shards+1)
	}
	row := make([]int, numStrata)
	var total int64
	for s := 0; s < shards; s++ {
		clear(row)
		fill(s, row)
		var in int64
		for c, k := range row {
			if k < 0 {
				return nil, fmt.Errorf("shard %d: stratum %d has %d samples", s, c, k)
			}
			ix.inShard[s*w+c] = int32(in)
			in += int64(k)
			if total+in > math.MaxInt32 {
				return nil, fmt.Errorf("more than %d samples", math.MaxInt32)
			}
			ix.prefix[c][s+1] = ix.prefix[c][s] + int32(k)
		}
		ix.inShard[s*w+numStrata] = int32(in)
		total += in
		ix.shardFirst[s+1] = total
	}
	ix.n = int(total)
	return &Input{NumStrata: numStrata, NumShards: shards, counted: ix}, nil
}

func (ix *countIndex) count(c int) int { return int(ix.prefix[c][len(ix.prefix[c])-1]) }

// member is stratum c's k-th sample, 0 <= k < count(c).
func (ix *countIndex) member(c, k int) int32 {
	pre := ix.prefix[c]
	// The shard s with pre[s] <= k < pre[s+1].
	s := sort.Search(len(pre)-1, func(s int) bool { return pre[s+1] > int32(k) })
	return int32(ix.shardFirst[s] + int64(ix.inShard[s*(len(ix.prefix)+1)+c]) + int64(k) - int64(pre[s]))
}

func (ix *countIndex) stratumOf(x int32) uint32 {
	s := sort.Search(len(ix.shardFirst)-1, func(s int) bool { return ix.shardFirst[s+1] > int64(x) })
	pos := int32(int64(x) - ix.shardFirst[s])
	w := len(ix.prefix) + 1
	row := ix.inShard[s*w : (s+1)*w]
	c := sort.Search(len(row)-1, func(c int) bool { return row[c+1] > pos })
	return uint32(c)
}
