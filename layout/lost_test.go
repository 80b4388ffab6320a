package layout

import (
	"math/rand/v2"
	"testing"
)

// lostCatalog is testCatalog with every fifth sample lost.
type lostCatalog struct{ *testCatalog }

func (c lostCatalog) Lost(i int) bool { return i%5 == 0 }

// A lost sample's member and index.csv row are PieceLost, whole, and
// nothing else is: every extent of any range is contiguous, and a byte is
// lost exactly when it lies in a lost member or row.
func TestLostMembersReadAsLost(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 1))
	cat := newTestCatalog(200, rng)
	st := make([]uint32, len(cat.strata))
	for i := range st {
		st[i] = uint32(cat.strata[i])
	}
	in, err := NewInput(st, 3, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	o, err := Order(in, Params{Seed: 2, World: 1, Batch: 16, Alpha: 1})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMembers(o, lostCatalog{cat})
	if !m.HasLost() {
		t.Fatal("no member lost")
	}
	files := []*FileMap{m.Epoch(), m.Index()}
	for b := range o.Batches {
		files = append(files, m.Batch(b))
	}
	for _, f := range files {
		// The lost bytes of f, as [from, to) runs, walked without Extents.
		var lostRuns [][2]int64
		if f.Kind() == IndexCSV {
			for i := range m.Len() {
				if m.Lost(i) {
					lostRuns = append(lostRuns, [2]int64{m.rowOff[i], m.rowOff[i+1]})
				}
			}
		} else {
			first, last := f.Range()
			for i := first; i < last; i++ {
				if m.Lost(i) {
					lostRuns = append(lostRuns, [2]int64{m.off[i] - f.base, m.off[i+1] - f.base})
				}
			}
		}
		// lostBytes counts the lost bytes in [a, b).
		lostBytes := func(a, b int64) int64 {
			var n int64
			for _, r := range lostRuns {
				n += max(0, min(b, r[1])-max(a, r[0]))
			}
			return n
		}
		for range 200 {
			off := rng.Int64N(f.Size())
			n := 1 + rng.Int64N(min(f.Size()-off, 5000))
			at := off
			for _, e := range f.Extents(nil, off, n) {
				if e.FileOff != at || e.Len <= 0 {
					t.Fatalf("%s: extent %+v at %d", f.Name(), e, at)
				}
				want := int64(0)
				if e.Piece == PieceLost {
					want = e.Len
				}
				if got := lostBytes(e.FileOff, e.FileOff+e.Len); got != want {
					t.Fatalf("%s: extent %+v holds %d lost bytes", f.Name(), e, got)
				}
				at += e.Len
			}
			if at != off+n {
				t.Fatalf("%s: extents of [%d, %d) end at %d", f.Name(), off, off+n, at)
			}
		}
	}
}
