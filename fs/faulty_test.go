package fs_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/internal/testds"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/metrics"
)

// Issue 24: a mount built in-process, on stores behind the fault-injecting
// wrapper, serves an epoch byte for byte while m=2 stores misbehave: one
// serves flipped bits, one answers after a delay that outlives the hedge
// deadline, and then one is down. Every member of epoch.tar equals its
// source file, and every .cls names its stratum.
func TestEpochThroughFaultyStores(t *testing.T) {
	requireFUSE(t)
	met := metrics.New(make([]string, 6))
	ds := testds.New(t, synth.Spec{Counts: []int{50, 25, 8}, MinSize: 2_000, MaxSize: 60_000, Seed: 9}, met)
	mnt := mountTree(t, ds, met, 2, []int{0, 1}, layout.Params{Seed: 3, World: 2, Batch: 8, Alpha: 1})
	ds.Faulty[1].SetFlipBits(true)
	ds.Faulty[4].SetDelay(400*time.Millisecond, 100*time.Millisecond)
	check := func(rel string) int { return testds.CheckTar(t, filepath.Join(mnt, rel), ds.Src) }
	n := check("epochs/0000/rank-000/epoch.tar")
	ds.Faulty[4].SetDelay(0, 0)
	ds.Faulty[4].SetDown(true)
	n += check("epochs/0001/rank-001/epoch.tar")
	if n < 70 {
		t.Fatalf("%d samples read and checked over two rank-epochs, want most of the 83", n)
	}
	if s := met.Snapshot(); s.ChecksumFailures == 0 || s.DegradedReads == 0 {
		t.Fatalf("flipped bits and a down store went unseen: %d checksum failures, %d degraded reads", s.ChecksumFailures, s.DegradedReads)
	}
}
