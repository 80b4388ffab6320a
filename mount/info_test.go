package mount

import (
	"testing"

	"github.com/shardfs/shardfs/layout"
)

// Issue 40 item 17: info.json of an open-ended mount held 1,000
// alpha_by_epoch entries, all the same. It lists epochs until the
// schedule stops changing. (Moved from cmd/shardfs with the rendering of
// info.json, issue 42.)
func TestAlphaByEpochStopsWhenConstant(t *testing.T) {
	s := &layout.Spec{Base: layout.Params{Alpha: 0.5, World: 1, Batch: 8}, ResumeEpoch: -1}
	if got := alphaByEpoch(s); len(got) != 1 || got[0] != 0.5 {
		t.Fatalf("open-ended, no schedule: %v, want [0.5]", got)
	}
	s.AlphaPoints = []layout.AlphaPoint{{Epoch: 0, Alpha: 0}, {Epoch: 4, Alpha: 1}}
	if got := alphaByEpoch(s); len(got) != 5 || got[4] != 1 || got[2] != 0.5 {
		t.Fatalf("open-ended, schedule 0:0,4:1: %v, want 5 entries ending at 1", got)
	}
}
