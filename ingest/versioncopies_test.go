package ingest

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/repository"
)

// A kept version's manifest has a copy on every store, and nothing else
// holds it: verify reads every copy and names the missing and the corrupt
// ones, repair rewrites them from an intact copy byte for byte, and the
// version then opens from any one store's copy. A version gc removed (no
// copy anywhere) is not damage.
func TestVerifyRepairsKeptVersionCopies(t *testing.T) {
	ctx := context.Background()
	src1 := tree(t, 60, 3, "", 1)
	stores, ids := appendedVersions(t, src1, tree(t, 30, 2, "b", 2), tree(t, 20, 2, "c", 3))
	// Version 2's kept manifest is removed everywhere, as gc removes it.
	v1, v2 := repository.VersionKey("ds", ids[0]), repository.VersionKey("ds", ids[1])
	for _, s := range stores {
		if err := s.Delete(ctx, v2); err != nil {
			t.Fatal(err)
		}
	}
	intact, err := getObject(ctx, stores[2], v1)
	if err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(intact)
	flipped[len(flipped)/2] ^= 0x10
	if err := stores[0].Put(ctx, v1, flipped); err != nil {
		t.Fatal(err)
	}
	if err := stores[1].Delete(ctx, v1); err != nil {
		t.Fatal(err)
	}

	ds, rep := openAndVerify(t, stores)
	if rep.Intact() {
		t.Fatal("verify calls the dataset intact with version 1's copy corrupt on store 0 and missing on store 1")
	}
	if len(rep.BadVersions) != 2 {
		t.Fatalf("verify found %d bad version copies, want 2 (store 0 corrupt, store 1 missing): %+v", len(rep.BadVersions), rep.BadVersions)
	}
	for i, vc := range rep.BadVersions {
		if vc.Store != i || vc.Version != 1 || vc.IngestID != ids[0] {
			t.Errorf("bad version copy %d: %+v, want store %d's copy of version 1 (%s)", i, vc, i, ids[0])
		}
	}
	if !errors.Is(rep.BadVersions[1].Err, backend.ErrNotExist) {
		t.Errorf("store 1's copy: %v, want it missing", rep.BadVersions[1].Err)
	}
	if !rep.Recoverable() {
		t.Fatal("verify calls the damage unrecoverable; store 2 holds an intact copy")
	}
	n, err := ds.Repair(ctx, rep, false, nil)
	if err != nil {
		t.Fatalf("repair: %v", err)
	}
	if n != 2 {
		t.Errorf("repair wrote %d objects, want the 2 version copies", n)
	}
	for i, s := range stores {
		b, err := getObject(ctx, s, v1)
		if err != nil || !bytes.Equal(b, intact) {
			t.Fatalf("store %d's copy of version 1 after repair: %v, equal to the intact copy: %v", i, err, bytes.Equal(b, intact))
		}
		if _, err := s.Stat(ctx, v2); !errors.Is(err, backend.ErrNotExist) {
			t.Errorf("store %d: repair wrote version 2's manifest, which gc had removed (%v)", i, err)
		}
	}
	rep, err = ds.Verify(ctx, nil)
	if err != nil || !rep.Intact() {
		t.Fatalf("verify after repair: %v, intact %v: %+v", err, rep != nil && rep.Intact(), rep)
	}
	// Each store's copy alone opens version 1.
	for i := range stores {
		for j, s := range stores {
			if j != i {
				if err := s.Delete(ctx, v1); err != nil {
					t.Fatal(err)
				}
			}
		}
		checkServes(t, stores, 1, src1)
		for j, s := range stores {
			if j != i {
				if err := s.Put(ctx, v1, intact); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// openAndVerify opens the current version of ds and verifies it.
func openAndVerify(t *testing.T, stores []backend.Store) (*repository.Dataset, *repository.Report) {
	t.Helper()
	ds, err := repository.Open(context.Background(), stores, "ds", repository.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := ds.Verify(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return ds, rep
}

// appendedVersions ingests srcs[0] into 3 local stores, RS(2,1), and
// appends each later source as the next version; it returns the stores and
// each version's ingest id.
func appendedVersions(t *testing.T, srcs ...*Source) ([]backend.Store, []string) {
	t.Helper()
	ctx := context.Background()
	stores := localStores(t, t.TempDir(), 3)
	r, err := Run(ctx, srcs[0], Options{Name: "ds", Stores: stores, Data: 2, Parity: 1, ShardSize: 64 << 10, BlockSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{r.Manifest.IngestID}
	for _, src := range srcs[1:] {
		r, err := Append(ctx, src, Options{Name: "ds", Stores: stores}, AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.Manifest.IngestID)
	}
	return stores, ids
}

// getObject reads all of object key.
func getObject(ctx context.Context, s backend.Store, key string) ([]byte, error) {
	n, err := s.Stat(ctx, key)
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	return b, s.ReadAt(ctx, key, b, 0)
}

// A kept version whose every copy is corrupt is lost: verify names it
// (unrecoverable), repair mends everything else and names it, and the
// current version still verifies and serves. With the dataset's lock held
// (an ingest or gc running), repair writes no version copy and says to run
// again.
func TestLostVersionIsNamed(t *testing.T) {
	ctx := context.Background()
	src1, src2 := tree(t, 60, 3, "", 1), tree(t, 30, 2, "b", 2)
	stores, ids := appendedVersions(t, src1, src2, tree(t, 20, 2, "c", 3))
	v1, v2 := repository.VersionKey("ds", ids[0]), repository.VersionKey("ds", ids[1])
	for _, s := range stores {
		b, err := getObject(ctx, s, v1)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/3] ^= 1
		if err := s.Put(ctx, v1, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := stores[1].Delete(ctx, v2); err != nil {
		t.Fatal(err)
	}
	ds, rep := openAndVerify(t, stores)
	if !slices.Equal(rep.LostVersions, []int{1}) || rep.Recoverable() {
		t.Fatalf("lost versions %v, recoverable %v: want version 1 lost, unrecoverable", rep.LostVersions, rep.Recoverable())
	}
	if len(rep.BadVersions) != 4 {
		t.Fatalf("%d bad version copies, want 4 (version 1 on 3 stores, version 2 on store 1): %+v", len(rep.BadVersions), rep.BadVersions)
	}

	// A lock held: no version copy is written.
	lock, _, err := repository.AcquireLock(ctx, stores, "ds", "someone-else", repository.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := objectSums(t, stores, "ds")
	_, err = ds.Repair(ctx, rep, false, nil)
	if err == nil || !strings.Contains(err.Error(), "run repair again") || !strings.Contains(err.Error(), "versions [1]") {
		t.Fatalf("repair with the lock held: %v; want it to name lost version 1 and say to run again", err)
	}
	after := objectSums(t, stores, "ds")
	if !maps.Equal(before, after) {
		t.Fatalf("repair with the lock held changed objects: %d before, %d after", len(before), len(after))
	}
	lock.Release(ctx)

	n, err := ds.Repair(ctx, rep, false, nil)
	if !errors.Is(err, repository.ErrUnrecoverable) || !strings.Contains(err.Error(), "versions [1]") {
		t.Fatalf("repair: %v; want ErrUnrecoverable naming version 1", err)
	}
	if n != 1 {
		t.Errorf("repair wrote %d objects, want 1 (version 2 on store 1)", n)
	}
	if _, err := repository.Open(ctx, stores, "ds", repository.Options{Version: 1}); err == nil {
		t.Error("version 1 opens with every copy of its manifest corrupt")
	}
	checkServes(t, stores, 2, src1, src2)
	rep, err = ds.Verify(ctx, nil)
	if err != nil || len(rep.BadVersions) != 3 || !slices.Equal(rep.LostVersions, []int{1}) || len(rep.Damaged) != 0 {
		t.Fatalf("verify after repair: %v: %+v", err, rep)
	}
}

// A gc killed after it marked version 1 and deleted one copy of its
// manifest: verify names the removal as a note, not damage, and repair
// writes nothing back; gc run again finishes, and leaves no mark.
func TestInterruptedGCIsNotDamage(t *testing.T) {
	ctx := context.Background()
	stores, ids := appendedVersions(t, tree(t, 60, 3, "", 1), tree(t, 30, 2, "b", 2))
	id1 := ids[0]
	for _, s := range stores {
		if err := s.Put(ctx, repository.GCMarkKey("ds", id1), []byte("removing\n")); err != nil {
			t.Fatal(err)
		}
	}
	if err := stores[0].Delete(ctx, repository.VersionKey("ds", id1)); err != nil {
		t.Fatal(err)
	}
	ds, rep := openAndVerify(t, stores)
	if !rep.Intact() || len(rep.BadVersions) != 0 || !slices.Equal(rep.Removing, []int{1}) {
		t.Fatalf("verify of an interrupted gc: intact %v, bad version copies %+v, removing %v: want intact, none, [1]", rep.Intact(), rep.BadVersions, rep.Removing)
	}
	// A report from before the gc began, repaired after it: nothing is
	// written back.
	stale := &repository.Report{BadVersions: []repository.VersionCopy{{Store: 0, Version: 1, IngestID: id1, Err: backend.ErrNotExist}}}
	if n, err := ds.Repair(ctx, stale, false, nil); err != nil || n != 0 {
		t.Fatalf("repair from a report older than the gc: wrote %d (%v), want 0", n, err)
	}
	if _, err := stores[0].Stat(ctx, repository.VersionKey("ds", id1)); !errors.Is(err, backend.ErrNotExist) {
		t.Fatalf("repair restored a version gc is removing: %v", err)
	}
	gc, err := repository.GC(ctx, stores, "ds", repository.GCOptions{KeepLast: 1, Delete: true})
	if err != nil || !slices.Equal(gc.Removed, []int{1}) {
		t.Fatalf("gc again: %v, removed %v", err, gc)
	}
	for i, s := range stores {
		marks, err := s.List(ctx, repository.GCMarkPrefix("ds"))
		if err != nil || len(marks) != 0 {
			t.Fatalf("store %d after gc: marks %v (%v)", i, marks, err)
		}
	}
	if rep, err := ds.Verify(ctx, nil); err != nil || !rep.Intact() || len(rep.Removing) != 0 {
		t.Fatalf("verify after gc: %v: %+v", err, rep)
	}
}
