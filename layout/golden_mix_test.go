package layout_test

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/shardfs/shardfs/layout"
)

// goldenMix pins the order of a mix of datasets (Params.Mix over an input
// grouped by dataset), by version. Pinned at the review of issue 42, with
// hashes computed on the tree before it (e50937a) and equal here: the
// other golden pins did not cover a mix.
var goldenMix = map[int]string{
	1: "7073de662317bfb7446f42c4d4e9567ce9b20043123c71aa1a81bf5097ad331f",
	2: "8d4cd4440df97fe66dc733c943b0c1a92b09f00e7f205bb46c61404bd407bd71",
	3: "8d4cd4440df97fe66dc733c943b0c1a92b09f00e7f205bb46c61404bd407bd71", // version 3 changed rank affinity only
	4: "8d4cd4440df97fe66dc733c943b0c1a92b09f00e7f205bb46c61404bd407bd71", // no seam of these mixes held a repeat
	5: "8d4cd4440df97fe66dc733c943b0c1a92b09f00e7f205bb46c61404bd407bd71", // mixes are version 4's in version 5
	6: "8d4cd4440df97fe66dc733c943b0c1a92b09f00e7f205bb46c61404bd407bd71", // unchanged in version 6 (its change is the window a run gets by default)
}

func TestGoldenMixOrder(t *testing.T) {
	const n, strata, perShard = 3000, 6, 61
	stratum := make([]uint32, n)
	shard := make([]uint32, n)
	for i := range stratum {
		stratum[i] = uint32(i * 7 % 11 % strata)
		shard[i] = uint32(i / perShard)
	}
	in, err := layout.NewInput(stratum, strata, shard, (n+perShard-1)/perShard)
	if err != nil {
		t.Fatal(err)
	}
	// Strata 0-2 are one dataset, 3-5 another.
	if err := in.SetGroups([]int{0, 0, 0, 1, 1, 1}, 2); err != nil {
		t.Fatal(err)
	}
	for v := layout.MinOrderVersion; v <= layout.OrderVersion; v++ {
		h := sha256.New()
		for _, p := range []layout.Params{
			{Seed: 11, World: 3, Batch: 24, Alpha: 1, Mix: []float64{0.7, 0.3}},
			{Seed: 12, World: 2, Batch: 40, Alpha: 0.5, Tail: layout.Pad, Mix: []float64{1, 3}},
		} {
			p.Version = v
			hashOrders(t, h, in, p)
		}
		got := hex.EncodeToString(h.Sum(nil))
		t.Logf("mix order version %d: %s", v, got)
		if want := goldenMix[v]; got != want {
			t.Errorf("mix order of version %d hashes to %s, pinned %q: bump layout.OrderVersion if on purpose", v, got, want)
		}
	}
}
