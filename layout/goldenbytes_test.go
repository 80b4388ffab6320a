package layout

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"testing"
)

// plainCatalog is testCatalog as a dataset without derived fields sees it:
// one class per stratum, numbered alike (what every dataset ingested
// before records and labels apart from strata has).
type plainCatalog struct{ *testCatalog }

func (plainCatalog) Class(s int) int { return s }

// fieldsCatalog adds listing fields: index.csv shows them as columns.
type fieldsCatalog struct{ plainCatalog }

func (fieldsCatalog) FieldNames() []string { return []string{"time", "size", "note, with comma"} }
func (c fieldsCatalog) Fields(i int) []string {
	return []string{fmt.Sprintf("2026-01-%02dT00:00:00Z", 1+i%28), fmt.Sprint(i * 7), fmt.Sprintf("n\"%d\"", i%3)}
}

// goldenFiles pins the bytes of every file a rank-epoch serves (batch tars,
// epoch.tar, index.csv) for datasets of one member per sample, by mode:
// records and labels apart from strata must leave them as they are. The
// hashes were computed by the code before either (commit 18fa5fb), whose
// newest order was version 4: the modes pin it.
var goldenFiles = map[string]string{
	"global":          "5c59f41ca581cf9956dbbba9e6c103c05cc401df0c1883273aca9b39b75d74a7",
	"window+pad":      "7ee1ec22057e62d4e04384c8fdf069d747034358549e42f0ca66d1ed9cf42d4d",
	"alpha+epochsize": "078332ad98b6f98c0a83f2a0e5ebfdce2f7487bbb4363ea7c3f765c673b52017",
	"affinity+fields": "81ba544ef49a965f956f97febe2331046a2d55bd75b3b88351c9280ceb08cd57",
}

func TestGoldenFileBytes(t *testing.T) {
	modes := map[string]Params{
		"global":          {Seed: 11, World: 2, Rank: 1, Batch: 16, Alpha: 1, Version: 4},
		"window+pad":      {Seed: 12, World: 3, Rank: 2, Batch: 8, Alpha: 1, Tail: Pad, Window: 3, Epoch: 1, Version: 4},
		"alpha+epochsize": {Seed: 14, World: 1, Batch: 12, Alpha: 0.3, EpochSize: 500, Version: 4},
		"affinity+fields": {Seed: 13, World: 2, Rank: 0, Batch: 10, Alpha: 1, Affinity: true, Epoch: 2, Version: 4},
	}
	for name, p := range modes {
		rng := rand.New(rand.NewPCG(99, 1))
		tc := newTestCatalog(600, rng)
		st := make([]uint32, len(tc.strata))
		shard := make([]uint32, len(tc.strata))
		for i := range st {
			st[i], shard[i] = uint32(tc.strata[i]), uint32(i/40)
		}
		in, err := NewInput(st, 3, shard, 15)
		if err != nil {
			t.Fatal(err)
		}
		o, err := Order(in, p)
		if err != nil {
			t.Fatal(err)
		}
		var cat SampleCatalog = plainCatalog{tc}
		if name == "affinity+fields" {
			cat = fieldsCatalog{plainCatalog{tc}}
		}
		m := NewMembers(o, cat)
		h := sha256.New()
		files := []*FileMap{m.Epoch(), m.Index()}
		for b := range o.Batches {
			files = append(files, m.Batch(b))
		}
		for _, f := range files {
			fmt.Fprintf(h, "%s %d\n", f.Name(), f.Size())
			h.Write(render(f, 0, f.Size()))
		}
		got := hex.EncodeToString(h.Sum(nil))
		if got != goldenFiles[name] {
			t.Errorf("%s: the files' bytes hash to %s, pinned %s", name, got, goldenFiles[name])
		}
	}
}
