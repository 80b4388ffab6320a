package mount_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/internal/testds"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/mount"
)

// Issue 24: a whole mount (cache, prefetch, tree, FUSE) built in-process
// with mount.Open on stores behind the fault-injecting wrapper reads an
// epoch byte for byte while one store flips bits and another is slow.
func TestOpenInProcessWithFaultyStores(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true: /dev/fuse is missing")
		}
		t.Skip("no /dev/fuse")
	}
	ds := testds.New(t, synth.Spec{Counts: []int{60, 30, 10}, MinSize: 2_000, MaxSize: 80_000, Seed: 4}, nil)
	var stores []backend.Store
	for _, f := range ds.Faulty {
		stores = append(stores, f)
	}
	dir := filepath.Join(t.TempDir(), "mnt")
	os.Mkdir(dir, 0o755)
	spec := &layout.Spec{Base: layout.Params{Seed: 7, World: 2, Batch: 8, Alpha: 1}, ResumeEpoch: -1, Epochs: 2, Ranks: []int{0, 1}}
	mt, err := mount.Open(t.Context(), stores, dir, mount.Config{Name: "ds", Spec: spec,
		CacheSize: 64 << 20, ReadTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mt.Close)
	ds.Faulty[2].SetFlipBits(true)
	ds.Faulty[5].SetDelay(300*time.Millisecond, 100*time.Millisecond)
	samples := 0
	for _, rank := range []string{"rank-000", "rank-001"} {
		samples += testds.CheckTar(t, filepath.Join(dir, "epochs/0001", rank, "epoch.tar"), ds.Src)
	}
	if samples != 96 { // 100 samples over 2 ranks of batch 8, the tail dropped
		t.Fatalf("read %d samples over both ranks, want 96", samples)
	}
	if s := mt.Metrics.Snapshot(); s.ChecksumFailures == 0 {
		t.Fatalf("one store flipped bits and no checksum failure was counted: %+v", s)
	}
}
