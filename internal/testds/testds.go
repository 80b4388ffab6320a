// Package testds builds real datasets for package tests: a synthetic
// imbalanced source tree, ingested RS(4,2) into six local stores (optionally
// behind the fault-injecting wrapper), opened as a dataset.
package testds

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/erasure"
	"github.com/shardfs/shardfs/ingest"
	"github.com/shardfs/shardfs/internal/faultstore"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/repository"
)

// DS is an ingested test dataset.
type DS struct {
	*repository.Dataset
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
	ds, err := repository.Open(ctx, wrapped, "ds", repository.Options{Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	return &DS{Dataset: ds, Src: src, Faulty: faulty}
}

// CheckTar reads the batch or epoch tar at path and checks every member
// against the source tree src: each sample's bytes equal its source file,
// and each .cls names its stratum (strata are numbered as ingest numbers
// them, in the order of the class directories' names). It returns the
// samples it checked; the first difference fails t.
func CheckTar(t testing.TB, path, src string) int {
	t.Helper()
	classes, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	stratum := map[string]string{}
	for i, c := range classes {
		stratum[c.Name()] = strconv.Itoa(i)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	n := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return n
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		got, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("%s member %s: %v", path, h.Name, err)
		}
		if key, ok := strings.CutSuffix(h.Name, ".cls"); ok {
			class, _, _ := strings.Cut(key, "/")
			if strings.TrimSpace(string(got)) != stratum[class] {
				t.Fatalf("%s: %s is %q, want stratum %q (%s)", path, h.Name, got, stratum[class], class)
			}
			continue
		}
		want, err := os.ReadFile(filepath.Join(src, h.Name))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s member %s: %d bytes differ from the source's %d (%v)", path, h.Name, len(got), len(want), err)
		}
		n++
	}
}
