package layout

import (
	"cmp"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Spec is the order of a whole run, as one value: the parameters every
// rank-epoch shares, an alpha that may change by epoch, the point a resumed
// job starts from, the time weighting, and which ranks and epochs are
// served. It owns the rules about which options combine (Validate) and,
// bound to a dataset's input, those that need the data (Bind). Params
// gives one rank-epoch's parameters; a mount asks it for every directory
// it opens, so nothing is parsed again.
//
// Its errors are *SpecError, worded in the library's terms ("batch size",
// "resume point"); a caller with other names for the options (the CLI's
// flags) words them in its own with SpecError.In.
type Spec struct {
	Base Params // Epoch and Rank are set by Params; Alpha when AlphaPoints is empty
	// AlphaPoints, ascending by epoch, make alpha linear between them and
	// constant before the first and after the last. Preset names the
	// preset they come from, if any (PresetSchedule), for messages.
	AlphaPoints []AlphaPoint
	Preset      string
	// ResumeEpoch is the epoch a resumed job starts in (-1: none), of which
	// ResumeSkip global batches were consumed.
	ResumeEpoch, ResumeSkip int
	// Recency, when set, weights time strata by age and picks each epoch's
	// time window (recency.go). Its Start comes from the dataset (the
	// strata's time buckets), set before the spec is bound.
	Recency *Recency
	// Ranks are the ranks served, each in 0..World-1; the epochs served
	// are Epochs from FirstEpoch on (Epochs 0: open-ended).
	Ranks              []int
	FirstEpoch, Epochs int
	// MixNames name the datasets Base.Mix weights, in its order, for
	// messages; MixGiven are the weights as the user gave them, for
	// display (Base.Mix may be those scaled by a power of two, when their
	// sum overflows: the same shares, other numbers).
	MixNames []string
	MixGiven []float64
	// Feedback, when set, weights the strata of each epoch after the first
	// from the trainer's reports (feedback.go).
	Feedback *Feedback
	// WindowChosen: Base.Window was not given (WindowAuto), and
	// ChooseWindow chose it for the dataset (autowindow.go).
	WindowChosen bool
	// Run names the run whose log keeps the trainer's reports (Feedback)
	// and each epoch's dataset version (Follow); Follow serves each epoch
	// from the version the log records for it. DataVersion is the dataset
	// version pinned (0: the current one when the run starts).
	Run         string
	Follow      bool
	DataVersion int
}

// MaxRanks bounds the ranks one process serves: each is a directory and an
// order in memory, and an option must not be able to ask for two billion.
const MaxRanks = 65536

// AlphaPoint is alpha at one epoch of a spec.
type AlphaPoint struct {
	Epoch int
	Alpha float64
}

// Option names one option of a Spec in the library's words. SpecError
// messages write the options they name as {option}, so a caller can put
// its own names in their place.
type Option string

// The options of a Spec, as SpecError names them.
const (
	OptWorld         Option = "world size"
	OptRanks         Option = "ranks"
	OptBatch         Option = "batch size"
	OptEpochs        Option = "epochs"
	OptEpochSize     Option = "epoch size"
	OptAlpha         Option = "alpha"
	OptAlphaSchedule Option = "alpha schedule"
	OptWindow        Option = "window"
	OptAffinity      Option = "affinity"
	OptTail          Option = "tail"
	OptResume        Option = "resume point"
	OptMix           Option = "mix"
	OptOrderVersion  Option = "order version"
	OptHalfLife      Option = "recency half-life"
	OptTimeWindow    Option = "time window"
	OptTimeStep      Option = "time window step"
	OptAsOf          Option = "as-of time"
	OptMinShare      Option = "minimum share"
	OptPreset        Option = "preset"
	OptFeedback      Option = "feedback"
	OptRun           Option = "run"
	OptFollow        Option = "follow"
	OptDataVersion   Option = "dataset version"
)

// SpecError is an order that cannot be served, and why. Option is the one
// to change; Msg names options as {option}.
type SpecError struct {
	Option Option
	Msg    string
}

func (e *SpecError) Error() string { return e.In(nil) }

// In words the error with name's names for the options (nil: the
// library's own).
func (e *SpecError) In(name func(Option) string) string {
	if name == nil {
		name = func(o Option) string { return string(o) }
	}
	var b strings.Builder
	msg := e.Msg
	for {
		i := strings.IndexByte(msg, '{')
		j := strings.IndexByte(msg[i+1:], '}')
		if i < 0 || j < 0 {
			break
		}
		b.WriteString(msg[:i])
		b.WriteString(name(Option(msg[i+1 : i+1+j])))
		msg = msg[i+1+j+1:]
	}
	b.WriteString(msg)
	return b.String()
}

// specErr is a SpecError about opt; format may name options as {option}.
func specErr(opt Option, format string, args ...any) *SpecError {
	return &SpecError{Option: opt, Msg: fmt.Sprintf(format, args...)}
}

// resumeText is the resume point as E:N.
func (s *Spec) resumeText() string {
	return strconv.Itoa(s.ResumeEpoch) + ":" + strconv.Itoa(s.ResumeSkip)
}

// mixText is the mix as NAME:W pairs.
func (s *Spec) mixText() string {
	var parts []string
	for i, w := range s.Base.Mix {
		if i < len(s.MixGiven) {
			w = s.MixGiven[i]
		}
		name := s.mixName(i)
		parts = append(parts, name+":"+strconv.FormatFloat(w, 'g', -1, 64))
	}
	return strings.Join(parts, ",")
}

// Validate explains what is wrong with the spec on its own: which options
// do not combine, and values out of range. Rules that need the data are
// Bind's.
func (s *Spec) Validate() error {
	p := s.Base
	if p.Window == WindowAuto {
		// Not given: ChooseWindow picks one only where the rules below
		// allow it, so the spec is checked as the global order it is
		// otherwise.
		p.Window = 0
	}
	switch {
	case p.Version != 0 && (p.Version < MinOrderVersion || p.Version > OrderVersion):
		return specErr(OptOrderVersion, "{%s} %d: this shardfs computes order versions %d to %d: pin one of them, or run the shardfs release the job started with on every node", OptOrderVersion, p.Version, MinOrderVersion, OrderVersion)
	case s.Epochs < 0:
		return specErr(OptEpochs, "{%s} %d: must be at least 1, or 0 for open-ended epochs (mount only)", OptEpochs, s.Epochs)
	case s.DataVersion < 0:
		return specErr(OptDataVersion, "{%s} %d: a dataset version is 1 or more (0: the current one)", OptDataVersion, s.DataVersion)
	}
	if err := broken(specRules, s.features(), s); err != nil {
		return err
	}
	switch {
	case s.FirstEpoch < 0:
		return specErr(OptEpochs, "first epoch %d: must be >= 0", s.FirstEpoch)
	case s.ResumeEpoch >= 0 && s.Epochs > 0 && s.ResumeEpoch >= s.FirstEpoch+s.Epochs:
		return specErr(OptResume, "{%s} %s: epoch %d is past the last epoch of {%s} %d (epochs %d..%d): pass {%s} %d or more, or {%s} 0 for open-ended epochs",
			OptResume, s.resumeText(), s.ResumeEpoch, OptEpochs, s.Epochs, s.FirstEpoch, s.FirstEpoch+s.Epochs-1, OptEpochs, s.ResumeEpoch+1-s.FirstEpoch, OptEpochs)
	case len(s.Ranks) > MaxRanks:
		return specErr(OptRanks, "{%s}: %d ranks are more than one process serves (at most %d)", OptRanks, len(s.Ranks), MaxRanks)
	}
	for i, pt := range s.AlphaPoints {
		if i > 0 && pt.Epoch <= s.AlphaPoints[i-1].Epoch {
			return specErr(OptAlphaSchedule, "{%s}: give the epochs in increasing order", OptAlphaSchedule)
		}
	}
	for _, r := range s.Ranks {
		if r < 0 || r >= p.World {
			return specErr(OptRanks, "{%s}: rank %d is outside 0..%d for {%s} %d", OptRanks, r, p.World-1, OptWorld, p.World)
		}
	}
	if s.Recency != nil {
		if err := s.Recency.Validate(); err != nil {
			return err
		}
	}
	if s.Feedback != nil {
		if err := s.Feedback.Validate(); err != nil {
			return err
		}
	}
	return p.Validate()
}

// AlphaAt is the spec's alpha at epoch e.
func (s *Spec) AlphaAt(e int) float64 {
	pts := s.AlphaPoints
	switch {
	case len(pts) == 0:
		return s.Base.Alpha
	case e <= pts[0].Epoch:
		return pts[0].Alpha
	case e >= pts[len(pts)-1].Epoch:
		return pts[len(pts)-1].Alpha
	}
	i := sort.Search(len(pts), func(i int) bool { return pts[i].Epoch > e })
	a, b := pts[i-1], pts[i]
	return a.Alpha + (b.Alpha-a.Alpha)*float64(e-a.Epoch)/float64(b.Epoch-a.Epoch)
}

// Params is the order of rank's epoch e.
func (s *Spec) Params(e, rank int) (Params, error) {
	p := s.Base
	if p.Window == WindowAuto {
		return p, specErr(OptWindow, "the {%s} is chosen from the dataset before its order is computed (Spec.ChooseWindow), and was not", OptWindow)
	}
	p.Epoch, p.Rank = e, rank
	p.Alpha = s.AlphaAt(e)
	if e == s.ResumeEpoch {
		p.Skip = s.ResumeSkip
	}
	if s.Recency != nil {
		var err error
		if p.Weights, _, _, err = s.Recency.Weights(e); err != nil {
			return p, err
		}
	}
	if f := s.Feedback; f != nil {
		switch {
		case f.Weights != nil:
			var err error
			if p.Weights, err = f.Weights(e); err != nil {
				return p, err
			}
		case e > 0:
			return p, fmt.Errorf("epoch %d's weights come from the trainer's reports, and this order reads none (name a dataset and its run)", e)
		}
		p.MinShare = f.Floor
	}
	return p, p.Validate()
}

// Compared is the order plan compares s's with: the same run in the other
// locality. A global order is compared with a window of window shards, and
// a window with the global order. A window keeps each pool's own class mix
// and reads every sample once per epoch, so the window compared with
// leaves out every option that re-weights the global order: alpha (1),
// its schedule, the epoch size, the least share, time weights and the
// trainer's feedback; and affinity, the other locality.
func (s *Spec) Compared(window int) *Spec {
	c := *s
	c.Base.Affinity, c.Recency, c.WindowChosen = false, nil, false
	if s.Base.Window > 0 {
		return c.Global()
	}
	c.Base.Window, c.Base.Alpha, c.Base.EpochSize, c.Base.MinShare = window, 1, 0, 0
	c.AlphaPoints, c.Preset, c.Feedback = nil, "", nil
	return &c
}

// Global is the same run in the global order: no window, no affinity
// (what affinity's randomness is measured against). Every option a
// locality allows, the global order allows too.
func (s *Spec) Global() *Spec {
	c := *s
	c.Base.Window, c.Base.Affinity, c.WindowChosen = 0, false, false
	return &c
}

// Bind checks the spec against the input its order is made from, and
// returns the batches per rank of its first epoch: it refuses an epoch in
// which a rank gets no batch at all, a batch larger than the epoch, a mix
// in which some dataset would never be served, and a resume point past
// the end of its epoch.
func (s *Spec) Bind(in *Input) (steps int, err error) {
	if err := s.Validate(); err != nil {
		return 0, err
	}
	if s.ResumeEpoch >= 0 {
		p, err := s.Params(s.ResumeEpoch, 0)
		if err != nil {
			return 0, err
		}
		if _, err := Steps(in, p); err != nil {
			return 0, specErr(OptResume, "{%s} %s: %s", OptResume, s.resumeText(), wordedIn(err))
		}
	}
	plain := *s
	plain.ResumeEpoch, plain.ResumeSkip = -1, 0
	p, err := plain.Params(0, 0)
	if err != nil {
		return 0, err
	}
	n := cmp.Or(s.Base.EpochSize, in.N())
	for i, sh := range MixShares(s.Base.Mix) {
		if sh*float64(n) < 1 {
			return 0, specErr(OptMix, "{%s} %q: %s's weight is %.3g of the total, %.3g of an epoch's %d samples: it would never be served; raise its weight or leave it out (the mix as given: %s)",
				OptMix, s.mixText(), s.mixName(i), sh, sh*float64(n), n, s.DescribeMix())
		}
	}
	q, opt := s.Base.MinShare, OptMinShare
	if s.Feedback != nil {
		q, opt = s.Feedback.Floor, OptFeedback
	}
	if q > 0 {
		k := 0
		for c := range in.NumStrata {
			if in.Count(c) > 0 {
				k++
			}
		}
		if q*float64(k) > 1 {
			return 0, specErr(opt, "{%s}: a least share of %v for each of %d strata is more than a whole epoch: at most %.4g (1/%d), which balances them", opt, q, k, 1/float64(k), k)
		}
	}
	if s.Base.Batch > n {
		// Padded, one batch of that size: memory an option could make any size.
		return 0, specErr(OptBatch, "{%s} %d is larger than an epoch (%d samples): lower {%s}", OptBatch, s.Base.Batch, n, OptBatch)
	}
	steps, err = Steps(in, p)
	if err != nil {
		return 0, err
	}
	if steps == 0 {
		return 0, specErr(OptBatch, "{%s} %d is larger than a rank's share of an epoch (%d samples over {%s} %d is %d per rank), so every epoch would be empty: lower {%s} or {%s}, or pass {%s} pad",
			OptBatch, s.Base.Batch, n, OptWorld, s.Base.World, n/s.Base.World, OptBatch, OptWorld, OptTail)
	}
	return steps, nil
}

// mixName is the name of the mix's i-th dataset.
func (s *Spec) mixName(i int) string {
	if i < len(s.MixNames) {
		return s.MixNames[i]
	}
	return "#" + strconv.Itoa(i)
}

// DescribeMix is the mix as the order serves it: each dataset's share.
func (s *Spec) DescribeMix() string {
	var parts []string
	for i, sh := range MixShares(s.Base.Mix) {
		parts = append(parts, fmt.Sprintf("%s %.4g%%", s.mixName(i), 100*sh))
	}
	return strings.Join(parts, ", ")
}

// wordedIn is err's text with its options in braces, so a SpecError that
// wraps it words them too.
func wordedIn(err error) string {
	if se, ok := err.(*SpecError); ok {
		return se.Msg
	}
	return err.Error()
}
