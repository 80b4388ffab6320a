package layout

import (
	"cmp"
	"math"
	"slices"
	"sort"
)

// BatchStats summarizes how far batch compositions are from the targets.
type BatchStats struct {
	Batches      int
	MeanTV       float64   // mean total-variation distance of a batch's mix from π
	MaxTV        float64   // worst batch
	MaxDeviation float64   // worst |count − B·π_c| over batches and strata
	Share        []float64 // each stratum's share of the served samples
}

// Stats measures the batches of o against targets pi.
func Stats(o *RankOrder, in *Input, pi []float64) BatchStats {
	st := BatchStats{Batches: o.Batches, Share: make([]float64, in.NumStrata)}
	counts := make([]int, in.NumStrata)
	B := o.Params.Batch
	for b := 0; b < o.Batches; b++ {
		clear(counts)
		for _, s := range o.BatchSamples(b).All() {
			c := in.StratumOf(s)
			counts[c]++
			st.Share[c]++
		}
		tv := 0.0
		for c, x := range counts {
			tv += math.Abs(float64(x)/float64(B) - pi[c])
			st.MaxDeviation = max(st.MaxDeviation, math.Abs(float64(x)-float64(B)*pi[c]))
		}
		st.MeanTV += tv / 2
		st.MaxTV = max(st.MaxTV, tv/2)
	}
	if o.Batches > 0 {
		st.MeanTV /= float64(o.Batches)
	}
	for c := range st.Share {
		st.Share[c] /= float64(max(1, o.Samples.Len()))
	}
	return st
}

// UniformOrder is the baseline a plain DistributedSampler gives: one seeded
// permutation of all samples (keyed, so it needs no memory per sample),
// dealt to ranks in contiguous batches, drop tail. With weights it
// permutes the samples of strata of weight > 0 (a time window's): position
// j of the permutation is the j-th of them, strata in index order.
func UniformOrder(in *Input, p Params) *RankOrder {
	n := in.N()
	var read []int // with weights: strata of weight > 0
	var before []int
	if p.Weights != nil && slices.Contains(p.Weights, 0) {
		n = 0
		for c, w := range p.Weights {
			if w > 0 && in.Count(c) > 0 {
				read, before = append(read, c), append(before, n)
				n += in.Count(c)
			}
		}
	}
	perm := newFeistel(uint64(n), seedOf(p.Seed, uint64(p.Epoch), 0x756e69))
	steps := n / p.Batch / p.World
	o := &RankOrder{Params: p, Batches: steps, Samples: MakePositions(steps * p.Batch)}
	for t := 0; t < steps; t++ {
		g := t*p.World + p.Rank
		for i := g * p.Batch; i < (g+1)*p.Batch; i++ {
			j := int(perm.at(uint64(i)))
			if read == nil {
				o.Samples.Append(int64(j))
				continue
			}
			x := sort.Search(len(before), func(x int) bool { return before[x] > j }) - 1
			o.Samples.Append(in.member(read[x], j-before[x]))
		}
	}
	return o
}

// FieldStats measures batches on one field of the stratum tuple.
type FieldStats struct {
	MeanTV, MaxTV float64   // of a batch's mix of the field's values from the target's
	Holding       []float64 // per value: the fraction of batches holding at least one sample of it
	// MeanDeviation and MaxDeviation are |count − B·π_v| in samples, over
	// every batch and every value v with a target above 0: how far a
	// batch's count of a value is from its share of the batch.
	MeanDeviation, MaxDeviation float64
}

// StatsBy measures o's batches on a field: value[c] is stratum c's value
// (0..n-1), and pi the strata's target, summed per value.
func StatsBy(o *RankOrder, in *Input, value []int, n int, pi []float64) FieldStats {
	target := make([]float64, n)
	for c, v := range value {
		target[v] += pi[c]
	}
	st := FieldStats{Holding: make([]float64, n)}
	counts := make([]int, n)
	B := o.Params.Batch
	deviations := 0
	for b := 0; b < o.Batches; b++ {
		clear(counts)
		for _, s := range o.BatchSamples(b).All() {
			counts[value[in.StratumOf(s)]]++
		}
		tv := 0.0
		for v, x := range counts {
			tv += math.Abs(float64(x)/float64(B) - target[v])
			if x > 0 {
				st.Holding[v]++
			}
			if target[v] > 0 {
				d := math.Abs(float64(x) - float64(B)*target[v])
				st.MeanDeviation += d
				st.MaxDeviation = max(st.MaxDeviation, d)
				deviations++
			}
		}
		st.MeanTV += tv / 2
		st.MaxTV = max(st.MaxTV, tv/2)
	}
	if deviations > 0 {
		st.MeanDeviation /= float64(deviations)
	}
	if o.Batches > 0 {
		st.MeanTV /= float64(o.Batches)
		for v := range st.Holding {
			st.Holding[v] /= float64(o.Batches)
		}
	}
	return st
}

// Geometry locates sample bytes in a shard's data fragments.
type Geometry interface {
	Locate(sample int) (shard int, off, size int64)
	FragSize(shard int) int64
}

// ReadPlan counts the ranged GETs a reader of o needs when it fetches
// lookahead batches at a time and merges, per (shard, fragment), ranges whose
// gap is at most gap bytes (a lookahead below 1 counts as 1). It returns
// the GETs and the bytes they read.
func ReadPlan(o *RankOrder, g Geometry, lookahead int, gap int64) (gets int, bytes int64) {
	type rng struct {
		shard, frag int
		a, b        int64
	}
	var rs []rng
	B := o.Params.Batch
	lookahead = max(lookahead, 1) // a reader fetches at least the batch it reads
	for first := 0; first < o.Batches; first += lookahead {
		rs = rs[:0]
		for _, s := range o.Samples.Slice(first*B, min(o.Batches, first+lookahead)*B).All() {
			shard, off, size := g.Locate(int(s))
			f := g.FragSize(shard)
			for pos := off; pos < off+size; {
				frag := int(pos / f)
				end := min(off+size, int64(frag+1)*f)
				rs = append(rs, rng{shard, frag, pos - int64(frag)*f, end - int64(frag)*f})
				pos = end
			}
		}
		slices.SortFunc(rs, func(x, y rng) int {
			return cmp.Or(cmp.Compare(x.shard, y.shard), cmp.Compare(x.frag, y.frag), cmp.Compare(x.a, y.a))
		})
		for i := 0; i < len(rs); {
			cur := rs[i]
			j := i + 1
			for ; j < len(rs) && rs[j].shard == cur.shard && rs[j].frag == cur.frag && rs[j].a-cur.b <= gap; j++ {
				cur.b = max(cur.b, rs[j].b)
			}
			gets++
			bytes += cur.b - cur.a
			i = j
		}
	}
	return gets, bytes
}

// PairRepeat measures how much of a batch's company repeats across epochs:
// of the sample pairs that share a batch among the first limit batches of
// a, the fraction that share a batch again in b. a and b each hold every
// rank's batches of one epoch. A uniform shuffle repeats about (B-1)/(N-1);
// rank affinity about W times that, since a sample only meets its rank's.
func PairRepeat(a, b []Positions, limit int) float64 {
	where := map[int64]int{}
	for i, bt := range b {
		for _, s := range bt.All() {
			where[s] = i
		}
	}
	var pairs, again int
	for _, bt := range a[:min(limit, len(a))] {
		for i := range bt.Len() {
			wi, ok := where[bt.At(i)]
			for j := i + 1; j < bt.Len(); j++ {
				pairs++
				if wj, ok2 := where[bt.At(j)]; ok && ok2 && wi == wj {
					again++
				}
			}
		}
	}
	if pairs == 0 {
		return 0
	}
	return float64(again) / float64(pairs)
}
