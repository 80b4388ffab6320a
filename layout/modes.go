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
	}{{len(s.AlphaPoints) > 0, modeSchedule}, {s.Recency != nil, modeRecency}, {s.Feedback != nil, modeFeedback}} {
		if f.on {
			m |= f.m
		}
	}
	return m
}

// rule refuses mode with any of the modes in with: a Params or Spec that
// uses both gets err. The first rule broken, in table order, is the error.
type rule struct {
	mode, with mode
	err        func(s *Spec) error
}

// broken is the first rule of rules that the modes m break, or nil.
func broken(rules []rule, m mode, s *Spec) error {
	for _, r := range rules {
		if m&r.mode != 0 && m&r.with != 0 {
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
	}},
	{modeWindow, modeAlpha, static("window mode keeps each window's own class mix: use alpha 1 with a window")},
	{modeWindow, modeEpochSize, static("window mode reads every sample once per epoch: leave the epoch size at 0")},
	{modeAffinity, modeWindow, static("affinity and window are two locality modes: pick one")},
	{modeAffinity, modeAlpha, static("affinity keeps each rank's shards' own class mix: use alpha 1 with affinity")},
	{modeAffinity, modeEpochSize, static("affinity reads each rank's shards once per epoch: leave the epoch size at 0")},
	{modeMix, modeWindow | modeAffinity, func(*Spec) error {
		return specErr(OptMix, "a mix of datasets is dealt over the global order: leave out {%s} and {%s}", OptWindow, OptAffinity)
	}},
	{modeResumed, modeAffinity, static("affinity has no world-size-independent global order to resume in: resume at an epoch boundary")},
	{modeWeights, modeWindow | modeAffinity | modeMix, func(*Spec) error {
		return specErr(OptTimeWindow, "time weights and windows re-weight the global order: leave out {%s}, {%s} and {%s}", OptWindow, OptAffinity, OptMix)
	}},
}

// specRules: which of a run's modes combine, besides paramsRules.
var specRules = []rule{
	{modeSchedule, modeWindow | modeAffinity, func(s *Spec) error {
		opt := OptAlphaSchedule
		if s.Preset != "" {
			opt = OptPreset
		}
		return specErr(opt, "{%s}: window and affinity keep each pool's own class mix (alpha 1)", opt)
	}},
	{modeRecency, modeWindow | modeAffinity | modeMix, func(*Spec) error {
		return specErr(OptHalfLife, "{%s}, {%s} and {%s} re-weight the global order: leave out {%s}, {%s} and {%s}", OptHalfLife, OptTimeWindow, OptAsOf, OptWindow, OptAffinity, OptMix)
	}},
	{modeFeedback, modeWindow | modeAffinity | modeMix | modeRecency | modeSchedule | modeMinShare, func(*Spec) error {
		return specErr(OptFeedback, "{%s} re-weights the strata of the global order of one dataset from the trainer's reports: leave out {%s}, {%s}, {%s}, {%s}, {%s} and {%s} (its floor is the least share)",
			OptFeedback, OptWindow, OptAffinity, OptMix, OptHalfLife, OptAlphaSchedule, OptMinShare)
	}},
}

// static is a rule's error that names no option.
func static(msg string) func(*Spec) error { return func(*Spec) error { return errors.New(msg) } }

// allows reports whether the spec's modes, with m added, break no rule.
func (s *Spec) allows(m mode) bool {
	f := s.features() | m
	return broken(specRules, f, s) == nil && broken(paramsRules, f, s) == nil
}
