package mount

import (
	"strings"
	"testing"

	"github.com/shardfs/shardfs/layout"
)

// Issue 30: the read path names a sample in 64 bits, so a dataset past
// 2^31 samples is served; what stays bounded is one rank-epoch's members
// (named in 32 bits, and tens of GB of member table past that). A mount
// of 3 billion samples on two ranks is servable; on one rank it is
// refused, naming the rank-epoch's size and the fix.
func TestMountServesPastTwoBillionSamples(t *testing.T) {
	in, err := layout.NewEvenCountInput([]int{2_000_000_000, 1_000_000_000}, 4_000_000)
	if err != nil {
		t.Fatal(err)
	}
	p := layout.Params{Seed: 1, World: 2, Batch: 1000, Alpha: 1}
	if err := checkServable("ds", in, p); err != nil {
		t.Fatalf("3e9 samples on 2 ranks: %v", err)
	}
	p.World = 1
	err = checkServable("ds", in, p)
	if err == nil || !strings.Contains(err.Error(), "ds: a rank-epoch of 3000000000 samples (3000000000 samples in 1 ranks): a mount serves at most 2147483647 a rank-epoch; raise --world-size") {
		t.Fatalf("3e9 samples on 1 rank: %v", err)
	}
}
