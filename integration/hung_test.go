package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"

	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/internal/toxitest"
)

// proxiedCluster is n MinIO processes, each reached through its own toxiproxy proxy.
type proxiedCluster struct {
	*cluster
	proxies []*toxiproxy.Proxy
	urls    []string // through the proxies
}

func startProxiedCluster(t *testing.T, n int) *proxiedCluster {
	t.Helper()
	// The faults are the proxies': the MinIO processes behind them are the
	// shared set's, each store a fresh bucket.
	c := sharedCluster(t, n)
	tp := toxitest.Start(t)
	pc := &proxiedCluster{cluster: c}
	for i, raw := range c.urls {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		p := tp.Proxy(fmt.Sprintf("store%d", i), u.Host)
		pc.proxies = append(pc.proxies, p)
		pc.urls = append(pc.urls, "http://"+p.Listen+u.Path)
	}
	return pc
}

type mountStats struct {
	HedgedReads   int64 `json:"hedged_reads"`
	DegradedReads int64 `json:"degraded_reads"`
	PrefetchBytes int64 `json:"prefetch_bytes"`
	Stores        []struct {
		State string `json:"state"`
	} `json:"stores"`
}

func readMountStats(t *testing.T, mnt string) mountStats {
	t.Helper()
	var s mountStats
	if err := json.Unmarshal(mustRead(t, filepath.Join(mnt, ".shardfs", "stats.json")), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// sampleFiles lists the sample files of a mount, sorted.
func sampleFiles(t *testing.T, mnt string) []string {
	t.Helper()
	var files []string
	filepath.Walk(filepath.Join(mnt, "samples"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	sort.Strings(files)
	return files
}

// burnCPU keeps n goroutines spinning until the returned stop is called,
// so that healthy stores answer late, as on a loaded training node.
func burnCPU(n int) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := 0
			for {
				select {
				case <-done:
					return
				default:
					for j := 0; j < 1e5; j++ {
						x += j
					}
				}
			}
		}()
	}
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// Issue 9 item 7: with exactly m stores black-holed (connections accepted,
// never answered), every read still returns the right bytes, under CPU load
// and with the prefetcher's large ranged reads; healthy stores are not
// marked down, and the slow reads were hedged.
func TestBlackHoledStoresWithinM(t *testing.T) {
	pc := startProxiedCluster(t, 6)
	src := ingestSynthetic(t, pc.urls, 600, "ds", 4, 2)
	mnt := mountShardfs(t, "--stores="+strings.Join(pc.urls, ","), "--batch-size=16", "--epochs=2", "--cache-size=64MiB", "ds")
	files := sampleFiles(t, mnt)
	if len(files) != 600 {
		t.Fatalf("%d sample files, want 600", len(files))
	}
	toxitest.BlackHole(t, pc.proxies[1])
	toxitest.BlackHole(t, pc.proxies[4])
	stop := burnCPU(2)
	defer stop()
	var mu sync.Mutex
	var failures []string
	work := make(chan string)
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range work {
				got, err := os.ReadFile(f)
				rel, _ := filepath.Rel(filepath.Join(mnt, "samples"), f)
				want, _ := os.ReadFile(filepath.Join(src, rel))
				if err != nil || !bytes.Equal(got, want) {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%s: %v (bytes equal %v)", rel, err, bytes.Equal(got, want)))
					mu.Unlock()
				}
			}
		}()
	}
	start := time.Now()
	go func() {
		for _, f := range files {
			work <- f
		}
		close(work)
	}()
	// Meanwhile a trainer reads two epochs of batch tars through the prefetcher.
	samples := 0
	for e := 0; e < 2; e++ {
		res, err := readEpochVerified(t, mnt, src, e, nil)
		if err != nil {
			failures = append(failures, fmt.Sprintf("epoch %d batch %d: %v", e, res.batches, err))
		}
		samples += res.samples
	}
	wg.Wait()
	stop()
	if len(failures) > 0 {
		log, _ := os.ReadFile(mnt + ".log")
		t.Fatalf("%d reads failed with 2 of 6 stores black-holed (m=2):\n%s\n%s", len(failures), strings.Join(failures[:min(10, len(failures))], "\n"), log)
	}
	st := readMountStats(t, mnt)
	for i, s := range st.Stores {
		if i != 1 && i != 4 && s.State != "healthy" {
			t.Errorf("store %d is %s, but only stores 1 and 4 are black-holed", i, s.State)
		}
	}
	if st.HedgedReads == 0 {
		t.Errorf("reads with 2 black-holed stores and no hedged read counted: %+v", st)
	}
	t.Logf("600 sample files and %d batch-tar samples read in %v with stores 1 and 4 black-holed and 2 cores busy; hedged %d, degraded %d",
		samples, time.Since(start).Round(time.Millisecond), st.HedgedReads, st.DegradedReads)
}

// Issue 9 item 8: with more than m stores hung, the first EIO comes within
// --read-timeout, later reads fail within about a second, and reads come
// back when the stores do.
func TestMoreThanMStoresHung(t *testing.T) {
	pc := startProxiedCluster(t, 6)
	src := ingestSynthetic(t, pc.urls, 200, "ds", 4, 2)
	const readTimeout = 4 * time.Second
	mnt := mountShardfs(t, "--stores="+strings.Join(pc.urls, ","), "--batch-size=16", "--no-prefetch", "--read-timeout="+readTimeout.String(), "ds")
	files := sampleFiles(t, mnt)
	for _, i := range []int{0, 2, 5} {
		toxitest.BlackHole(t, pc.proxies[i])
	}
	// A sample whose data fragment is on a healthy store still reads (one
	// GET, no decode); the others need a decode that cannot succeed.
	var eio []time.Duration
	start := time.Now()
	for _, f := range files[:60] {
		t0 := time.Now()
		got, err := os.ReadFile(f)
		d := time.Since(t0)
		switch {
		case err == nil:
			rel, _ := filepath.Rel(filepath.Join(mnt, "samples"), f)
			want, _ := os.ReadFile(filepath.Join(src, rel))
			if !bytes.Equal(got, want) {
				t.Fatalf("%s: wrong bytes with 3 stores hung", rel)
			}
		case errors.Is(err, syscall.EIO):
			eio = append(eio, d)
		default:
			t.Fatalf("read with 3 of 6 stores hung: %v, want EIO or the right bytes", err)
		}
	}
	if len(eio) < 10 {
		t.Fatalf("only %d of 60 reads failed with 3 of 6 stores hung; the test needs more", len(eio))
	}
	if eio[0] > readTimeout+time.Second {
		t.Errorf("first EIO after %v, want within --read-timeout %v", eio[0].Round(time.Millisecond), readTimeout)
	}
	var slow []string
	for _, d := range eio[2:] { // the first two may still be finding out which stores are down
		if d > 1500*time.Millisecond {
			slow = append(slow, d.Round(time.Millisecond).String())
		}
	}
	if len(slow) > 0 {
		t.Errorf("while the stores stay down reads must fail within about a second; %d of %d were slower: %v", len(slow), len(eio)-2, slow)
	}
	t.Logf("%d EIOs in %v; first after %v", len(eio), time.Since(start).Round(time.Millisecond), eio[0].Round(time.Millisecond))
	for _, i := range []int{0, 2, 5} {
		toxitest.Heal(t, pc.proxies[i])
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, f := range files[60:120] {
		for {
			got, err := os.ReadFile(f)
			if err == nil {
				rel, _ := filepath.Rel(filepath.Join(mnt, "samples"), f)
				want, _ := os.ReadFile(filepath.Join(src, rel))
				if !bytes.Equal(got, want) {
					t.Fatalf("%s: wrong bytes after the stores came back", rel)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("reads did not come back within 30s of the stores returning: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// Issue 9 items 9 and 10: one hung store (SIGSTOP) bounds mount, plan and
// verify by the per-request timeout, and verify says it could not check.
func TestOneHungStoreBoundsTools(t *testing.T) {
	t.Parallel() // waits more than it computes, asserts bytes, states and hang bounds (main_test.go, parallelTests)
	c := startCluster(t, 6)
	stores := "--stores=" + strings.Join(c.urls, ",")
	src := writeSource(t, synth.Imbalanced(600, 5, 0.7, 20_000, 60_000, 21))
	if r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=4", "--parity=2", "--shard-size=1MiB", src, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	if err := c.servers[3].Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer c.servers[3].Signal(syscall.SIGCONT)
	// The default request timeout is 10s; each tool may wait about that once or twice, not once per shard.
	const bound = 45 * time.Second
	r := run(t, 3*time.Minute, nil, "plan", stores, "--batch-size=16", "ds")
	rp := r.elapsed
	if r.code != 0 || r.elapsed > bound {
		t.Errorf("plan with one store hung: exit %d after %v, want success within %v: %v", r.code, r.elapsed.Round(time.Second), bound, r)
	}
	r = run(t, 3*time.Minute, nil, "verify", stores, "ds")
	rv := r.elapsed
	if r.code != 3 || r.elapsed > bound || !strings.Contains(r.stderr, c.servers[3].Addr) {
		t.Errorf("verify with one store hung: exit %d after %v, want exit 3 (could not check) naming the store within %v: %v", r.code, r.elapsed.Round(time.Second), bound, r)
	}
	start := time.Now()
	mnt := mountShardfs(t, stores, "--batch-size=16", "ds")
	if d := time.Since(start); d > bound {
		t.Errorf("mount with one store hung took %v, want within %v", d.Round(time.Second), bound)
	}
	t.Logf("one store SIGSTOPped, default 10s request timeout: plan %v, verify %v (exit %d), mount %v", rp.Round(time.Millisecond), rv.Round(time.Millisecond), r.code, time.Since(start).Round(time.Millisecond))
	files := sampleFiles(t, mnt)
	for _, f := range files[:20] {
		got, err := os.ReadFile(f)
		rel, _ := filepath.Rel(filepath.Join(mnt, "samples"), f)
		want, _ := os.ReadFile(filepath.Join(src, rel))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s with one store hung: %v", rel, err)
		}
	}
}

// hasSocket reports whether process pid holds a socket open.
func hasSocket(pid int) bool {
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		if link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && strings.HasPrefix(link, "socket:") {
			return true
		}
	}
	return false
}

// Issue 9 item 10: an outage or a cancelled run is "could not check" (exit 3), not "unrecoverable".
func TestVerifyExitCodes(t *testing.T) {
	c := startCluster(t, 3)
	stores := "--stores=" + strings.Join(c.urls, ",")
	src := writeSource(t, synth.Imbalanced(400, 5, 0.7, 20_000, 80_000, 9))
	if r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--shard-size=1MiB", src, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	cmd := execShardfs("verify", stores, "ds")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// SIGINT once verify is at work, talking to the stores: sent before
	// main has set up its handler (while the binary's packages initialise),
	// it ends the process as it would any program (exit -1, twice in three
	// runs on a busy machine), and tests nothing of verify's.
	for deadline := time.Now().Add(time.Minute); !hasSocket(cmd.Process.Pid) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	var ee interface{ ExitCode() int }
	if errors.As(err, &ee) && ee.ExitCode() != 3 && ee.ExitCode() != 0 {
		t.Errorf("cancelled verify: exit %d, want 3 (could not check) or 0 (finished first): %s", ee.ExitCode(), out.String())
	}
	c.servers[1].Kill()
	c.servers[2].Kill()
	r := run(t, 2*time.Minute, nil, "verify", stores, "ds")
	if r.code != 3 || !strings.Contains(r.stderr, "could not") {
		t.Errorf("verify with 2 of 3 stores down: want exit 3 'could not check': %v", r)
	}
}

// Issue 11 item 3: hedges fire on a store's own slowness, measured as the
// time to its first byte. A store 2 s away (toxiproxy latency on its
// connection alone) is still hedged around: the epoch reads verified, and
// hedged reads are counted.
func TestSlowStoreStillHedged(t *testing.T) {
	pc := startProxiedCluster(t, 6)
	src := ingestSynthetic(t, pc.urls, 300, "ds", 4, 2)
	// --prime=false: the first batches, primed before the store slowed,
	// would be read from memory; this is of the reads that reach it.
	mnt := mountShardfs(t, "--stores="+strings.Join(pc.urls, ","), "--batch-size=16", "--cache-size=64MiB", "--prime=false", "ds")
	toxitest.Latency(t, pc.proxies[2], 2000, 0)
	res, err := readEpochVerified(t, mnt, src, 0, nil)
	if err != nil {
		t.Fatalf("epoch with store 2 answering after 2 s: batch %d: %v", res.batches, err)
	}
	st := readMountStats(t, mnt)
	if st.HedgedReads == 0 {
		t.Fatalf("%d samples read with one store 2 s away and no read hedged: %+v", res.samples, st)
	}
	t.Logf("%d samples read with store 2 answering after 2 s; hedged %d, degraded %d", res.samples, st.HedgedReads, st.DegradedReads)
}

// Issue 24 item 4: the --read-timeout bound holds on a busy machine. With
// 3 of 6 stores black-holed (more than m=2) and both cores kept busy by
// other work, the first read that cannot be served fails (EIO) within
// 1.5 x --read-timeout, and later ones, with the stores known to be down,
// within 2 s. Reads whose data fragment is on a healthy store still return
// the right bytes. Batch files are read too, with prefetch on.
func TestMoreThanMStoresHungBusy(t *testing.T) {
	pc := startProxiedCluster(t, 6)
	src := ingestSynthetic(t, pc.urls, 200, "ds", 4, 2)
	const readTimeout = 5 * time.Second
	// --prime=false: the 200 samples, primed before the stores hung,
	// would be served from memory; this is of the reads that reach them.
	mnt := mountShardfs(t, "--stores="+strings.Join(pc.urls, ","), "--batch-size=16", "--read-timeout="+readTimeout.String(), "--prime=false", "ds")
	files := sampleFiles(t, mnt)
	// Busy as a training node: goroutines here and processes beside the
	// daemon spin on both cores.
	stop := burnCPU(4)
	defer stop()
	defer busyProcesses(t, 4)()
	for _, i := range []int{0, 2, 5} {
		toxitest.BlackHole(t, pc.proxies[i])
	}
	var eio []time.Duration
	var eioFiles []string
	read := func(f string) {
		t0 := time.Now()
		got, err := os.ReadFile(f)
		d := time.Since(t0)
		switch {
		case err == nil:
			if rel, err := filepath.Rel(filepath.Join(mnt, "samples"), f); err == nil && !strings.HasPrefix(rel, "..") {
				want, _ := os.ReadFile(filepath.Join(src, rel))
				if !bytes.Equal(got, want) {
					t.Fatalf("%s: wrong bytes with 3 stores hung", rel)
				}
			}
		case errors.Is(err, syscall.EIO):
			eio = append(eio, d)
			eioFiles = append(eioFiles, f)
		default:
			t.Fatalf("%s with 3 of 6 stores hung: %v, want EIO or the right bytes", f, err)
		}
	}
	for _, f := range files[:40] {
		read(f)
	}
	for b := range 4 {
		read(filepath.Join(mnt, fmt.Sprintf("epochs/0000/rank-000/batch-%06d.tar", b)))
	}
	if len(eio) < 10 {
		t.Fatalf("only %d of 44 reads failed with 3 of 6 stores hung; the test needs more", len(eio))
	}
	if eio[0] > readTimeout*3/2 {
		t.Errorf("first EIO after %v, want within 1.5 x --read-timeout %v", eio[0].Round(time.Millisecond), readTimeout)
	}
	var slow []string
	for i, d := range eio[1:] {
		if d > 2*time.Second {
			slow = append(slow, fmt.Sprintf("%s: %v", filepath.Base(eioFiles[i+1]), d.Round(time.Millisecond)))
		}
	}
	if len(slow) > 0 {
		t.Errorf("with the stores known to be down, reads must fail within 2 s; %d of %d were slower: %v", len(slow), len(eio)-1, slow)
	}
	t.Logf("%d EIOs; first after %v; the rest: %v", len(eio), eio[0].Round(time.Millisecond), eio[1:])
}
