package layout

import (
	"math"
	"strconv"
	"strings"
)

// Presets are named alpha schedules that the study in examples/study
// supports, so a good choice is one word.
//
// decoupled:N[:F] follows Kang et al. (ICLR 2020, "Decoupling
// Representation and Classifier for Long-Tailed Recognition"): balancing
// every batch for a whole run can hurt what the model learns, while a late
// re-balance helps the rare strata. A run of N epochs (0..N-1) reads the
// natural mix (α = 1) first and balanced strata (α = 0) for its last F of
// the epochs (default 0.2, rounded, at least one epoch).
const defaultRebalanced = 0.2

// PresetSchedule is the alpha schedule a preset names.
func PresetSchedule(preset string) ([]AlphaPoint, error) {
	parts := strings.Split(preset, ":")
	bad := func(why string) error {
		return specErr(OptPreset, "{%s} %q: %s; use decoupled:N (a run of N epochs, the last fifth balanced) or decoupled:N:F (the last fraction F balanced), e.g. decoupled:30 or decoupled:30:0.1", OptPreset, preset, why)
	}
	if parts[0] != "decoupled" {
		return nil, bad("no such preset")
	}
	if len(parts) < 2 || len(parts) > 3 {
		return nil, bad("give the run's epochs")
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil || n < 2 {
		return nil, bad("the run's epochs must be a whole number, 2 or more")
	}
	f := defaultRebalanced
	if len(parts) == 3 {
		if f, err = strconv.ParseFloat(parts[2], 64); err != nil || !(f > 0 && f < 1) {
			return nil, bad("the fraction re-balanced must be between 0 and 1")
		}
	}
	last := min(n-1, max(1, int(math.Round(f*float64(n))))) // epochs at α = 0
	first := n - last                                       // the first balanced epoch
	if first == 1 {
		return []AlphaPoint{{0, 1}, {1, 0}}, nil
	}
	return []AlphaPoint{{0, 1}, {first - 1, 1}, {first, 0}}, nil
}
