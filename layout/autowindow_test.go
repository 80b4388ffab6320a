package layout_test

import (
	"testing"

	"github.com/shardfs/shardfs/layout"
)

// TestAutoWindow holds the automatic window's rule to its statement: the
// fewest whole shards holding 10,000 samples, at most 256 MiB of them, at
// least 2, and the global order where that is every shard or the input
// holds no shards per sample.
func TestAutoWindow(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name string
		sh   layout.Shape
		want int
	}{
		{"the GPU check's 60,000 samples of 48 KiB in 44 shards: bytes bind", layout.Shape{Samples: 60000, Shards: 44, Bytes: 60000 * 48 << 10, PerSample: true}, 4},
		{"small samples: the pool binds", layout.Shape{Samples: 1000000, Shards: 150, Bytes: 150 * 64 * mib, PerSample: true}, 2},
		{"1,000 samples a shard of 100 KB: 10 shards hold 10,000, 2 of them 256 MiB", layout.Shape{Samples: 100000, Shards: 100, Bytes: 100000 * 100000, PerSample: true}, 2},
		{"tiny samples, many shards: 10,000 samples", layout.Shape{Samples: 100000, Shards: 1000, Bytes: 100000 * 1000, PerSample: true}, 100},
		{"shards larger than the byte bound: still 2", layout.Shape{Samples: 50000, Shards: 10, Bytes: 10 * 512 * mib, PerSample: true}, 2},
		{"every shard in one pool: global", layout.Shape{Samples: 8000, Shards: 8, Bytes: 8000 * 1000, PerSample: true}, 0},
		{"the README's pets, 1 shard: global", layout.Shape{Samples: 640, Shards: 1, Bytes: 60000, PerSample: true}, 0},
		{"two shards: global", layout.Shape{Samples: 1 << 20, Shards: 2, Bytes: 2 << 30, PerSample: true}, 0},
		{"strata of several fields: global", layout.Shape{Samples: 60000, Shards: 44, Bytes: 60000 * 48 << 10, PerSample: true, Fields: true}, 0},
		{"counts only (lazy): global", layout.Shape{Samples: 60000, Shards: 44, Bytes: 60000 * 48 << 10}, 0},
		{"empty: global", layout.Shape{PerSample: true}, 0},
	} {
		if got := layout.AutoWindow(tc.sh); got != tc.want {
			t.Errorf("%s: AutoWindow(%+v) = %d, want %d", tc.name, tc.sh, got, tc.want)
		}
	}
}

// TestChooseWindow: a run that gives no window reads in the automatic
// window from order version 6 on, and globally where a window would break
// its options or where it pins an older version; a given window, 0
// included, is kept; an order asked for before the choice is refused, not
// computed globally behind the user's back.
func TestChooseWindow(t *testing.T) {
	gpu := layout.Shape{Samples: 60000, Shards: 44, Bytes: 60000 * 48 << 10, PerSample: true}
	base := layout.Params{World: 2, Batch: 256, Alpha: 1, Window: layout.WindowAuto}
	for _, tc := range []struct {
		name string
		edit func(s *layout.Spec)
		want int
	}{
		{"default", func(s *layout.Spec) {}, 4},
		{"order version 6 pinned", func(s *layout.Spec) { s.Base.Version = 6 }, 4},
		{"order version 5 pinned keeps the global order", func(s *layout.Spec) { s.Base.Version = 5 }, 0},
		{"order version 1 pinned", func(s *layout.Spec) { s.Base.Version = 1 }, 0},
		{"--window 0 given", func(s *layout.Spec) { s.Base.Window = 0 }, 0},
		{"--window 9 given", func(s *layout.Spec) { s.Base.Window = 9 }, 9},
		{"alpha", func(s *layout.Spec) { s.Base.Alpha = 0.5 }, 0},
		{"alpha schedule", func(s *layout.Spec) { s.AlphaPoints = []layout.AlphaPoint{{0, 0.3}, {9, 1}} }, 0},
		{"epoch size", func(s *layout.Spec) { s.Base.EpochSize = 1000 }, 0},
		{"least share", func(s *layout.Spec) { s.Base.MinShare = 0.01 }, 0},
		{"affinity", func(s *layout.Spec) { s.Base.Affinity = true }, 0},
		{"time weights", func(s *layout.Spec) { s.Recency = &layout.Recency{HalfLife: 86400} }, 0},
		{"feedback", func(s *layout.Spec) { s.Feedback, s.Run = &layout.Feedback{Step: 1, Floor: 0.01}, "r" }, 0},
	} {
		s := &layout.Spec{Base: base, ResumeEpoch: -1, Ranks: []int{0}, Epochs: 1}
		tc.edit(s)
		if err := s.Validate(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		s.ChooseWindow(gpu)
		if s.Base.Window != tc.want {
			t.Errorf("%s: window %d, want %d", tc.name, s.Base.Window, tc.want)
		}
		if s.Recency != nil {
			continue // its Params need the dataset's time buckets
		}
		if p, err := s.Params(0, 0); err != nil || p.Window != tc.want {
			t.Errorf("%s: Params window %d (%v), want %d", tc.name, p.Window, err, tc.want)
		}
	}

	s := &layout.Spec{Base: base, ResumeEpoch: -1, Ranks: []int{0}, Epochs: 1}
	if _, err := s.Params(0, 0); err == nil {
		t.Fatal("Params before ChooseWindow computed an order; want it refused")
	}
	s.ChooseWindow(gpu)
	s.ChooseWindow(layout.Shape{Samples: 640, Shards: 1, PerSample: true})
	if s.Base.Window != 0 {
		t.Errorf("chosen again for a one-shard version: window %d, want 0", s.Base.Window)
	}
	s.ChooseWindow(gpu)
	if s.Base.Window != 4 {
		t.Errorf("chosen again for the first version: window %d, want 4", s.Base.Window)
	}
	if g := s.Global(); g.Base.Window != 0 || g.WindowChosen {
		t.Errorf("Global of a chosen window: window %d, chosen %v", g.Base.Window, g.WindowChosen)
	}
}
