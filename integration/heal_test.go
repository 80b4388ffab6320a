package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/shardfs/shardfs/heal"
	"github.com/shardfs/shardfs/internal/miniotest"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/repository"
)

// Issue 44: self-healing. No person runs repair: shardfs heal, running as
// a service, finds and rebuilds what is lost.

// healProc is a running shardfs heal.
type healProc struct {
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
}

// startHealer starts shardfs heal with args; it is killed in t.Cleanup.
func startHealer(t *testing.T, args ...string) *healProc {
	t.Helper()
	logf, err := os.CreateTemp(t.TempDir(), "heal-*.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd := execShardfs(append([]string{"heal"}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	hp := &healProc{cmd: cmd, log: logf.Name(), exited: make(chan struct{})}
	go func() { cmd.Wait(); logf.Close(); close(hp.exited) }()
	t.Cleanup(func() { hp.kill() })
	return hp
}

// kill ends the healer with SIGKILL (after SIGCONT, should it be stopped).
func (hp *healProc) kill() {
	hp.cmd.Process.Signal(syscall.SIGCONT)
	hp.cmd.Process.Kill()
	<-hp.exited
}

func (hp *healProc) logText(t *testing.T) string { return string(mustRead(t, hp.log)) }

// waitLog waits until the healer's log matches re, or fails after limit.
func (hp *healProc) waitLog(t *testing.T, re string, limit time.Duration) string {
	t.Helper()
	rx := regexp.MustCompile(re)
	for start := time.Now(); time.Since(start) < limit; time.Sleep(100 * time.Millisecond) {
		if m := rx.FindString(hp.logText(t)); m != "" {
			return m
		}
	}
	t.Fatalf("the healer did not log %q in %v:\n%s", re, limit, hp.logText(t))
	return ""
}

// wipeStore loses a MinIO store's every object: the process is killed,
// its data directory removed, and it starts again empty, with its bucket
// (as an operator replacing a disk would make it).
func wipeStore(t *testing.T, s *miniotest.Server) {
	t.Helper()
	s.Kill()
	if err := os.RemoveAll(s.DataDir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(s.DataDir, "shardfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	s.Restart()
}

// verifyClean runs verify until it exits 0, and returns how long that took.
func verifyClean(t *testing.T, stores, name string, limit time.Duration, healer *healProc) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		r := run(t, 2*time.Minute, nil, "verify", stores, name)
		if r.code == 0 {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("verify still exits %d %v after the damage:\n%s\nhealer log:\n%s", r.code, limit, r.stdout, healer.logText(t))
		}
		time.Sleep(2 * time.Second)
	}
}

// verifyingReader reads rank 0's epochs one after another, batch by batch,
// checking every sample's bytes against the source, until stopped. It
// counts the bytes read, by time, and keeps the first error (a wrong byte
// or a failed read).
type verifyingReader struct {
	mnt, src string
	// pace bounds the bytes it reads a second (0: as fast as it can).
	pace    float64
	start   time.Time
	quit    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	marks   []readMark
	err     error
	samples atomic.Int64
	once    sync.Once
}

type readMark struct {
	at    time.Time
	bytes int64
}

func startVerifyingReader(mnt, src string, pace float64) *verifyingReader {
	r := &verifyingReader{mnt: mnt, src: src, pace: pace, start: time.Now(), quit: make(chan struct{}), done: make(chan struct{})}
	go r.loop()
	return r
}

func (r *verifyingReader) loop() {
	defer close(r.done)
	var total int64
	for e := 0; ; e++ {
		if err := r.epoch(e, &total); err != nil {
			r.mu.Lock()
			r.err = err
			r.mu.Unlock()
			return
		}
		select {
		case <-r.quit:
			return
		default:
		}
	}
}

func (r *verifyingReader) epoch(e int, total *int64) error {
	dir := filepath.Join(r.mnt, "epochs", fmt.Sprintf("%04d", e), "rank-000")
	f, err := os.Open(filepath.Join(dir, "index.csv"))
	if err != nil {
		return err
	}
	rows, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil {
		return err
	}
	rows = rows[1:]
	for b, pos := 0, 0; pos < len(rows); b++ {
		select {
		case <-r.quit:
			return nil
		default:
		}
		name := filepath.Join(dir, fmt.Sprintf("batch-%06d.tar", b))
		data, err := os.ReadFile(name)
		if err != nil {
			return fmt.Errorf("epoch %d batch %d: %w", e, b, err)
		}
		tr := tar.NewReader(bytes.NewReader(data))
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return fmt.Errorf("epoch %d batch %d: %w", e, b, err)
			}
			body, _ := io.ReadAll(tr)
			if strings.HasSuffix(hdr.Name, ".cls") {
				continue
			}
			want, err := os.ReadFile(filepath.Join(r.src, rows[pos][2]))
			if err != nil {
				return err
			}
			if !bytes.Equal(body, want) {
				return fmt.Errorf("epoch %d batch %d: %s: WRONG BYTES", e, b, rows[pos][2])
			}
			pos++
			r.samples.Add(1)
		}
		*total += int64(len(data))
		r.mu.Lock()
		r.marks = append(r.marks, readMark{time.Now(), *total})
		r.mu.Unlock()
		if r.pace > 0 {
			ahead := time.Duration(float64(*total)/r.pace*float64(time.Second)) - time.Since(r.start)
			select {
			case <-r.quit:
				return nil
			case <-time.After(ahead):
			}
		}
	}
	return nil
}

// rate is the reader's MB/s between two times.
func (r *verifyingReader) rate(from, to time.Time) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first, last *readMark
	for i := range r.marks {
		m := &r.marks[i]
		if m.at.Before(from) || m.at.After(to) {
			continue
		}
		if first == nil {
			first = m
		}
		last = m
	}
	if first == nil || last == first {
		return 0
	}
	return float64(last.bytes-first.bytes) / 1e6 / last.at.Sub(first.at).Seconds()
}

func (r *verifyingReader) stop() error {
	r.once.Do(func() { close(r.quit) })
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// healState reads the healer's recorded state from the stores.
func healState(t *testing.T, c *cluster, name string) *heal.State {
	t.Helper()
	st, err := heal.ReadState(context.Background(), c.clients(t), name)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Items 1 and 7: a mount reads epochs in a loop, checking every byte,
// while shardfs heal runs as a service with Prometheus scraping it under
// the shipped alert rules. Store 3 is wiped and restarted empty: the healer
// brings verify back to exit 0 with no command from a person, and the
// critical alert stays quiet (one store lost of m = 2). Then stores 1 and
// 4 are wiped, and a healer held to 300 KiB/s (so that healing outlasts
// the alert's minute) takes over: ShardfsRedundancyCritical fires (margin
// 0: one more loss and samples are gone), and shardfs list shows it.
// The healer is then restarted without the bound: verify comes back
// clean and the alert clears. The reader never sees a wrong byte or an
// error; its rate during healing is logged against the rate before.
func TestHealWipedStoresWhileReading(t *testing.T) {
	t.Parallel() // waits out the alert's minute, asserts bytes, alert states and hang bounds; the rates are logged (main_test.go, parallelTests)
	requireTool(t, "prometheus")
	c := startCluster(t, 6)
	src := t.TempDir()
	if _, err := synth.Write(src, synth.Imbalanced(800, 4, 0.6, 20_000, 60_000, 44)); err != nil {
		t.Fatal(err)
	}
	stores := "--stores=" + strings.Join(c.urls, ",")
	if r := run(t, 5*time.Minute, nil, "ingest", stores, "--data=4", "--parity=2", "--shard-size=1MiB", src, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	// A cache half the dataset's size: every epoch reads from the stores.
	mp := mountShardfsEnv(t, nil, stores, "--batch-size=16", "--cache-size=16MiB", "ds")
	// The reader is paced: it checks every byte it reads throughout the
	// healing, as before, but reading as fast as it could (22 MB/s) cost
	// the test 228 CPU seconds, and paced at 4 MB/s it costs 99, measured
	// over its whole process tree (issue 56), for a rate nothing asserts.
	// A reader that falls below its pace while the stores heal shows in
	// the rates logged.
	reader := startVerifyingReader(mp.dir, src, 4e6)
	defer reader.stop()

	metricsPort := freePort(t)
	metricsAddr := fmt.Sprintf("--metrics-addr=127.0.0.1:%d", metricsPort)
	healer := startHealer(t, stores, "--pause=2s", "--hint-poll=1s", metricsAddr, "ds")
	healer.waitLog(t, `msg="heal: cycle done"`, 3*time.Minute)

	prom := startPrometheus(t, fmt.Sprintf("127.0.0.1:%d", metricsPort))
	alertState := func() string {
		for _, al := range prom.alerts() {
			if al.Labels["alertname"] == "ShardfsRedundancyCritical" && al.Labels["dataset"] == "ds" {
				return al.State // pending or firing
			}
		}
		return ""
	}
	// Prometheus has the healer's margin before anything is lost.
	for start := time.Now(); prom.series(`shardfs_heal_redundancy_margin{dataset="ds"} == 2`) == 0; time.Sleep(time.Second) {
		if time.Since(start) > time.Minute {
			t.Fatal("Prometheus has no margin of 2 for ds after a minute")
		}
	}

	before := reader.rate(time.Now().Add(-5*time.Second), time.Now())

	// Store 3 lost.
	wiped := time.Now()
	wipeStore(t, c.servers[3])
	took := verifyClean(t, stores, "ds", 5*time.Minute, healer)
	during := reader.rate(wiped, time.Now())
	t.Logf("store 3 wiped: verify clean after %v with no command; the reader, paced at 4 MB/s, read %.1f MB/s before, %.1f MB/s while healing (%.2f)", took.Round(time.Second), before, during, during/before)
	if st := alertState(); st != "" {
		t.Fatalf("ShardfsRedundancyCritical is %s with one store lost of m=2", st)
	}

	// Stores 1 and 4 lost, and a healer held to 300 KiB/s.
	healer.kill()
	wiped = time.Now()
	wipeStore(t, c.servers[1])
	wipeStore(t, c.servers[4])
	healer = startHealer(t, stores, "--pause=2s", "--hint-poll=1s", "--rate-bytes=300KiB", metricsAddr, "ds")
	for alertState() != "firing" {
		if time.Since(wiped) > 3*time.Minute {
			t.Fatalf("ShardfsRedundancyCritical did not fire in 3 minutes with 2 stores wiped; healer log:\n%s", healer.logText(t))
		}
		time.Sleep(time.Second)
	}
	fired := time.Since(wiped)
	r := run(t, time.Minute, nil, "list", stores)
	if r.code != 0 || !regexp.MustCompile(`(?m)^ds .* 0 of 2 \(healer, `).MatchString(r.stdout) {
		t.Fatalf("shardfs list while two lost stores are healed: want a margin of 0 of 2: %v\nhealer log:\n%s", r, healer.logText(t))
	}
	// The bound lifted.
	healer.kill()
	healer = startHealer(t, stores, "--pause=2s", "--hint-poll=1s", metricsAddr, "ds")
	took = verifyClean(t, stores, "ds", 5*time.Minute, healer)
	during = reader.rate(wiped, time.Now())
	clean := time.Now()
	for alertState() != "" {
		if time.Since(clean) > time.Minute {
			t.Fatalf("ShardfsRedundancyCritical still fires a minute after verify came back clean; healer log:\n%s", healer.logText(t))
		}
		time.Sleep(time.Second)
	}
	t.Logf("stores 1 and 4 wiped: the critical alert fired after %v; with the bound lifted, verify clean after %v, the alert cleared %v later; the reader read %.1f MB/s meanwhile",
		fired.Round(time.Second), took.Round(time.Second), time.Since(clean).Round(time.Second), during)
	r = run(t, time.Minute, nil, "list", stores)
	if r.code != 0 || !regexp.MustCompile(`(?m)^ds .* 2 of 2 \(healer, `).MatchString(r.stdout) {
		t.Fatalf("shardfs list after healing: want a margin of 2 of 2: %v", r)
	}
	if err := reader.stop(); err != nil {
		t.Fatalf("the reader failed while the stores were healed: %v\nhealer log:\n%s", err, healer.logText(t))
	}
	if n := reader.samples.Load(); n < 800 {
		t.Fatalf("the reader checked %d samples, fewer than one epoch", n)
	}
	t.Logf("the reader checked %d samples, every byte right", reader.samples.Load())
}

// Item 2: a byte flipped in MinIO's on-disk part file of one fragment, and
// another fragment deleted, are both found and rebuilt by one scrub cycle.
func TestHealScrubFindsRotAndLoss(t *testing.T) {
	c := startCluster(t, 6)
	src := t.TempDir()
	if _, err := synth.Write(src, synth.Imbalanced(200, 3, 0.6, 30_000, 90_000, 45)); err != nil {
		t.Fatal(err)
	}
	stores := "--stores=" + strings.Join(c.urls, ",")
	if r := run(t, 5*time.Minute, nil, "ingest", stores, "--data=4", "--parity=2", "--shard-size=4MiB", src, "rot"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	// Fragments of a 4 MiB shard are about 1 MiB: MinIO keeps them in part files.
	parts := minioFiles(t, c.servers[2].DataDir, "/rot/data/", "part.1")
	if len(parts) < 1 {
		t.Fatal("store 2 holds no part file of a fragment")
	}
	flipByte(t, parts[0], -1)
	s5 := c.store(t, 5)
	keys, _ := s5.List(context.Background(), repository.DataPrefix("rot"))
	if len(keys) < 2 {
		t.Fatalf("store 5 holds %d fragments", len(keys))
	}
	if err := s5.Delete(context.Background(), keys[len(keys)-1]); err != nil {
		t.Fatal(err)
	}
	if r := run(t, 2*time.Minute, nil, "verify", stores, "rot"); r.code != 1 || strings.Count(r.stdout, "damaged: shard") != 2 {
		t.Fatalf("verify before healing: want exit 1 with 2 damaged fragments: %v", r)
	}
	r := run(t, 2*time.Minute, nil, "heal", "--once", stores, "rot")
	if r.code != 0 || strings.Count(r.stderr, `msg="heal: cycle done"`) != 1 || !strings.Contains(r.stderr, "fragments_rebuilt=2") {
		t.Fatalf("one heal cycle: want it done with 2 fragments rebuilt: %v", r)
	}
	if r := run(t, 2*time.Minute, nil, "verify", stores, "rot"); r.code != 0 {
		t.Fatalf("verify after one heal cycle: %v", r)
	}
}

// Item 3: heal on read. The scrub is set so slow (a pause of an hour after
// its first cycle) that it cannot find a damaged fragment in time; a
// mount's read of that shard decodes around it and leaves a hint, and the
// healer rebuilds the fragment within 30 s of the read.
func TestHealOnRead(t *testing.T) {
	c := sharedCluster(t, 6)
	src := t.TempDir()
	if _, err := synth.Write(src, synth.Imbalanced(200, 3, 0.6, 20_000, 60_000, 46)); err != nil {
		t.Fatal(err)
	}
	stores := "--stores=" + strings.Join(c.urls, ",")
	if r := run(t, 5*time.Minute, nil, "ingest", stores, "--data=4", "--parity=2", "--shard-size=1MiB", src, "hint"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	healer := startHealer(t, stores, "--pause=1h", "--hint-poll=2s", "hint")
	healer.waitLog(t, `msg="heal: cycle done"`, 2*time.Minute)
	s1 := c.store(t, 1)
	keys, _ := s1.List(context.Background(), repository.DataPrefix("hint"))
	if len(keys) < 3 {
		t.Fatalf("store 1 holds %d fragments", len(keys))
	}
	lost := keys[len(keys)/2]
	if err := s1.Delete(context.Background(), lost); err != nil {
		t.Fatal(err)
	}
	mp := mountShardfsEnv(t, nil, stores, "--batch-size=16", "hint")
	read := time.Now()
	if _, err := readEpochVerified(t, mp.dir, src, 0, nil); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := s1.Stat(context.Background(), lost); err == nil {
			break
		}
		if time.Since(read) > 30*time.Second {
			t.Fatalf("the fragment read degraded was not rebuilt in 30 s of the read; mount log:\n%s\nhealer log:\n%s", mustRead(t, mp.log), healer.logText(t))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("the fragment was rebuilt %v after the epoch's read began (the scrub's next cycle is an hour away)", time.Since(read).Round(100*time.Millisecond))
	if !strings.Contains(string(mustRead(t, mp.log)), "told the healer") {
		t.Fatalf("the mount's log does not say it told the healer:\n%s", mustRead(t, mp.log))
	}
	if r := run(t, 2*time.Minute, nil, "verify", stores, "hint"); r.code != 0 {
		t.Fatalf("verify after heal on read: %v", r)
	}
}

// Item 4, with the random store failures every step that writes is tested
// against: the healer is killed with SIGKILL at 10 random moments, some of
// them while a random store is down; each restart resumes from the
// position its predecessor recorded, and verify then exits 0.
func TestHealKilledAtRandomMoments(t *testing.T) {
	c := startCluster(t, 6)
	src := t.TempDir()
	if _, err := synth.Write(src, synth.Imbalanced(300, 3, 0.6, 20_000, 60_000, 47)); err != nil {
		t.Fatal(err)
	}
	stores := "--stores=" + strings.Join(c.urls, ",")
	if r := run(t, 5*time.Minute, nil, "ingest", stores, "--data=4", "--parity=2", "--shard-size=512KiB", src, "kill"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	// Two stores lose every fragment: m of them, so every shard is at margin 0.
	for _, i := range []int{0, 3} {
		s := c.store(t, i)
		keys, _ := s.List(context.Background(), repository.DataPrefix("kill"))
		for _, k := range keys {
			s.Delete(context.Background(), k)
		}
	}
	rng := rand.New(rand.NewPCG(47, 4))
	resumed := 0
	for k := range 10 {
		down := -1
		if k%3 == 1 {
			down = rng.IntN(6)
			c.servers[down].Kill()
		}
		// The state is read after the store goes down: a kill during the
		// last healer's state write can leave the newest position on that
		// store alone, and the healer resumes from what it can reach.
		st := healState(t, c, "kill")
		// Slow enough that a cycle spans several kills.
		hp := startHealer(t, stores, "--batch=1", "--rate-bytes=4MiB", "--pause=1h", "--lease=5s", "kill")
		if st != nil {
			want := fmt.Sprintf(`msg="heal: resuming" dataset=kill cycle=%d shard=%d `, st.Cycle+1, st.Next)
			if st.Next == st.Shards || st.Next == 0 {
				want = `msg="heal: (resuming|holding)`
			}
			hp.waitLog(t, want, time.Minute)
			resumed++
		} else if k > 0 {
			// Kill 0 may land before the first healer wrote any
			// position (on a busy machine its start outlasts the
			// 0.3–2.8 s it gets: CI saw kills 0, 1 and 2 all find no
			// state, and the restarts nothing to resume from). Every
			// later restart must find one: this healer writes its
			// first before its random moment starts.
			for deadline := time.Now().Add(time.Minute); healState(t, c, "kill") == nil; time.Sleep(100 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("restart %d wrote no position in a minute; healer log:\n%s", k, hp.logText(t))
				}
			}
		}
		time.Sleep(time.Duration(300+rng.IntN(2500)) * time.Millisecond)
		hp.kill()
		if down >= 0 {
			c.servers[down].Restart()
		}
		t.Logf("kill %d: state before %+v; healer log:\n%s", k, st, hp.logText(t))
	}
	// Kills 2 to 9 follow a recorded position, and kill 1 too when kill 0
	// came after the first healer's first write.
	if resumed < 8 {
		t.Fatalf("%d restarts resumed from a recorded position, want 8 or 9", resumed)
	}
	if r := run(t, 5*time.Minute, nil, "heal", "--once", "--lease=5s", stores, "kill"); r.code != 0 {
		t.Fatalf("the last heal: %v", r)
	}
	if r := run(t, 2*time.Minute, nil, "verify", stores, "kill"); r.code != 0 {
		t.Fatalf("verify after the healer was killed 10 times: %v", r)
	}
}

// Item 5: two healers on one dataset, with both cores busy. Only one
// writes (the state names it, cycle after cycle); with it SIGSTOPped, the
// other takes over once the lease runs out, and the stopped one, resumed,
// writes nothing more.
func TestTwoHealersOneWrites(t *testing.T) {
	c := sharedCluster(t, 6)
	src := t.TempDir()
	if _, err := synth.Write(src, synth.Imbalanced(150, 3, 0.6, 10_000, 40_000, 48)); err != nil {
		t.Fatal(err)
	}
	stores := "--stores=" + strings.Join(c.urls, ",")
	if r := run(t, 5*time.Minute, nil, "ingest", stores, "--data=4", "--parity=2", "--shard-size=512KiB", src, "two"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	// Both cores busy with other processes, as on a training node: the
	// test runs in the suite's quiet stage, where no other load is.
	busyProcesses(t, 2)
	const lease = 8 * time.Second
	a := startHealer(t, stores, "--pause=500ms", "--lease=8s", "two")
	a.waitLog(t, `heal: holding the healer lock`, time.Minute)
	b := startHealer(t, stores, "--pause=500ms", "--lease=8s", "two")
	b.waitLog(t, `heal: another healer holds the lock; standing by`, time.Minute)
	idA := fmt.Sprintf("heal-%s-%d", hostname(t), a.cmd.Process.Pid)
	idB := fmt.Sprintf("heal-%s-%d", hostname(t), b.cmd.Process.Pid)
	// A writes its state after its first step, not when it takes the
	// lock: wait for the first state (on a busy machine the step outlasted
	// B's start), then it must be A's, and stay A's.
	for deadline := time.Now().Add(time.Minute); healState(t, c, "two") == nil && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	for range 5 {
		if st := healState(t, c, "two"); st == nil || st.Healer != idA {
			t.Fatalf("state %+v: healer A (%s) holds the lock, and only it writes", st, idA)
		}
		time.Sleep(time.Second)
	}
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	// A's lease runs out Lease after its last renewal, which the lock
	// object holds (to the second), and which A, stopped, cannot change.
	var info repository.LockInfo
	b0 := make([]byte, 4096)
	lockStore := c.store(t, 0)
	size, err := lockStore.Stat(context.Background(), repository.HealLockKey("two"))
	if err != nil {
		t.Fatal(err)
	}
	if err := lockStore.ReadAt(context.Background(), repository.HealLockKey("two"), b0[:size], 0); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b0[:size], &info); err != nil || info.IngestID != idA {
		t.Fatalf("the healer lock %s: want A's (%s): %v", b0[:size], idA, err)
	}
	runsOut := time.Unix(info.Heartbeat, 0).Add(lease)
	for {
		if st := healState(t, c, "two"); st != nil && st.Healer == idB {
			break
		}
		if time.Since(stopped) > lease+30*time.Second {
			t.Fatalf("healer B did not take over within the lease (%v) and 30 s:\n%s", lease, b.logText(t))
		}
		time.Sleep(200 * time.Millisecond)
	}
	took := time.Since(stopped)
	// The heartbeat is kept to the second: allow that second.
	if early := runsOut.Sub(time.Now()); early > time.Second {
		t.Fatalf("healer B took over %v before A's lease ran out (A's last renewal %v, lease %v)", early, time.Unix(info.Heartbeat, 0), lease)
	}
	t.Logf("healer B took over %v after A was stopped, %v after A's lease ran out (lease %v)", took.Round(100*time.Millisecond), time.Since(runsOut).Round(100*time.Millisecond), lease)
	a.cmd.Process.Signal(syscall.SIGCONT)
	a.waitLog(t, `lost the healer lock|another healer holds the lock`, time.Minute)
	for range 5 {
		if st := healState(t, c, "two"); st == nil || st.Healer != idB {
			t.Fatalf("after A resumed, state %+v: only B (%s) writes", st, idB)
		}
		time.Sleep(time.Second)
	}
}

func hostname(t *testing.T) string {
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// countingProxy forwards HTTP to a store, counting requests and the bytes
// of request and response bodies: what the healer really asked of it.
type countingProxy struct {
	requests, bytes atomic.Int64
	target          string
}

func (p *countingProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	body, _ := io.ReadAll(r.Body)
	p.bytes.Add(int64(len(body)))
	req, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	req.Host = r.Host
	req.ContentLength = int64(len(body))
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	n, _ := io.Copy(w, resp.Body)
	p.bytes.Add(n)
}

// Item 6: the healer's rates hold on a busy machine. Both cores burn, a
// healer bound to 4 MiB/s scrubs one dataset and a healer bound to 40
// requests/s another, for 20 s, each through a proxy that counts what
// reaches the stores: each rate is within 10% of its bound. 20 s, not the
// 60 it was until issue 56: the bound is the same, and over 20 s one
// request is 0.1% of the count and one 1 MiB fragment 1.2% of the bytes;
// the 40 s more cost the suite 80 CPU seconds of burners.
func TestHealRatesOnBusyMachine(t *testing.T) {
	c := startCluster(t, 6)
	src := t.TempDir()
	if _, err := synth.Write(src, synth.Imbalanced(300, 3, 0.6, 20_000, 80_000, 49)); err != nil {
		t.Fatal(err)
	}
	stores := "--stores=" + strings.Join(c.urls, ",")
	for _, name := range []string{"bytes", "requests"} {
		if r := run(t, 5*time.Minute, nil, "ingest", stores, "--data=4", "--parity=2", "--shard-size=1MiB", src, name); r.code != 0 {
			t.Fatalf("ingest: %v", r)
		}
	}
	// Each healer reaches the stores through proxies of its own.
	proxied := func() (string, []*countingProxy) {
		var urls []string
		var ps []*countingProxy
		for i, s := range c.servers {
			p := &countingProxy{target: s.Addr}
			ln := listenLoopback(t)
			srv := &http.Server{Handler: p}
			go srv.Serve(ln)
			t.Cleanup(func() { srv.Close() })
			urls = append(urls, strings.Replace(c.urls[i], s.Addr, ln.Addr().String(), 1))
			ps = append(ps, p)
		}
		return "--stores=" + strings.Join(urls, ","), ps
	}
	byteStores, byteProxies := proxied()
	reqStores, reqProxies := proxied()
	sum := func(ps []*countingProxy) (req, b int64) {
		for _, p := range ps {
			req += p.requests.Load()
			b += p.bytes.Load()
		}
		return
	}
	stop := burnCPU(2)
	defer stop()
	const byteRate, reqRate = 4 << 20, 40
	hb := startHealer(t, byteStores, "--rate-bytes=4MiB", "--pause=1ms", "bytes")
	hr := startHealer(t, reqStores, "--rate-requests=40", "--pause=1ms", "requests")
	hb.waitLog(t, `holding the healer lock`, time.Minute)
	hr.waitLog(t, `holding the healer lock`, time.Minute)
	// Measure from a few seconds in: the bursts of the start are spent.
	time.Sleep(3 * time.Second)
	_, b0 := sum(byteProxies)
	r0, _ := sum(reqProxies)
	t0 := time.Now()
	time.Sleep(20 * time.Second)
	_, b1 := sum(byteProxies)
	r1, _ := sum(reqProxies)
	secs := time.Since(t0).Seconds()
	stop()
	gotBytes := float64(b1-b0) / secs
	gotReqs := float64(r1-r0) / secs
	t.Logf("over %.0f s with both cores busy: %.2f MiB/s against a bound of 4 MiB/s (%.3f); %.1f requests/s against 40 (%.3f)",
		secs, gotBytes/(1<<20), gotBytes/byteRate, gotReqs, gotReqs/reqRate)
	if gotBytes < 0.9*byteRate || gotBytes > 1.1*byteRate {
		t.Errorf("byte rate %.0f B/s: not within 10%% of %d\n%s", gotBytes, byteRate, hb.logText(t))
	}
	if gotReqs < 0.9*reqRate || gotReqs > 1.1*reqRate {
		t.Errorf("request rate %.1f/s: not within 10%% of %d\n%s", gotReqs, reqRate, hr.logText(t))
	}
}

// listenLoopback listens on a free loopback port, closed in t.Cleanup.
func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// Issue 58: a mount hands each "heal needed" its reads return to the
// hinter of the version that holds the shard. Under --follow, epoch 1 reads
// version 2, whose appended shard lives under the append's ingest: a lost
// fragment there must be hinted under that ingest and shard, and nothing
// else hinted.
func TestFollowHintsTheVersionItReads(t *testing.T) {
	requireTool(t, "python3")
	c := sharedCluster(t, 6)
	specA := synth.Spec{Counts: []int{60, 40}, MinSize: 500, MaxSize: 3000, Seed: 91}
	specB := synth.Spec{Counts: []int{30, 20}, MinSize: 500, MaxSize: 3000, Seed: 92, Tag: "new-"}
	srcA, srcB, all := writeSource(t, specA), writeSource(t, specB), t.TempDir()
	for _, s := range []synth.Spec{specA, specB} {
		if _, err := synth.Write(all, s); err != nil {
			t.Fatal(err)
		}
	}
	stores := "--stores=" + strings.Join(c.urls, ",")
	if r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=4", "--parity=2", srcA, "fh"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	ctx := context.Background()
	s1 := c.store(t, 1)
	before, err := s1.List(ctx, repository.DataPrefix("fh"))
	if err != nil || len(before) != 1 {
		t.Fatalf("store 1 holds %v (%v), want the one fragment of shard 0", before, err)
	}
	mp := mountShardfsEnv(t, nil, stores, "--batch-size=10", "--seed=3", "--follow", "--run=h1", "--report-wait=1m", "fh")
	readIndexKeys(t, mp.dir, 0, 0) // epoch 0 recorded at version 1
	if r := run(t, 2*time.Minute, nil, "ingest", stores, "--append", srcB, "fh"); r.code != 0 || !strings.Contains(r.stdout, "committed version 2") {
		t.Fatalf("append: %v", r)
	}
	// The append's shard is shard 1; its data fragment 0 lies on store 1.
	after, _ := s1.List(ctx, repository.DataPrefix("fh"))
	var lost string
	for _, k := range after {
		if !slices.Contains(before, k) && strings.HasSuffix(k, "/00000001.00") {
			lost = k
		}
	}
	if lost == "" {
		t.Fatalf("store 1 after the append holds %v: no fragment 0 of shard 1", after)
	}
	if err := s1.Delete(ctx, lost); err != nil {
		t.Fatal(err)
	}
	appendID := strings.Split(strings.TrimPrefix(lost, repository.DataPrefix("fh")), "/")[0]
	checkEpochTars(t, mp.dir, all, 1) // version 2, byte for byte, shard 1 decoded
	want := repository.HealHintKey("fh", appendID, 1)
	var hints []string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if hints, err = s1.List(ctx, repository.HealHintPrefix("fh")); err != nil {
			t.Fatal(err)
		}
		if slices.Contains(hints, want) || time.Now().After(deadline) {
			break
		}
	}
	if !slices.Equal(hints, []string{want}) {
		t.Fatalf("hints after reading version 2 with its shard 1 missing a fragment: %v, want only %s; mount log:\n%s", hints, want, mustRead(t, mp.log))
	}
}
