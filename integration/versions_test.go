package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/backend/storetest"
	"github.com/shardfs/shardfs/internal/synth"
)

// taggedSource writes an ImageFolder source of n samples whose file names
// start with tag, and returns its directory.
func taggedSource(t *testing.T, n, classes int, tag string, seed uint64) string {
	t.Helper()
	spec := synth.Imbalanced(n, classes, 0.6, 2_000, 40_000, seed)
	spec.Tag = tag
	return writeSource(t, spec)
}

// checkSamplesView checks that a mount's samples/ holds exactly the files
// of srcs, byte for byte: the view shows each sample at its key.
func checkSamplesView(t *testing.T, mnt string, srcs ...string) {
	t.Helper()
	if err := sameTree(mnt, srcs...); err != nil {
		t.Fatalf("%s: %v", mnt, err)
	}
}

// storeSums is every object of dataset name on the stores, with its CRC.
func storeSums(t *testing.T, stores []backend.Store, name string) map[string]uint32 {
	t.Helper()
	return storetest.Sums(t, stores, name+"/")
}

// Ingest v1, append v2 and v3 on MinIO, mount each version: each serves
// exactly its samples, byte for byte, v1's objects are unchanged after the
// appends, and a mount of the current version keeps serving it while
// another version is committed. Rollback to v1, then roll the rollback back.
func TestVersionsOnMinIO(t *testing.T) {
	c := sharedCluster(t, 3)
	stores := "--stores=" + strings.Join(c.urls, ",")
	clients := c.clients(t)
	src1 := taggedSource(t, 150, 3, "", 1)
	src2 := taggedSource(t, 90, 4, "b", 2)
	src3 := taggedSource(t, 60, 2, "c", 3)
	if r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--shard-size=512KiB", src1, "lives"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	before := storeSums(t, clients, "lives")
	current := mountBinary(t, testBinary, nil, stores, "--batch-size=8", "--version-check-every=300ms", "lives").dir

	r := run(t, 2*time.Minute, nil, "ingest", stores, "--append", src2, "lives")
	if r.code != 0 || !strings.Contains(r.stdout, "committed version 2 of lives (after version 1): appended 90 samples") {
		t.Fatalf("append v2: %v", r)
	}
	t.Logf("append v2: %s", strings.TrimSpace(r.stdout))
	if r := run(t, 2*time.Minute, nil, "ingest", stores, "--append", src3, "lives"); r.code != 0 {
		t.Fatalf("append v3: %v", r)
	}
	after := storeSums(t, clients, "lives")
	for k, sum := range before {
		if strings.HasSuffix(k, "lives/manifest") || strings.HasSuffix(k, "lives/identity") {
			continue // they name the current version
		}
		if after[k] != sum {
			t.Fatalf("%s changed or went away in the appends", k)
		}
	}
	// The mount that started at v1 still serves v1, and says so.
	checkSamplesView(t, current, src1)
	infoOf := func(mnt string) map[string]any {
		var v struct {
			Dataset map[string]any `json:"dataset"`
		}
		if err := json.Unmarshal(mustRead(t, filepath.Join(mnt, ".shardfs", "info.json")), &v); err != nil {
			t.Fatal(err)
		}
		return v.Dataset
	}
	if d := infoOf(current); d["version"] != 1.0 || d["samples"] != 150.0 {
		t.Fatalf("the mount started at v1 says %v", d)
	}
	// Its stats say a newer version is current, once it has asked.
	var stats struct {
		DatasetVersion int `json:"dataset_version"`
		CurrentVersion int `json:"current_version"`
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if err := json.Unmarshal(mustRead(t, filepath.Join(current, ".shardfs", "stats.json")), &stats); err != nil {
			t.Fatal(err)
		}
		if stats.CurrentVersion == 3 || time.Now().After(deadline) {
			break
		}
	}
	if stats.DatasetVersion != 1 || stats.CurrentVersion != 3 {
		t.Fatalf("stats.json of the mount started at v1, after two appends: serves %d, current %d; want 1 and 3", stats.DatasetVersion, stats.CurrentVersion)
	}
	for v, srcs := range map[int][]string{1: {src1}, 2: {src1, src2}, 0: {src1, src2, src3}} {
		mnt := mountShardfs(t, stores, "--batch-size=8", fmt.Sprint("--version=", v), "lives")
		checkSamplesView(t, mnt, srcs...)
		if d := infoOf(mnt); d["current_version"] != 3.0 || (v != 0 && d["version"] != float64(v)) {
			t.Fatalf("a mount of version %d says %v", v, d)
		}
	}
	if r := run(t, time.Minute, nil, "verify", stores, "--version=1", "lives"); r.code != 0 {
		t.Fatalf("verify version 1: %v", r)
	}
	if r := run(t, time.Minute, nil, "mount", stores, "--version=7", "lives", t.TempDir()); r.code == 0 || !strings.Contains(r.stderr, "lives has versions 1-3") {
		t.Fatalf("a version that does not exist: %v", r)
	}

	if r := run(t, time.Minute, nil, "rollback", stores, "lives", "--to=1"); r.code != 0 || !strings.Contains(r.stdout, "committed version 4 of lives: the content of version 1") {
		t.Fatalf("rollback: %v", r)
	}
	checkSamplesView(t, mountShardfs(t, stores, "--batch-size=8", "lives"), src1)
	if r := run(t, time.Minute, nil, "rollback", stores, "lives", "--to=3"); r.code != 0 {
		t.Fatalf("rollback of the rollback: %v", r)
	}
	checkSamplesView(t, mountShardfs(t, stores, "--batch-size=8", "lives"), src1, src2, src3)
	r = run(t, time.Minute, nil, "versions", stores, "lives")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 6 || !strings.Contains(lines[5], "current") || !strings.Contains(lines[5], "rollback to 3") ||
		!strings.Contains(lines[1], "150") || !strings.Contains(lines[3], "300") {
		t.Fatalf("versions: %v", r)
	}
	t.Logf("versions:\n%s", r.stdout)
	if r := run(t, 2*time.Minute, nil, "verify", stores, "lives"); r.code != 0 {
		t.Fatalf("verify: %v", r)
	}
}

// TestKillDuringAppend kills an append with SIGKILL at random moments, on
// file:// stores and on MinIO: each time the previous version is current
// and whole, or the new one is, and verify passes; the same command with
// --skip-existing then finishes the append.
func TestKillDuringAppend(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		dir := t.TempDir()
		var urls []string
		for i := range 3 {
			urls = append(urls, "file://"+filepath.Join(dir, fmt.Sprint("s", i)))
		}
		killDuringAppend(t, urls)
	})
	t.Run("minio", func(t *testing.T) { killDuringAppend(t, sharedCluster(t, 3).urls) })
}

func killDuringAppend(t *testing.T, urls []string) {
	stores := "--stores=" + strings.Join(urls, ",")
	src1 := taggedSource(t, 100, 3, "", 1)
	src2 := taggedSource(t, 600, 3, "b", 2)
	ingest := func(name string) {
		t.Helper()
		if r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--shard-size=256KiB", src1, name); r.code != 0 {
			t.Fatalf("ingest: %v", r)
		}
	}
	ingest("timing")
	full := run(t, 2*time.Minute, nil, "ingest", stores, "--append", src2, "timing")
	if full.code != 0 {
		t.Fatalf("uninterrupted append: %v", full)
	}
	rng := rand.New(rand.NewPCG(28, 1))
	// 5 kill moments in CI, 10 with SHARDFS_SOAK=long.
	n := soakCount(10, 5, 4)
	kept, appended, interrupted := 0, 0, 0
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("killed%02d", i)
		ingest(name)
		after := time.Duration(rng.Int64N(int64(full.elapsed)))
		cmd := execShardfs("ingest", stores, "--append", src2, name)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(after)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		r := run(t, 2*time.Minute, nil, "versions", stores, name)
		switch {
		case r.code == 0 && currentVersion(r.stdout) == "1 100":
			kept++
		case r.code == 0 && currentVersion(r.stdout) == "2 700":
			appended++
		default:
			t.Fatalf("killed after %v: neither version 1 of 100 samples nor version 2 of 700 is current: %v", after, r)
		}
		// Issue 40: a kill leaves the previous version's copies untouched
		// until the new one's commit point, and the new one whole after
		// it, so verify finds nothing to mend but, perhaps, pending copies
		// (a note) of the version it committed, and manifest copies and
		// store identities that the kill kept from being written (a store
		// still holding the previous version's: exit 1, all recoverable;
		// the rerun below writes them). No fragment is ever damaged.
		// (Before, such a kill could leave a state no tool opened.)
		r = run(t, 2*time.Minute, nil, "verify", stores, name)
		metadataOnly := r.code == 1 && regexp.MustCompile(`DAMAGED: 0 fragments, \d+ manifest copies, 0 index copies, \d+ identities, 0 foreign stores; all recoverable`).MatchString(r.stdout)
		if r.code != 0 && !metadataOnly {
			t.Fatalf("killed after %v: verify: %v", after, r)
		}
		if strings.Contains(r.stdout, "under the pending keys") || metadataOnly {
			interrupted++
		}
		if r := run(t, 2*time.Minute, nil, "ingest", stores, "--append", "--skip-existing", src2, name); r.code != 0 {
			t.Fatalf("rerun after the kill: %v", r)
		}
		if r := run(t, 2*time.Minute, nil, "versions", stores, name); currentVersion(r.stdout) != "2 700" {
			t.Fatalf("after the rerun: %v", r)
		}
		if r := run(t, 2*time.Minute, nil, "verify", stores, name); r.code != 0 {
			t.Fatalf("verify after the rerun: %v", r)
		}
		if r := run(t, 2*time.Minute, nil, "verify", stores, "--version=1", name); r.code != 0 {
			t.Fatalf("verify version 1 after the rerun: %v", r)
		}
	}
	t.Logf("%d kills over a %v append: %d left version 1 current, %d had committed version 2 (%d of them in the commit, with metadata copies for repair), 0 torn", n, full.elapsed.Round(time.Millisecond), kept, appended, interrupted)
}

// currentVersion is the number and samples of the current version in the
// output of shardfs versions, as "2 700".
func currentVersion(out string) string {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 6 && strings.Contains(line, " current ") {
			return f[0] + " " + f[3]
		}
	}
	return ""
}

// gc --keep-last 1 while a real mount serves v1 (on MinIO): v1 still reads
// byte for byte through the mount after gc, v2 is gone; once the mount
// ends, a second gc frees v1's objects and v3 verifies.
func TestGCHonoursARunningMount(t *testing.T) {
	c := sharedCluster(t, 3)
	stores := "--stores=" + strings.Join(c.urls, ",")
	src1 := taggedSource(t, 120, 3, "", 1)
	src2 := taggedSource(t, 60, 3, "b", 2)
	src3 := taggedSource(t, 80, 2, "c", 3)
	for _, args := range [][]string{
		{"--data=2", "--parity=1", "--shard-size=256KiB", src1},
		{"--append", src2},
		{"--data=2", "--parity=1", "--shard-size=256KiB", "--force", src3},
	} {
		if r := run(t, 2*time.Minute, nil, append(append([]string{"ingest", stores}, args...), "kept")...); r.code != 0 {
			t.Fatalf("ingest %v: %v", args, r)
		}
	}
	clients := c.clients(t)
	objects := func() int { return len(storeSums(t, clients, "kept")) }
	mp := mountShardfsEnv(t, nil, stores, "--batch-size=8", "--version=1", "kept")
	n0 := objects()
	dry := run(t, time.Minute, nil, "gc", stores, "kept", "--keep-last=1")
	if dry.code != 0 || !strings.Contains(dry.stdout, "keep version 1: leased by a mount") || !strings.Contains(dry.stdout, "would remove versions [2]") || objects() != n0 {
		t.Fatalf("dry run: %v", dry)
	}
	r := run(t, time.Minute, nil, "gc", stores, "kept", "--keep-last=1", "--yes")
	if r.code != 0 || !strings.Contains(r.stdout, "removed versions [2]") {
		t.Fatalf("gc: %v", r)
	}
	t.Logf("gc with v1 mounted:\n%s", r.stdout)
	n1 := objects()
	if n1 >= n0 {
		t.Fatalf("gc removed nothing: %d objects before, %d after", n0, n1)
	}
	checkSamplesView(t, mp.dir, src1) // read after the gc: v1's objects are there
	if r := run(t, time.Minute, nil, "verify", stores, "--version=2", "kept"); r.code != 3 || !strings.Contains(r.stderr, "removed by gc") {
		t.Fatalf("verify of the removed version 2: %v", r)
	}

	mp.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-mp.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the mount did not end in 30 s after SIGTERM")
	}
	r = run(t, time.Minute, nil, "gc", stores, "kept", "--keep-last=1", "--yes")
	if r.code != 0 || !strings.Contains(r.stdout, "removed versions [1]") {
		t.Fatalf("gc after the mount ended: %v", r)
	}
	if n2 := objects(); n2 >= n1 {
		t.Fatalf("the second gc removed nothing: %d objects before, %d after", n1, n2)
	}
	if r := run(t, 2*time.Minute, nil, "verify", stores, "kept"); r.code != 0 {
		t.Fatalf("verify v3: %v", r)
	}
	checkSamplesView(t, mountShardfs(t, stores, "--batch-size=8", "kept"), src3)
}

// TestKillDuringGC kills gc --yes with SIGKILL at random moments: the
// current version verifies every time, and gc run again finishes.
func TestKillDuringGC(t *testing.T) {
	dir := t.TempDir()
	var urls []string
	for i := range 3 {
		urls = append(urls, "file://"+filepath.Join(dir, fmt.Sprint("s", i)))
	}
	stores := "--stores=" + strings.Join(urls, ",")
	src1 := taggedSource(t, 300, 3, "", 1)
	src2 := taggedSource(t, 200, 2, "c", 3)
	makeVersions := func(name string) {
		t.Helper()
		for _, args := range [][]string{
			{"--data=2", "--parity=1", "--shard-size=64KiB", src1},
			{"--data=2", "--parity=1", "--shard-size=64KiB", "--force", src2},
		} {
			if r := run(t, 2*time.Minute, nil, append(append([]string{"ingest", stores}, args...), name)...); r.code != 0 {
				t.Fatalf("ingest %v: %v", args, r)
			}
		}
	}
	makeVersions("timing")
	full := run(t, time.Minute, nil, "gc", stores, "timing", "--keep-last=1", "--yes")
	if full.code != 0 || !strings.Contains(full.stdout, "removed versions [1]") {
		t.Fatalf("uninterrupted gc: %v", full)
	}
	rng := rand.New(rand.NewPCG(28, 3))
	// 5 kill moments in CI, 10 with SHARDFS_SOAK=long.
	n := soakCount(10, 5, 4)
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("gc%02d", i)
		makeVersions(name)
		after := time.Duration(rng.Int64N(int64(full.elapsed)))
		cmd := execShardfs("gc", stores, name, "--keep-last=1", "--yes")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(after)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		if r := run(t, 2*time.Minute, nil, "verify", stores, name); r.code != 0 {
			t.Fatalf("killed after %v: verify: %v", after, r)
		}
		// The killed gc's lock is taken over at once on this host.
		if r := run(t, time.Minute, nil, "gc", stores, name, "--keep-last=1", "--yes"); r.code != 0 {
			t.Fatalf("gc after the kill: %v", r)
		}
		if r := run(t, time.Minute, nil, "versions", stores, name); !strings.Contains(r.stdout, "removed  ingest") {
			t.Fatalf("version 1 after the second gc: %v", r)
		}
		if r := run(t, 2*time.Minute, nil, "verify", stores, name); r.code != 0 {
			t.Fatalf("verify after the second gc: %v", r)
		}
	}
	t.Logf("%d kills over a %v gc: the current version verified every time", n, full.elapsed.Round(time.Millisecond))
}

// Migrate RS(4,2) on 6 MinIO stores to RS(3,2) on 5 others while a mount
// reads the old set: the mount reads every sample right throughout; after
// the migration a mount of the new set reads every sample right, and with
// 2 of the new stores killed a fresh mount still does. A migration killed
// with SIGKILL commits nothing; the rerun completes and verifies. The peak
// RSS of the migration is logged against the dataset's size.
func TestMigrateWhileMounted(t *testing.T) {
	old := startCluster(t, 6)
	next := startCluster(t, 5)
	from := "--stores=" + strings.Join(old.urls, ",")
	to := "--to-stores=" + strings.Join(next.urls, ",")
	spec1 := synth.Imbalanced(400, 4, 0.6, 20_000, 200_000, 1)
	spec2 := synth.Imbalanced(200, 3, 0.6, 20_000, 200_000, 2)
	spec2.Tag = "b"
	src1, src2 := writeSource(t, spec1), writeSource(t, spec2)
	if r := run(t, 2*time.Minute, nil, "ingest", from, "--data=4", "--parity=2", "--shard-size=1MiB", src1, "moving"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	if r := run(t, 2*time.Minute, nil, "ingest", from, "--append", src2, "moving"); r.code != 0 {
		t.Fatalf("append: %v", r)
	}
	reader := mountShardfs(t, from, "--batch-size=16", "--cache-size=16MiB", "moving")

	// A reader of the old set, all through the migration.
	stop := make(chan struct{})
	readErr := make(chan error, 1)
	go func() {
		passes := 0
		for {
			select {
			case <-stop:
				if passes == 0 {
					readErr <- fmt.Errorf("the reader of the old stores finished no pass")
					return
				}
				readErr <- nil
				return
			default:
			}
			if err := sameTree(reader, src1, src2); err != nil {
				readErr <- err
				return
			}
			passes++
		}
	}()

	// Killed once, with some of its fragments written: nothing committed
	// on the new stores.
	cmd := execShardfs("migrate", from, "moving", to, "--data=3", "--parity=2")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	first := next.store(t, 0)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		keys, _ := first.List(context.Background(), "moving/data/")
		if len(keys) >= 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the migration wrote no 10 fragments to a new store in a minute")
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	newStores := "--stores=" + strings.Join(next.urls, ",")
	if r := run(t, time.Minute, nil, "versions", newStores, "moving"); r.code == 0 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("a migration killed while it copied left a dataset on the new stores: %v", r)
	}
	start := time.Now()
	mig := execShardfs("migrate", from, "moving", to, "--data=3", "--parity=2")
	peakRSS := measurePeakRSS(t, mig)
	var out bytes.Buffer
	mig.Stdout, mig.Stderr = &out, &out
	if err := mig.Run(); err != nil {
		t.Fatalf("migrate after the kill: %v\n%s", err, out.String())
	}
	rss := peakRSS()
	close(stop)
	if err := <-readErr; err != nil {
		t.Fatalf("reading the old stores during the migration: %v", err)
	}
	var size int64
	for _, src := range []string{src1, src2} {
		filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
			if info, err := d.Info(); err == nil && !d.IsDir() {
				size += info.Size()
			}
			return nil
		})
	}
	t.Logf("migrate after a SIGKILL: %s in %v; peak RSS %d MiB for a dataset of %d MiB", strings.TrimSpace(out.String()), time.Since(start).Round(time.Millisecond), rss>>20, size>>20)
	if !strings.Contains(out.String(), "RS(4,2) on 6 stores to RS(3,2) on 5 stores") || strings.Contains(out.String(), "(0 found intact") {
		t.Fatalf("migrate: %s", out.String())
	}
	if r := run(t, 2*time.Minute, nil, "verify", newStores, "moving"); r.code != 0 {
		t.Fatalf("verify the new stores: %v", r)
	}
	checkSamplesView(t, mountShardfs(t, newStores, "--batch-size=16", "moving"), src1, src2)
	next.servers[1].Kill()
	next.servers[3].Kill()
	checkSamplesView(t, mountShardfs(t, newStores, "--batch-size=16", "--read-timeout=30s", "moving"), src1, src2)
	// The old set still mounts: that is the rollback.
	checkSamplesView(t, mountShardfs(t, from, "--batch-size=16", "moving"), src1, src2)
}

// sameTree is checkSamplesView as an error, for a goroutine.
func sameTree(mnt string, srcs ...string) error {
	want := map[string]string{}
	for _, src := range srcs {
		filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				rel, _ := filepath.Rel(src, p)
				want[rel] = p
			}
			return nil
		})
	}
	seen := 0
	root := filepath.Join(mnt, "samples")
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		got, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(want[rel])
		if err != nil || !bytes.Equal(got, b) {
			return fmt.Errorf("%s: wrong bytes or no such sample", rel)
		}
		seen++
		return nil
	})
	if err == nil && seen != len(want) {
		err = fmt.Errorf("%d samples served, want %d", seen, len(want))
	}
	return err
}
