package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/repository"
)

// Issue 43 item 2: new data joins the next epoch (mount --follow), on six
// MinIO stores and real mounts, W = 2.
//   - Epoch 0 is opened, then an append is committed: epoch 0 (rank 1
//     opened after the append too) serves version 1 alone; epoch 1, first
//     opened after it, serves version 2 with the new samples, every byte
//     checked against the sources by Python's tarfile.
//   - A fresh mount of another world size resuming inside epoch 1
//     (--resume-at) deals exactly epoch 1's global batches; a mount of
//     version 2 alone (its base) serves epoch 0 from version 1 as recorded.
//   - stats.json names each epoch's version; gc keeps version 1 because the
//     run recorded it, and says so.
//   - The first node killed (SIGKILL) while it records an epoch: every
//     mount after it reads one version for that epoch.
func TestFollowAppends(t *testing.T) {
	requireTool(t, "python3")
	c := sharedCluster(t, 6)
	specA := synth.Spec{Counts: []int{120, 60, 20}, MinSize: 500, MaxSize: 3000, Seed: 81}
	specB := synth.Spec{Counts: []int{40, 30, 30}, MinSize: 500, MaxSize: 3000, Seed: 82, Tag: "new-"}
	srcA, srcB, all := writeSource(t, specA), writeSource(t, specB), t.TempDir()
	for _, s := range []synth.Spec{specA, specB} {
		if _, err := synth.Write(all, s); err != nil {
			t.Fatal(err)
		}
	}
	storesFlag := "--stores=" + strings.Join(c.urls, ",")
	if r := run(t, 2*time.Minute, nil, "ingest", storesFlag, "--data=4", "--parity=2", srcA, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	order := []string{storesFlag, "--world-size=2", "--batch-size=10", "--seed=3", "--follow", "--run=f1", "--report-wait=1m"}
	a := mountShardfsEnv(t, nil, append(order, "ds")...)
	epoch0rank0 := readIndexKeys(t, a.dir, 0, 0)
	if r := run(t, 2*time.Minute, nil, "ingest", storesFlag, "--append", srcB, "ds"); r.code != 0 || !strings.Contains(r.stdout, "committed version 2") {
		t.Fatalf("append: %v", r)
	}
	epoch0rank1 := readIndexKeys(t, a.dir, 0, 1)
	epoch1 := [][]string{readIndexKeys(t, a.dir, 1, 0), readIndexKeys(t, a.dir, 1, 1)}
	isNew := func(k string) bool { return strings.Contains(filepath.Base(k), "new-") }
	for _, k := range append(epoch0rank0, epoch0rank1...) {
		if isNew(k) {
			t.Fatalf("epoch 0 serves %s, a sample appended after it began", k)
		}
	}
	newIn1 := 0
	for _, k := range append(slices.Clone(epoch1[0]), epoch1[1]...) {
		if isNew(k) {
			newIn1++
		}
	}
	if len(epoch0rank0)+len(epoch0rank1) != 200 || len(epoch1[0])+len(epoch1[1]) != 300 || newIn1 != 100 {
		t.Fatalf("epoch 0 serves %d samples, epoch 1 %d with %d appended; want 200, and 300 with the 100 appended",
			len(epoch0rank0)+len(epoch0rank1), len(epoch1[0])+len(epoch1[1]), newIn1)
	}
	for e := range 2 {
		checkEpochTars(t, a.dir, all, e)
	}
	var stats struct {
		Follow struct {
			Run    string
			Epochs []struct{ Epoch, Version int }
		}
	}
	if err := json.Unmarshal(mustRead(t, filepath.Join(a.dir, ".shardfs", "stats.json")), &stats); err != nil {
		t.Fatal(err)
	}
	if f := stats.Follow; f.Run != "f1" || len(f.Epochs) != 2 || f.Epochs[0].Version != 1 || f.Epochs[1].Version != 2 {
		t.Fatalf("stats.json follow: %+v, want epoch 0 at version 1 and epoch 1 at version 2", f)
	}

	// A fresh mount of another world size, resuming in epoch 1: its base is
	// version 2; epoch 1 is dealt as the run dealt it.
	const skip = 4
	b := mountShardfsEnv(t, nil, storesFlag, "--world-size=1", "--batch-size=10", "--seed=3", "--follow", "--run=f1", fmt.Sprintf("--resume-at=1:%d", skip), "ds")
	resumed := batchKeys(t, filepath.Join(b.dir, "epochs", "0001", "rank-000", "index.csv"))
	ranks := [][][]string{batchKeys(t, filepath.Join(a.dir, "epochs", "0001", "rank-000", "index.csv")), batchKeys(t, filepath.Join(a.dir, "epochs", "0001", "rank-001", "index.csv"))}
	if len(resumed) != 2*len(ranks[0])-skip {
		t.Fatalf("the resumed mount has %d batches of epoch 1, want %d", len(resumed), 2*len(ranks[0])-skip)
	}
	for i, keys := range resumed {
		g := skip + i
		if want := ranks[g%2][g/2]; !slices.Equal(keys, want) {
			t.Fatalf("resumed batch %d (global %d): %v, the run's %v", i, g, keys, want)
		}
	}
	// Its epoch 0 is version 1's, as recorded, though it opened version 2.
	b0 := readIndexKeys(t, b.dir, 0, 0)
	if len(b0) != 200 || slices.ContainsFunc(b0, isNew) {
		t.Fatalf("a mount of version 2 serves epoch 0 with %d samples (appended ones: %v); the run recorded version 1's 200", len(b0), slices.ContainsFunc(b0, isNew))
	}

	// gc keeps version 1: the run may resume in epoch 0.
	if r := run(t, time.Minute, nil, "gc", storesFlag, "--keep-last=1", "ds"); r.code != 0 || !strings.Contains(r.stdout, "run f1 epoch 0 (--follow)") {
		t.Fatalf("gc: %v", r)
	}

	// The first node killed while it records epoch 0 of run f2: every mount
	// after it serves that epoch from one version.
	cmd := execShardfs(append([]string{"mount", storesFlag, "--world-size=2", "--batch-size=10", "--seed=3", "--follow", "--run=f2"}, "ds", filepath.Join(t.TempDir(), "killed"))...)
	os.MkdirAll(cmd.Args[len(cmd.Args)-1], 0o755)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killedDir := cmd.Args[len(cmd.Args)-1]
	deadline := time.Now().Add(time.Minute)
	for !isMounted(killedDir) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	go os.ReadDir(filepath.Join(killedDir, "epochs", "0000", "rank-000")) // records epoch 0
	time.Sleep(30 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGKILL)
	abortFUSE(killedDir)
	cmd.Wait()
	exec.Command("fusermount3", "-uz", killedDir).Run()
	var versions []int
	for range 2 {
		m := mountShardfsEnv(t, nil, storesFlag, "--world-size=2", "--batch-size=10", "--seed=3", "--follow", "--run=f2", "ds")
		keys := readIndexKeys(t, m.dir, 0, 0)
		rec, err := repository.ReadEpochRecord(context.Background(), c.clients(t), "ds", "f2", 0)
		if err != nil || rec == nil {
			t.Fatalf("epoch 0's record after a mount read it: %+v %v", rec, err)
		}
		if want := map[int]int{1: 100, 2: 150}[rec.Version]; len(keys) != want {
			t.Fatalf("run f2 epoch 0 recorded at version %d, and a mount serves %d samples of rank 0", rec.Version, len(keys))
		}
		versions = append(versions, rec.Version)
	}
	if versions[0] != versions[1] {
		t.Fatalf("two mounts after the kill read epoch 0 at versions %v", versions)
	}

	// A recorder killed after its first PUT, as written by hand: run f3's
	// epoch 0 at version 1 on store 4 alone, while version 2 is current.
	// The record does not count yet; the next mount adopts it (the version
	// the epoch was first recorded with), completes it, and serves version
	// 1; so does the one after.
	partial, _ := json.Marshal(repository.EpochRecord{Run: "f3", Epoch: 0, Version: 1})
	if err := c.store(t, 4).Create(context.Background(), repository.EpochKey("ds", "f3", 0), partial); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		m := mountShardfsEnv(t, nil, storesFlag, "--world-size=2", "--batch-size=10", "--seed=3", "--follow", "--run=f3", "ds")
		if keys := readIndexKeys(t, m.dir, 0, 0); len(keys) != 100 || slices.ContainsFunc(keys, isNew) {
			t.Fatalf("run f3 epoch 0, first recorded at version 1 by a recorder killed part way: a mount serves %d samples of rank 0 (appended ones: %v), want version 1's 100", len(keys), slices.ContainsFunc(keys, isNew))
		}
	}
	if rec, err := repository.ReadEpochRecord(context.Background(), c.clients(t), "ds", "f3", 0); err != nil || rec == nil || rec.Version != 1 {
		t.Fatalf("run f3 epoch 0's record: %+v %v, want version 1, counted", rec, err)
	}
}

// readIndexKeys is the keys of rank's index.csv in epoch e of mnt.
func readIndexKeys(t *testing.T, mnt string, e, rank int) []string {
	t.Helper()
	var keys []string
	for _, b := range batchKeys(t, filepath.Join(mnt, "epochs", fmt.Sprintf("%04d", e), fmt.Sprintf("rank-%03d", rank), "index.csv")) {
		keys = append(keys, b...)
	}
	return keys
}

// --follow with a time window: the window slides to the buckets an append
// brings. Version 1 holds samples from January and March 2025; with
// --time-window 40d, epoch 0 reads March alone. An append brings May:
// epoch 1 reads May's samples and not January's.
func TestFollowTimeWindow(t *testing.T) {
	c := sharedCluster(t, 6)
	storesFlag := "--stores=" + strings.Join(c.urls, ",")
	listing := func(dir, prefix string, months []int, n int) string {
		var lines []string
		for i := range n {
			key := fmt.Sprintf("%s/%04d.bin", prefix, i)
			os.MkdirAll(filepath.Join(dir, prefix), 0o755)
			if err := os.WriteFile(filepath.Join(dir, key), []byte(fmt.Sprintf("%s sample %d %s", prefix, i, strings.Repeat("x", 100+i))), 0o644); err != nil {
				t.Fatal(err)
			}
			month := months[i%len(months)]
			ts := time.Date(2025, time.Month(month), 10+i%5, 12, 0, 0, 0, time.UTC)
			lines = append(lines, fmt.Sprintf(`{"path": %q, "label": "c%d", "time": %q}`, key, i%2, ts.Format(time.RFC3339)))
		}
		p := filepath.Join(dir, prefix+".jsonl")
		if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dir := t.TempDir()
	a := listing(dir, "a", []int{1, 3}, 120)
	b := listing(dir, "b", []int{5}, 40)
	if r := run(t, 2*time.Minute, nil, "ingest", storesFlag, "--data=4", "--parity=2", "--time-bucket=time=30d", a, "tw"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	m := mountShardfsEnv(t, nil, storesFlag, "--batch-size=4", "--follow", "--run=w1", "--time-window=40d", "tw")
	month := func(k string) int {
		var n int
		fmt.Sscanf(filepath.Base(k), "%04d.bin", &n)
		if strings.HasPrefix(k, "b/") {
			return 5
		}
		return []int{1, 3}[n%2]
	}
	months := func(keys []string) map[int]int {
		out := map[int]int{}
		for _, k := range keys {
			out[month(k)]++
		}
		return out
	}
	e0 := months(readIndexKeys(t, m.dir, 0, 0))
	if e0[1] != 0 || e0[5] != 0 || e0[3] == 0 {
		t.Fatalf("epoch 0 with a 40-day window reads months %v; want March alone", e0)
	}
	if r := run(t, 2*time.Minute, nil, "ingest", storesFlag, "--append", b, "tw"); r.code != 0 {
		t.Fatalf("append: %v", r)
	}
	e1 := months(readIndexKeys(t, m.dir, 1, 0))
	if e1[1] != 0 || e1[5] == 0 {
		t.Fatalf("epoch 1, after an append of May, reads months %v; want May, and no January", e1)
	}
	t.Logf("epoch 0 read months %v, epoch 1 %v", e0, e1)
}

// Issue 55 item 2: a rollback under a --follow mount, then a new append.
// The mount opened version 1 and served version 2 (an append, B) for
// epoch 1, so its cache holds B's samples under their numbers. A rollback
// to version 1 (version 3) and an append of C (version 4, as many samples
// as B: the same numbers, other bytes) made version 4 an append of the
// version the mount opened, and it was served: 2 of 20 samples with the
// rolled-back samples' bytes, 9 with other wrong bytes, 9 EIO. A version
// must be on one chain of appends with every version the mount has served:
// version 3 (version 1's content) is, and serves right bytes; version 4
// is not, and its epoch answers an error that says to remount. A fresh
// mount serves that epoch from version 4, byte for byte.
func TestFollowAfterARollback(t *testing.T) {
	requireTool(t, "python3")
	c := sharedCluster(t, 6)
	specA := synth.Spec{Counts: []int{60, 30, 10}, MinSize: 500, MaxSize: 3000, Seed: 91}
	specB := synth.Spec{Counts: []int{10, 6, 4}, MinSize: 500, MaxSize: 3000, Seed: 92, Tag: "new-"}
	specC := synth.Spec{Counts: []int{10, 6, 4}, MinSize: 500, MaxSize: 3000, Seed: 93, Tag: "newer-"}
	srcA, srcB, srcC := writeSource(t, specA), writeSource(t, specB), writeSource(t, specC)
	withB, withC := t.TempDir(), t.TempDir()
	for dir, specs := range map[string][]synth.Spec{withB: {specA, specB}, withC: {specA, specC}} {
		for _, s := range specs {
			if _, err := synth.Write(dir, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	storesFlag := "--stores=" + strings.Join(c.urls, ",")
	if r := run(t, 2*time.Minute, nil, "ingest", storesFlag, "--data=4", "--parity=2", srcA, "rb"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	order := []string{storesFlag, "--world-size=1", "--batch-size=10", "--seed=5", "--follow", "--run=r1", "--report-wait=1m"}
	a := mountShardfsEnv(t, nil, append(order, "rb")...)
	checkEpochTars(t, a.dir, srcA, 0)
	if r := run(t, 2*time.Minute, nil, "ingest", storesFlag, "--append", srcB, "rb"); r.code != 0 || !strings.Contains(r.stdout, "committed version 2") {
		t.Fatalf("append B: %v", r)
	}
	checkEpochTars(t, a.dir, withB, 1) // B's samples read, so cached
	if r := run(t, time.Minute, nil, "rollback", storesFlag, "rb", "--to=1"); r.code != 0 || !strings.Contains(r.stdout, "committed version 3") {
		t.Fatalf("rollback: %v", r)
	}
	// Version 3 is version 1's content, on the mount's chain: served.
	if keys := readIndexKeys(t, a.dir, 2, 0); len(keys) != 100 {
		t.Fatalf("epoch 2 (version 3, version 1's content) serves %d samples, want 100", len(keys))
	}
	checkEpochTars(t, a.dir, srcA, 2)
	if r := run(t, 2*time.Minute, nil, "ingest", storesFlag, "--append", srcC, "rb"); r.code != 0 || !strings.Contains(r.stdout, "committed version 4") {
		t.Fatalf("append C: %v", r)
	}
	// Epoch 3 is recorded at version 4, which this mount cannot serve
	// right from its cache: every path into the epoch fails, none serves.
	epoch3 := filepath.Join(a.dir, "epochs", "0003", "rank-000")
	for _, name := range []string{"index.csv", "epoch.tar", "batch-000000.tar"} {
		if b, err := os.ReadFile(filepath.Join(epoch3, name)); err == nil {
			t.Fatalf("epoch 3 (version 4, off the mount's chain after a rollback) serves %s: %d bytes", name, len(b))
		}
	}
	if log := mustRead(t, a.log); !strings.Contains(string(log), "version 4 is not an append of version 2, which this mount has served") || !strings.Contains(string(log), "remount") {
		t.Fatalf("the mount's log does not say why epoch 3 is refused, or to remount:\n%s", log)
	}
	// A fresh mount of the run serves epoch 3 from version 4, right.
	b := mountShardfsEnv(t, nil, append(order, "rb")...)
	keys := readIndexKeys(t, b.dir, 3, 0)
	newer := 0
	for _, k := range keys {
		if strings.Contains(filepath.Base(k), "newer-") {
			newer++
		}
		if strings.Contains(filepath.Base(k), "new-") {
			t.Fatalf("epoch 3 at version 4 serves %s, a rolled-back sample", k)
		}
	}
	if len(keys) != 120 || newer != 20 {
		t.Fatalf("epoch 3 at version 4 serves %d samples, %d of them C's; want 120 and 20", len(keys), newer)
	}
	checkEpochTars(t, b.dir, withC, 3)
}

// Issue 55 item 2, the random form: a --follow mount through random
// appends, rollbacks to a random earlier version, and kills (SIGKILL) of
// the mount, which a fresh mount of the run replaces. After each step the
// next epoch is read: it serves its recorded version byte for byte, every
// member checked against that version's sources, or, when that version is
// off the chain of what the mount has served, every read of it fails, and
// a fresh mount then serves it byte for byte. Never another version's
// bytes. A step may also take one or two of the six stores down (RS(4,2)
// survives two) while the epoch is recorded and read. The seed is logged;
// SHARDFS_SEED replays a run.
func TestFollowRandomAppendsRollbacksAndKills(t *testing.T) {
	requireTool(t, "python3")
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SHARDFS_SEED"); s != "" {
		fmt.Sscan(s, &seed)
	}
	t.Logf("seed %d (SHARDFS_SEED=%d replays this run)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 55))
	c := startCluster(t, 6)
	storesFlag := "--stores=" + strings.Join(c.urls, ",")
	// content[v] is version v's specs; srcOf(v) a directory of all their files.
	// With stores down, no version is committed: the epoch is recorded at
	// the latest one.
	content := map[int][]synth.Spec{}
	srcDirs := map[int]string{}
	srcOf := func(v int) string {
		if d, ok := srcDirs[v]; ok {
			return d
		}
		d := t.TempDir()
		for _, s := range content[v] {
			if _, err := synth.Write(d, s); err != nil {
				t.Fatal(err)
			}
		}
		srcDirs[v] = d
		return d
	}
	spec := func(i int) synth.Spec {
		n := 10 + rng.IntN(20) // an append's sample count: often the same numbers as a rolled-back one's
		return synth.Spec{Counts: []int{n, n / 2, 5}, MinSize: 300, MaxSize: 2500, Seed: uint64(100 + i), Tag: fmt.Sprintf("a%d-", i)}
	}
	first := synth.Spec{Counts: []int{50, 25, 10}, MinSize: 300, MaxSize: 2500, Seed: 99}
	if r := run(t, 2*time.Minute, nil, "ingest", storesFlag, "--data=4", "--parity=2", writeSource(t, first), "fr"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	content[1] = []synth.Spec{first}
	latest := 1
	order := []string{storesFlag, "--world-size=1", "--batch-size=10", "--seed=9", "--follow", "--run=rr", "--report-wait=1m", "fr"}
	m := mountShardfsEnv(t, nil, order...)
	served, refused := 0, 0
	for epoch := 0; epoch < 8; epoch++ {
		step := "read"
		var down []int
		switch k := rng.IntN(5); {
		case epoch == 0:
		case k == 0 || k == 1:
			step = "append"
			s := spec(epoch)
			if r := run(t, 2*time.Minute, nil, "ingest", storesFlag, "--append", writeSource(t, s), "fr"); r.code != 0 {
				t.Fatalf("epoch %d: append: %v", epoch, r)
			}
			latest++
			content[latest] = append(slices.Clone(content[latest-1]), s)
		case k == 2 && latest > 1:
			to := 1 + rng.IntN(latest-1)
			step = fmt.Sprintf("rollback to %d", to)
			if r := run(t, time.Minute, nil, "rollback", storesFlag, "fr", fmt.Sprintf("--to=%d", to)); r.code != 0 {
				t.Fatalf("epoch %d: rollback: %v", epoch, r)
			}
			latest++
			content[latest] = content[to]
		case k == 4:
			// Up to m = 2 stores fail while the epoch is recorded and read.
			down = rng.Perm(6)[:1+rng.IntN(2)]
			step = fmt.Sprintf("stores %v down", down)
			for _, d := range down {
				c.servers[d].Kill()
			}
		default:
			step = "kill the mount"
			m.kill()
			m = mountShardfsEnv(t, nil, order...)
		}
		_, err := os.ReadFile(filepath.Join(m.dir, "epochs", fmt.Sprintf("%04d", epoch), "rank-000", "index.csv"))
		if down != nil {
			checkEpochTars(t, m.dir, srcOf(latest), epoch) // read with the stores down, when served
		}
		for _, d := range down {
			c.servers[d].Restart()
		}
		rec, rerr := repository.ReadEpochRecord(context.Background(), c.clients(t), "fr", "rr", epoch)
		if rerr != nil || rec == nil {
			t.Fatalf("epoch %d (after %s): its record: %+v %v", epoch, step, rec, rerr)
		}
		if err == nil {
			checkEpochTars(t, m.dir, srcOf(rec.Version), epoch)
			served++
			t.Logf("epoch %d after %s: version %d served by the mount", epoch, step, rec.Version)
			continue
		}
		// Refused: every path into the epoch fails, and a fresh mount of
		// the run serves it right; it then follows on.
		for _, name := range []string{"epoch.tar", "batch-000000.tar"} {
			if b, err := os.ReadFile(filepath.Join(m.dir, "epochs", fmt.Sprintf("%04d", epoch), "rank-000", name)); err == nil {
				t.Fatalf("epoch %d: index.csv refused, %s served (%d bytes)", epoch, name, len(b))
			}
		}
		m.cmd.Process.Signal(syscall.SIGTERM)
		<-m.exited
		m = mountShardfsEnv(t, nil, order...)
		checkEpochTars(t, m.dir, srcOf(rec.Version), epoch)
		refused++
		t.Logf("epoch %d after %s: version %d refused by the mount (%v), served by a fresh one", epoch, step, rec.Version, err)
	}
	t.Logf("%d epochs served by the mount that followed, %d refused and served by a fresh mount", served, refused)
}
