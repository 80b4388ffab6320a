package layout_test

import (
	"strings"
	"testing"

	"github.com/shardfs/shardfs/layout"
)

// TestRunRules: the rules about a run's log, its follow and its pinned
// dataset version are the spec's (they were the CLI's and the mount's,
// twice): each refusal names what to change, and what they allow passes.
func TestRunRules(t *testing.T) {
	fb := &layout.Feedback{Step: 1, Floor: 0.01}
	for _, tc := range []struct {
		name string
		edit func(s *layout.Spec)
		want string // "" passes
	}{
		{"plain", func(s *layout.Spec) {}, ""},
		{"feedback with a run", func(s *layout.Spec) { s.Feedback, s.Run = fb, "r" }, ""},
		{"follow with a run", func(s *layout.Spec) { s.Follow, s.Run = true, "r" }, ""},
		{"a pinned version", func(s *layout.Spec) { s.DataVersion = 3 }, ""},
		{"feedback without a run", func(s *layout.Spec) { s.Feedback = fb }, "feedback needs run NAME"},
		{"follow without a run", func(s *layout.Spec) { s.Follow = true }, "follow needs run NAME"},
		{"follow with feedback", func(s *layout.Spec) { s.Follow, s.Feedback, s.Run = true, fb, "r" }, "follow serves one dataset from version to version"},
		{"follow with a mix", func(s *layout.Spec) { s.Follow, s.Run, s.Base.Mix = true, "r", []float64{1, 1} }, "follow serves one dataset from version to version"},
		{"a run alone", func(s *layout.Spec) { s.Run = "r" }, "run r without feedback or follow"},
		{"a version with a mix", func(s *layout.Spec) { s.DataVersion, s.Base.Mix = 2, []float64{1, 1} }, "dataset version with mix"},
		{"a negative version", func(s *layout.Spec) { s.DataVersion = -1 }, "dataset version -1: a dataset version is 1 or more"},
	} {
		s := &layout.Spec{Base: layout.Params{World: 1, Batch: 8, Alpha: 1}, ResumeEpoch: -1, Ranks: []int{0}, Epochs: 1}
		tc.edit(s)
		err := s.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want an error that starts %q", tc.name, err, tc.want)
		}
	}
}
