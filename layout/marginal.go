package layout

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Order version 5: batches that balance every field, not only the strata.
//
// A stratum is the product of the fields a dataset is stratified by (the
// label, each --strata field, each --bins field, the time bucket). With a
// few fields every stratum holds many samples, and versions 1-4's bound,
// each stratum within ⌊B·π_c⌋..⌈B·π_c⌉ of every batch, balances each field
// too. With many fields most strata hold less than one sample a batch, the
// bound says only "0 or 1" for each, and the strata's extras, dealt
// round-robin in a shuffled chain, leave each field's per-batch count no
// closer to its target than a shuffle's (879 strata from four fields over
// 2,000 records: the first field's per-batch deviation 1.59 mean, 7.42 max,
// against a shuffle's 1.69 and 6.63).
//
// Version 5 keeps every stratum's bound and adds the fields'. Of the survey
// sampler's tools (nested stratification with systematic selection, the
// cube method, controlled rounding of the table of per-batch quotas) it
// builds the last, as a recursive split:
//
//  1. The epoch's slots are apportioned to strata by controlled rounding
//     (rounding.go) of M·B·π_c over the two laminar families of the
//     strata's field tuples, instead of by largest remainder: every
//     stratum, each value of the first field, each value of the second,
//     each (f1, f2) cell (and every longer prefix of the tuple, and of the
//     tuple without f1) gets ⌊M·B·π⌋ or ⌈M·B·π⌉ slots.
//  2. As before, every batch takes q_c = ⌊n'_c/M⌋ of stratum c, and the
//     r_c = n'_c mod M extras (each r_c < M) are dealt over the M batches,
//     at most one a batch. They are dealt by halving: the batches [lo, hi)
//     hold extras t (per stratum), the lower half's are a controlled
//     rounding of t·(mid-lo)/(hi-lo), the upper half the rest, down to
//     single batches.
//
// Why every batch is then within one sample of every set's target (B·π_X
// for X a stratum, a value of f1 or f2, or a prefix set). Write e_X =
// n'_X/M (extras and quotas summed over X's strata: each batch must hold
// about e_X of X). A range of m batches holds t_X of X; claim: m·⌊e_X⌋ ≤
// t_X ≤ m·⌈e_X⌉. The whole range holds n'_X = M·e_X. A split of a range
// gives its lower half a rounding of t_X·m'/m, which lies between
// m'·⌊e_X⌋ and m'·⌈e_X⌉ (integers), so its floor and ceiling do too; the
// upper half's t_X - y_X lies between t_X - ⌈t_X·m'/m⌉ = ⌊t_X·(m-m')/m⌋ ≥
// (m-m')·⌊e_X⌋ and likewise below (m-m')·⌈e_X⌉. At a single batch the
// claim says the batch holds ⌊e_X⌋ or ⌈e_X⌉ of X. And step 1 gives
// ⌊M·B·π_X⌋ ≤ n'_X ≤ ⌈M·B·π_X⌉, so ⌊B·π_X⌋ ≤ ⌊e_X⌋ and ⌈e_X⌉ ≤ ⌈B·π_X⌉:
// every batch holds ⌊B·π_X⌋ or ⌈B·π_X⌉ of X, within one sample of its
// target. The whole is exact at every split (each batch B samples).
//
// The bound for the fields after the second: a value v of field j ≥ 3 is
// the union of the B-sets (f2, ..., fj) whose last value is v, one per
// value of (f2..fj-1) present, each within one of its target; so v's
// per-batch deviation is below the number of distinct (f2..fj-1) values
// present with v (for j = 3: the values of f2). No controlled rounding
// holds three marginals in general (rounding.go); in practice the sums'
// roundings cancel (TestManyFieldsBalance measures them).
//
// It stays the order it was in every other respect: G does not depend on
// W (each batch's composition is a function of its index in G), so ranks
// are disjoint and resume is exact and elastic; the batches are put in a
// seeded order every epoch and each is shuffled; draws come from each
// stratum's seeded permutations as in version 4, seam included; α and the
// time weights set π (α applies to the strata: π_c ∝ n_c^α·w_c, and the
// fields' targets are the sums); and it needs O(strata) memory. To vary
// which strata's extras meet from epoch to epoch, each cycle numbers the
// strata in a seeded order, each split takes them in a seeded order of its
// own (which changes the roundings: firstHalf), and a seeded coin picks
// which half is rounded and which takes the rest.
//
// Window and affinity orders, and mixes, are version 4's: a mix deals its
// datasets' extras as before (mix.go). So is the global order of strata of
// one field (a label, or one --strata field): version 4's deal already
// holds it within one sample of its target in every batch, at a twentieth
// of the cost. BenchmarkPlan_10M_1000strata_W64_fields (10M samples in
// 1,000 strata of three fields, W=64, B=256: 610 batches a rank) takes
// 1.06 s a rank-epoch, against 47 ms for version 4's deal of the same
// strata (_version4); the profile puts 80% in the max flows of the splits
// below the kept ones, which every batch walks again.

// SetFields gives each stratum its tuple of field values: values[c][j] is
// stratum c's value of field j (numbered per field), k fields for every
// stratum, the fields in the order the user named them. Order version 5
// balances each batch on the first two fields as well as on the strata.
// Without it a stratum is its own single field (or its group's, with
// SetGroups).
func (in *Input) SetFields(values [][]uint32) error {
	if len(values) != in.NumStrata {
		return fmt.Errorf("%d field tuples for %d strata", len(values), in.NumStrata)
	}
	for c, v := range values {
		if len(v) != len(values[0]) {
			return fmt.Errorf("stratum %d has %d field values, stratum 0 %d", c, len(v), len(values[0]))
		}
	}
	in.fields = values
	return nil
}

// Fields returns the strata's field tuples as version 5 sees them (see
// SetFields): each stratum's own when set, else (group, stratum) for
// grouped strata, else (stratum).
func (in *Input) Fields() [][]uint32 {
	if in.fields != nil {
		return in.fields
	}
	out := make([][]uint32, in.NumStrata)
	for c := range out {
		if in.Group != nil {
			out[c] = []uint32{uint32(in.Group[c]), uint32(c)}
		} else {
			out[c] = []uint32{uint32(c)}
		}
	}
	return out
}

// manyFields reports whether the strata are tuples of two fields or more
// (SetFields, or SetGroups's groups): only then does version 5 deal
// otherwise than version 4, whose deal already holds one field (the
// strata) within one sample of its target in every batch.
func (in *Input) manyFields() bool {
	if in.fields != nil {
		return len(in.fields) > 0 && len(in.fields[0]) >= 2
	}
	return in.Group != nil
}

// marginalWeightScale turns real targets into integer weights for the
// controlled rounding, which needs exact shares: π_c·2^40, at least 1
// for π_c > 0 (a change of at most 2^-40 of a target).
const marginalWeightScale = 1 << 40

// apportionMarginal is step 1 above: total slots over the strata by
// controlled rounding of total·π_c, π_c ∝ n_c^α·w_c (then MinShare).
func apportionMarginal(in *Input, p Params, total int) []int {
	w := make([]int64, in.NumStrata)
	switch {
	case p.Weights == nil && p.MinShare == 0 && p.Alpha == 1:
		for c := range w {
			w[c] = int64(in.Count(c))
		}
	case p.Weights == nil && p.MinShare == 0 && p.Alpha == 0:
		for c := range w {
			w[c] = int64(min(in.Count(c), 1))
		}
	default:
		for c, x := range TargetsOf(in, p) {
			if x > 0 {
				w[c] = max(1, int64(math.Round(x*marginalWeightScale)))
			}
		}
	}
	var items []int
	var values [][]uint32
	var t []int64
	var sum int64
	fields := in.Fields()
	for c, x := range w {
		if x > 0 {
			items = append(items, c)
			values = append(values, fields[c])
			t = append(t, x)
			sum += x
		}
	}
	counts := make([]int, in.NumStrata)
	for i, y := range newFamilies(values).round(t, int64(total), sum) {
		counts[items[i]] = int(y)
	}
	return counts
}

// extrasDeal is step 2 above: the extras of M batches, dealt by halving.
// A range of batches is its items with extras (ascending) and how many
// each: the ranges shrink as they halve, and so does their work.
type extrasDeal struct {
	fam     *families
	items   []int   // strata with extras, in the cycle's seeded order
	itemOf  []int32 // per stratum: its item, or -1
	r       []int64 // extras per item
	m       int
	seed    uint64
	scratch *roundScratch
	// root and the ranges below it, memoDepth halvings deep, are kept:
	// every batch's walk passes them (O(strata) numbers each, about a
	// million numbers in all at most; the whole tree when it fits).
	root      *dealNode
	memoDepth int
	// The last batch asked about: its extras and those of the batches
	// before it, per item.
	last          int
	has, previous []int64
	// below is the last walk's ranges under the kept range it left from
	// (belowFrom): level k is the range k halvings under it. A rank asks
	// for its batches in ascending order, and the next batch's walk
	// starts at the deepest of them that holds it, so each split is
	// computed once per rank-epoch, not once per batch beneath it.
	belowFrom *dealNode
	below     []dealLevel
	depth     int // levels of below in use
}

// dealLevel is a range of batches [lo, hi) under a kept range: its items
// with extras and how many each, and per item the extras before lo.
type dealLevel struct {
	lo, hi int
	idx    []int32
	t      []int64
	before []int64
}

// dealNode is a range of batches, [lo, hi), as the halving reaches it:
// its items with extras (ascending) and how many each, and per item the
// extras of the batches before lo. A kept node also keeps its first
// half's extras and its halves.
type dealNode struct {
	lo, hi int
	idx    []int32
	t      []int64
	before []int64
	first  []int64
	halves [2]*dealNode
}

func newExtrasDeal(in *Input, r []int, m int, rng *rand.Rand, seed uint64) *extrasDeal {
	d := &extrasDeal{m: m, seed: seed, itemOf: make([]int32, len(r)), last: -1}
	for c, x := range r {
		d.itemOf[c] = -1
		if x > 0 {
			d.items = append(d.items, c)
		}
	}
	rng.Shuffle(len(d.items), func(i, j int) { d.items[i], d.items[j] = d.items[j], d.items[i] })
	fields := in.Fields()
	values := make([][]uint32, len(d.items))
	d.r = make([]int64, len(d.items))
	for i, c := range d.items {
		d.itemOf[c] = int32(i)
		values[i] = fields[c]
		d.r[i] = int64(r[c])
	}
	d.fam = newFamilies(values)
	d.scratch = newRoundScratch(d.fam)
	d.has, d.previous = make([]int64, len(d.items)), make([]int64, len(d.items))
	d.root = &dealNode{lo: 0, hi: m, before: make([]int64, len(d.items)), idx: make([]int32, len(d.items)), t: slices.Clone(d.r)}
	for i := range d.root.idx {
		d.root.idx[i] = int32(i)
	}
	// Levels kept: 2^(l+1) ranges of 2·len(items) numbers, about a million
	// numbers at most; and, unless the whole tree fits, ranges of 8
	// batches or more (a range kept costs a split, as a batch's own walk
	// below it does, and a rank reads only some of the batches).
	whole := 2*m*2*max(len(d.items), 1) <= 1<<20
	for d.memoDepth = 0; d.memoDepth < 40 && (8<<d.memoDepth)*max(len(d.items), 1) <= 1<<20 && (whole || m>>(d.memoDepth+1) >= 8); d.memoDepth++ {
	}
	return d
}

// walk halves the batches from the whole down to one, taking the upper
// half where upper says, and returns that batch, its items with extras
// and how many (0 or 1), and in previous, per item, the extras of the
// batches before it. upper sees each split: the range, its items, and the first
// half's extras and the extras before the range, per item of the range.
func (d *extrasDeal) walk(previous []int64, upper func(lo, mid int, idx []int32, first, before []int64) bool) (b int, idx []int32, t []int64) {
	n := d.kept(upper)
	copy(previous, n.before)
	idx, t = slices.Clone(n.idx), slices.Clone(n.t)
	lo, hi := n.lo, n.hi
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		first := d.firstHalf(lo, mid, hi, idx, t)
		up := upper(lo, mid, idx, first, previous)
		keepHalf(&idx, &t, first, previous, up)
		if up {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, idx, t
}

// kept halves the batches through the kept ranges, as walk does, and
// returns the last kept range it reaches.
func (d *extrasDeal) kept(upper func(lo, mid int, idx []int32, first, before []int64) bool) *dealNode {
	n := d.root
	for depth := 0; n.hi-n.lo > 1 && depth < d.memoDepth; depth++ {
		mid := n.lo + (n.hi-n.lo)/2
		if n.first == nil {
			n.first = d.firstHalf(n.lo, mid, n.hi, n.idx, n.t)
		}
		up := upper(n.lo, mid, n.idx, n.first, n.before)
		h := 0
		if up {
			h = 1
		}
		if n.halves[h] == nil {
			half := &dealNode{lo: n.lo, hi: mid, before: slices.Clone(n.before), idx: slices.Clone(n.idx), t: slices.Clone(n.t)}
			if up {
				half.lo, half.hi = mid, n.hi
			}
			keepHalf(&half.idx, &half.t, n.first, half.before, up)
			n.halves[h] = half
		}
		n = n.halves[h]
	}
	return n
}

// batch is walk to batch b, from the deepest range of the last walk
// that holds b: the same splits, each computed once while the batches
// asked for ascend. It returns b's items with extras and how many, and
// the extras before b per item; they are d's, valid until the next call.
func (d *extrasDeal) batch(b int) (idx []int32, t, before []int64) {
	n := d.kept(func(_, mid int, _ []int32, _, _ []int64) bool { return b >= mid })
	if d.belowFrom != n {
		d.belowFrom, d.depth = n, 0
		d.level(0, n.lo, n.hi, n.idx, n.t, n.before)
	}
	for d.depth > 1 && !(d.below[d.depth-1].lo <= b && b < d.below[d.depth-1].hi) {
		d.depth--
	}
	for l := &d.below[d.depth-1]; l.hi-l.lo > 1; l = &d.below[d.depth-1] {
		mid := l.lo + (l.hi-l.lo)/2
		first := d.firstHalf(l.lo, mid, l.hi, l.idx, l.t)
		up := b >= mid
		lo, hi := l.lo, mid
		if up {
			lo, hi = mid, l.hi
		}
		next := d.level(d.depth, lo, hi, l.idx, l.t, l.before)
		keepHalf(&next.idx, &next.t, first, next.before, up)
	}
	l := &d.below[d.depth-1]
	return l.idx, l.t, l.before
}

// level sets below[k] to a copy of the range given, drops the levels
// under it, and returns it.
func (d *extrasDeal) level(k, lo, hi int, idx []int32, t, before []int64) *dealLevel {
	if k == len(d.below) {
		d.below = append(d.below, dealLevel{})
	}
	l := &d.below[k]
	l.lo, l.hi = lo, hi
	l.idx = append(l.idx[:0], idx...)
	l.t = append(l.t[:0], t...)
	l.before = append(l.before[:0], before...)
	d.depth = k + 1
	return l
}

// keepHalf keeps, of a range's items idx with extras t whose first half
// holds first, the upper half's (adding the first half's to previous) or
// the lower half's.
func keepHalf(idx *[]int32, t *[]int64, first, previous []int64, upper bool) {
	keep := 0
	for i, x := range *t {
		if upper {
			previous[(*idx)[i]] += first[i]
			x -= first[i]
		} else {
			x = first[i]
		}
		if x > 0 {
			(*idx)[keep], (*t)[keep] = (*idx)[i], x
			keep++
		}
	}
	*idx, *t = (*idx)[:keep], (*t)[:keep]
}

// at returns, per item, the extras batch b holds (0 or 1) and those the
// batches before it hold. They are d's: valid until the next call.
func (d *extrasDeal) at(b int) (has, previous []int64) {
	if b == d.last {
		return d.has, d.previous
	}
	idx, t, before := d.batch(b)
	copy(d.previous, before)
	clear(d.has)
	for i, x := range t {
		d.has[idx[i]] = x
	}
	d.last = b
	return d.has, d.previous
}

// lastBatchFrom is the last batch whose first draw of stratum c, b·q +
// (its extras before b), is at most k (k ≥ 0): one walk down the halves,
// where a search over the batches would walk once per probe.
func (d *extrasDeal) lastBatchFrom(c int, q, k int64) int {
	i := d.itemOf[c]
	switch {
	case i < 0 && q == 0: // no draws at all: every batch's first is 0
		return d.m - 1
	case i < 0:
		return int(min(int64(d.m-1), k/q))
	}
	b, _, _ := d.walk(make([]int64, len(d.items)), func(_, mid int, idx []int32, first, before []int64) bool {
		y := int64(0)
		if j, ok := slices.BinarySearch(idx, i); ok {
			y = first[j]
		}
		return int64(mid)*q+before[i]+y <= k
	})
	return b
}

// firstHalf is the extras of batches [lo, mid) of the range [lo, hi) that
// holds t of items idx: a controlled rounding of t·(mid-lo)/(hi-lo), or,
// by a seeded coin, t less such a rounding for [mid, hi).
//
// The max flow rounds up the first items it reaches, so with the items in
// one order at every split the same strata would take the first half's
// extras split after split, and a batch would gather the rarest strata's
// extras (a batch's TV from the strata's mix rose past a shuffle's worst):
// each split takes the items in an order of its own, seeded.
func (d *extrasDeal) firstHalf(lo, mid, hi int, idx []int32, t []int64) []int64 {
	seed := seedOf(d.seed, tagSplit, uint64(lo), uint64(hi))
	perm := rand.New(rand.NewPCG(seed, uint64(len(idx)))).Perm(len(idx))
	pidx, pt := make([]int32, len(idx)), make([]int64, len(idx))
	for i, j := range perm {
		pidx[i], pt[i] = idx[j], t[j]
	}
	num := int64(mid - lo)
	if seed&1 != 0 {
		num = int64(hi - mid)
	}
	py := d.fam.roundSome(pidx, pt, num, int64(hi-lo), d.scratch)
	y := make([]int64, len(idx))
	for i, j := range perm {
		y[j] = py[i]
		if seed&1 != 0 {
			y[j] = t[j] - py[i]
		}
	}
	return y
}

// hasExtra reports whether batch b holds an extra of stratum c.
func (d *extrasDeal) hasExtra(b, c int) bool {
	i := d.itemOf[c]
	if i < 0 {
		return false
	}
	has, _ := d.at(b)
	return has[i] > 0
}

// extrasBefore counts stratum c's extras in batches 0..b-1.
func (d *extrasDeal) extrasBefore(b, c int) int {
	i := d.itemOf[c]
	if i < 0 || b == 0 {
		return 0
	}
	if b >= d.m {
		return int(d.r[i])
	}
	_, previous := d.at(b)
	return int(previous[i])
}
