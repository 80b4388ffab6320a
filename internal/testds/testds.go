// Package testds builds real datasets for package tests: a synthetic
// imbalanced source tree, ingested RS(4,2) into six local stores (optionally
// behind the fault-injecting wrapper), opened as a dataset.
package testds

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/dataset"
	"github.com/shardfs/shardfs/erasure"
	"github.com/shardfs/shardfs/ingest"
	"github.com/shardfs/shardfs/internal/faultstore"
	"github.com/shardfs/shardfs/internal/synth"
)

// DS is an ingested test dataset.
type DS struct {
	*dataset.Dataset
	Src    string               // source tree: Src/<key> holds each sample's bytes
	Faulty []*faultstore.Faulty // the stores as the dataset reads them
}

// New ingests spec and opens the dataset through Faulty wrappers.
func New(t testing.TB, spec synth.Spec, metrics erasure.Metrics) *DS {
	t.Helper()
	base := t.TempDir()
	src := filepath.Join(base, "src")
	if _, err := synth.Write(src, spec); err != nil {
		t.Fatal(err)
	}
	var plain, wrapped []backend.Store
	var faulty []*faultstore.Faulty
	for i := 0; i < 6; i++ {
		s, err := backend.NewLocal(filepath.Join(base, fmt.Sprint("store", i)))
		if err != nil {
			t.Fatal(err)
		}
		f := faultstore.New(s)
		plain, wrapped, faulty = append(plain, s), append(wrapped, f), append(faulty, f)
	}
	source, err := ingest.Scan(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := ingest.Run(ctx, source, ingest.Options{Name: "ds", Stores: plain, Data: 4, Parity: 2, ShardSize: 2 << 20}); err != nil {
		t.Fatal(err)
	}
	ds, err := dataset.Open(ctx, wrapped, "ds", dataset.Options{Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	return &DS{Dataset: ds, Src: src, Faulty: faulty}
}
