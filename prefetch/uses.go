package prefetch

import (
	"slices"

	"github.com/shardfs/shardfs/layout"
)

// memberIndex finds the members of a rank-epoch that read a sample: the
// cache's ranker asks it of every chunk it weighs. Its memory follows the
// members, not the sample ids: a rank of a global shuffle reads a few
// samples spread over the whole dataset, whose ids may lie past 2^31.
//
// A table indexed by id takes one load where the sorted ids take a binary
// search, and the ranker asks often; so it is kept where it is small
// (denseIds) or no larger than the sorted ids would be (at most 2 ids a
// member, as when one rank reads a whole dataset). Else the distinct ids
// are kept sorted beside their first member.
type memberIndex struct {
	dense []int32 // dense[s]: sample s's first member, -1: none; nil when sparse

	ids    []int64 // sparse: distinct sample ids, ascending
	firsts []int32 // sparse: firsts[j] is ids[j]'s first member

	// more holds every member of a sample read more than once (re-weighted
	// epochs), ascending.
	more map[int64][]int32
}

// denseIds is the most ids a dense table holds whatever the members: 16 MiB.
const denseIds = 1 << 22

func newMemberIndex(m *layout.Members) *memberIndex {
	n := m.Len()
	top := int64(-1)
	for i := range n {
		top = max(top, int64(m.Sample(i)))
	}
	x := &memberIndex{}
	if top < max(2*int64(n), denseIds) {
		x.dense = make([]int32, top+1)
		for i := range x.dense {
			x.dense[i] = -1
		}
	} else {
		order := make([]int32, n)
		for i := range order {
			order[i] = int32(i)
		}
		// Stable by id: a sample's members stay ascending, its first first.
		slices.SortStableFunc(order, func(a, b int32) int {
			sa, sb := m.Sample(int(a)), m.Sample(int(b))
			switch {
			case sa < sb:
				return -1
			case sa > sb:
				return 1
			}
			return 0
		})
		for _, i := range order {
			if s := int64(m.Sample(int(i))); len(x.ids) == 0 || x.ids[len(x.ids)-1] != s {
				x.ids = append(x.ids, s)
				x.firsts = append(x.firsts, i)
			}
		}
		x.ids, x.firsts = slices.Clip(x.ids), slices.Clip(x.firsts)
	}
	for i := range n {
		s := int64(m.Sample(i))
		f := x.first(s)
		switch {
		case f < 0 && x.dense != nil:
			x.dense[s] = int32(i)
		case int(f) == i:
		default:
			if x.more == nil {
				x.more = map[int64][]int32{}
			}
			if len(x.more[s]) == 0 {
				x.more[s] = []int32{f}
			}
			x.more[s] = append(x.more[s], int32(i))
		}
	}
	return x
}

// first is sample s's first member, or -1.
func (x *memberIndex) first(s int64) int32 {
	if x.dense != nil {
		if s < 0 || s >= int64(len(x.dense)) {
			return -1
		}
		return x.dense[s]
	}
	j, ok := slices.BinarySearch(x.ids, s)
	if !ok {
		return -1
	}
	return x.firsts[j]
}

// all is every member of sample s, ascending, when it has more than one.
func (x *memberIndex) all(s int64) []int32 { return x.more[s] }
