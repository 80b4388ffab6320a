package integration

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/synth"
)

type indexStats struct {
	Loads    int64 `json:"loads"`
	TierHits int64 `json:"tier_hits"`
	Unpinned int64 `json:"unpinned_lookups"`
	// Format 3.
	GroupLoads int64 `json:"group_loads"`
	GroupsHeld int   `json:"groups_held"`
	Groups     int   `json:"groups"`
}

func readIndexStatsAll(t *testing.T, mnt string) indexStats {
	t.Helper()
	var s struct {
		Index *indexStats `json:"shard_indexes"`
	}
	if err := json.Unmarshal(mustRead(t, filepath.Join(mnt, ".shardfs", "stats.json")), &s); err != nil || s.Index == nil {
		t.Fatalf("stats.json has no shard index counters: %v", err)
	}
	return *s.Index
}

// datasetInfo is what a test reads of info.json's dataset.
type datasetInfo struct {
	Dataset struct {
		Shards  int `json:"shards"`
		Samples int `json:"samples"`
	} `json:"dataset"`
}

func readDatasetInfo(t *testing.T, mnt string) datasetInfo {
	t.Helper()
	var info datasetInfo
	if err := json.Unmarshal(mustRead(t, filepath.Join(mnt, ".shardfs", "info.json")), &info); err != nil {
		t.Fatal(err)
	}
	return info
}

// checkSampleTree reads every file of samples/, which must list n, and
// checks each against the source, byte for byte.
func checkSampleTree(t *testing.T, mnt, src string, n int) {
	t.Helper()
	files := sampleFiles(t, mnt)
	if len(files) != n {
		t.Fatalf("samples/ lists %d files, want %d", len(files), n)
	}
	for _, f := range files {
		rel, _ := filepath.Rel(filepath.Join(mnt, "samples"), f)
		got := mustRead(t, f)
		want, err := os.ReadFile(filepath.Join(src, rel))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("samples/%s: %d bytes, source %d (%v): WRONG BYTES", rel, len(got), len(want), err)
		}
	}
}

func readIndexStats(t *testing.T, mnt string) (loads, unpinned int64) {
	t.Helper()
	s := readIndexStatsAll(t, mnt)
	return s.Loads, s.Unpinned
}

// Issue 13: a dataset in metadata format 2 mounts without reading any shard
// index. A rank-epoch fetches the indexes of its own shards when it is first
// used — with --affinity over 4 ranks, a part of them — and a samples/
// class directory those of its class. Every byte read matches the source,
// and no read ever looks up a sample whose rows were not pinned.
func TestLazyIndexMount(t *testing.T) {
	t.Parallel() // waits more than it computes, asserts bytes, states and hang bounds (main_test.go, parallelTests)
	c := startCluster(t, 3)
	src := writeSource(t, synth.Imbalanced(600, 4, 0.6, 2_000, 20_000, 13))
	stores := "--stores=" + strings.Join(c.urls, ",")
	if r := run(t, 5*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--shard-size=64KiB", "--seed=7", "--format=2", src, "lazy"); r.code != 0 {
		t.Fatalf("format 2 ingest: %v", r)
	}
	mnt := mountShardfs(t, stores, "--batch-size=16", "--world-size=4", "--affinity", "--epochs=2", "lazy")
	info := readDatasetInfo(t, mnt)
	if info.Dataset.Samples != 600 || info.Dataset.Shards < 20 {
		t.Fatalf("info.json: %d samples in %d shards; want 600 in 20 or more", info.Dataset.Samples, info.Dataset.Shards)
	}
	if loads, _ := readIndexStats(t, mnt); loads != 0 {
		t.Fatalf("%d shard indexes read at mount, want 0", loads)
	}

	res, err := readEpochVerified(t, mnt, src, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	loads, unpinned := readIndexStats(t, mnt)
	if res.samples == 0 || loads == 0 || loads >= int64(info.Dataset.Shards) || unpinned != 0 {
		t.Fatalf("rank 0's epoch 0 (%d samples, verified): %d of %d shard indexes fetched, %d unpinned lookups; want some but not all, and 0",
			res.samples, loads, info.Dataset.Shards, unpinned)
	}
	t.Logf("rank 0's epoch 0: %d samples, %d of %d shard indexes fetched", res.samples, loads, info.Dataset.Shards)
	// The next epoch of the same rank reads the same shards (affinity): no
	// index is fetched again while the first epoch's rows are held.
	if _, err := readEpochVerified(t, mnt, src, 1, nil); err != nil {
		t.Fatal(err)
	}
	if again, _ := readIndexStats(t, mnt); again != loads {
		t.Fatalf("epoch 1 of the same rank fetched %d more shard indexes, want 0", again-loads)
	}

	checkSampleTree(t, mnt, src, 600)
	all, unpinned := readIndexStats(t, mnt)
	t.Logf("after all of samples/: %d shard indexes fetched", all)
	if all > int64(info.Dataset.Shards)+loads || unpinned != 0 {
		t.Fatalf("after reading samples/: %d shard indexes fetched for %d shards, %d unpinned lookups", all, info.Dataset.Shards, unpinned)
	}

	// A global shuffle, where each rank holds a copy of just its own rows
	// (no bridging, no disk tier on shards it holds in part). The dataset
	// has more shards than the catalog keeps whole rows of, so epoch 1
	// needs indexes fetched again: they are fetched while epoch 0 is read,
	// and its own first read fetches none.
	global := mountShardfs(t, stores, "--batch-size=16", "--world-size=4", "--epochs=2", "lazy")
	if _, err := readEpochVerified(t, global, src, 0, nil); err != nil {
		t.Fatal(err)
	}
	settled := readIndexStatsAll(t, global)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		time.Sleep(500 * time.Millisecond)
		now := readIndexStatsAll(t, global)
		if now == settled {
			break
		}
		settled = now
	}
	if _, err := readEpochVerified(t, global, src, 1, nil); err != nil {
		t.Fatal(err)
	}
	if after := readIndexStatsAll(t, global); after.Loads != settled.Loads || after.Unpinned != 0 {
		t.Fatalf("global shuffle: %d indexes fetched by the end of epoch 0 (next epoch's included), %d after epoch 1 (want the same), %d unpinned lookups",
			settled.Loads, after.Loads, after.Unpinned)
	}
	t.Logf("global shuffle, rank 0 of 4: %d shard index fetches for epochs 0 and 1 of %d shards", settled.Loads, info.Dataset.Shards)

	// With a disk tier, which pins whole shards: each index comes from the
	// stores once, and another mount on the same tier (a remount, or a
	// second mount on the node) finds every index it needs there.
	tier := t.TempDir()
	for i := range 2 {
		dir := mountShardfs(t, stores, "--batch-size=16", "--world-size=4", "--epochs=2", "--cache-dir="+tier, "lazy")
		for e := 0; e < 2; e++ {
			if _, err := readEpochVerified(t, dir, src, e, nil); err != nil {
				t.Fatalf("mount %d on the tier: epoch %d: %v", i, e, err)
			}
		}
		st := readIndexStatsAll(t, dir)
		switch {
		case st.Unpinned != 0:
			t.Fatalf("mount %d on the tier: %d unpinned lookups", i, st.Unpinned)
		case i == 0 && (st.Loads == 0 || st.Loads > int64(info.Dataset.Shards)):
			t.Fatalf("first mount on the tier: %d indexes from the stores for %d shards", st.Loads, info.Dataset.Shards)
		case i == 1 && (st.Loads != 0 || st.TierHits == 0):
			t.Fatalf("second mount on the tier: %d indexes from the stores, %d from the tier; want 0 and some", st.Loads, st.TierHits)
		}
	}

	// One of the three stores killed (m=1): a fresh mount fetches every
	// index it needs from the other two and decodes the data around the
	// lost fragments, every byte still the source's.
	c.servers[1].Kill()
	degraded := mountShardfs(t, stores, "--batch-size=16", "--world-size=4", "--epochs=1", "lazy")
	if _, err := readEpochVerified(t, degraded, src, 0, nil); err != nil {
		t.Fatalf("with store 1 down: %v", err)
	}
	st := readIndexStatsAll(t, degraded)
	if ms := readMountStats(t, degraded); st.Loads == 0 || st.Unpinned != 0 || ms.DegradedReads == 0 {
		t.Fatalf("with store 1 down: %+v, %d degraded reads; want loads, no unpinned lookup, degraded reads", st, ms.DegradedReads)
	}
}
