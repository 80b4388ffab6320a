package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/synth"
)

// Issue 30: a dataset in metadata format 3 mounts reading its root only:
// no group object, no shard index. A rank-epoch of the global order reads
// the group objects of its samples, each once, then their shards' indexes;
// samples/ and a window order read the groups they list, a rank-affine
// order the groups of its range of samples. Every byte read is
// the source's, and no read looks up a sample whose rows were not pinned,
// with all stores up and with one killed.
func TestFormat3Mount(t *testing.T) {
	c := startCluster(t, 3)
	src := writeSource(t, synth.Imbalanced(600, 4, 0.6, 2_000, 20_000, 13))
	stores := "--stores=" + strings.Join(c.urls, ",")
	if r := run(t, 5*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--shard-size=64KiB", "--seed=7", "--format=3", "--group-shards=1", src, "groups"); r.code != 0 {
		t.Fatalf("format 3 ingest: %v", r)
	}
	mnt := mountShardfs(t, stores, "--batch-size=8", "--world-size=16", "--epochs=2", "groups")
	info := readDatasetInfo(t, mnt)
	if info.Dataset.Samples != 600 || info.Dataset.Shards < 40 {
		t.Fatalf("info.json: %d samples in %d shards; want 600 in 40 or more", info.Dataset.Samples, info.Dataset.Shards)
	}
	if st := readIndexStatsAll(t, mnt); st.GroupLoads != 0 || st.Loads != 0 || st.Groups != info.Dataset.Shards {
		t.Fatalf("at mount: %+v; want no group object and no index read, and one group a shard", st)
	}

	var first indexStats
	for e := range 2 {
		res, err := readEpochVerified(t, mnt, src, e, nil)
		if err != nil {
			t.Fatalf("epoch %d: %v", e, err)
		}
		st := readIndexStatsAll(t, mnt)
		if res.samples == 0 || st.GroupLoads == 0 || st.GroupLoads != int64(st.GroupsHeld) || st.GroupsHeld >= st.Groups || st.Unpinned != 0 {
			t.Fatalf("rank 0 of 16, epoch %d (%d samples, verified): %+v; want some groups, each read once, not all, and no unpinned lookup", e, res.samples, st)
		}
		if e == 0 {
			first = st
		}
		t.Logf("rank 0 of 16, epochs 0..%d: %d samples, %d of %d group objects read, %d shard indexes", e, res.samples, st.GroupLoads, st.Groups, st.Loads)
	}

	// samples/: every file of the whole tree, byte for byte.
	checkSampleTree(t, mnt, src, 600)
	if st := readIndexStatsAll(t, mnt); st.GroupsHeld != st.Groups || st.Unpinned != 0 || st.GroupLoads < first.GroupLoads {
		t.Fatalf("after all of samples/: %+v; want every group held and no unpinned lookup", st)
	}

	// Rank affinity (order version 3): a rank reads the groups of its
	// range of samples, an eighth of them.
	affine := mountShardfs(t, stores, "--batch-size=8", "--world-size=8", "--affinity", "--epochs=2", "groups")
	for e := range 2 {
		if _, err := readEpochVerified(t, affine, src, e, nil); err != nil {
			t.Fatalf("affine mount, epoch %d: %v", e, err)
		}
	}
	if st := readIndexStatsAll(t, affine); st.GroupLoads == 0 || st.GroupLoads > int64(st.Groups/8+2) || st.Unpinned != 0 {
		t.Fatalf("affine mount, rank 0 of 8, epochs 0 and 1: %+v; want the groups of an eighth of the samples (at most %d), no unpinned lookup", st, st.Groups/8+2)
	} else {
		t.Logf("affine mount, rank 0 of 8, epochs 0 and 1: %d of %d group objects read", st.GroupLoads, st.Groups)
	}

	// A window order lists every sample's shard: every group is read.
	window := mountShardfs(t, stores, "--batch-size=8", "--world-size=4", "--window=4", "--epochs=1", "groups")
	if _, err := readEpochVerified(t, window, src, 0, nil); err != nil {
		t.Fatalf("window mount: %v", err)
	}
	if st := readIndexStatsAll(t, window); st.GroupsHeld != st.Groups || st.Unpinned != 0 {
		t.Fatalf("window mount: %+v", st)
	}

	// With a disk tier: a second mount on it reads every shard index it
	// needs from the tier (the group objects again from the stores).
	tier := t.TempDir()
	for i := range 2 {
		dir := mountShardfs(t, stores, "--batch-size=8", "--world-size=16", "--epochs=1", "--cache-dir="+tier, "groups")
		if _, err := readEpochVerified(t, dir, src, 0, nil); err != nil {
			t.Fatalf("mount %d on the tier: %v", i, err)
		}
		st := readIndexStatsAll(t, dir)
		if st.Unpinned != 0 || st.GroupLoads == 0 || (i == 0) != (st.Loads > 0) || (i == 1) != (st.TierHits > 0) {
			t.Fatalf("mount %d on the tier: %+v; want group loads, index loads from the stores on the first mount only, tier hits on the second", i, st)
		}
	}

	// One of the three stores killed (m=1): group objects, indexes and
	// data all come from the other two.
	c.servers[2].Kill()
	degraded := mountShardfs(t, stores, "--batch-size=8", "--world-size=16", "--epochs=1", "groups")
	if _, err := readEpochVerified(t, degraded, src, 0, nil); err != nil {
		t.Fatalf("with store 2 down: %v", err)
	}
	st := readIndexStatsAll(t, degraded)
	if ms := readMountStats(t, degraded); st.GroupLoads == 0 || st.Unpinned != 0 || ms.DegradedReads == 0 {
		t.Fatalf("with store 2 down: %+v, %d degraded reads; want group loads, no unpinned lookup, degraded reads", st, ms.DegradedReads)
	}
}
