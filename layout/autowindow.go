package layout

import (
	"fmt"
	"math"
)

// WindowAuto as a Spec's Base.Window means the window was not given: the
// run reads in windows of whole shards where that keeps its order's
// guarantees, and globally where it does not (Spec.ChooseWindow decides,
// from the dataset's shape). Order version 6 made it the default.
const WindowAuto = -1

// The automatic window's randomness, stated: every batch is drawn from a
// pool of whole shards holding at least AutoWindowSamples samples, or
// AutoWindowBytes of them where that is fewer, and at least two shards.
// A dataset whose shards all fit one such pool is read in the global
// order, which then costs nothing a window would save.
//
// Why a window by default: a global shuffle reads one small GET per sample,
// and a cold epoch of a dataset larger than the memory cache then starves a
// fast GPU (an H200 fed ResNet-18 at 2,392 samples/s, a 77% stall, against
// 11,637 and 3% with --window 4, in one run of ../shared/gpu-check). A
// window reads whole shards, few and large GETs, ahead of the readers.
// 256 MiB is an eighth of the default memory cache, so the window the
// readers are in and the one prefetched next fit it with room to spare;
// 10,000 samples is the pool of a WebDataset shuffle buffer of the size its
// users pick, and more.
const (
	AutoWindowSamples = 10000
	AutoWindowBytes   = 256 << 20
)

// Shape is what the automatic window is chosen from: one version of a
// dataset, as its header says.
type Shape struct {
	Samples, Shards, Bytes int64
	// PerSample: the order's input holds every sample's shard, which a
	// window needs. A dataset loaded lazily (format 3, or a top-level
	// manifest) orders from counts alone, and reads globally.
	PerSample bool
	// Fields: the strata are tuples of several fields, or cut into time
	// buckets. The global order holds every batch within one sample of
	// its share of each of the first two (order version 5); a window
	// balances the strata only, so such a dataset reads globally.
	Fields bool
}

// AutoWindow is the window, in shards, that the automatic rule gives a
// dataset of shape sh: the fewest whole shards holding AutoWindowSamples
// samples, at most AutoWindowBytes of them, at least 2; 0 (the global
// order) where that would be every shard, the input cannot hold a window,
// or the strata are tuples of fields the global order balances.
func AutoWindow(sh Shape) int {
	if !sh.PerSample || sh.Fields || sh.Shards < 3 || sh.Samples < 1 {
		return 0
	}
	perShard := float64(sh.Samples) / float64(sh.Shards)
	s := int64(math.Ceil(AutoWindowSamples / perShard))
	if sh.Bytes > 0 {
		shardBytes := float64(sh.Bytes) / float64(sh.Shards)
		s = min(s, int64(AutoWindowBytes/shardBytes))
	}
	s = max(s, 2)
	if s >= sh.Shards {
		return 0
	}
	return int(s)
}

// windowAllowed reports whether s's run can read in windows: a window keeps
// each pool's own stratum mix and reads every sample once per epoch, so
// every option that re-weights the global order (alpha, its schedule, the
// epoch size, the least share, time weights, the trainer's feedback), a
// mix, and affinity (the other locality) keep the global order; and order
// versions before 6 read globally unless a window is given, so a job that
// pins its version keeps its order.
func (s *Spec) windowAllowed() bool {
	return s.Base.OrderVersion() >= 6 && s.allows(modeWindow)
}

// ChooseWindow picks the window of a spec whose window was not given
// (WindowAuto), for the dataset version of shape sh: AutoWindow's where
// the run allows a window (windowAllowed), else 0. A spec it chose for
// before chooses again, so a mount that follows a dataset from version to
// version chooses for each from that version alone, as every node does.
// A window that was given is kept.
func (s *Spec) ChooseWindow(sh Shape) {
	if s.Base.Window != WindowAuto && !s.WindowChosen {
		return
	}
	s.WindowChosen = true
	s.Base.Window = 0
	if s.windowAllowed() {
		s.Base.Window = AutoWindow(sh)
	}
}

// WindowTrade says in plain words which locality s reads in, for a dataset
// of shape sh, and what it trades: plan prints it and a mount logs it.
func (s *Spec) WindowTrade(sh Shape) string {
	w := s.Base.Window
	if w > 0 {
		how := "as given"
		if s.WindowChosen {
			how = "chosen because no window was given"
		}
		pool := ""
		if sh.Shards > 0 {
			k := min(int64(w), sh.Shards)
			pool = fmt.Sprintf(" (about %d samples, %s)", sh.Samples*k/sh.Shards, mib(sh.Bytes*k/sh.Shards))
		}
		return fmt.Sprintf("%d shards a window, %s: every batch is drawn from the samples of its window's shards%s, which are read ahead whole, "+
			"so a cold epoch of a dataset larger than the memory cache keeps a fast GPU fed; the global order (window 0) draws every batch from the whole dataset, at one small GET a sample", w, how, pool)
	}
	switch {
	case !s.WindowChosen:
		return "none, as given (window 0): the global order draws every batch from the whole dataset, at one small GET a sample; " +
			"a cold epoch of a dataset larger than the memory cache then keeps a fast GPU waiting (give no window for the automatic one)"
	case !s.windowAllowed():
		return "none: the global order, because this run re-weights it (alpha, a schedule, an epoch size, a least share, time weights, feedback), mixes datasets, uses affinity, or pins order version 5 or lower, and a window keeps none of those"
	case !sh.PerSample:
		return "none: the global order, because the dataset is loaded lazily and its order is computed from counts, which a window cannot be"
	case sh.Fields:
		return "none: the global order, because the dataset's strata are tuples of several fields or time buckets, and only the global order holds every batch within one sample of each field's share"
	}
	return fmt.Sprintf("none: the global order, because the whole dataset (%d samples in %d shards) fits one window of %d samples or %s: every batch is drawn from all of it", sh.Samples, sh.Shards, AutoWindowSamples, mib(AutoWindowBytes))
}

// mib writes n bytes in MiB.
func mib(n int64) string { return fmt.Sprintf("%d MiB", (n+1<<19)>>20) }

// WindowBytes is about how many bytes one window of p holds in a dataset
// of shape sh: its shards' share of the dataset's bytes (0 for the global
// order). A mount holds the window its readers are in and the next one.
func WindowBytes(p Params, sh Shape) int64 {
	shards := max(sh.Shards, 1)
	return sh.Bytes * min(int64(max(p.Window, 0)), shards) / shards
}
