package repository_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/ingest"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/manifest"
	"github.com/shardfs/shardfs/repository"
)

// synthSource writes spec's synthetic files and scans them.
func synthSource(t *testing.T, spec synth.Spec) *ingest.Source {
	t.Helper()
	dir := t.TempDir()
	if _, err := synth.Write(dir, spec); err != nil {
		t.Fatal(err)
	}
	src, err := ingest.Scan(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// ingestFormat ingests one synthetic source into three fresh local stores
// in the given metadata format.
func ingestFormat(t *testing.T, src *ingest.Source, format int) []backend.Store {
	t.Helper()
	return ingestGroups(t, src, format, 0)
}

// ingestGroups is ingestFormat with groupShards shards per format-3 group
// object (0: the default).
func ingestGroups(t *testing.T, src *ingest.Source, format, groupShards int) []backend.Store {
	t.Helper()
	base := t.TempDir()
	var stores []backend.Store
	for i := 0; i < 3; i++ {
		s, _ := backend.NewLocal(filepath.Join(base, fmt.Sprint("s", i)))
		stores = append(stores, s)
	}
	opts := ingest.Options{Name: "ds", Stores: stores, Data: 2, Parity: 1, ShardSize: 16 << 10, BlockSize: 4096, Seed: 5, Format: format, GroupShards: groupShards}
	if _, err := ingest.Run(context.Background(), src, opts); err != nil {
		t.Fatal(err)
	}
	return stores
}

// Issue 13: a dataset in metadata format 2 (top-level manifest plus one
// index per shard) opens, verifies and serves the same order, by keys, as
// the same source in format 1; its shards hold their samples stratum by
// stratum.
func TestFormat2ServesTheSameOrder(t *testing.T) {
	src := synthSource(t, synth.Imbalanced(300, 4, 0.6, 200, 3000, 8))
	ctx := context.Background()
	var keys [2][]string
	for fi, format := range []int{1, 2} {
		stores := ingestFormat(t, src, format)
		ds, err := repository.Open(ctx, stores, "ds", repository.Options{})
		if err != nil {
			t.Fatal(err)
		}
		m := ds.Manifest
		if (m.Top != nil) != (format == 2) {
			t.Fatalf("format %d: Top set %v", format, m.Top != nil)
		}
		if format == 2 {
			if len(m.Shards) < 5 {
				t.Fatalf("%d shards: want several", len(m.Shards))
			}
			for si, sh := range m.Shards {
				for j := sh.FirstSample + 1; j < sh.FirstSample+sh.NumSamples; j++ {
					if m.Samples.Stratum[j] < m.Samples.Stratum[j-1] {
						t.Fatalf("shard %d is not stored stratum by stratum", si)
					}
				}
			}
		}
		rep, err := ds.Verify(ctx, nil)
		if err != nil || !rep.Intact() {
			t.Fatalf("format %d: verify: %v %+v", format, err, rep)
		}
		in, err := repository.LayoutInput(m)
		if err != nil {
			t.Fatal(err)
		}
		for e := 0; e < 2; e++ {
			o, err := layout.Order(in, layout.Params{Seed: 3, Epoch: e, World: 1, Batch: 16, Alpha: 0.5})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range o.Samples.All() {
				keys[fi] = append(keys[fi], m.Samples.Key(int(s)))
			}
		}
	}
	if len(keys[0]) == 0 || !slices.Equal(keys[0], keys[1]) {
		t.Fatalf("the orders differ by key between format 1 and 2 (%d and %d samples)", len(keys[0]), len(keys[1]))
	}
}

// A shard index copy that is missing or corrupt is found by verify and
// restored by repair from an intact copy, byte for byte; with no intact
// copy left, repair writes nothing and says why.
func TestFormat2IndexCopiesRepaired(t *testing.T) {
	src := synthSource(t, synth.Imbalanced(120, 3, 0.6, 200, 3000, 4))
	ctx := context.Background()
	stores := ingestFormat(t, src, 2)
	ds, err := repository.Open(ctx, stores, "ds", repository.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := func(si int) string { return repository.IndexKey("ds", ds.Manifest.IngestID, si) }
	intact := make([]byte, ds.Manifest.Top.Shards[1].IndexSize)
	if err := stores[0].ReadAt(ctx, key(1), intact, 0); err != nil {
		t.Fatal(err)
	}
	if err := stores[0].Delete(ctx, key(1)); err != nil {
		t.Fatal(err)
	}
	if err := stores[2].Put(ctx, key(3), []byte("not an index")); err != nil {
		t.Fatal(err)
	}
	// Still opens: another copy of each is intact.
	if ds, err = repository.Open(ctx, stores, "ds", repository.Options{}); err != nil {
		t.Fatal(err)
	}
	rep, err := ds.Verify(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := []repository.IndexCopy{}
	for _, ic := range rep.BadIndexes {
		got = append(got, repository.IndexCopy{Store: ic.Store, Shard: ic.Shard})
	}
	if want := []repository.IndexCopy{{Store: 0, Shard: 1}, {Store: 2, Shard: 3}}; !slices.Equal(got, want) || rep.Intact() {
		t.Fatalf("bad index copies %v, want %v", got, want)
	}
	if n, err := ds.Repair(ctx, rep, false, nil); err != nil || n != 2 {
		t.Fatalf("repair wrote %d objects: %v", n, err)
	}
	if rep, err = ds.Verify(ctx, nil); err != nil || !rep.Intact() {
		t.Fatalf("after repair: %v %+v", err, rep)
	}
	back := make([]byte, len(intact))
	if err := stores[0].ReadAt(ctx, key(1), back, 0); err != nil || !slices.Equal(back, intact) {
		t.Fatalf("the restored copy differs from the intact one: %v", err)
	}
	// Every copy of shard 2's index lost: open refuses, naming the shard.
	for _, s := range stores {
		s.Put(ctx, key(2), []byte("garbage"))
	}
	if _, err := repository.Open(ctx, stores, "ds", repository.Options{}); err == nil || !strings.Contains(err.Error(), "shard 2's index: no intact copy on any store") {
		t.Fatalf("open with shard 2's index lost everywhere: %v", err)
	}
}

// orderOf is rank p.Rank's order of ds, from the input OrderInput gives.
func orderOf(t *testing.T, ds *repository.Dataset, p layout.Params) *layout.RankOrder {
	t.Helper()
	in, err := repository.OrderInput(ds, p)
	if err != nil {
		t.Fatal(err)
	}
	o, err := layout.Order(in, p)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// checkStrataListed checks that PinStratum lists each stratum's samples
// as the whole manifest m holds them.
func checkStrataListed(t *testing.T, l *repository.LazyCatalog, m *manifest.Manifest) {
	t.Helper()
	for c := range m.Strata {
		_, samples, err := l.PinStratum(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		var ref []int64
		for i := range m.Samples.Len() {
			if int(m.Samples.Stratum[i]) == c {
				ref = append(ref, int64(i))
			}
		}
		if !slices.Equal(samples.Int64s(), ref) {
			t.Fatalf("stratum %d: %d samples listed, %d in the whole manifest", c, samples.Len(), len(ref))
		}
	}
}
