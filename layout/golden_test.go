package layout_test

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io"
	"math"
	"testing"

	"github.com/shardfs/shardfs/layout"
)

// goldenOrders pins the order of OrderVersion for fixed inputs. A change to
// the order must bump layout.OrderVersion and add its hash here: nodes on
// different shardfs versions must never silently compute different orders.
var goldenAffinity = map[int]string{
	1: "86f4f9f6037b12f21a7b324dc4a4ac43ed1d5a399926a6b5b27d31c20210a19b",
	2: "86f4f9f6037b12f21a7b324dc4a4ac43ed1d5a399926a6b5b27d31c20210a19b", // affinity is unchanged in version 2
	3: "a3c9a2de791081c0af34fb865d3cd45e3e1477cb89f21632d7f226741ddf5d44", // version 3: sample ranges, not dealt shards
	4: "a3c9a2de791081c0af34fb865d3cd45e3e1477cb89f21632d7f226741ddf5d44", // unchanged in version 4
	5: "a3c9a2de791081c0af34fb865d3cd45e3e1477cb89f21632d7f226741ddf5d44", // unchanged in version 5
	6: "a3c9a2de791081c0af34fb865d3cd45e3e1477cb89f21632d7f226741ddf5d44", // unchanged in version 6 (its change is the window a run gets by default)
}

// goldenRecency pins the orders with time weights and windows, by mode
// and version.
var goldenRecency = map[string]map[int]string{
	"half-life": {
		1: "4f1ef77822c571fa52963b95b9493bb100476aaf832af5fb5bde55bf948a43a2",
		2: "5a4d423b13cbcecacff309870aa3b7b4dca8c3d8b40657cf7068e88c90e7b068",
		3: "5a4d423b13cbcecacff309870aa3b7b4dca8c3d8b40657cf7068e88c90e7b068",  // unchanged in version 3
		4: "bccd09e48498d3df67cfbe8e24d9dee361c305492a2530cf59f94d9e44b79bc5",  // version 4: no avoidable repeat in a batch
		5: "bccd09e48498d3df67cfbe8e24d9dee361c305492a2530cf59f94d9e44b79bc5",  // one field: version 4's deal in version 5
		6: "bccd09e48498d3df67cfbe8e24d9dee361c305492a2530cf59f94d9e44b79bc5"}, // unchanged in version 6 (its change is the window a run gets by default)
	"half-life+window+alpha+pad": {
		1: "385d1a3b815075b3a5239b842f1d8d066b93f3141a830802c4234df405943c4b",
		2: "5e21f0f4afb57778a926d75f4686da5293367930dc665c0f00c301c2d0fd4937",
		3: "5e21f0f4afb57778a926d75f4686da5293367930dc665c0f00c301c2d0fd4937",  // unchanged in version 3
		4: "1dcf0bf774176bdb97d5f749d50044bbef839d5121a736d90b0018702c826fd1",  // version 4: no avoidable repeat in a batch
		5: "1dcf0bf774176bdb97d5f749d50044bbef839d5121a736d90b0018702c826fd1",  // one field: version 4's deal in version 5
		6: "1dcf0bf774176bdb97d5f749d50044bbef839d5121a736d90b0018702c826fd1"}, // unchanged in version 6 (its change is the window a run gets by default)
	"sliding window": {
		1: "1f8c5ff8d29fa18b9c4047e405ecfe66adaeebaa41d3d9ff8f884cef37043c3b",
		2: "ef5502c1fd738d4eb3c961600f92f0e3c870427830ebc15511c1885747b71857",
		3: "ef5502c1fd738d4eb3c961600f92f0e3c870427830ebc15511c1885747b71857",  // unchanged in version 3
		4: "ef5502c1fd738d4eb3c961600f92f0e3c870427830ebc15511c1885747b71857",  // unchanged in version 4
		5: "ef5502c1fd738d4eb3c961600f92f0e3c870427830ebc15511c1885747b71857",  // one field: version 4's deal in version 5
		6: "ef5502c1fd738d4eb3c961600f92f0e3c870427830ebc15511c1885747b71857"}, // unchanged in version 6 (its change is the window a run gets by default)
	"time groups": {
		1: "781bfb00a4859bf0e056189403f8f138c2d1d1abc3649639e964960f93f9d2ab",
		2: "0f4a203307e0ffed62e1e26374902aa11ff4329f45ef06e4925cdbc8ddd447da",
		3: "0f4a203307e0ffed62e1e26374902aa11ff4329f45ef06e4925cdbc8ddd447da",  // unchanged in version 3
		4: "1706f9dd0b3d588f279f08083622f8089c0d0cd4cfd35eaa5e04c0832dcdadc8",  // version 4: no avoidable repeat in a batch
		5: "5815e574cf3a80547625e46a7ac7a9d43483318979dbb42b359bd1812303ced4",  // version 5: every field balanced
		6: "5815e574cf3a80547625e46a7ac7a9d43483318979dbb42b359bd1812303ced4"}, // unchanged in version 6 (its change is the window a run gets by default)
	"window as of": {
		1: "6732926c8712a145c0e20eb5b467ad043759d18159b36d7666e443868e3ae296",
		2: "e1398c2add2233e4060277dce8e3871854c0a65fad23f2da963d6e6dd5dc0b94",
		3: "e1398c2add2233e4060277dce8e3871854c0a65fad23f2da963d6e6dd5dc0b94",  // unchanged in version 3
		4: "e1398c2add2233e4060277dce8e3871854c0a65fad23f2da963d6e6dd5dc0b94",  // unchanged in version 4
		5: "e1398c2add2233e4060277dce8e3871854c0a65fad23f2da963d6e6dd5dc0b94",  // one field: version 4's deal in version 5
		6: "e1398c2add2233e4060277dce8e3871854c0a65fad23f2da963d6e6dd5dc0b94"}, // unchanged in version 6 (its change is the window a run gets by default)
}

var goldenOrders = map[int]string{
	1: "746164cc62cf27be75fad3476c935ffbe5903e0d6351a67d6d625876f90df44b",
	2: "5138481d5dae9999f1d3a23daf940c46c0ec06aab12675aac2dba2ba20ba6ed3",
	3: "5138481d5dae9999f1d3a23daf940c46c0ec06aab12675aac2dba2ba20ba6ed3", // version 3 changed rank affinity only
	4: "01c4d64ec4b033827ff09fe54e9b7fa3e66bc9a90db5fd7ccbfd845c31dc2585", // version 4: no avoidable repeat in a batch
	5: "01c4d64ec4b033827ff09fe54e9b7fa3e66bc9a90db5fd7ccbfd845c31dc2585", // one field: version 4's deal in version 5
	6: "01c4d64ec4b033827ff09fe54e9b7fa3e66bc9a90db5fd7ccbfd845c31dc2585", // unchanged in version 6 (its change is the window a run gets by default)
}

// TestGoldenOrder hashes the orders of several modes (global, balanced with
// pad, window, epoch size; rank affinity pinned apart) over a fixed
// imbalanced input.
func TestGoldenOrder(t *testing.T) {
	const n, strata, perShard = 5000, 7, 97
	stratum := make([]uint32, n)
	shard := make([]uint32, n)
	for i := range stratum {
		// Imbalanced: stratum c takes about half of what c-1 does.
		c := uint32(0)
		for x := uint32(i*2654435761%1024) + 1; x < 512 && c < strata-1; x *= 2 {
			c++
		}
		stratum[i] = c
		shard[i] = uint32(i / perShard)
	}
	in, err := layout.NewInput(stratum, strata, shard, (n+perShard-1)/perShard)
	if err != nil {
		t.Fatal(err)
	}
	// Every version this build computes is pinned: a running job pins its
	// version and must get the same order from a newer shardfs.
	for v := layout.MinOrderVersion; v <= layout.OrderVersion; v++ {
		h := sha256.New()
		for _, p := range []layout.Params{
			{Seed: 17, World: 4, Batch: 32, Alpha: 1},
			{Seed: 17, World: 3, Batch: 50, Alpha: 0, Tail: layout.Pad},
			{Seed: 5, World: 2, Batch: 64, Alpha: 0.5, EpochSize: 3000},
			{Seed: 9, World: 4, Batch: 16, Alpha: 1, Window: 3},
		} {
			p.Version = v
			hashOrders(t, h, in, p)
		}
		got := hex.EncodeToString(h.Sum(nil))
		want, ok := goldenOrders[v]
		if !ok || got != want {
			t.Errorf("order version %d hashes to %s, pinned %q: the order changed. If on purpose, bump layout.OrderVersion and pin the new hash under it; never change a pinned hash",
				v, got, want)
		}
		// Time weights and windows (recency.go), each mode pinned on its
		// own: new modes, so the hashes above did not change when they came.
		starts := []int64{0, 0, 86400, 2 * 86400, 2 * 86400, 5 * 86400, 9 * 86400}
		for _, tc := range []struct {
			mode string
			rec  layout.Recency
			p    layout.Params
		}{
			{"half-life", layout.Recency{HalfLife: 2 * 86400}, layout.Params{Seed: 3, World: 4, Batch: 32, Alpha: 1}},
			{"half-life+window+alpha+pad", layout.Recency{HalfLife: 86400, Window: 6 * 86400}, layout.Params{Seed: 4, World: 3, Batch: 20, Alpha: 0.5, Tail: layout.Pad}},
			{"sliding window", layout.Recency{Window: 3 * 86400, Step: 2 * 86400}, layout.Params{Seed: 5, World: 2, Batch: 16, Alpha: 1}},
			{"window as of", layout.Recency{Window: 4 * 86400, AsOf: 3 * 86400}, layout.Params{Seed: 6, World: 2, Batch: 8, Alpha: 1}},
			{"time groups", layout.Recency{HalfLife: 3 * 86400}, layout.Params{Seed: 7, World: 3, Batch: 24, Alpha: 1}},
		} {
			h := sha256.New()
			tc.rec.Start = starts
			tc.p.Version = v
			sched := layout.Spec{Base: tc.p, ResumeEpoch: -1, Recency: &tc.rec}
			input := in
			if tc.mode == "time groups" {
				// Strata grouped by bucket, as a dataset cut into time buckets is.
				if input, err = layout.NewInput(stratum, strata, shard, (n+perShard-1)/perShard); err != nil {
					t.Fatal(err)
				}
				if err := input.SetGroups([]int{0, 0, 1, 2, 2, 3, 4}, 5); err != nil {
					t.Fatal(err)
				}
			}
			hashSpec(t, h, input, &sched)
			got := hex.EncodeToString(h.Sum(nil))
			if want := goldenRecency[tc.mode][v]; got != want {
				t.Errorf("%s order of version %d hashes to %s, pinned %q: bump layout.OrderVersion if on purpose", tc.mode, v, got, want)
			}
		}
		// Rank affinity, pinned on its own.
		h = sha256.New()
		hashOrders(t, h, in, layout.Params{Seed: 9, World: 3, Batch: 16, Alpha: 1, Affinity: true, Version: v})
		got = hex.EncodeToString(h.Sum(nil))
		if want := goldenAffinity[v]; got != want {
			t.Errorf("affinity order of version %d hashes to %s, pinned %q: bump layout.OrderVersion if on purpose", v, got, want)
		}
	}
}

func hashOrders(t *testing.T, h io.Writer, in *layout.Input, p layout.Params) {
	t.Helper()
	hashSpec(t, h, in, &layout.Spec{Base: p, ResumeEpoch: -1})
}

// hashSpec hashes every rank's orders of epochs 0 to 2.
func hashSpec(t *testing.T, h io.Writer, in *layout.Input, s *layout.Spec) {
	t.Helper()
	for e := 0; e < 3; e++ {
		for r := 0; r < s.Base.World; r++ {
			p, err := s.Params(e, r)
			if err != nil {
				t.Fatal(err)
			}
			o, err := layout.Order(in, p)
			if err != nil {
				t.Fatal(err)
			}
			binary.Write(h, binary.LittleEndian, int64(o.Batches))
			// Pinned as 4-byte positions, as they were stored before
			// positions could pass 2^31.
			narrow := make([]int32, o.Samples.Len())
			for i, x := range o.Samples.All() {
				if x > math.MaxInt32 {
					t.Fatalf("position %d in a golden order of %d samples", x, in.N())
				}
				narrow[i] = int32(x)
			}
			binary.Write(h, binary.LittleEndian, narrow)
		}
	}
}

// goldenFields pins the global order of strata of several fields (issue
// 60's 870-odd strata of four fields), by version: version 5 balances
// every batch on the first two fields; versions 1-4 ignore the fields.
var goldenFields = map[int]string{
	1: "249d0db8af0414bb758edab08e267b81ce132f6f0dc60a0f977fda9bec8d6bce",
	2: "2781596bf68240ef728d8b8748394d8ae2be62cb7770844ed24d91f89b615336",
	3: "2781596bf68240ef728d8b8748394d8ae2be62cb7770844ed24d91f89b615336",
	4: "2781596bf68240ef728d8b8748394d8ae2be62cb7770844ed24d91f89b615336",
	5: "7d6bbb4436e93eb4a246a628ce7cb64ced770de71d9f1d22c64d406e5fc3e7da", // version 5: every field balanced
	6: "7d6bbb4436e93eb4a246a628ce7cb64ced770de71d9f1d22c64d406e5fc3e7da", // unchanged in version 6 (its change is the window a run gets by default)
}

func TestGoldenFieldsOrder(t *testing.T) {
	mf := newManyFields(t, 2000, 4, 1)
	for v := layout.MinOrderVersion; v <= layout.OrderVersion; v++ {
		h := sha256.New()
		for _, p := range []layout.Params{
			{Seed: 17, World: 4, Batch: 32, Alpha: 1},
			{Seed: 17, World: 3, Batch: 50, Alpha: 0, Tail: layout.Pad},
			{Seed: 5, World: 2, Batch: 64, Alpha: 0.5, EpochSize: 3000},
		} {
			p.Version = v
			hashOrders(t, h, mf.in, p)
		}
		got := hex.EncodeToString(h.Sum(nil))
		t.Logf("fields order version %d: %s", v, got)
		if want := goldenFields[v]; got != want {
			t.Errorf("fields order of version %d hashes to %s, pinned %q: bump layout.OrderVersion if on purpose", v, got, want)
		}
	}
}
