package layout

import (
	"math"
	"testing"
)

// A schedule gives each rank-epoch its alpha, linear between the points and
// constant outside them, and the resume point's skip in its epoch alone.
func TestSpec(t *testing.T) {
	s := &Spec{Base: Params{Seed: 1, World: 4, Batch: 8, Alpha: 0.7}, ResumeEpoch: 3, ResumeSkip: 12,
		AlphaPoints: []AlphaPoint{{2, 0}, {6, 1}}}
	for _, tc := range []struct {
		epoch int
		alpha float64
		skip  int
	}{{0, 0, 0}, {2, 0, 0}, {3, 0.25, 12}, {4, 0.5, 0}, {6, 1, 0}, {9, 1, 0}} {
		p, err := s.Params(tc.epoch, 2)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(p.Alpha-tc.alpha) > 1e-12 || p.Skip != tc.skip || p.Epoch != tc.epoch || p.Rank != 2 || p.Seed != 1 || p.Batch != 8 {
			t.Fatalf("epoch %d: %+v, want alpha %v skip %d", tc.epoch, p, tc.alpha, tc.skip)
		}
	}
	s.AlphaPoints = nil
	if p, _ := s.Params(5, 0); p.Alpha != 0.7 {
		t.Fatalf("no points: alpha %v, want the base's 0.7", p.Alpha)
	}
	if _, err := s.Params(0, 4); err == nil {
		t.Fatal("rank 4 of world 4 accepted")
	}
}
