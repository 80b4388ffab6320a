package integration

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/synth"
)

// requireTool returns the path of a tool, skipping the test when it is
// missing, or failing it under CI=true.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true: %s is missing: %v", name, err)
		}
		t.Skipf("%s is missing: %v", name, err)
	}
	return p
}

// requireTorch checks that Debian's python3-torch imports in /usr/bin/python3.
func requireTorch(t *testing.T) {
	t.Helper()
	if err := exec.Command("/usr/bin/python3", "-c", "import torch").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true: /usr/bin/python3 cannot import torch (apt-get install python3-torch): %v", err)
		}
		t.Skipf("no torch in /usr/bin/python3: %v", err)
	}
}

// mountShardfs runs `shardfs mount ARGS... MOUNTPOINT` in the background and
// waits for the tree. The mount is always taken down in t.Cleanup.
func mountShardfs(t *testing.T, args ...string) string {
	t.Helper()
	return mountShardfsEnv(t, nil, args...).dir
}

// mountProc is a running mount daemon.
type mountProc struct {
	dir, log string
	cmd      *exec.Cmd
	exited   <-chan struct{} // closed when the daemon has ended
}

// mountShardfsEnv is mountShardfs with extra environment, returning the process.
func mountShardfsEnv(t *testing.T, env []string, args ...string) *mountProc {
	t.Helper()
	return mountBinary(t, binary, env, args...)
}

// mountBinary is mountShardfsEnv with another build of the binary.
func mountBinary(t *testing.T, bin string, env []string, args ...string) *mountProc {
	t.Helper()
	requireTool(t, "fusermount3")
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(dir + ".log")
	if err != nil {
		t.Fatal(err)
	}
	cmd := execBinary(bin, append(append([]string{"mount"}, args...), dir)...)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// exited is closed when the daemon ends; waitErr is then its status.
	// A closed channel can be received from any number of times.
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			abortFUSE(dir)
			exec.Command("fusermount3", "-uz", dir).Run()
			<-exited
		}
		if isMounted(dir) {
			exec.Command("fusermount3", "-uz", dir).Run()
			t.Errorf("mount %s was still up after the daemon stopped", dir)
		}
		logf.Close()
		if t.Failed() {
			// The daemon's own account of a failed test: CI keeps no files.
			log, _ := os.ReadFile(dir + ".log")
			lines := strings.Split(strings.TrimSpace(string(log)), "\n")
			t.Logf("the last %d lines of the daemon's log (%s):\n%s", min(len(lines), 60), dir+".log", strings.Join(lines[max(0, len(lines)-60):], "\n"))
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(filepath.Join(dir, ".shardfs", "info.json")); err == nil {
			return &mountProc{dir: dir, log: dir + ".log", cmd: cmd, exited: exited}
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(dir + ".log")
			t.Fatalf("shardfs mount exited: %v\n%s", waitErr, log)
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatal("mount did not come up in 60s")
	return nil
}

// abortFUSE aborts the FUSE connection of the mount at dir, whose daemon
// is being killed, and leaves the mount in place (a dead mount: every
// request on it fails with ENOTCONN), through the fusectl file system,
// mounted here if it is not; without fusectl, umount(2) with MNT_FORCE,
// which aborts it too but takes the mount off. A daemon killed while it
// holds a file open on its own mount (go-fuse's poll hack opens one as
// the mount comes up) sends that file's FLUSH to itself as it exits, and
// waits for the answer in D state until the connection is aborted; every
// request on the mount waits with it, and a lazy unmount (fusermount3
// -uz) aborts nothing. Seen twice in fresh-clone runs: TestFollowAppends
// and TestStaleMountCleared, each killing a mount just after it came up,
// hung the suite.
func abortFUSE(dir string) {
	const ctl = "/sys/fs/fuse/connections"
	if entries, err := os.ReadDir(ctl); err == nil && len(entries) == 0 {
		exec.Command("mount", "-t", "fusectl", "none", ctl).Run()
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mi), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || f[4] != dir {
			continue
		}
		if _, minor, ok := strings.Cut(f[2], ":"); ok {
			if os.WriteFile(filepath.Join(ctl, minor, "abort"), []byte("1"), 0) == nil {
				return
			}
		}
	}
	syscall.Unmount(dir, syscall.MNT_FORCE)
}

// kill ends the daemon with SIGKILL, as a crash or the OOM killer does,
// and takes its dead mount off the mountpoint.
func (m *mountProc) kill() {
	m.cmd.Process.Signal(syscall.SIGKILL)
	abortFUSE(m.dir)
	<-m.exited
	exec.Command("fusermount3", "-uz", m.dir).Run()
}

func isMounted(dir string) bool {
	b, _ := os.ReadFile("/proc/mounts")
	return bytes.Contains(b, []byte(" "+dir+" "))
}

// ingestSynthetic writes an imbalanced dataset of n samples and ingests it.
func ingestSynthetic(t *testing.T, urls []string, n int, name string, k, m int) string {
	t.Helper()
	src := t.TempDir()
	if _, err := synth.Write(src, synth.Imbalanced(n, 6, 0.6, 2_000, 60_000, 5)); err != nil {
		t.Fatal(err)
	}
	r := run(t, 5*time.Minute, nil, "ingest", "--stores="+strings.Join(urls, ","), fmt.Sprintf("--data=%d", k), fmt.Sprintf("--parity=%d", m), "--shard-size=4MiB", src, name)
	if r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	return src
}

type tarReport struct {
	Ranks map[string]struct {
		Batches int      `json:"batches"`
		Keys    []string `json:"keys"`
	} `json:"ranks"`
	Mismatch         []string `json:"mismatch"`
	ClsWrong         []string `json:"cls_wrong"`
	EpochTarMismatch []string `json:"epoch_tar_mismatch"`
	IndexMismatch    []string `json:"index_mismatch"`
}

// checkEpochTars runs check_tars.py over epoch e of the mount at mnt against
// the source files under src, and fails the test on any byte, class,
// epoch.tar or index.csv mismatch.
func checkEpochTars(t *testing.T, mnt, src string, e int) {
	t.Helper()
	out, err := exec.Command("python3", "testdata/check_tars.py", mnt, src, fmt.Sprintf("%04d", e)).Output()
	if err != nil {
		t.Fatalf("check_tars epoch %d: %v", e, err)
	}
	var rep tarReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Mismatch)+len(rep.ClsWrong)+len(rep.EpochTarMismatch)+len(rep.IndexMismatch) > 0 {
		t.Fatalf("epoch %d: %s", e, out)
	}
}

// TestMountMinIO mounts a dataset on six MinIO processes with four ranks and
// checks every byte with Python's tarfile, fio, and a PyTorch DataLoader.
func TestMountMinIO(t *testing.T) {
	t.Parallel() // waits more than it computes, asserts bytes, states and hang bounds (main_test.go, parallelTests)
	c := sharedCluster(t, 6)
	const n, world, batch = 1536, 4, 32 // n = 12 steps x W x B: the ranks cover the dataset exactly
	src := ingestSynthetic(t, c.urls, n, "train", 4, 2)
	mp := mountShardfsEnv(t, nil, "--stores="+strings.Join(c.urls, ","), "--world-size=4", "--batch-size=32", "--epochs=2", "--seed=7", "--metrics-addr=127.0.0.1:0", "train")
	mnt := mp.dir

	t.Run("tarfile", func(t *testing.T) {
		out, err := exec.Command("python3", "testdata/check_tars.py", mnt, src, "0000").Output()
		if err != nil {
			t.Fatalf("check_tars.py: %v", err)
		}
		var rep tarReport
		if err := json.Unmarshal(out, &rep); err != nil {
			t.Fatalf("report: %v\n%s", err, out)
		}
		if len(rep.Mismatch)+len(rep.ClsWrong)+len(rep.EpochTarMismatch)+len(rep.IndexMismatch) > 0 {
			t.Fatalf("bytes %d wrong, cls %d wrong, epoch.tar %v, index %v", len(rep.Mismatch), len(rep.ClsWrong), rep.EpochTarMismatch, rep.IndexMismatch)
		}
		if len(rep.Ranks) != world {
			t.Fatalf("%d ranks, want %d", len(rep.Ranks), world)
		}
		seen := map[string]string{}
		for rank, r := range rep.Ranks {
			if r.Batches != n/world/batch {
				t.Fatalf("%s has %d batches, want %d", rank, r.Batches, n/world/batch)
			}
			for _, k := range r.Keys {
				if other, dup := seen[k]; dup {
					t.Fatalf("%s is in %s and %s: ranks overlap", k, other, rank)
				}
				seen[k] = rank
			}
		}
		files, _ := filepath.Glob(filepath.Join(src, "*", "*"))
		if len(seen) != n || len(files) != n {
			t.Fatalf("ranks cover %d samples, the dataset has %d (%d files)", len(seen), n, len(files))
		}
	})

	t.Run("fio", func(t *testing.T) {
		fio := requireTool(t, "fio")
		rankDir := filepath.Join(mnt, "epochs", "0000", "rank-000")
		for _, args := range [][]string{
			{"--name=seq", "--rw=read", "--bs=1M"},
			{"--name=rand", "--rw=randread", "--bs=64k", "--numjobs=2"},
		} {
			cmd := exec.Command(fio, append(args, "--opendir="+rankDir, "--readonly", "--ioengine=psync", "--group_reporting")...)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "err= 0") {
				t.Fatalf("fio %v: %v\n%s", args, err, out)
			}
		}
		// fio-style random preads return the bytes of a sequential read.
		for _, name := range []string{"epoch.tar", "batch-000003.tar", "index.csv"} {
			p := filepath.Join(rankDir, name)
			seq, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for i := 0; i < 500; i++ {
				off := rng.IntN(len(seq))
				buf := make([]byte, []int{4096, 65536, 1 << 20}[i%3])
				got, _ := f.ReadAt(buf, int64(off))
				if !bytes.Equal(buf[:got], seq[off:min(len(seq), off+len(buf))]) {
					t.Fatalf("%s: pread(%d, %d) differs from the sequential bytes", name, off, len(buf))
				}
			}
			f.Close()
			if sha256.Sum256(seq) != sha256.Sum256(mustRead(t, p)) {
				t.Fatalf("%s: two sequential reads differ", name)
			}
		}
	})

	t.Run("pytorch", func(t *testing.T) {
		requireTorch(t)
		rankDir := filepath.Join(mnt, "epochs", "0001", "rank-002")
		// index.csv maps positions to keys; tar member names map to positions.
		want := map[string]string{} // member stem -> source sha256
		rows := readIndex(t, filepath.Join(rankDir, "index.csv"))
		tarNames := tarMemberNames(t, filepath.Join(rankDir, "epoch.tar"))
		for i, row := range rows {
			sum := sha256.Sum256(mustRead(t, filepath.Join(src, row.key)))
			want[tarNames[i]] = hex.EncodeToString(sum[:]) + " " + strconv.Itoa(row.stratum)
		}
		got := map[string]int{}
		for _, f := range runPython(t, "testdata/torch_loader.py", rankDir) {
			if w, ok := want[f[0]]; !ok || w != f[1]+" "+f[2] {
				t.Fatalf("sample %s: got %s %s, want %q", f[0], f[1], f[2], w)
			}
			got[f[0]]++
		}
		if len(got) != len(want) || len(rows) != n/world {
			t.Fatalf("loader delivered %d distinct samples, the rank has %d (index rows %d)", len(got), len(want), len(rows))
		}
		for name, k := range got {
			if k != 1 {
				t.Fatalf("sample %s delivered %d times", name, k)
			}
		}
	})

	t.Run("readonly", func(t *testing.T) {
		for _, op := range []func() error{
			func() error { return os.WriteFile(filepath.Join(mnt, "new"), []byte("x"), 0o644) },
			func() error { return os.Mkdir(filepath.Join(mnt, "d"), 0o755) },
			func() error {
				return os.Rename(filepath.Join(mnt, "epochs", "0000"), filepath.Join(mnt, "epochs", "9999"))
			},
			func() error {
				f, err := os.OpenFile(filepath.Join(mnt, "epochs", "0000", "rank-000", "epoch.tar"), os.O_WRONLY, 0)
				if err == nil {
					f.Close()
				}
				return err
			},
		} {
			if err := op(); !errorsIsErrno(err, syscall.EROFS) {
				t.Fatalf("write-like op: %v, want EROFS", err)
			}
		}
	})

	t.Run("stable inodes and exact sizes", func(t *testing.T) {
		p := filepath.Join(mnt, "epochs", "0000", "rank-001", "batch-000002.tar")
		a, _ := os.Stat(p)
		data := mustRead(t, p)
		b, _ := os.Stat(p)
		if a.Sys().(*syscall.Stat_t).Ino != b.Sys().(*syscall.Stat_t).Ino || a.Size() != int64(len(data)) {
			t.Fatalf("inode %d vs %d, size %d vs %d bytes read", a.Sys().(*syscall.Stat_t).Ino, b.Sys().(*syscall.Stat_t).Ino, a.Size(), len(data))
		}
	})

	t.Run("stats", func(t *testing.T) {
		var s struct {
			BytesServed int64 `json:"bytes_served"`
			Stores      []struct {
				Requests int64 `json:"requests"`
			} `json:"stores"`
		}
		if err := json.Unmarshal(mustRead(t, filepath.Join(mnt, ".shardfs", "stats.json")), &s); err != nil {
			t.Fatal(err)
		}
		if s.BytesServed == 0 || len(s.Stores) != 6 {
			t.Fatalf("stats: %+v", s)
		}
		// Prometheus serves the same counters.
		m := regexp.MustCompile(`url=(http://127\.0\.0\.1:\d+/metrics)`).FindStringSubmatch(string(mustRead(t, mp.log)))
		if m == nil {
			t.Fatalf("no metrics URL in the log:\n%s", mustRead(t, mp.log))
		}
		resp, err := http.Get(m[1])
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		served := regexp.MustCompile(`(?m)^shardfs_bytes_served_total (\S+)$`).FindSubmatch(body)
		if served == nil || !bytes.Contains(body, []byte(`shardfs_backend_requests_total{store="`+c.urls[0])) {
			t.Fatalf("metrics lack bytes served or per-store requests:\n%s", body)
		}
		var again struct {
			BytesServed int64 `json:"bytes_served"`
		}
		json.Unmarshal(mustRead(t, filepath.Join(mnt, ".shardfs", "stats.json")), &again)
		if v, _ := strconv.ParseFloat(string(served[1]), 64); int64(v) != again.BytesServed {
			t.Fatalf("metrics say %s bytes served, stats.json %d", served[1], again.BytesServed)
		}
		info := string(mustRead(t, filepath.Join(mnt, ".shardfs", "info.json")))
		if !strings.Contains(info, `"world_size": 4`) || strings.Contains(info, "shardfs-test-secret") {
			t.Fatalf("info.json: %s", info)
		}
	})
}

type indexRow struct {
	key     string
	stratum int
	batch   int
}

func readIndex(t *testing.T, p string) []indexRow {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(string(mustRead(t, p))), "\n")
	var strata []string
	var rows []indexRow
	for _, l := range lines[1:] {
		f := strings.Split(l, ",")
		b, _ := strconv.Atoi(f[1])
		rows = append(rows, indexRow{key: f[2], batch: b})
		strata = append(strata, f[3])
	}
	names := append([]string(nil), strata...)
	sort.Strings(names)
	names = compact(names)
	for i := range rows {
		rows[i].stratum = sort.SearchStrings(names, strata[i])
	}
	return rows
}

func compact(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// tarMemberNames returns the data member names of a tar, without .cls members.
func tarMemberNames(t *testing.T, p string) []string {
	t.Helper()
	out, err := exec.Command("tar", "tf", p).Output()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if !strings.HasSuffix(l, ".cls") {
			names = append(names, l)
		}
	}
	return names
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func errorsIsErrno(err error, want syscall.Errno) bool {
	var e syscall.Errno
	for err != nil {
		if x, ok := err.(syscall.Errno); ok {
			e = x
			break
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			break
		}
		err = u.Unwrap()
	}
	return e == want
}
