package ingest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardfs/shardfs/repository"
)

// Migrate RS(2,1) on 3 stores to RS(3,2) on 5 others, in every metadata
// format, after an append and a gc'd version: interrupted once, the rerun
// keeps what the first run wrote and commits; every kept version then
// serves its samples from the new stores, also with 2 of them gone; the
// old stores are untouched; a second run has nothing to do; stores that
// hold another dataset of the name are refused before anything is written.
// With local numbering, the appends' shards keep their numbers within
// their appends on the new stores (manifest.Segment.Local; format 2, whose
// shard indexes migrate re-encodes).
func TestMigrateCopiesEveryKeptVersion(t *testing.T) {
	for _, format := range []int{1, 2, 3} {
		t.Run(fmt.Sprint("format", format), func(t *testing.T) { migrateCopiesEveryKeptVersion(t, format, false) })
	}
	t.Run("format2-local", func(t *testing.T) { migrateCopiesEveryKeptVersion(t, 2, true) })
}

func migrateCopiesEveryKeptVersion(t *testing.T, format int, local bool) {
	ctx := context.Background()
	from := localStores(t, t.TempDir(), 3)
	toDir := t.TempDir()
	to := localStores(t, toDir, 5)
	src1, src2, src3 := tree(t, 150, 3, "", 1), tree(t, 60, 4, "b", 2), tree(t, 40, 2, "c", 3)
	if _, err := Run(ctx, src1, Options{Name: "ds", Stores: from, Data: 2, Parity: 1, ShardSize: 32 << 10, BlockSize: 4096, Format: format}); err != nil {
		t.Fatal(err)
	}
	for _, src := range []*Source{src2, src3} {
		if _, err := Append(ctx, src, Options{Name: "ds", Stores: from, localSegment: local}, AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Rollback(ctx, Options{Name: "ds", Stores: from}, 2); err != nil { // v4: v2's content
		t.Fatal(err)
	}
	// Versions 1-3 go, and v3's appended shards with them: only v4 is copied.
	if _, err := repository.GC(ctx, from, "ds", repository.GCOptions{KeepLast: 1, Delete: true}); err != nil {
		t.Fatal(err)
	}
	before := objectSums(t, from, "ds")

	mctx, cancel := context.WithCancel(ctx)
	progressed := 0
	opts := MigrateOptions{Name: "ds", From: from, To: to, Data: 3, Parity: 2, ShardsInFlight: 1,
		Progress: func(int64) {
			if progressed++; progressed == 3 {
				cancel()
			}
		}}
	if _, err := Migrate(mctx, opts); err == nil || !strings.Contains(err.Error(), "rerun the same command") {
		t.Fatalf("an interrupted migration: %v", err)
	}
	if _, err := repository.LoadHeader(ctx, to, "ds", nil); !errors.Is(err, repository.ErrNotFound) {
		t.Fatalf("an interrupted migration left a dataset on the new stores: %v", err)
	}
	opts.Progress = nil
	res, err := Migrate(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Reused < 3*5 || res.Version != 5 || fmt.Sprint(res.Versions) != "[4]" {
		t.Fatalf("the rerun: %d fragments reused (want at least the 15 of 3 shards), version %d, versions copied %v", res.Reused, res.Version, res.Versions)
	}
	if after := objectSums(t, from, "ds"); len(after) != len(before) {
		t.Fatalf("the old stores changed: %d objects, %d before", len(after), len(before))
	}
	for k, v := range objectSums(t, from, "ds") {
		if before[k] != v {
			t.Fatalf("the old stores changed: %s", k)
		}
	}
	cur := checkServes(t, to, 0, src1, src2)
	if cur.Manifest.Data != 3 || cur.Manifest.Parity != 2 || cur.Manifest.VersionNumber() != 5 {
		t.Fatalf("on the new stores: RS(%d,%d), version %d", cur.Manifest.Data, cur.Manifest.Parity, cur.Manifest.VersionNumber())
	}
	checkServes(t, to, 4, src1, src2)
	if _, err := repository.Open(ctx, to, "ds", repository.Options{Version: 3}); !errors.Is(err, repository.ErrNoVersion) {
		t.Fatalf("a version gc removed before the migration: %v", err)
	}
	if rep, err := cur.Verify(ctx, nil); err != nil || !rep.Intact() {
		t.Fatalf("the new stores do not verify: %v %+v", err, rep)
	}
	checkNumbering(t, to, cur.Manifest, local)
	again, err := Migrate(ctx, opts)
	if err != nil || !again.Unchanged {
		t.Fatalf("a second migration: %+v, %v", again, err)
	}
	for _, i := range []int{1, 3} {
		os.RemoveAll(filepath.Join(toDir, fmt.Sprint("s", i)))
	}
	checkServes(t, localStores(t, toDir, 5), 0, src1, src2)

	// Stores that hold another dataset of this name.
	other := localStores(t, t.TempDir(), 5)
	if _, err := Run(ctx, src3, Options{Name: "ds", Stores: other, Data: 3, Parity: 2, ShardSize: 32 << 10, BlockSize: 4096}); err != nil {
		t.Fatal(err)
	}
	held := objectSums(t, other, "ds")
	opts.To = other
	if _, err := Migrate(ctx, opts); err == nil || !strings.Contains(err.Error(), "hold another dataset of this name") {
		t.Fatalf("migrate onto another dataset: %v", err)
	}
	for k, v := range objectSums(t, other, "ds") {
		if held[k] != v {
			t.Fatalf("a refused migration wrote %s", k)
		}
	}
}
