//go:build benchharness

// Package bench is the benchmark harness behind scripts/bench.sh: it runs
// shardfs, a minimal in-memory FUSE file, tmpfs, rclone mount and s3fs side
// by side on one machine against local MinIO, and writes BENCHMARKS.md and
// PNG charts. Every figure is a median of repetitions in the same run,
// reported with its min and max, and compared as a ratio.
package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"

	"github.com/shardfs/shardfs/internal/miniotest"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/internal/toxitest"
)

var (
	binary string
	reps   = envInt("SHARDFS_BENCH_REPS", 3)
	outDir = envStr("SHARDFS_BENCH_OUT", "../docs/bench")
)

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return def
}

func envStr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// stat is a median with its range over repetitions.
type stat struct{ med, lo, hi float64 }

func summarize(xs []float64) stat {
	s := slices.Clone(xs)
	slices.Sort(s)
	return stat{med: s[len(s)/2], lo: s[0], hi: s[len(s)-1]}
}

func (s stat) String() string { return fmt.Sprintf("%.0f (%.0f–%.0f)", s.med, s.lo, s.hi) }

// pct2 prints a stat that is already a percentage.
func (s stat) pct2() string { return fmt.Sprintf("%.2f%% (%.2f–%.2f)", s.med, s.lo, s.hi) }

func (s stat) pct() string {
	return fmt.Sprintf("%.2f%% (%.2f–%.2f)", 100*s.med, 100*s.lo, 100*s.hi)
}

// repeat runs f reps times and summarizes its results.
func repeat(f func() float64) stat {
	var xs []float64
	for i := 0; i < reps; i++ {
		xs = append(xs, f())
	}
	return summarize(xs)
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+miniotest.AccessKey, "AWS_SECRET_ACCESS_KEY="+miniotest.SecretKey)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// daemon is a background mount process.
type daemon struct {
	dir string
	cmd *exec.Cmd
}

// startMount starts a FUSE daemon (name args...) serving dir and waits until ready(dir).
func startMount(t *testing.T, dir string, ready func() bool, env []string, name string, args ...string) *daemon {
	t.Helper()
	os.MkdirAll(dir, 0o755)
	cmd := exec.Command(name, args...)
	cmd.Env = append(append(os.Environ(), "AWS_ACCESS_KEY_ID="+miniotest.AccessKey, "AWS_SECRET_ACCESS_KEY="+miniotest.SecretKey), env...)
	logf, _ := os.Create(dir + ".log")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{dir: dir, cmd: cmd}
	deadline := time.Now().Add(60 * time.Second)
	for !ready() {
		if time.Now().After(deadline) {
			d.stop()
			log, _ := os.ReadFile(dir + ".log")
			t.Fatalf("%s did not come up:\n%s", name, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return d
}

// anomalyTally sums the anomaly detector's findings over every shardfs
// mount the run stops: on healthy runs, each one is a false positive.
var anomalyTally struct {
	sync.Mutex
	mounts, checks int64
	fired          map[string]int64 // by kind
	where          []string         // the mounts that fired any, with what
}

// tallyAnomalies adds a shardfs mount's fired anomalies to anomalyTally.
func (d *daemon) tallyAnomalies() {
	b, err := os.ReadFile(filepath.Join(d.dir, ".shardfs", "stats.json"))
	if err != nil {
		return // not a shardfs mount (a peer, the ceiling), or one that failed
	}
	var st struct {
		Fired  map[string]int64 `json:"anomalies_fired"`
		Checks int64            `json:"anomaly_checks"`
	}
	if json.Unmarshal(b, &st) != nil {
		return
	}
	anomalyTally.Lock()
	defer anomalyTally.Unlock()
	if anomalyTally.fired == nil {
		anomalyTally.fired = map[string]int64{}
	}
	anomalyTally.mounts++
	anomalyTally.checks += st.Checks
	var here []string
	for k, n := range st.Fired {
		anomalyTally.fired[k] += n
		if n > 0 {
			here = append(here, fmt.Sprintf("%s %d", k, n))
		}
	}
	if len(here) > 0 {
		slices.Sort(here)
		anomalyTally.where = append(anomalyTally.where, filepath.Base(d.dir)+": "+strings.Join(here, ", "))
	}
}

// resetAnomalies starts a new tally and returns a function that describes it.
func resetAnomalies() (describe func() string) {
	anomalyTally.Lock()
	anomalyTally.mounts, anomalyTally.checks, anomalyTally.fired, anomalyTally.where = 0, 0, map[string]int64{}, nil
	anomalyTally.Unlock()
	return func() string {
		anomalyTally.Lock()
		defer anomalyTally.Unlock()
		var total int64
		var kinds []string
		for k, n := range anomalyTally.fired {
			total += n
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		}
		slices.Sort(kinds)
		s := fmt.Sprintf("%d anomalies fired over %d shardfs mounts and %d evaluations of the detector", total, anomalyTally.mounts, anomalyTally.checks)
		if total > 0 {
			s += " (" + strings.Join(kinds, ", ") + "; in " + strings.Join(anomalyTally.where, "; ") + ")"
		}
		return s
	}
}

func (d *daemon) stop() {
	d.tallyAnomalies()
	exec.Command("fusermount3", "-u", d.dir).Run()
	d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		exec.Command("fusermount3", "-uz", d.dir).Run()
		d.cmd.Process.Kill()
		<-done
	}
}

// peakRSS is the daemon's VmHWM in bytes.
func (d *daemon) peakRSS() int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			kb, _ := strconv.ParseInt(strings.Fields(l)[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// proxiedStores starts one MinIO with buckets store0 to store5 and extra,
// and one toxiproxy named name in front of it; stores is the --stores flag
// of the six store buckets, reached through the proxy.
func proxiedStores(t *testing.T, name string, extra ...string) (proxy *toxiproxy.Proxy, stores string) {
	proxy, stores, _ = proxiedCluster(t, name, extra...)
	return proxy, stores
}

// cluster is the processes behind proxiedCluster's stores, for their CPU time.
type cluster struct{ minio, toxiproxy int }

// proxiedCluster is proxiedStores, with the pids of MinIO and toxiproxy.
func proxiedCluster(t *testing.T, name string, extra ...string) (proxy *toxiproxy.Proxy, stores string, pids cluster) {
	srv := miniotest.Start(t, append([]string{"store0", "store1", "store2", "store3", "store4", "store5"}, extra...)...)
	tox := toxitest.Start(t)
	proxy = tox.Proxy(name, srv.Addr)
	var urls []string
	for i := 0; i < 6; i++ {
		urls = append(urls, fmt.Sprintf("http://%s/store%d/ds", proxy.Listen, i))
	}
	return proxy, "--stores=" + strings.Join(urls, ","), cluster{srv.Pid(), tox.Pid()}
}

func exists(p string) func() bool {
	return func() bool { _, err := os.Stat(p); return err == nil }
}

// report accumulates BENCHMARKS.md.
// report is the markdown a run writes: its head (what was measured, on
// what), then the tables that lead (CPU per GB served), then each
// scenario's section in turn.
type report struct {
	head, lead, b strings.Builder
	charts        []chart
}

func (r *report) printf(format string, args ...any) { fmt.Fprintf(&r.b, format, args...) }

// leadf writes to the part that comes right after the head.
func (r *report) leadf(format string, args ...any) { fmt.Fprintf(&r.lead, format, args...) }

func (r *report) text() string { return r.head.String() + r.lead.String() + r.b.String() }

func TestBenchmarks(t *testing.T) {
	for _, tool := range []string{"fio", "fusermount3", "rclone", "s3fs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing: run scripts/bench.sh, which installs it", tool)
		}
	}
	// Everything here is plain HTTP on loopback. rclone 1.60's S3 client fails
	// outright when AWS_CA_BUNDLE is set ("unsupported transport"), so drop it.
	os.Unsetenv("AWS_CA_BUNDLE")
	dir, _ := os.MkdirTemp("", "shardfs-bench-bin")
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "shardfs")
	// The test build: it adds the FUSE ceiling and --inject-latency, which
	// the shipped binary does not hold.
	run(t, "go", "build", "-tags", "shardfs_testhooks", "-o", binary, "../cmd/shardfs")
	os.MkdirAll(outDir, 0o755)

	// The workload: 10,000 samples of 50-150 kB in 10 imbalanced strata.
	work := t.TempDir()
	src := filepath.Join(work, "src")
	total, err := synth.Write(src, synth.Imbalanced(10_000, 10, 0.75, 50_000, 150_000, 7))
	if err != nil {
		t.Fatal(err)
	}
	r := &report{}
	fmt.Fprintf(&r.head, "# shardfs benchmarks\n\nMeasured by `scripts/bench.sh` on %s. Every figure is the median of %d repetitions in the same run, with min–max in parentheses; compare ratios, not absolute numbers, across machines.\n\n",
		machine(), reps)
	fmt.Fprintf(&r.head, "Workload: %d samples of 50–150 kB in 10 imbalanced classes (%.0f MB), read whole for one epoch by 8 reader threads unless stated.\n\n", 10_000, float64(total)/1e6)

	// SHARDFS_BENCH_ONLY=epochs (a comma-separated list) runs only those
	// scenarios and writes their section to docs/bench/<names>.md, leaving
	// BENCHMARKS.md as the last full run wrote it.
	scenarios := []struct {
		name string
		run  func()
	}{
		{"loader", func() { loader(t, r, work, src, total) }},
		{"fuse", func() { fuseCeiling(t, r, work, src) }},
		{"stalls", func() { stalls(t, r, work, src) }},
		{"degraded", func() { degraded(t, r, work, src) }},
		{"epochs", func() { epochsBeyondRAM(t, r, work) }},
		{"latency", func() { latencyRegime(t, r, work) }},
		{"floors", func() { cpuFloors(t, r, work) }},
		{"records", func() { records(t, r, work) }},
		{"requests", func() { requestsPerEpoch(t, r, work) }},
		{"fusereq", func() { fuseRequestSizes(t, r, work) }},
		{"ingestcpu", func() { ingestCPU(t, r, work) }},
		{"trainer", func() { trainerStall(t, r, work) }},
		{"steady", func() { steadyState(t, r, work) }},
		{"coldcache", func() { coldCache(t, r, work) }},
		// Only when asked (hours at 5,000,000 records): SHARDFS_BENCH_ONLY=ingestcpu,scale.
		{"scale", func() { scaleIngest(t, r, work) }},
		// Only when asked: SHARDFS_BENCH_ONLY=baseline SHARDFS_BENCH_BASELINE=<rev>.
		{"baseline", func() { againstBaseline(t, r, work) }},
	}
	only := os.Getenv("SHARDFS_BENCH_ONLY")
	for _, sc := range scenarios {
		if only == "" && sc.name != "baseline" && sc.name != "scale" || slices.Contains(strings.Split(only, ","), sc.name) {
			sc.run()
		}
	}
	if only != "" {
		md := filepath.Join(outDir, strings.ReplaceAll(only, ",", "-")+".md")
		if err := os.WriteFile(md, []byte(r.text()), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", md)
		for _, c := range r.charts {
			if err := c.save(filepath.Join(outDir, c.file)); err != nil {
				t.Errorf("chart %s: %v", c.file, err)
			}
		}
		return
	}

	// The hand-written analysis of the targets this run misses, if any.
	if analysis, err := os.ReadFile("ANALYSIS.md"); err == nil {
		r.printf("%s", analysis)
	}
	// The GPU node's table, measured by hand with ../shared/gpu-check: a
	// 2-core run cannot remeasure it, so it is carried over as written.
	if gpu, err := os.ReadFile("GPU.md"); err == nil {
		r.printf("%s", gpu)
	}
	// The numbers first: a chart that fails to draw must not lose a run.
	md := filepath.Join(outDir, "..", "..", "BENCHMARKS.md")
	if err := os.WriteFile(md, []byte(r.text()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", md)
	for _, c := range r.charts {
		if err := c.save(filepath.Join(outDir, c.file)); err != nil {
			t.Errorf("chart %s: %v", c.file, err)
		}
	}
}

func machine() string {
	out, _ := exec.Command("nproc").Output()
	return fmt.Sprintf("%s, %s cores, loopback only", time.Now().UTC().Format("2006-01-02"), strings.TrimSpace(string(out)))
}

// fioBW runs fio and returns the read bandwidth in MB/s.
func fioBW(t *testing.T, args ...string) float64 {
	out := run(t, "fio", append(args, "--output-format=json", "--readonly")...)
	var res struct {
		Jobs []struct {
			Read struct {
				BW int64 `json:"bw_bytes"`
			} `json:"read"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &res); err != nil {
		t.Fatalf("fio output: %v\n%s", err, out)
	}
	var bw int64
	for _, j := range res.Jobs {
		bw += j.Read.BW
	}
	return float64(bw) / 1e6
}
