// Package integration holds end-to-end tests that run the shardfs binary
// against real MinIO server processes, one per store.
package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/miniotest"
)

// binary is shardfs as it ships; testBinary is its test build (build tag
// shardfs_testhooks), which adds mount's hidden --inject-latency, for the
// tests that need it.
var binary, testBinary string

func TestMain(m *testing.M) {
	if os.Getenv("SHARDFS_TEST_RECORD_EPOCH") != "" {
		os.Exit(recordEpochChild())
	}
	dir, err := os.MkdirTemp("", "shardfs-bin")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "shardfs")
	testBinary = filepath.Join(dir, "shardfs-testhooks")
	for _, b := range [][]string{{"-o", binary}, {"-tags", "shardfs_testhooks", "-o", testBinary}} {
		build := exec.Command("go", append(append([]string{"build"}, b...), "../cmd/shardfs")...)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build shardfs:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	for _, s := range shared.servers {
		s.Kill()
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// shared is the package's one set of MinIO processes, one per store, for
// the tests that never kill, stop, restart or touch the files of a store
// (sharedCluster). A MinIO process took seconds of CPU to come up (7.5 s
// measured on the busy 2-core machine), and the package started about 350
// of them, 6 a test: the largest part of the suite's time.
var shared struct {
	sync.Mutex
	dir     string
	servers []*miniotest.Server
	buckets int // made so far: each test gets buckets of its own
}

// sharedStores is how many processes the shared set holds: the most
// stores a test takes from it.
const sharedStores = 6

// sharedCluster is startCluster for a test that never kills, stops or
// restarts a store, nor reads a store's files: n stores, each a fresh
// bucket of its own on one of the shared processes, the same process for
// the same store number in every test. Its servers are nil: a test that
// reaches for one (c.servers[i]) fails at once and must use startCluster.
func sharedCluster(t *testing.T, n int) *cluster {
	t.Helper()
	if n > sharedStores {
		return startCluster(t, n)
	}
	miniotest.RequireBinary(t)
	shared.Lock()
	defer shared.Unlock()
	if shared.servers == nil {
		dir, err := os.MkdirTemp("", "shardfs-shared-minio")
		if err != nil {
			t.Fatal(err)
		}
		shared.dir = dir
		for i := range sharedStores {
			s, err := miniotest.StartShared(filepath.Join(dir, fmt.Sprint(i)))
			if err != nil {
				t.Fatalf("shared MinIO %d: %v", i, err)
			}
			shared.servers = append(shared.servers, s)
		}
	}
	shared.buckets++
	bucket := fmt.Sprintf("t%04d", shared.buckets)
	c := &cluster{}
	for i := range n {
		url := shared.servers[i].URL(bucket + "/ds")
		st, err := backend.Open(url, backend.OpenOptions{Credentials: &backend.Credentials{
			AccessKeyID: miniotest.AccessKey, SecretAccessKey: miniotest.SecretKey}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := backend.EnsureBucket(context.Background(), st); err != nil {
			t.Fatalf("bucket %s on shared MinIO %d: %v", bucket, i, err)
		}
		c.urls = append(c.urls, url)
		// Its objects go when the test ends, behind MinIO's back: no test
		// asks for the bucket again.
		t.Cleanup(func() { os.RemoveAll(filepath.Join(shared.servers[i].DataDir, bucket)) })
	}
	return c
}

// parallelTests: a test runs beside others (t.Parallel; test.sh's
// -parallel 4, once the serial tests are done, at the end of the run where
// the integration tests have the machine to themselves) when it waits more
// than it computes and asserts only bytes, states and wall-clock bounds
// that catch hangs, on stores of its own. Measured with a sampler of the
// test process tree's CPU beside the -race pass: these used 0.2-0.7 of a
// core over their wall time (TestOneHungStoreBoundsTools 20 CPU s in 86 s,
// on timeouts of a stopped store). A test that asserts a rate, a stall
// share, an RSS or an anomaly under load, or burns the cores on purpose,
// stays serial: the others' load would be its noise. Tests that mostly
// compute gain nothing from it on two cores (an earlier batch of kill
// soaks and scale tests saved 27 s of a run).

// soakCount is how many rounds a soak of random faults runs: long with
// SHARDFS_SOAK=long, the count every round ran before issue 56; short
// under -short; else ci, the count the suite runs on every change (the
// rounds' seeds are fixed, so CI runs the first ci rounds of the long
// soak). Each caller's comment gives the coverage of a CI run.
func soakCount(long, ci, short int) int {
	switch {
	case os.Getenv("SHARDFS_SOAK") == "long":
		return long
	case testing.Short():
		return short
	}
	return ci
}

// cluster is k+m MinIO processes, one bucket each.
type cluster struct {
	servers []*miniotest.Server
	urls    []string
}

func startCluster(t *testing.T, n int) *cluster {
	t.Helper()
	c := &cluster{}
	for i := 0; i < n; i++ {
		s := miniotest.Start(t, "shardfs")
		c.servers = append(c.servers, s)
		c.urls = append(c.urls, s.URL("shardfs/ds"))
	}
	return c
}

// store opens store i with the test credentials, as a test-side client.
func (c *cluster) store(t *testing.T, i int) backend.Store {
	t.Helper()
	s, err := backend.Open(c.urls[i], backend.OpenOptions{Credentials: &backend.Credentials{
		AccessKeyID: miniotest.AccessKey, SecretAccessKey: miniotest.SecretKey}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// clients opens every store of the cluster as a test-side client.
func (c *cluster) clients(t *testing.T) []backend.Store {
	t.Helper()
	var out []backend.Store
	for i := range c.urls {
		out = append(out, c.store(t, i))
	}
	return out
}

// result of one shardfs run.
type result struct {
	stdout, stderr string
	code           int
	elapsed        time.Duration
}

// run executes shardfs with the test credentials in its environment (never in argv).
func run(t *testing.T, timeout time.Duration, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+miniotest.AccessKey, "AWS_SECRET_ACCESS_KEY="+miniotest.SecretKey)
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String(), elapsed: time.Since(start)}
	if ctx.Err() != nil {
		t.Fatalf("shardfs %s: timed out after %v\n%s%s", strings.Join(args, " "), timeout, r.stdout, r.stderr)
	}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return r
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// execShardfs prepares a shardfs command with the test credentials, for tests that signal it.
func execShardfs(args ...string) *exec.Cmd { return execBinary(binary, args...) }

// measurePeakRSS makes cmd, not yet started, run under GNU time, and
// returns a func that gives the command's own peak resident set in bytes
// once cmd has ended. Go's rusage of a child cannot be used for it: os/exec
// starts a child with vfork, and Linux carries the parent's high-water
// mark across the exec, so a child of a 600 MB test process "peaked" at
// 600 MB however little it held (CI, in issue 55's RSS test). GNU time
// forks the command from its own small image. cmd runs in a process group
// of its own: killGroup ends the command with time.
func measurePeakRSS(t *testing.T, cmd *exec.Cmd) func() int64 {
	t.Helper()
	out := filepath.Join(t.TempDir(), "peak-rss")
	cmd.Args = append([]string{"/usr/bin/time", "-f", "%M", "-o", out, cmd.Path}, cmd.Args[1:]...)
	cmd.Path = "/usr/bin/time"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return func() int64 {
		t.Helper()
		b, err := os.ReadFile(out)
		lines := strings.Fields(string(b))
		if err != nil || len(lines) == 0 {
			t.Fatalf("GNU time wrote no peak RSS for %v: %v %q", cmd.Args, err, b)
		}
		kib, err := strconv.ParseInt(lines[len(lines)-1], 10, 64)
		if err != nil {
			t.Fatalf("GNU time's peak RSS for %v: %q", cmd.Args, b)
		}
		return kib << 10
	}
}

// runGroupBounded runs cmd, started by measurePeakRSS's rules, and returns
// its error; past bound (a hang bound) it kills the group and fails t.
func runGroupBounded(t *testing.T, cmd *exec.Cmd, bound time.Duration) error {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(bound):
		killGroup(cmd)
		<-done
		t.Fatalf("%v did not end in %v", cmd.Args, bound)
		return nil
	}
}

// killGroup kills cmd's process group: a command run by measurePeakRSS
// and GNU time with it.
func killGroup(cmd *exec.Cmd) { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }

// execBinary is execShardfs with another build of the binary.
func execBinary(bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+miniotest.AccessKey, "AWS_SECRET_ACCESS_KEY="+miniotest.SecretKey)
	return cmd
}
