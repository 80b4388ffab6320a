package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/synth"
)

// TestMountDaemonSaysWhenReady: `mount --daemon` returns only once the tree
// is served, so the very next command reads it with no sleep; it fails with
// the mount's own error, and a non-zero exit, when the mount cannot be
// made; umount stops the daemon.
func TestMountDaemonSaysWhenReady(t *testing.T) {
	requireTool(t, "fusermount3")
	c := sharedCluster(t, 6)
	ingestSynthetic(t, c.urls, 400, "train", 4, 2)
	stores := "--stores=" + strings.Join(c.urls, ",")
	dir := filepath.Join(t.TempDir(), "mnt")
	os.Mkdir(dir, 0o755)
	logFile := dir + ".log"
	readyFile := dir + ".ready"
	r := run(t, 2*time.Minute, nil, "mount", "--daemon", "--log-file", logFile, "--ready-file", readyFile, stores, "--batch-size=16", "train", dir)
	m := regexp.MustCompile(`daemon pid (\d+)`).FindStringSubmatch(r.stdout)
	if r.code != 0 || m == nil {
		log, _ := os.ReadFile(logFile)
		t.Fatalf("mount --daemon: %v\nlog:\n%s", r, log)
	}
	pid, _ := strconv.Atoi(m[1])
	gone := func() bool { return syscall.Kill(pid, 0) == syscall.ESRCH || zombie(pid) }
	t.Cleanup(func() {
		if isMounted(dir) {
			exec.Command("umount", dir).Run()
		}
		for deadline := time.Now().Add(15 * time.Second); !gone() && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
		}
		if !gone() {
			syscall.Kill(pid, syscall.SIGKILL)
			exec.Command("fusermount3", "-uz", dir).Run()
			t.Errorf("daemon %d still ran 15s after umount", pid)
		}
	})
	if b, err := os.ReadFile(readyFile); err != nil || string(b) != fmt.Sprintf("%d\n%s\n", pid, dir) {
		t.Fatalf("--ready-file %s: %q, %v; want the daemon's pid %d and the mountpoint", readyFile, b, err, pid)
	}
	// No wait: the command returned, so the tree is there.
	var info struct {
		Dataset struct {
			Name    string `json:"name"`
			Samples int    `json:"samples"`
		} `json:"dataset"`
	}
	b, err := os.ReadFile(filepath.Join(dir, ".shardfs/info.json"))
	if err != nil || json.Unmarshal(b, &info) != nil || info.Dataset.Name != "train" || info.Dataset.Samples != 400 {
		t.Fatalf("info.json right after mount --daemon returned: %v, %s", err, b)
	}
	// Epochs are open-ended by default: a third epoch opens, as a training loop expects.
	for _, e := range []string{"0000", "0002"} {
		rows := readIndex(t, filepath.Join(dir, "epochs", e, "rank-000", "index.csv"))
		if len(rows) != 400/16*16 {
			t.Fatalf("epoch %s: %d rows in index.csv, want %d", e, len(rows), 400/16*16)
		}
	}
	// stats ends with the totals since the mount started.
	batch := mustRead(t, filepath.Join(dir, "epochs", "0000", "rank-000", "batch-000000.tar"))
	st := run(t, time.Minute, nil, "stats", "--count=1", "--interval=100ms", dir)
	total := regexp.MustCompile(`(?m)^total since mount \(\d+s\): ([0-9.]+ [KMG]?i?B) served`).FindStringSubmatch(st.stdout)
	if st.code != 0 || total == nil || total[1] == "0 B" || len(batch) == 0 {
		t.Fatalf("stats after reading a batch of %d bytes: want a totals line with bytes served: %v", len(batch), st)
	}
	if v := run(t, time.Minute, nil, "version"); v.code != 0 || !strings.HasPrefix(v.stdout, "shardfs ") || !strings.Contains(v.stdout, "order versions 1-6, metadata formats 1 to 3") {
		t.Fatalf("version: %v", v)
	}
	// A mount that cannot be made fails the command itself, with its cause.
	dir2 := filepath.Join(t.TempDir(), "mnt2")
	os.Mkdir(dir2, 0o755)
	bad := run(t, 2*time.Minute, nil, "mount", "--daemon", "--log-file", dir2+".log", stores, "no-such-dataset", dir2)
	if bad.code == 0 || !strings.Contains(bad.stderr, "no-such-dataset") || !strings.Contains(bad.stderr, "daemon log") {
		t.Fatalf("mount --daemon of a dataset that does not exist: %v", bad)
	}
	if isMounted(dir2) {
		exec.Command("fusermount3", "-uz", dir2).Run()
		t.Fatal("a failed mount --daemon left a mount behind")
	}
	// umount stops the daemon.
	if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
		t.Fatalf("umount: %v: %s", err, out)
	}
	for deadline := time.Now().Add(15 * time.Second); !gone(); {
		if time.Now().After(deadline) {
			t.Fatalf("daemon %d still runs 15s after umount", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := os.Stat(readyFile); !os.IsNotExist(err) {
		t.Fatalf("--ready-file %s still there after the mount ended: %v", readyFile, err)
	}
}

// zombie reports whether pid has exited and waits to be reaped (its parent,
// the mount --daemon command, is gone, so init reaps it eventually).
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] == "Z"
}

// Issue 29 item 5: --log-format json makes every log line of the daemon
// one JSON object with time, level and msg, for a log collector; a bad
// format is refused before anything runs.
func TestLogFormatJSON(t *testing.T) {
	_, urls := localStores(t, 3)
	stores := "--stores=" + strings.Join(urls, ",")
	src := writeSource(t, synth.Imbalanced(60, 3, 0.5, 1_000, 4_000, 29))
	if r := run(t, time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", src, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	mp := mountShardfsEnv(t, nil, "--log-format=json", "--log-level=debug", stores, "--batch-size=8", "ds")
	mustRead(t, filepath.Join(mp.dir, "epochs", "0000", "rank-000", "batch-000000.tar"))
	mp.cmd.Process.Signal(syscall.SIGTERM)
	<-mp.exited
	lines := strings.Split(strings.TrimSpace(string(mustRead(t, mp.log))), "\n")
	logged := 0
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q (%v)", l, err)
		}
		if rec["time"] == nil || rec["level"] == nil || rec["msg"] == nil {
			t.Fatalf("log line %q lacks time, level or msg", l)
		}
		logged++
	}
	if logged < 2 {
		t.Fatalf("the daemon logged %d lines at debug level: %q", logged, lines)
	}
	if r := run(t, time.Minute, nil, "--log-format=xml", "list", stores); r.code == 0 || !strings.Contains(r.stderr, `--log-format "xml"`) {
		t.Fatalf("a bad --log-format must be refused: %v", r)
	}
}
