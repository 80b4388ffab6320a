package ingest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/repository"
)

// idsOnStores are the ingest ids whose data, index or group objects some
// store holds.
func idsOnStores(t *testing.T, stores []backend.Store, name string) []string {
	t.Helper()
	var ids []string
	for _, s := range stores {
		for _, prefix := range []string{repository.DataPrefix(name), repository.IndexPrefix(name), repository.GroupPrefix(name)} {
			keys, err := s.List(context.Background(), prefix)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				id, _, _ := strings.Cut(strings.TrimPrefix(k, prefix), "/")
				ids = append(ids, id)
			}
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// v1 ingested, v2 appended, v3 an ingest --force of other samples. gc
// --keep-last 1 while a mount's lease holds v1: v2 goes (its manifest and
// its appended shards), v1 stays whole; once the lease is released, a
// second gc frees v1's objects, and v3 verifies. A dry run deletes
// nothing, and gc without a rule refuses.
func TestGCKeepsWhatIsKeptOrLeased(t *testing.T) {
	for _, format := range []int{1, 3} {
		t.Run(map[int]string{1: "format1", 3: "format3"}[format], func(t *testing.T) { gcKeepsWhatIsKeptOrLeased(t, format) })
	}
}

func gcKeepsWhatIsKeptOrLeased(t *testing.T, format int) {
	ctx := context.Background()
	stores := localStores(t, t.TempDir(), 3)
	src1, src2, src3 := tree(t, 120, 3, "", 1), tree(t, 60, 3, "b", 2), tree(t, 80, 2, "c", 3)
	opts := Options{Name: "ds", Stores: stores, Data: 2, Parity: 1, ShardSize: 64 << 10, BlockSize: 4096, Format: format}
	r1, err := Run(ctx, src1, opts)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := Append(ctx, src2, Options{Name: "ds", Stores: stores}, AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	force := opts
	force.Force = true
	r3, err := Run(ctx, src3, force)
	if err != nil {
		t.Fatal(err)
	}
	id1, id2, id3 := r1.Manifest.IngestID, r2.Manifest.IngestID, r3.Manifest.IngestID
	if got := idsOnStores(t, stores, "ds"); !slices.Equal(got, sorted(id1, id2, id3)) {
		t.Fatalf("before gc the stores hold ingests %v, want %v: ingest --force keeps the versions it replaces", got, sorted(id1, id2, id3))
	}
	v1, err := repository.Open(ctx, stores, "ds", repository.Options{Version: 1})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := repository.TakeLease(ctx, stores, "ds", v1.Manifest, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Confirm(ctx, nil); err != nil {
		t.Fatal(err)
	}

	if _, err := repository.GC(ctx, stores, "ds", repository.GCOptions{}); !errors.Is(err, repository.ErrNoRule) {
		t.Fatalf("gc without a rule: %v", err)
	}
	before := objectSums(t, stores, "ds")
	dry, err := repository.GC(ctx, stores, "ds", repository.GCOptions{KeepLast: 1})
	if err != nil {
		t.Fatal(err)
	}
	if after := objectSums(t, stores, "ds"); len(after) != len(before) || dry.Deleted {
		t.Fatalf("the dry run deleted: %d objects before, %d after", len(before), len(after))
	}
	if !slices.Equal(dry.Removed, []int{2}) || !slices.Equal(dry.Ingests, []string{id2}) || dry.Objects == 0 {
		t.Fatalf("dry run with v1 leased: removes versions %v, ingests %v, %d objects; want [2], [%s]", dry.Removed, dry.Ingests, dry.Objects, id2)
	}
	rep, err := repository.GC(ctx, stores, "ds", repository.GCOptions{KeepLast: 1, Delete: true})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Deleted || rep.Objects != dry.Objects || rep.Bytes != dry.Bytes {
		t.Fatalf("gc deleted %d objects, %d bytes; the dry run said %d, %d", rep.Objects, rep.Bytes, dry.Objects, dry.Bytes)
	}
	if got := idsOnStores(t, stores, "ds"); !slices.Equal(got, sorted(id1, id3)) {
		t.Fatalf("after gc with v1 leased the stores hold ingests %v, want %v", got, sorted(id1, id3))
	}
	checkServes(t, stores, 1, src1)
	if _, err := repository.Open(ctx, stores, "ds", repository.Options{Version: 2}); !errors.Is(err, repository.ErrNoVersion) || !strings.Contains(err.Error(), "removed by gc") {
		t.Fatalf("version 2 after gc: %v", err)
	}

	lease.Release(ctx)
	rep, err = repository.GC(ctx, stores, "ds", repository.GCOptions{KeepLast: 1, Delete: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Removed, []int{1}) || !slices.Equal(rep.Ingests, []string{id1}) {
		t.Fatalf("the second gc removed versions %v, ingests %v", rep.Removed, rep.Ingests)
	}
	if got := idsOnStores(t, stores, "ds"); !slices.Equal(got, []string{id3}) {
		t.Fatalf("after the second gc the stores hold ingests %v, want only %s", got, id3)
	}
	v3 := checkServes(t, stores, 0, src3)
	if rep, err := v3.Verify(ctx, nil); err != nil || !rep.Intact() {
		t.Fatalf("v3 after gc: %v %+v", err, rep)
	}
	if rep, err := repository.GC(ctx, stores, "ds", repository.GCOptions{KeepLast: 1, Delete: true}); err != nil || len(rep.Removed) != 0 || rep.Objects != 0 {
		t.Fatalf("a third gc: %+v, %v", rep, err)
	}
}

func sorted(ids ...string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}
