package integration

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shardfs/shardfs/cache"
	"github.com/shardfs/shardfs/internal/synth"
)

type diskStats struct {
	Disk *struct {
		Hits      int64 `json:"hits"`
		Writes    int64 `json:"writes"`
		Evictions int64 `json:"evictions"`
		Corrupt   int64 `json:"corrupt_refetches"`
	} `json:"disk"`
	Stores []struct {
		Requests int64 `json:"requests"`
	} `json:"stores"`
}

func readDiskStats(t *testing.T, mnt string) diskStats {
	t.Helper()
	var s diskStats
	if err := json.Unmarshal(mustRead(t, filepath.Join(mnt, ".shardfs", "stats.json")), &s); err != nil || s.Disk == nil {
		t.Fatalf("stats.json has no disk tier counters: %v", err)
	}
	return s
}

func (s diskStats) storeRequests() int64 {
	var n int64
	for _, st := range s.Stores {
		n += st.Requests
	}
	return n
}

// tierBytes is what the tier's files occupy on disk, measured from outside.
func tierBytes(root string) int64 {
	var total int64
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && (strings.HasSuffix(p, ".dat") || strings.HasSuffix(p, ".idx")) {
			total += fi.Sys().(*syscall.Stat_t).Blocks * 512
		}
		return nil
	})
	return total
}

// TestDiskTierThroughMounts: the disk tier survives a kill -9 of the daemon
// (the remount serves the epoch without asking the stores), bit rot on local
// disk is re-fetched and never served, two mounts share one cache directory
// within its size, and after ingest --force no stale byte is served.
func TestDiskTierThroughMounts(t *testing.T) {
	requireTool(t, "fusermount3")
	_, urls := localStores(t, 6)
	stores := "--stores=" + strings.Join(urls, ",")
	src := writeSource(t, synth.Imbalanced(400, 5, 0.7, 10_000, 60_000, 31))
	if r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=4", "--parity=2", "--shard-size=2MiB", src, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	cacheDir := t.TempDir()
	const limit = 64 << 20
	mountArgs := []string{stores, "--batch-size=16", "--epochs=2", "--cache-dir=" + cacheDir, "--cache-dir-size=64MiB", "ds"}

	// 1. Fill the tier, kill -9 the daemon, remount: the epoch comes from disk.
	a := mountShardfsEnv(t, nil, mountArgs...)
	if _, err := readEpochVerified(t, a.dir, src, 0, nil); err != nil {
		t.Fatal(err)
	}
	if st := readDiskStats(t, a.dir); st.Disk.Writes == 0 {
		t.Fatalf("a cold epoch wrote nothing to the disk tier: %+v", st.Disk)
	}
	a.kill()
	b := mountShardfsEnv(t, nil, mountArgs...)
	if _, err := readEpochVerified(t, b.dir, src, 0, nil); err != nil {
		t.Fatal(err)
	}
	st := readDiskStats(t, b.dir)
	if st.storeRequests() != 0 || st.Disk.Hits == 0 {
		t.Fatalf("after kill -9 and a remount the epoch asked the stores %d times (disk hits %d); want 0", st.storeRequests(), st.Disk.Hits)
	}

	// 2. Bit rot on local disk: flipped bytes are fetched again, never served.
	files, _ := filepath.Glob(filepath.Join(cacheDir, cache.TierDir, "*", "*.dat"))
	if len(files) == 0 {
		t.Fatal("no shard files in the disk tier")
	}
	for _, name := range files {
		data, _ := os.ReadFile(name)
		for i := len(data) / 3; i < len(data); i += len(data) / 3 {
			data[i] ^= 0x01
		}
		os.WriteFile(name, data, 0o644)
	}
	c := mountShardfsEnv(t, nil, mountArgs...)
	if _, err := readEpochVerified(t, c.dir, src, 0, nil); err != nil {
		t.Fatal(err)
	}
	if st := readDiskStats(t, c.dir); st.Disk.Corrupt == 0 || st.storeRequests() == 0 {
		t.Fatalf("bytes flipped in %d tier files: %d corrupt re-fetches, %d store requests; want both > 0", len(files), st.Disk.Corrupt, st.storeRequests())
	}

	// 3. Two mounts share the directory: both read right bytes, the tier stays within its size.
	d := mountShardfsEnv(t, nil, mountArgs...)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, mnt := range []string{c.dir, d.dir} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = readEpochVerified(t, mnt, src, 1, nil)
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("two mounts on one cache directory: %v, %v", errs[0], errs[1])
	}
	if got := tierBytes(cacheDir); got > limit {
		t.Fatalf("the tier holds %d bytes, --cache-dir-size is %d", got, limit)
	}

	// 4. After ingest --force, a new mount never serves the old dataset's bytes.
	other := writeSource(t, synth.Imbalanced(300, 4, 0.6, 10_000, 60_000, 32))
	if r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=4", "--parity=2", "--shard-size=2MiB", "--force", other, "ds"); r.code != 0 {
		t.Fatalf("ingest --force: %v", r)
	}
	e := mountShardfsEnv(t, nil, mountArgs...)
	if _, err := readEpochVerified(t, e.dir, other, 0, nil); err != nil {
		t.Fatalf("after ingest --force: %v", err)
	}
	// Its bytes came from the stores into a namespace of its own (bytes were checked above against the new source).
	if st := readDiskStats(t, e.dir); st.storeRequests() == 0 || st.Disk.Writes == 0 {
		t.Fatalf("the re-ingested dataset was served without fetching: %d store requests, %d disk writes", st.storeRequests(), st.Disk.Writes)
	}
	if ns, _ := filepath.Glob(filepath.Join(cacheDir, cache.TierDir, "ds-*")); len(ns) != 2 {
		t.Fatalf("namespaces in the tier: %v, want one per ingest (2)", ns)
	}
}

// TestWarmFillsExactlyWhatRanksRead: warm fetches the first batches of a
// rank-epoch and nothing else; after a full warm, a mount with the same
// cache directory reads the epoch without asking the stores at all.
func TestWarmFillsExactlyWhatRanksRead(t *testing.T) {
	requireTool(t, "fusermount3")
	_, urls := localStores(t, 6)
	stores := "--stores=" + strings.Join(urls, ",")
	src := writeSource(t, synth.Imbalanced(500, 5, 0.7, 5_000, 40_000, 33))
	if r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=4", "--parity=2", "--shard-size=2MiB", src, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	cacheDir := t.TempDir()
	order := []string{"--world-size=2", "--rank=1", "--batch-size=16", "--seed=9", "--epoch-size=0"}
	warm := func(extra ...string) result {
		r := run(t, 2*time.Minute, nil, append(append([]string{"warm", stores, "--cache-dir=" + cacheDir}, order...), append(extra, "ds")...)...)
		if r.code != 0 {
			t.Fatalf("warm: %v", r)
		}
		return r
	}
	if r := warm("--batches=3"); !strings.Contains(r.stdout, "warmed ds: 48 samples") || !strings.Contains(r.stdout, "48 fetched") {
		t.Fatalf("warm --batches 3 with batch size 16 must fetch exactly 48 samples: %v", r)
	}
	if r := warm(); !strings.Contains(r.stdout, "48 already on disk") {
		t.Fatalf("a full warm after a partial one must skip the 48 samples on disk: %v", r)
	}
	mnt := mountShardfs(t, append(append([]string{stores, "--cache-dir=" + cacheDir}, order...), "ds")...)
	rankDir := filepath.Join(mnt, "epochs", "0000", "rank-001")
	rows := readIndex(t, filepath.Join(rankDir, "index.csv"))
	names := tarMemberNames(t, filepath.Join(rankDir, "epoch.tar"))
	if len(rows) != len(names) || len(rows) == 0 {
		t.Fatalf("%d index rows, %d tar members", len(rows), len(names))
	}
	// Compare every member of epoch.tar with the source, by position.
	data := mustRead(t, filepath.Join(rankDir, "epoch.tar"))
	members := tarMembers(t, data)
	for i, row := range rows {
		if want := mustRead(t, filepath.Join(src, row.key)); string(members[2*i]) != string(want) {
			t.Fatalf("member %d (%s): wrong bytes", i, row.key)
		}
	}
	if st := readDiskStats(t, mnt); st.storeRequests() != 0 || st.Disk.Hits == 0 {
		t.Fatalf("after warm the epoch asked the stores %d times (disk hits %d); want 0", st.storeRequests(), st.Disk.Hits)
	}
}

// tarMembers returns the bodies of a tar's members, in order.
func tarMembers(t *testing.T, data []byte) [][]byte {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(data))
	var out [][]byte
	for {
		_, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
}

// TestDirectIO: with --direct-io every read of a batch file reaches the
// daemon (a second read is served again, not from the kernel's page cache),
// and the bytes are the epoch's verified bytes, whole-file reads and 4 KiB
// reads alike; without it the second read costs the daemon nothing.
func TestDirectIO(t *testing.T) {
	requireTool(t, "fusermount3")
	_, urls := localStores(t, 6)
	stores := "--stores=" + strings.Join(urls, ",")
	src := writeSource(t, synth.Imbalanced(200, 4, 0.7, 10_000, 60_000, 37))
	if r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=4", "--parity=2", "--shard-size=2MiB", src, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	served := func(mnt string) int64 {
		var s struct {
			BytesServed int64 `json:"bytes_served"`
		}
		if err := json.Unmarshal(mustRead(t, filepath.Join(mnt, ".shardfs", "stats.json")), &s); err != nil {
			t.Fatal(err)
		}
		return s.BytesServed
	}
	for _, direct := range []bool{true, false} {
		args := []string{stores, "--batch-size=16", "--cache-dir=" + t.TempDir(), "ds"}
		if direct {
			args = append([]string{"--direct-io"}, args...)
		}
		m := mountShardfsEnv(t, nil, args...)
		if _, err := readEpochVerified(t, m.dir, src, 0, nil); err != nil {
			t.Fatalf("direct-io %v: %v", direct, err)
		}
		batch := filepath.Join(m.dir, "epochs", "0000", "rank-000", "batch-000001.tar")
		first := mustRead(t, batch)
		before := served(m.dir)
		// Again, in 4 KiB reads.
		f, err := os.Open(batch)
		if err != nil {
			t.Fatal(err)
		}
		var again bytes.Buffer
		buf := make([]byte, 4096)
		for {
			n, err := f.Read(buf)
			again.Write(buf[:n])
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		f.Close()
		if !bytes.Equal(first, again.Bytes()) {
			t.Fatalf("direct-io %v: a second read of %s in 4 KiB reads differs from the first", direct, batch)
		}
		delta := served(m.dir) - before
		switch {
		case direct && delta != int64(len(first)):
			t.Fatalf("--direct-io: the second read of a %d-byte batch reached the daemon for %d bytes, want all of them", len(first), delta)
		case !direct && delta != 0:
			t.Fatalf("without --direct-io the second read of a batch reached the daemon for %d bytes; want 0 (page cache)", delta)
		}
	}
}

// Issue 40 item 14: the disk tier was keyed by the version's ingest id, so
// after an append of 50 samples to 1,000 a mount of the new version found
// the tier cold (0 hits) and filled a second copy. Each shard's entries now
// live under the ingest that uploaded it: the new version's mount reads the
// shards it shares with the old one from the tier, and adds only the new.
func TestDiskTierSharedAcrossVersions(t *testing.T) {
	_, urls := localStores(t, 3)
	stores := "--stores=" + strings.Join(urls, ",")
	src1 := taggedSource(t, 1000, 4, "", 1)
	src2 := taggedSource(t, 50, 4, "b", 2)
	if r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--shard-size=1MiB", src1, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	tier := t.TempDir()
	epoch := func(mnt string) int {
		t.Helper()
		n := 0
		files, _ := filepath.Glob(filepath.Join(mnt, "epochs", "0000", "rank-000", "batch-*.tar"))
		for _, f := range files {
			n += len(tarMemberNames(t, f))
		}
		return n
	}
	mount := func() *mountProc {
		return mountShardfsEnv(t, nil, stores, "--world-size=1", "--batch-size=10", "--epochs=1", "--cache-dir="+tier, "--cache-dir-size=1GiB", "ds")
	}
	mp := mount()
	n1 := epoch(mp.dir)
	w1 := readDiskStats(t, mp.dir).Disk.Writes
	mp.cmd.Process.Signal(syscall.SIGTERM)
	<-mp.exited
	bytes1 := tierBytes(tier)
	if r := run(t, 2*time.Minute, nil, "ingest", stores, "--append", src2, "ds"); r.code != 0 {
		t.Fatalf("append: %v", r)
	}
	mp = mount()
	n2 := epoch(mp.dir)
	st := readDiskStats(t, mp.dir).Disk
	mp.cmd.Process.Signal(syscall.SIGTERM)
	<-mp.exited
	bytes2 := tierBytes(tier)
	// Version 2's epoch reads the 1,000 old samples (minus what the tail
	// drops) and the 50 new ones: the old ones come from the tier.
	if st.Hits < int64(n1)*9/10 || st.Writes > 100 || bytes2 > bytes1*13/10 {
		t.Fatalf("version 2's epoch of %d samples after version 1's of %d (%d written): %d tier hits, %d writes; the tier grew from %d to %d bytes",
			n2, n1, w1, st.Hits, st.Writes, bytes1, bytes2)
	}
	t.Logf("after an append of 50 samples to 1,000: version 2's epoch of %d samples had %d tier hits and %d writes; the tier grew from %d to %d bytes", n2, st.Hits, st.Writes, bytes1, bytes2)
}
