package mount_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/ingest"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/internal/testds"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/mount"
	"github.com/shardfs/shardfs/repository"
)

// Issue 58: the read path returns "heal needed" as a value, and the mount
// hands it to the hinter of the dataset that holds the shard. In a mix the
// read path numbers the second dataset's shards after the first's: a lost
// fragment of "other"'s shard 0 (the mix's shard 1) must be hinted as
// "other"'s shard 0, and nothing else hinted (not "other"'s shard 1, nor
// "ds"'s).
func TestMountHintsTheDatasetOfAMix(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true: /dev/fuse is missing")
		}
		t.Skip("no /dev/fuse")
	}
	ctx := context.Background()
	ds := testds.New(t, synth.Spec{Counts: []int{30, 20}, MinSize: 2_000, MaxSize: 40_000, Seed: 4}, nil)
	var stores []backend.Store
	for _, f := range ds.Faulty {
		stores = append(stores, f)
	}
	src := filepath.Join(t.TempDir(), "other")
	if _, err := synth.Write(src, synth.Spec{Counts: []int{60, 40}, MinSize: 30_000, MaxSize: 60_000, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	source, err := ingest.Scan(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := ingest.Run(ctx, source, ingest.Options{Name: "other", Stores: stores, Data: 4, Parity: 2, ShardSize: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if n := ds.Manifest.NumShards(); n != 1 || res.Manifest.NumShards() < 2 {
		t.Fatalf("ds has %d shards and other %d: the test needs 1 and at least 2", n, res.Manifest.NumShards())
	}
	id := res.Manifest.IngestID
	lost := repository.FragmentKey("other", id, 0, 0)
	if err := stores[0].Delete(ctx, lost); err != nil { // fragment f of shard s is on store (s+f) mod 6
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "mnt")
	os.Mkdir(dir, 0o755)
	spec := &layout.Spec{Base: layout.Params{Seed: 7, World: 1, Batch: 8, Alpha: 1, Mix: []float64{1, 1}},
		MixNames: []string{"ds", "other"}, ResumeEpoch: -1, Epochs: 1, Ranks: []int{0}}
	mt, err := mount.Open(t.Context(), stores, dir, mount.Config{Name: "ds+other", Mix: spec.MixNames, Spec: spec,
		CacheSize: 64 << 20, ReadTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mt.Close)
	f, err := os.Open(filepath.Join(dir, "epochs/0000/rank-000/epoch.tar"))
	if err != nil {
		ents, _ := filepath.Glob(filepath.Join(dir, "*", "*"))
		t.Fatalf("%v; the mount holds %v", err, ents)
	}
	n, err := io.Copy(io.Discard, f) // every byte verified, other's shard 0 decoded
	f.Close()
	if err != nil || n == 0 {
		t.Fatalf("read %d bytes of the epoch: %v", n, err)
	}
	want := repository.HealHintKey("other", id, 0)
	var hints []string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		hints = hints[:0]
		for _, name := range []string{"ds", "other"} {
			keys, err := stores[1].List(ctx, repository.HealHintPrefix(name))
			if err != nil {
				t.Fatal(err)
			}
			hints = append(hints, keys...)
		}
		if slices.Contains(hints, want) || time.Now().After(deadline) {
			break
		}
	}
	if !slices.Equal(hints, []string{want}) {
		t.Fatalf("hints on store 1 after reading a mix with other's shard 0 missing a fragment: %v, want only %s", hints, want)
	}
}
