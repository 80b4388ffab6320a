package layout

import "errors"

// mode is an order option that changes how the order is built, as a bit
// of a set. Which modes combine is one table (paramsRules, specRules):
// a new mode is a bit here, a line in features, its rows, and a flag.
type mode uint16

const (
	modeWindow    mode = 1 << iota // Window > 0: windows of whole shards
	modeAffinity                   // Affinity: each rank keeps its shards
	modeMix                        // Mix: several datasets by weight
	modeWeights                    // Weights: per-stratum multipliers (time weights, feedback)
	modeAlpha                      // Alpha other than 1: a re-weighting of the strata
	modeEpochSize                  // EpochSize other than 0
	modeMinShare                   // MinShare > 0: a least share per stratum
	modeResumed                    // Skip > 0: an elastic resume inside an epoch
	modeSchedule                   // a Spec's AlphaPoints: alpha by epoch
	modeRecency                    // a Spec's Recency: time weights and windows
	modeFeedback                   // a Spec's Feedback: weights from the trainer's reports
	modeRun                        // a Spec's Run: the run's log names it
	modeFollow                     // a Spec's Follow: each epoch from the version its record names
	modePinned                     // a Spec's DataVersion: one version of the dataset, not the current
)

// features are the modes p uses.
func (p Params) features() mode {
	var m mode
	for _, f := range []struct {
		on bool
		m  mode
	}{{p.Window > 0, modeWindow}, {p.Affinity, modeAffinity}, {p.Mix != nil, modeMix}, {p.Weights != nil, modeWeights},
		{p.Alpha != 1, modeAlpha}, {p.EpochSize != 0, modeEpochSize}, {p.MinShare > 0, modeMinShare}, {p.Skip > 0, modeResumed}} {
		if f.on {
			m |= f.m
		}
	}
	return m
}

// features are the modes the spec uses: its base's (an automatic window
// not chosen yet counts as none) and its own.
func (s *Spec) features() mode {
	p := s.Base
	p.Window = max(p.Window, 0)
	m := p.features()
	for _, f := range []struct {
		on bool
		m  mode
	}{{len(s.AlphaPoints) > 0, modeSchedule}, {s.Recency != nil, modeRecency}, {s.Feedback != nil, modeFeedback},
		{s.Run != "", modeRun}, {s.Follow, modeFollow}, {s.DataVersion != 0, modePinned}} {
		if f.on {
			m |= f.m
		}
	}
	return m
}

// rule refuses mode with any of the modes in with (or, when needs is set,
// without every one of them): a Params or Spec that breaks it gets err.
// The first rule broken, in table order, is the error.
type rule struct {
	mode, with mode
	err        func(s *Spec) error
	needs      bool
}

// broken is the first rule of rules that the modes m break, or nil.
func broken(rules []rule, m mode, s *Spec) error {
	for _, r := range rules {
		if m&r.mode != 0 && (m&r.with != 0) != r.needs {
			return r.err(s)
		}
	}
	return nil
}

// paramsRules: which modes one rank-epoch's parameters combine. A window
// and affinity keep each pool's own stratum mix and read every sample
// once per epoch, so neither takes a re-weighting or an epoch size; a mix
// and the weights re-weight the global order.
var paramsRules = []rule{
	{modeMinShare, modeWindow | modeAffinity | modeMix, func(*Spec) error {
		return specErr(OptMinShare, "{%s} re-weights the global order of one dataset: leave out {%s}, {%s} and {%s}", OptMinShare, OptWindow, OptAffinity, OptMix)
	}, false},
	{modeWindow, modeAlpha, static("window mode keeps each window's own class mix: use alpha 1 with a window"), false},
	{modeWindow, modeEpochSize, static("window mode reads every sample once per epoch: leave the epoch size at 0"), false},
	{modeAffinity, modeWindow, static("affinity and window are two locality modes: pick one"), false},
	{modeAffinity, modeAlpha, static("affinity keeps each rank's shards' own class mix: use alpha 1 with affinity"), false},
	{modeAffinity, modeEpochSize, static("affinity reads each rank's shards once per epoch: leave the epoch size at 0"), false},
	{modeMix, modeWindow | modeAffinity, func(*Spec) error {
		return specErr(OptMix, "a mix of datasets is dealt over the global order: leave out {%s} and {%s}", OptWindow, OptAffinity)
	}, false},
	{modeResumed, modeAffinity, static("affinity has no world-size-independent global order to resume in: resume at an epoch boundary"), false},
	{modeWeights, modeWindow | modeAffinity | modeMix, func(*Spec) error {
		return specErr(OptTimeWindow, "time weights and windows re-weight the global order: leave out {%s}, {%s} and {%s}", OptWindow, OptAffinity, OptMix)
	}, false},
}

// specRules: which of a run's modes combine, besides paramsRules; then
// the run's log, which only feedback and follow read, and each needs:
// every node, and a resumed job, reads the same reports and versions
// from it.
var specRules = []rule{
	{modeSchedule, modeWindow | modeAffinity, func(s *Spec) error {
		opt := OptAlphaSchedule
		if s.Preset != "" {
			opt = OptPreset
		}
		return specErr(opt, "{%s}: window and affinity keep each pool's own class mix (alpha 1)", opt)
	}, false},
	{modeRecency, modeWindow | modeAffinity | modeMix, func(*Spec) error {
		return specErr(OptHalfLife, "{%s}, {%s} and {%s} re-weight the global order: leave out {%s}, {%s} and {%s}", OptHalfLife, OptTimeWindow, OptAsOf, OptWindow, OptAffinity, OptMix)
	}, false},
	{modeFeedback, modeWindow | modeAffinity | modeMix | modeRecency | modeSchedule | modeMinShare, func(*Spec) error {
		return specErr(OptFeedback, "{%s} re-weights the strata of the global order of one dataset from the trainer's reports: leave out {%s}, {%s}, {%s}, {%s}, {%s} and {%s} (its floor is the least share)",
			OptFeedback, OptWindow, OptAffinity, OptMix, OptHalfLife, OptAlphaSchedule, OptMinShare)
	}, false},
	{modePinned, modeMix, func(*Spec) error {
		return specErr(OptDataVersion, "{%s} with {%s}: a mix reads each dataset's current version", OptDataVersion, OptMix)
	}, false},
	{modeFeedback, modeRun, func(*Spec) error {
		return specErr(OptFeedback, "{%s} needs {%s} NAME: the trainer's reports are kept under the run's name, so every node and a resumed job read the same ones", OptFeedback, OptRun)
	}, true},
	{modeFollow, modeRun, func(*Spec) error {
		return specErr(OptFollow, "{%s} needs {%s} NAME: the version each epoch serves is recorded under the run's name, so every node and a resumed job serve the same", OptFollow, OptRun)
	}, true},
	{modeFollow, modeFeedback | modeMix, func(*Spec) error {
		return specErr(OptFollow, "{%s} serves one dataset from version to version: leave out {%s} and {%s} (whose strata would change under it)", OptFollow, OptMix, OptFeedback)
	}, false},
	{modeRun, modeFeedback | modeFollow, func(s *Spec) error {
		return specErr(OptRun, "{%s} %s without {%s} or {%s}: a run's log holds the trainer's reports and each epoch's version, which only those read; add one, or leave out {%s}", OptRun, s.Run, OptFeedback, OptFollow, OptRun)
	}, true},
}

// static is a rule's error that names no option.
func static(msg string) func(*Spec) error { return func(*Spec) error { return errors.New(msg) } }

// allows reports whether the spec's modes, with m added, break no rule.
func (s *Spec) allows(m mode) bool {
	f := s.features() | m
	return broken(specRules, f, s) == nil && broken(paramsRules, f, s) == nil
}

// InputNeed is what an order needs of its input (Input) beyond the
// strata's sizes: what decides which input a dataset gives it.
type InputNeed int

const (
	// NeedsCounts: per-shard (or per-group) counts of each stratum. The
	// global order of version 2 on is computed from them at any size.
	NeedsCounts InputNeed = iota
	// NeedsRanges: counts, and the shards of each rank's sample ranges
	// (Input.SetSegments, SetShardRuns): rank affinity of version 3 on.
	NeedsRanges
	// NeedsSamples: every sample's stratum and shard: windows, version-2
	// affinity, and every order of version 1.
	NeedsSamples
)

// Needs is what orders of p need of their input.
func (p Params) Needs() InputNeed {
	switch {
	case p.Affinity && rangeAffine(p):
		return NeedsRanges
	case p.Window != 0 || p.Affinity || p.OrderVersion() < 2:
		return NeedsSamples
	}
	return NeedsCounts
}
