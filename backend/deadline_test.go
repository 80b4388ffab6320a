package backend

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestDeadlineIsTheWindowsP95 holds Deadline, which reads a window kept
// sorted as answers arrive, to the rule it states: HedgeFactor × the p95 of
// the last 64 latencies (sorted afresh here), at least HedgeFloor, plus the
// bytes at HedgeRate. Ties and evictions of equal values included.
func TestDeadlineIsTheWindowsP95(t *testing.T) {
	opts := HealthOptions{HedgeFloor: 3 * time.Millisecond, HedgeFactor: 3, HedgeRate: 1e8}
	h := &Health{opts: opts}
	rng := rand.New(rand.NewPCG(1, 2))
	var all []time.Duration
	for i := range 1000 {
		d := time.Duration(rng.IntN(20)) * time.Millisecond // few values: many ties
		if i%97 == 0 {
			d = time.Duration(rng.IntN(2000)) * time.Millisecond
		}
		h.answer(d, false)
		all = append(all, d)
		window := slices.Clone(all[max(0, len(all)-64):])
		slices.Sort(window)
		want := opts.HedgeFloor
		if k := len(window); k >= 8 {
			want = max(want, time.Duration(opts.HedgeFactor*float64(window[k*95/100])))
		}
		want += time.Duration(float64(4096) / opts.HedgeRate * float64(time.Second))
		if got := h.Deadline(4096); got != want {
			t.Fatalf("after %d answers: Deadline = %v, the window's rule gives %v", i+1, got, want)
		}
		if len(h.byLat) != len(window) {
			t.Fatalf("after %d answers: %d latencies kept sorted, want %d", i+1, len(h.byLat), len(window))
		}
	}
}
