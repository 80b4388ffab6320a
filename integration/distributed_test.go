package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/synth"
)

// Issue 13: a distributed ingest. Four processes ingest four parts into
// MinIO in parallel with no coordination, commit finishes the job, and the
// dataset verifies and reads byte-identical through a mount to a
// single-process ingest of the same listing and seed. A part killed with
// kill -9 leaves the dataset invisible and commit naming the part; the
// rerun part makes it whole.
func TestDistributedIngest(t *testing.T) {
	c := sharedCluster(t, 3)
	src := writeSource(t, synth.Imbalanced(700, 5, 0.7, 2_000, 60_000, 11))
	stores := "--stores=" + strings.Join(c.urls, ",")
	common := []string{stores, "--data=2", "--parity=1", "--shard-size=512KiB", "--seed=7"}
	ingest := func(extra ...string) []string {
		return append(append(append([]string{"ingest"}, common...), extra...), src)
	}
	if r := run(t, 5*time.Minute, nil, append(ingest(), "single")...); r.code != 0 {
		t.Fatalf("single-process ingest: %v", r)
	}
	// The same listing in metadata format 2 must read the same too.
	if r := run(t, 5*time.Minute, nil, append(ingest("--format=2"), "format2")...); r.code != 0 {
		t.Fatalf("format 2 ingest: %v", r)
	}
	if r := run(t, 5*time.Minute, nil, "verify", stores, "format2"); r.code != 0 {
		t.Fatalf("verify format 2: %v", r)
	}
	// And in format 3 (issue 30), single-process and distributed.
	if r := run(t, 5*time.Minute, nil, append(ingest("--format=3"), "format3")...); r.code != 0 {
		t.Fatalf("format 3 ingest: %v", r)
	}

	// All four parts at once, as four processes.
	parts := func(name, job string, skip int) []result {
		out := make([]result, 4)
		var wg sync.WaitGroup
		for i := 0; i < 4; i++ {
			if i == skip {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				out[i] = run(t, 5*time.Minute, nil, append(ingest(fmt.Sprintf("--part=%d/4", i), "--job="+job), name)...)
			}()
		}
		wg.Wait()
		return out
	}
	start := time.Now()
	for i, r := range parts("timing", "t1", -1) {
		if r.code != 0 {
			t.Fatalf("part %d/4: %v", i, r)
		}
	}
	partTime := time.Since(start)
	var dist3Parts [4]result
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dist3Parts[i] = run(t, 5*time.Minute, nil, append(ingest(fmt.Sprintf("--part=%d/4", i), "--job=f3", "--format=3"), "dist3")...)
		}()
	}
	wg.Wait()
	for i, r := range dist3Parts {
		if r.code != 0 {
			t.Fatalf("format 3 part %d/4: %v", i, r)
		}
	}
	if r := run(t, 2*time.Minute, nil, "commit", stores, "dist3"); r.code != 0 || !strings.Contains(r.stdout, "committed dist3: 700 samples") {
		t.Fatalf("commit of the format 3 parts: %v", r)
	}
	for _, name := range []string{"format3", "dist3"} {
		if r := run(t, 5*time.Minute, nil, "verify", stores, name); r.code != 0 {
			t.Fatalf("verify %s: %v", name, r)
		}
	}

	// Part 2 is killed a third of the way through; the other three finish.
	kill := execShardfs(append(ingest("--part=2/4", "--job=j1"), "dist")...)
	var killOut bytes.Buffer
	kill.Stdout, kill.Stderr = &killOut, &killOut
	if err := kill.Start(); err != nil {
		t.Fatal(err)
	}
	others := make(chan []result, 1)
	go func() { others <- parts("dist", "j1", 2) }()
	time.Sleep(partTime / 3)
	kill.Process.Signal(syscall.SIGKILL)
	kill.Wait()
	if strings.Contains(killOut.String(), "done") {
		t.Fatalf("part 2 finished before it could be killed (%v after start); the test needs a longer part:\n%s", partTime/3, killOut.String())
	}
	for i, r := range <-others {
		if i != 2 && r.code != 0 {
			t.Fatalf("part %d/4: %v", i, r)
		}
	}
	r := run(t, 2*time.Minute, nil, "commit", stores, "dist")
	if r.code == 0 || !strings.Contains(r.stderr, "2/4") {
		t.Fatalf("commit with part 2 killed: want a refusal naming part 2/4: %v", r)
	}
	if r := run(t, 2*time.Minute, nil, "verify", stores, "dist"); r.code != 3 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("after a refused commit the dataset must be invisible: %v", r)
	}
	if r := run(t, 5*time.Minute, nil, append(ingest("--part=2/4", "--job=j1"), "dist")...); r.code != 0 {
		t.Fatalf("rerun of part 2: %v", r)
	}
	if r := run(t, 2*time.Minute, nil, "commit", stores, "dist"); r.code != 0 || !strings.Contains(r.stdout, "committed dist: 700 samples") {
		t.Fatalf("commit: %v", r)
	}
	if r := run(t, 5*time.Minute, nil, "verify", stores, "dist"); r.code != 0 {
		t.Fatalf("verify the committed distributed ingest: %v", r)
	}
	// Both again: nothing to do, nothing changed.
	if r := run(t, 2*time.Minute, nil, "commit", stores, "dist"); r.code != 0 || !strings.Contains(r.stdout, "nothing to do") {
		t.Fatalf("second commit: %v", r)
	}
	if r := run(t, 2*time.Minute, nil, append(ingest("--part=1/4", "--job=j1"), "dist")...); r.code != 0 || !strings.Contains(r.stdout, "nothing to do") {
		t.Fatalf("a part rerun after the commit: %v", r)
	}

	// Byte-identical reads: two epochs of the whole epoch tar and index.
	single := mountShardfs(t, stores, "--batch-size=32", "--epochs=2", "single")
	dist := mountShardfs(t, stores, "--batch-size=32", "--epochs=2", "dist")
	format2 := mountShardfs(t, stores, "--batch-size=32", "--epochs=2", "format2")
	format3 := mountShardfs(t, stores, "--batch-size=32", "--epochs=2", "format3")
	dist3 := mountShardfs(t, stores, "--batch-size=32", "--epochs=2", "dist3")
	for e := 0; e < 2; e++ {
		for _, f := range []string{"epoch.tar", "index.csv"} {
			p := filepath.Join("epochs", fmt.Sprintf("%04d", e), "rank-000", f)
			a, err := os.ReadFile(filepath.Join(single, p))
			if err != nil {
				t.Fatal(err)
			}
			for name, mnt := range map[string]string{"the distributed ingest": dist, "the format 2 ingest": format2,
				"the format 3 ingest": format3, "the distributed format 3 ingest": dist3} {
				b, err := os.ReadFile(filepath.Join(mnt, p))
				if err != nil {
					t.Fatal(err)
				}
				if len(a) == 0 || !bytes.Equal(a, b) {
					t.Fatalf("%s: %d bytes from the single-process ingest, %d from %s, not equal", p, len(a), len(b), name)
				}
			}
		}
	}
	// 700 samples in whole batches of 32: 21 batches, 672 samples and their labels.
	if m := tarMembers(t, mustRead(t, filepath.Join(dist, "epochs/0000/rank-000/epoch.tar"))); len(m) != 2*672 {
		t.Fatalf("epoch tar holds %d members, want 672 samples and 672 labels", len(m))
	}
}

// A distributed ingest that will not be committed (two of its three
// parts ran, replacing a committed dataset) is dropped with commit
// --abandon, which the refusing commit names: its part objects and the
// fragments and indexes they wrote leave every store, the committed
// dataset still verifies and serves every sample, and a commit then finds
// nothing pending. An id the stores hold nothing of is refused.
func TestAbandonADistributedIngestOnMinIO(t *testing.T) {
	c := sharedCluster(t, 3)
	src := writeSource(t, synth.Imbalanced(240, 3, 0.7, 2_000, 20_000, 13))
	stores := "--stores=" + strings.Join(c.urls, ",")
	common := []string{"ingest", stores, "--data=2", "--parity=1", "--shard-size=256KiB"}
	const name = "abandoned"
	if r := run(t, 2*time.Minute, nil, append(common, src, name)...); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	other := writeSource(t, synth.Imbalanced(300, 3, 0.5, 2_000, 20_000, 14))
	for i := range 2 {
		if r := run(t, 2*time.Minute, nil, append(common, "--force", fmt.Sprintf("--part=%d/3", i), "--job=left", other, name)...); r.code != 0 {
			t.Fatalf("part %d/3: %v", i, r)
		}
	}
	r := run(t, time.Minute, nil, "commit", stores, name)
	m := regexp.MustCompile(`ingest (job-[0-9a-f]+) lacks parts 2/3`).FindStringSubmatch(r.stderr)
	if r.code == 0 || m == nil || !strings.Contains(r.stderr, "shardfs commit --abandon INGEST_ID") {
		t.Fatalf("a commit of 2 of 3 parts: %v", r)
	}
	job := m[1]
	jobObjects := func() []string {
		var left []string
		for _, s := range c.clients(t) {
			for _, prefix := range []string{name + "/parts/", name + "/data/", name + "/index/", name + "/group/"} {
				keys, err := s.List(t.Context(), prefix)
				if err != nil {
					t.Fatal(err)
				}
				for _, k := range keys {
					if strings.HasPrefix(k, prefix+job) {
						left = append(left, k)
					}
				}
			}
		}
		return left
	}
	if len(jobObjects()) == 0 {
		t.Fatal("the parts wrote nothing under their ingest id")
	}
	// An id the stores do not hold (mistyped) is refused, and the refusal
	// names the ingest whose parts they do hold.
	if r := run(t, time.Minute, nil, "commit", stores, "--abandon=job-0000000000000000", name); r.code == 0 || !strings.Contains(r.stderr, "nothing of the ingest is on these stores") ||
		!strings.Contains(r.stderr, "they hold the parts of ingest "+job+",") {
		t.Fatalf("an abandon of an ingest the stores do not hold: %v", r)
	}
	r = run(t, time.Minute, nil, "commit", stores, "--abandon="+job, name)
	if r.code != 0 || !regexp.MustCompile(`abandoned ingest `+job+` of `+name+`: deleted [3-9] part objects and [1-9]\d* fragment and index objects; nothing committed was touched`).MatchString(r.stdout) {
		t.Fatalf("abandon: %v", r)
	}
	if left := jobObjects(); len(left) != 0 {
		t.Fatalf("after the abandon the stores hold %d objects of it: %v", len(left), left)
	}
	if r := run(t, time.Minute, nil, "verify", stores, name); r.code != 0 {
		t.Fatalf("verify after the abandon: %v", r)
	}
	if r := run(t, time.Minute, nil, "commit", stores, name); r.code != 0 || !strings.Contains(r.stdout, "nothing to do") {
		t.Fatalf("a commit after the abandon: %v", r)
	}
	checkSampleTree(t, mountShardfs(t, stores, "--batch-size=16", name), src, 240)
}
