package layout

import (
	"iter"
	"math"
	"slices"
)

// Positions is a sequence of sample positions. It takes 4 bytes a
// position while every position is below 2^31 and 8 bytes once one is
// not, so that the order of a dataset past two billion samples is exact
// while a rank-epoch of a smaller one costs what it always did (at W=1,
// 100 million samples are 400 MB, not 800).
type Positions struct {
	narrow []int32
	wide   []int64 // non-nil once a position needed 64 bits; then narrow is nil
}

// MakePositions returns an empty sequence with room for n positions.
func MakePositions(n int) Positions { return Positions{narrow: make([]int32, 0, n)} }

// PositionsOf is the sequence of the given positions.
func PositionsOf(xs ...int64) Positions {
	p := MakePositions(len(xs))
	for _, x := range xs {
		p.Append(x)
	}
	return p
}

// Len is the number of positions.
func (p Positions) Len() int {
	if p.wide != nil {
		return len(p.wide)
	}
	return len(p.narrow)
}

// At is position i.
func (p Positions) At(i int) int64 {
	if p.wide != nil {
		return p.wide[i]
	}
	return int64(p.narrow[i])
}

// Append adds x at the end.
func (p *Positions) Append(x int64) {
	if p.wide == nil && x >= 0 && x <= math.MaxInt32 {
		p.narrow = append(p.narrow, int32(x))
		return
	}
	if p.wide == nil {
		p.wide = make([]int64, len(p.narrow), max(cap(p.narrow), len(p.narrow)+1))
		for i, v := range p.narrow {
			p.wide[i] = int64(v)
		}
		p.narrow = nil
	}
	p.wide = append(p.wide, x)
}

// SizedPositions is n positions, each 0 until Set.
func SizedPositions(n int) Positions { return Positions{narrow: make([]int32, n)} }

// Set sets position i, which must be below Len.
func (p *Positions) Set(i int, x int64) {
	if p.wide == nil && (x < 0 || x > math.MaxInt32) {
		p.wide = make([]int64, len(p.narrow), cap(p.narrow))
		for k, y := range p.narrow {
			p.wide[k] = int64(y)
		}
		p.narrow = nil
	}
	if p.wide != nil {
		p.wide[i] = x
		return
	}
	p.narrow[i] = int32(x)
}

// AppendAll adds every position of xs at the end.
func (p *Positions) AppendAll(xs []int64) {
	for _, x := range xs {
		p.Append(x)
	}
}

// Slice is positions [lo, hi), sharing p's memory.
func (p Positions) Slice(lo, hi int) Positions {
	if p.wide != nil {
		return Positions{wide: p.wide[lo:hi:hi]}
	}
	return Positions{narrow: p.narrow[lo:hi:hi]}
}

// All yields every (index, position).
func (p Positions) All() iter.Seq2[int, int64] {
	return func(yield func(int, int64) bool) {
		for i := range p.Len() {
			if !yield(i, p.At(i)) {
				return
			}
		}
	}
}

// Int64s is a copy of the positions.
func (p Positions) Int64s() []int64 {
	out := make([]int64, p.Len())
	for i := range out {
		out[i] = p.At(i)
	}
	return out
}

// Bytes is the memory the positions take.
func (p Positions) Bytes() int64 {
	if p.wide != nil {
		return 8 * int64(cap(p.wide))
	}
	return 4 * int64(cap(p.narrow))
}

// SortFunc sorts the positions in place by cmp, as slices.SortFunc does.
func (p Positions) SortFunc(cmp func(a, b int64) int) {
	if p.wide != nil {
		slices.SortFunc(p.wide, cmp)
		return
	}
	slices.SortFunc(p.narrow, func(a, b int32) int { return cmp(int64(a), int64(b)) })
}
