package layout

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Feedback re-weights the strata epoch by epoch from what the trainer
// reports about each of them (its loss, or any number where higher means
// "needs more"): the exponentiated-gradient rule of DoReMi (Xie et al.,
// 2023) and online data mixing (Albalak et al., 2023).
//
// Epoch 0 serves the natural targets π⁰_c ∝ n_c^α. After epoch e the
// trainer reports r^e_c per stratum, and epoch e+1 aims at
//
//	π^{e+1}_c ∝ π^e_c · exp(η · r^e_c)
//
// with every stratum then raised to at least the floor f of the epoch
// (WithMinShare: the others scaled down in proportion). The floor is
// applied to what an epoch serves, never fed back into the update, so it
// is a bound, not a drift: a stratum whose loss stays low sinks to the
// floor and no lower. Strata the report leaves out get the mean of the
// values reported (a constant added to every r changes nothing), and
// strata with no samples get nothing.
//
// The weights are a pure function of the reports (Multipliers), so every
// node that reads the same reports computes the same order, and a resumed
// job (of any world size) recomputes exactly the weights it had. The
// reports are the only input that is not a flag: Weights, set by whoever
// binds the spec to a run's log (repository.BindFeedback, which reads them
// from the stores and keeps each epoch's multipliers), gives them to
// Spec.Params.
type Feedback struct {
	Step  float64 // η, the step size
	Floor float64 // f, the least share of an epoch every stratum with samples gets
	// Weights gives epoch e's multipliers w^e (Multipliers of the reports
	// of epochs 0..e-1). It may wait for a report; nil: the spec is bound
	// to no run, and only epoch 0 has weights.
	Weights func(epoch int) ([]float64, error)
}

// DefaultFeedbackStep and DefaultFeedbackFloor are the rule's defaults: a
// step of 1 moves a stratum whose loss is one unit above another's by a
// factor e ≈ 2.7 an epoch; a floor of 1% keeps every stratum in every
// epoch (set it to 0 to let the rule starve one).
const (
	DefaultFeedbackStep  = 1.0
	DefaultFeedbackFloor = 0.01
)

// minMultiplier keeps every multiplier above 0: a weight of 0 would leave
// the stratum out of the epoch and change the epoch's size.
const minMultiplier = 1e-12

// ParseFeedback parses the --feedback flag: "eg" (the defaults), or "eg:"
// followed by step=X and floor=F, comma-separated.
func ParseFeedback(s string) (*Feedback, error) {
	bad := func(why string) error {
		return specErr(OptFeedback, "{%s} %q: %s; use eg, or eg:step=X,floor=F (e.g. eg:step=0.5,floor=0.02)", OptFeedback, s, why)
	}
	rule, args, _ := strings.Cut(s, ":")
	if rule != "eg" {
		return nil, bad("the only rule is eg (exponentiated gradient, as in DoReMi)")
	}
	f := &Feedback{Step: DefaultFeedbackStep, Floor: DefaultFeedbackFloor}
	if args == "" {
		return f, nil
	}
	for _, kv := range strings.Split(args, ",") {
		k, v, ok := strings.Cut(kv, "=")
		x, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil {
			return nil, bad(fmt.Sprintf("%q is not NAME=NUMBER", kv))
		}
		switch k {
		case "step":
			f.Step = x
		case "floor":
			f.Floor = x
		default:
			return nil, bad(fmt.Sprintf("no setting %q (step, floor)", k))
		}
	}
	return f, f.Validate()
}

// Validate explains what is wrong with f's settings.
func (f *Feedback) Validate() error {
	switch {
	case !(f.Step > 0) || f.Step > MaxFeedbackStep:
		return specErr(OptFeedback, "{%s} step %v: must be a number above 0, at most %g", OptFeedback, f.Step, MaxFeedbackStep)
	case !(f.Floor >= 0 && f.Floor < 1):
		return specErr(OptFeedback, "{%s} floor %v: must be in [0, 1): the least share of an epoch every stratum gets", OptFeedback, f.Floor)
	}
	return nil
}

// String is f as the flag gives it.
func (f *Feedback) String() string {
	return "eg:step=" + strconv.FormatFloat(f.Step, 'g', -1, 64) + ",floor=" + strconv.FormatFloat(f.Floor, 'g', -1, 64)
}

// Multipliers are epoch e's weights w^e (π^e ∝ n^α·w^e) for strata
// strata, from the reports of epochs 0..e-1, each one value per stratum
// (NaN where the report is silent): w^0 = 1, w^{e+1} = NextMultipliers(w^e,
// r^e).
func (f *Feedback) Multipliers(strata int, reports [][]float64) ([]float64, error) {
	w := make([]float64, strata)
	for c := range w {
		w[c] = 1
	}
	for e, r := range reports {
		if len(r) != strata {
			return nil, fmt.Errorf("epoch %d's report has %d values for %d strata", e, len(r), strata)
		}
		w = NextMultipliers(w, r, f.Step)
	}
	return w, nil
}

// NextMultipliers is one exponentiated-gradient step: w'_c = w_c·exp(η·r_c),
// with NaN (not reported) as the mean of the values reported, scaled so
// that the largest is 1 and none is below minMultiplier.
func NextMultipliers(w, r []float64, step float64) []float64 {
	sum, n := 0.0, 0
	for _, x := range r {
		if !math.IsNaN(x) {
			sum += x
			n++
		}
	}
	mean := 0.0
	if n > 0 {
		mean = sum / float64(n)
	}
	top := math.Inf(-1)
	logs := make([]float64, len(w))
	for c := range w {
		x := r[c]
		if math.IsNaN(x) {
			x = mean
		}
		logs[c] = math.Log(w[c]) + step*(x-mean)
		top = max(top, logs[c])
	}
	out := make([]float64, len(w))
	for c := range out {
		out[c] = max(minMultiplier, math.Exp(logs[c]-top))
	}
	return out
}

// MaxReportValue and MaxFeedbackStep bound a report's values and the
// feedback's step, so that every weight an epoch gets is finite: the mean
// of values of at most 1e15 in size is finite, and so is step × (value −
// mean), at most 2e21; exp of it, scaled by the largest, lies in [0, 1].
// Reports of 1e308 for every stratum were accepted: their sum overflowed,
// the weights were NaN, and every later epoch of the run answered EIO
// (issue 55 item 7). A loss or a score is far inside the bound; a step
// of 1e6 already floors every stratum but the top one at a difference of
// 1e-3.
const (
	MaxReportValue  = 1e15
	MaxFeedbackStep = 1e6
)

// CheckReport explains what is wrong with a report's values.
func CheckReport(values map[string]float64, strata []string) ([]float64, error) {
	out := make([]float64, len(strata))
	for c := range out {
		out[c] = math.NaN()
	}
	for name, x := range values {
		c := slices.Index(strata, name)
		if c < 0 {
			return nil, fmt.Errorf("stratum %q is not one of the dataset's %d (%s)", name, len(strata), strings.Join(firstN(strata, 8), ", "))
		}
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("stratum %q: %v is not a finite number", name, x)
		}
		if math.Abs(x) > MaxReportValue {
			return nil, fmt.Errorf("stratum %q: %v is larger in size than %g, the most a report value may be: the weights, exp(step × value), would not be finite; report a loss or a score on its own scale", name, x, MaxReportValue)
		}
		out[c] = x
	}
	if len(values) == 0 {
		return nil, fmt.Errorf("the report names no stratum: give a number for each, e.g. {%q: 0.7}", strata[0])
	}
	return out, nil
}

func firstN(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(slices.Clone(s[:n]), "...")
}
