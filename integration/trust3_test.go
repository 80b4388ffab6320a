package integration

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/internal/toxitest"
)

// Issue 40 item 2: migrate --to-stores accepted an old store under another
// host name (localhost for 127.0.0.1) and re-encoded it in place, leaving
// the old set, the rollback, with foreign fragments. The probe now spans
// the old and the new stores together and refuses before any write.
func TestMigrateRefusesAnOldStoreUnderAnotherName(t *testing.T) {
	c := sharedCluster(t, 5)
	old := c.urls[:3]
	alias := strings.Replace(old[0], "127.0.0.1", "localhost", 1)
	if alias == old[0] {
		t.Fatalf("store URL %s has no 127.0.0.1 to alias", old[0])
	}
	src := writeSource(t, synth.Imbalanced(40, 3, 0.7, 500, 4_000, 3))
	if r := run(t, time.Minute, nil, "ingest", "--stores="+strings.Join(old, ","), "--data=2", "--parity=1", src, "moving"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	before := storeSums(t, []backend.Store{c.store(t, 0), c.store(t, 1), c.store(t, 2), c.store(t, 3), c.store(t, 4)}, "moving")
	to := []string{alias, c.urls[3], c.urls[4]}
	r := run(t, time.Minute, nil, "migrate", "--stores="+strings.Join(old, ","), "moving", "--to-stores="+strings.Join(to, ","), "--data=1", "--parity=2")
	want := "old store 0 (" + old[0] + ") and new store 0 (" + alias + ") are the same place under two names"
	if r.code == 0 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "Nothing was written") {
		t.Fatalf("want the alias of an old store refused, naming both: %v", r)
	}
	after := storeSums(t, []backend.Store{c.store(t, 0), c.store(t, 1), c.store(t, 2), c.store(t, 3), c.store(t, 4)}, "moving")
	if len(after) != len(before) {
		t.Fatalf("the refused migrate left %d objects, %d before", len(after), len(before))
	}
	for k, sum := range before {
		if after[k] != sum {
			t.Fatalf("the refused migrate changed %s", k)
		}
	}
	if r := run(t, time.Minute, nil, "verify", "--stores="+strings.Join(old, ","), "moving"); r.code != 0 {
		t.Fatalf("the old set after the refused migrate: %v", r)
	}
}

// startDaemonMount runs mount --daemon with args, returns the daemon's pid
// and the log file it printed, and unmounts in t.Cleanup.
func startDaemonMount(t *testing.T, dir string, args ...string) (int, string) {
	t.Helper()
	r := run(t, 2*time.Minute, nil, append(append([]string{"mount", "--daemon"}, args...), dir)...)
	m := regexp.MustCompile(`daemon pid (\d+), logging to (\S+);`).FindStringSubmatch(r.stdout)
	if r.code != 0 || m == nil {
		t.Fatalf("mount --daemon: %v", r)
	}
	pid, _ := strconv.Atoi(m[1])
	t.Cleanup(func() {
		if isMounted(dir) {
			exec.Command("umount", dir).Run()
		}
		for deadline := time.Now().Add(15 * time.Second); syscall.Kill(pid, 0) == nil && !zombie(pid) && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
		}
		if syscall.Kill(pid, 0) == nil && !zombie(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
			exec.Command("fusermount3", "-uz", dir).Run()
			t.Errorf("daemon %d still ran 15s after umount", pid)
		}
	})
	return pid, m[2]
}

// Issue 40 items 8 and 9: the daemon's default log was a predictable name
// in $TMPDIR, opened 0644 following symlinks, so a planted symlink made
// root's daemon append to any file; and SIGHUP killed the daemon and left a
// dead mount. Now the default log is a new 0600 file in a directory only
// its user can write, --log-file refuses a symlink, and SIGHUP reopens the
// log (as logrotate expects) while the mount stays.
func TestDaemonLogIsPrivateAndSIGHUPReopensIt(t *testing.T) {
	requireTool(t, "fusermount3")
	stores, src := smallLocalDataset(t)
	base := t.TempDir()
	// A symlink planted where the log should go is refused, and its
	// target is left alone.
	target := filepath.Join(base, "secret")
	if err := os.WriteFile(target, []byte("root's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "planted.log")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "mnt")
	os.Mkdir(dir, 0o755)
	r := run(t, time.Minute, nil, "mount", "--daemon", "--log-file", link, stores, "--batch-size=8", "ds", dir)
	if r.code == 0 {
		exec.Command("umount", dir).Run() // the old daemon mounted: leave no mount behind
	}
	if r.code == 0 || !strings.Contains(r.stderr, "is a symbolic link") {
		t.Fatalf("--log-file on a symlink: want refused, got %v", r)
	}
	if b, _ := os.ReadFile(target); string(b) != "root's\n" {
		t.Fatalf("the symlink's target was written: %q", b)
	}
	// The default log.
	pid, logFile := startDaemonMount(t, dir, stores, "--batch-size=8", "ds")
	if os.Geteuid() == 0 && !strings.HasPrefix(logFile, "/var/log/shardfs/") {
		t.Fatalf("root's daemon logs to %s, want a file in /var/log/shardfs", logFile)
	}
	fi, err := os.Lstat(logFile)
	if err != nil || fi.Mode().Perm() != 0o600 || !fi.Mode().IsRegular() {
		t.Fatalf("the daemon's log %s: %v, %v; want a regular file, mode 0600", logFile, fi.Mode(), err)
	}
	di, err := os.Lstat(filepath.Dir(logFile))
	if err != nil || di.Mode().Perm()&0o022 != 0 {
		t.Fatalf("the log's directory: %v, %v; want it closed to group and others", di.Mode(), err)
	}
	t.Cleanup(func() { os.Remove(logFile); os.Remove(logFile + ".1") })
	// logrotate: move the log away, then SIGHUP.
	if err := os.Rename(logFile, logFile+".1"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if b, err := os.ReadFile(logFile); err == nil && strings.Contains(string(b), "reopened the log file") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new log %s 20s after SIGHUP", logFile)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, ".shardfs", "info.json")); err != nil || syscall.Kill(pid, 0) != nil {
		t.Fatalf("after SIGHUP the mount is gone: %v (daemon alive: %v)", err, syscall.Kill(pid, 0) == nil)
	}
	checkSamplesView(t, dir, src)
}

// Issue 40 item 10: pprof answered, unauthenticated, on the metrics
// listener. It is opt-in now (--pprof), and needs --metrics-addr.
func TestProfilesAreOptIn(t *testing.T) {
	requireTool(t, "fusermount3")
	_, urls := localStores(t, 3)
	stores := "--stores=" + strings.Join(urls, ",")
	src := writeSource(t, synth.Imbalanced(30, 2, 0.7, 500, 2_000, 6))
	if r := run(t, time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", src, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	get := func(url string) int {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		pprof bool
		want  int
	}{{false, http.StatusNotFound}, {true, http.StatusOK}} {
		addr := toxitest.FreeAddr(t)
		args := []string{stores, "--batch-size=8", "--metrics-addr=" + addr}
		if tc.pprof {
			args = append(args, "--pprof")
		}
		mp := mountShardfsEnv(t, nil, append(args, "ds")...)
		if got := get("http://" + addr + "/metrics"); got != http.StatusOK {
			t.Fatalf("/metrics: %d", got)
		}
		for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=2", "/debug/pprof/heap"} {
			if got := get("http://" + addr + path); got != tc.want {
				t.Fatalf("--pprof=%v: %s answered %d, want %d", tc.pprof, path, got, tc.want)
			}
		}
		mp.cmd.Process.Signal(syscall.SIGTERM)
		<-mp.exited
	}
	if r := run(t, time.Minute, nil, "mount", stores, "--pprof", "ds", t.TempDir()); r.code == 0 || !strings.Contains(r.stderr, "--pprof serves profiles on --metrics-addr") {
		t.Fatalf("--pprof without --metrics-addr: %v", r)
	}
}

// Issue 40 item 11: mount --daemon ignored SIGTERM and SIGINT while it
// waited up to 10 minutes for its daemon. Now a signal stops the daemon
// and the command at once.
func TestDaemonStartStopsOnSignal(t *testing.T) {
	requireTool(t, "fusermount3")
	// Stores that accept connections and never answer: the daemon waits
	// on them for its request timeout.
	var urls []string
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				t.Cleanup(func() { c.Close() })
			}
		}()
		urls = append(urls, "http://"+l.Addr().String()+"/bkt/ds")
	}
	dir := t.TempDir()
	logFile := filepath.Join(t.TempDir(), "daemon.log")
	cmd := execShardfs("mount", "--daemon", "--log-file", logFile, "--stores="+strings.Join(urls, ","), "--request-timeout=5m", "ds", dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	time.Sleep(2 * time.Second)
	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-exited
		t.Fatalf("mount --daemon still waited 30s after SIGTERM: %s", out.String())
	}
	m := regexp.MustCompile(`stopped while the daemon \(pid (\d+)\) was starting`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("after SIGTERM: %s", out.String())
	}
	pid, _ := strconv.Atoi(m[1])
	for deadline := time.Now().Add(15 * time.Second); syscall.Kill(pid, 0) == nil && !zombie(pid); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the daemon %d still ran 15s after mount --daemon was stopped", pid)
		}
	}
	t.Logf("mount --daemon ended %v after SIGTERM, and its daemon with it", time.Since(start).Round(time.Millisecond))
}

// Issue 40 item 17: a mount --daemon --mkdir that failed left the
// directory it made behind.
func TestFailedMountRemovesItsMkdir(t *testing.T) {
	_, urls := localStores(t, 3)
	base := t.TempDir()
	dir := filepath.Join(base, "a", "b", "mnt")
	r := run(t, time.Minute, nil, "mount", "--daemon", "--mkdir", "--log-file", filepath.Join(base, "log"), "--stores="+strings.Join(urls, ","), "nosuch", dir)
	if r.code == 0 {
		exec.Command("umount", dir).Run()
		t.Fatalf("mount of a dataset that does not exist: %v", r)
	}
	if _, err := os.Stat(filepath.Join(base, "a")); !os.IsNotExist(err) {
		t.Fatalf("the failed mount left %s behind (%v)", filepath.Join(base, "a"), err)
	}
}

// Issue 40 item 12: with a relative mountpoint, the "busy" message named no
// holders: /proc names open files by absolute path.
func TestBusyRelativeMountpointNamesHolders(t *testing.T) {
	requireTool(t, "fusermount3")
	stores, _ := smallLocalDataset(t)
	parent := t.TempDir()
	dir := filepath.Join(parent, "mnt")
	os.Mkdir(dir, 0o755)
	logFile := filepath.Join(t.TempDir(), "mount.log")
	logf, _ := os.Create(logFile)
	defer logf.Close()
	cmd := execShardfs("mount", stores, "--batch-size=4", "ds", "mnt")
	cmd.Dir, cmd.Stdout, cmd.Stderr = parent, logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if isMounted(dir) {
			exec.Command("fusermount3", "-uz", dir).Run()
		}
	})
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(dir, ".shardfs", "info.json")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logFile)
			t.Fatalf("the mount did not come up:\n%s", b)
		}
	}
	f, err := os.Open(filepath.Join(dir, "epochs/0000/rank-000/epoch.tar"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd.Process.Signal(syscall.SIGTERM)
	var log []byte
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && !bytes.Contains(log, []byte("the mount is busy")); time.Sleep(100 * time.Millisecond) {
		log, _ = os.ReadFile(logFile)
	}
	if !bytes.Contains(log, []byte("the mount is busy")) || !bytes.Contains(log, []byte(fmt.Sprintf("pid %d", os.Getpid()))) {
		t.Fatalf("busy with a file open, mounted at a relative path: want this process named as a holder:\n%s", log)
	}
	f.Close()
}

// Issue 40 item 5: on MinIO, format 3 with one group object lost on every
// store, verify exited 3 ("could not check") and repair left an unrelated
// lost fragment unrepaired; with a format-2 shard index lost on every store
// and nothing else wrong, repair said "nothing to repair" and exited 0.
// Now verify exits 2 naming the lost group, repair mends the rest and
// exits 2, and the lone lost index is exit 2 too.
func TestLostMetadataObjectOnMinIO(t *testing.T) {
	c := sharedCluster(t, 3)
	stores := "--stores=" + strings.Join(c.urls, ",")
	clients := c.clients(t)
	ctx := t.Context()
	src := writeSource(t, synth.Imbalanced(300, 3, 0.7, 2_000, 20_000, 8))
	if r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--shard-size=256KiB", "--format=3", "--group-shards=2", src, "g3"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	groups, _ := clients[0].List(ctx, "g3/group/")
	if len(groups) < 3 {
		t.Fatalf("%d group objects, want at least 3", len(groups))
	}
	slices.Sort(groups)
	lostGroup := ""
	for _, k := range groups {
		if strings.HasSuffix(k, "00000001") {
			lostGroup = k
		}
	}
	if lostGroup == "" {
		t.Fatalf("no group 1 among %v", groups)
	}
	for _, s := range clients {
		if err := s.Delete(ctx, lostGroup); err != nil {
			t.Fatal(err)
		}
	}
	frags, _ := clients[2].List(ctx, "g3/data/")
	var frag string
	for _, k := range frags {
		if strings.Contains(k, "/00000000.") {
			frag = k
		}
	}
	if err := clients[2].Delete(ctx, frag); err != nil {
		t.Fatal(err)
	}
	r := run(t, 2*time.Minute, nil, "verify", stores, "g3")
	if r.code != 2 || !strings.Contains(r.stdout, "LOST GROUP: group 1 (shards 2-3)") || !strings.Contains(r.stdout, "damaged: shard 0") || strings.Contains(r.stdout, "LOST INDEX") {
		t.Fatalf("verify with group 1 lost and a fragment of shard 0: want exit 2 naming both: %v", r)
	}
	r = run(t, 2*time.Minute, nil, "repair", stores, "g3")
	if r.code != 2 || !strings.Contains(r.stdout, "wrote 1 objects") || !strings.Contains(r.stderr, "group 1 lost every copy of its object") {
		t.Fatalf("repair: want shard 0's fragment written, and exit 2 naming group 1: %v", r)
	}
	if _, err := clients[2].Stat(ctx, frag); err != nil {
		t.Fatalf("the unrelated fragment after repair: %v", err)
	}
	// Format 2: a shard index lost on every store, nothing else.
	if r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--shard-size=256KiB", "--format=2", src, "f2"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	idx, _ := clients[0].List(ctx, "f2/index/")
	slices.Sort(idx)
	for _, s := range clients {
		if err := s.Delete(ctx, idx[1]); err != nil {
			t.Fatal(err)
		}
	}
	if r := run(t, 2*time.Minute, nil, "repair", stores, "f2"); r.code != 2 || strings.Contains(r.stdout, "nothing to repair") || !strings.Contains(r.stderr, "lost every copy of their index") {
		t.Fatalf("repair with a shard index lost everywhere and nothing else: want exit 2 naming it: %v", r)
	}
}

// smallLocalDataset ingests 60 samples as "ds", RS(2,1), into three file://
// stores, and returns the --stores flag and the source.
func smallLocalDataset(t *testing.T) (stores, src string) {
	t.Helper()
	_, urls := localStores(t, 3)
	stores = "--stores=" + strings.Join(urls, ",")
	src = writeSource(t, synth.Imbalanced(60, 3, 0.7, 500, 2_000, 6))
	if r := run(t, time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", src, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	return stores, src
}
