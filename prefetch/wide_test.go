package prefetch_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/shardfs/shardfs/cache"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/internal/testds"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/metrics"
	"github.com/shardfs/shardfs/prefetch"
	"github.com/shardfs/shardfs/repository"
)

// spreadCatalog shows a small dataset's samples under ids far apart: the
// dataset's sample i is id (i+1)·stride. With a stride of 2^32 every id
// is past 2^31 and all share their low 32 bits, so a read path that named a
// sample in 32 bits would take them for one sample.
type spreadCatalog struct {
	repository.ManifestCatalog
	stride int64
}

func (c spreadCatalog) inner(id int) int                { return int(int64(id)/c.stride - 1) }
func (c spreadCatalog) id(i int) int64                  { return int64(i+1) * c.stride }
func (c spreadCatalog) Key(id int) string               { return c.ManifestCatalog.Key(c.inner(id)) }
func (c spreadCatalog) Size(id int) int64               { return c.ManifestCatalog.Size(c.inner(id)) }
func (c spreadCatalog) Stratum(id int) int              { return c.ManifestCatalog.Stratum(c.inner(id)) }
func (c spreadCatalog) SampleSum(id int) uint32         { return c.ManifestCatalog.SampleSum(c.inner(id)) }
func (c spreadCatalog) Complete(int) bool               { return false } // ids are not contiguous in a shard
func (c spreadCatalog) Fields(id int) []string          { return c.ManifestCatalog.Fields(c.inner(id)) }
func (c spreadCatalog) ShardSamples(int) (first, n int) { return 0, 0 }
func (c spreadCatalog) Locate(id int) (shard int, off, size int64) {
	return c.ManifestCatalog.Locate(c.inner(id))
}

// spreadRankEpoch is epoch 0 of a one-rank order of a small dataset of
// spec, its samples shown under ids stride apart, and a reader of it.
func spreadRankEpoch(t *testing.T, spec synth.Spec, stride int64) (*testds.DS, spreadCatalog, *layout.Members, *prefetch.Reader) {
	met := metrics.New(make([]string, 6))
	ds := testds.New(t, spec, met)
	in, err := repository.LayoutInput(ds.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	o, err := layout.Order(in, layout.Params{Seed: 3, World: 1, Batch: 10, Alpha: 1})
	if err != nil {
		t.Fatal(err)
	}
	cat := spreadCatalog{ManifestCatalog: repository.ManifestCatalog{M: ds.Manifest}, stride: stride}
	wide := &layout.RankOrder{Params: o.Params, Batches: o.Batches, Samples: layout.MakePositions(o.Samples.Len())}
	for _, s := range o.Samples.All() {
		wide.Samples.Append(cat.id(int(s)))
	}
	r := prefetch.New(ds, cat, cache.New(16<<20, nil), met, prefetch.DefaultConfig(), nil)
	t.Cleanup(func() { r.Close() })
	return ds, cat, layout.NewMembers(wide, cat), r
}

// Issue 30: a dataset past 2^31 samples is served, so the read path names
// a sample in 64 bits. Samples whose ids differ only above bit 31 are read
// through one small cache, prefetch on, and every byte of every batch file
// and of epoch.tar must be its own sample's.
func TestSamplesPastTwoBillionKeepTheirBytes(t *testing.T) {
	ds, cat, m, r := spreadRankEpoch(t, synth.Spec{Counts: []int{60, 30, 10}, MinSize: 500, MaxSize: 20_000, Seed: 11}, 1<<32)
	if got := m.Order().Samples.At(0); got <= 1<<31 {
		t.Fatalf("first id %d: want past 2^31", got)
	}
	ctx := context.Background()
	read := func(f *layout.FileMap) []byte {
		h := r.Open(f)
		defer h.Close()
		got := make([]byte, f.Size())
		n, err := h.ReadAt(ctx, got, 0)
		if err != nil && err != io.EOF {
			t.Fatalf("read: %v", err)
		}
		return got[:n]
	}
	for b := 0; b < m.Order().Batches; b++ {
		f := m.Batch(b)
		if got, want := read(f), expected(t, f, ds.Src, cat); !bytes.Equal(got, want) {
			t.Fatalf("batch %d: %d bytes differ from the source's %d", b, len(got), len(want))
		}
	}
	f := m.Epoch()
	if got, want := read(f), expected(t, f, ds.Src, cat); !bytes.Equal(got, want) {
		t.Fatalf("epoch.tar: %d bytes differ from the source's %d", len(got), len(want))
	}
	for s := 0; s < ds.Manifest.Samples.Len(); s++ {
		want, err := os.ReadFile(filepath.Join(ds.Src, cat.ManifestCatalog.Key(s)))
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(want))
		if n, err := r.ReadSample(ctx, int(cat.id(s)), got, 0); (err != nil && err != io.EOF) || !bytes.Equal(got[:n], want) {
			t.Fatalf("sample id %d: %d bytes, %v", cat.id(s), n, err)
		}
	}
}

// A rank-epoch's prefetch state grows with its members, not with the ids
// of the samples they read: a rank of a global shuffle reads a few samples
// spread over the whole dataset.
func TestStreamMemoryFollowsMembersNotIds(t *testing.T) {
	// Ids up to 100 × 2^22, about 4·10^8: as a rank of a 400-million-sample
	// dataset sees them.
	ds, cat, m, r := spreadRankEpoch(t, synth.Spec{Counts: []int{60, 30, 10}, MinSize: 500, MaxSize: 2_000, Seed: 12}, 1<<22)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	h := r.Open(m.Epoch())
	runtime.ReadMemStats(&after)
	h.Close()
	grew := after.TotalAlloc - before.TotalAlloc
	t.Logf("opening a rank-epoch of %d members, ids up to %d: %d bytes allocated", m.Len(), cat.id(ds.Manifest.Samples.Len()-1), grew)
	if grew > 8<<20 {
		t.Fatalf("opening a rank-epoch of %d members allocated %d bytes: it must not grow with the largest sample id (%d)", m.Len(), grew, cat.id(ds.Manifest.Samples.Len()-1))
	}
}
