package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Issue 13: above 10M samples, plan --synthetic models per-shard class
// counts only and computes the order of order version 2 from them. The
// rows it prints follow from the sizes: 12,000,000 samples, B=256, W=64
// gives ⌊12e6/256/64⌋ = 732 batches of 256 per rank, and the stratified
// order stays far closer to the class mix than a uniform shuffle.
func TestPlanFromClassCounts(t *testing.T) {
	r := run(t, 2*time.Minute, nil, "plan", "--synthetic=12000000", "--world-size=64", "--batch-size=256", "--rank=0-1")
	if r.code != 0 {
		t.Fatalf("plan: %v", r)
	}
	if !strings.Contains(r.stdout, "12000000 samples, 100 strata, 17884 shards of about 670 samples (each stratum spread evenly over the shards") {
		t.Fatalf("plan did not take the counts-only path:\n%s", r.stdout)
	}
	rows := 0
	for _, line := range strings.Split(r.stdout, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || f[0] != "0" {
			continue
		}
		rows++
		if f[2] != "732" || f[3] != fmt.Sprint(732*256) {
			t.Fatalf("rank %s: %s batches, %s samples; want 732 and %d:\n%s", f[1], f[2], f[3], 732*256, r.stdout)
		}
		var tv, uni float64
		fmt.Sscan(f[4], &tv)
		fmt.Sscan(f[6], &uni)
		if tv <= 0 || tv*2 > uni {
			t.Fatalf("rank %s: TV %v against a uniform shuffle's %v: the order is not stratified:\n%s", f[1], tv, uni, r.stdout)
		}
	}
	if rows != 2 {
		t.Fatalf("%d order rows for --rank=0-1:\n%s", rows, r.stdout)
	}
	for _, bad := range [][]string{
		{"plan", "--synthetic=12000000", "--window=4"},
		{"plan", "--synthetic=12000000", "--order-version=1"},
		{"plan", "--synthetic=12000000", "--emit=index"},
	} {
		if r := run(t, time.Minute, nil, bad...); r.code == 0 || !strings.Contains(r.stderr, "--synthetic") {
			t.Errorf("%v: want a refusal naming --synthetic: %v", bad, r)
		}
	}
}

// Issue 27: a billion samples in 100 classes x 12 monthly time buckets,
// weighted by recency, plan in bounded time and memory: 2 minutes (a
// hang bound, not a speed target) and 2 GiB of resident memory, measured
// from the process's own rusage.
func TestPlanBillionTimeStrata(t *testing.T) {
	text, maxRSS := runBounded(t, 2*time.Minute, "plan", "--synthetic=1000000000", "--synthetic-time-buckets=12", "--world-size=4096", "--recency-half-life=90d", "--time-window=180d")
	if maxRSS > 2<<30 {
		t.Fatalf("plan held %d MiB, more than 2 GiB", maxRSS>>20)
	}
	if !strings.Contains(text, "1000000000 samples, 1200 strata") || !strings.Contains(text, "epoch 0 reads the buckets that start from 2025-07-11 to 2025-12-08 (600 strata)") {
		t.Fatalf("plan:\n%s", text)
	}
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || f[0] != "0" || f[1] != "0" {
			continue
		}
		var tv, uni float64
		fmt.Sscan(f[4], &tv)
		fmt.Sscan(f[6], &uni)
		if f[2] == "0" || tv <= 0 || tv >= uni {
			t.Fatalf("rank 0: %s batches, TV %v against a uniform shuffle's %v:\n%s", f[2], tv, uni, text)
		}
		t.Logf("1e9 samples, 1,200 strata: max RSS %d MiB; %s", maxRSS>>20, line)
		return
	}
	t.Fatalf("no row for epoch 0 rank 0:\n%s", text)
}

// runBounded runs shardfs with a hang bound and returns its output and its
// peak resident memory (measurePeakRSS).
func runBounded(t *testing.T, bound time.Duration, args ...string) (string, int64) {
	t.Helper()
	cmd := execShardfs(args...)
	peakRSS := measurePeakRSS(t, cmd)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := runGroupBounded(t, cmd, bound); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out.String())
	}
	return out.String(), peakRSS()
}

// Issue 30: ten billion samples in 14,903,130 shards of about 670, as a
// format-3 description of counts and sizes only, written to a file store
// and read back. The root, what every node reads, stays under 64 MiB; a
// rank's start (read and check the root, compute its order of W=16,384
// from the root's counts, locate every sample of its epoch through the
// group objects, each location checked against the even model's) stays
// under 2 GiB. The first run writes the description and then starts rank
// 0 from what it wrote on the store, reading every group object back; the
// second, in a fresh process, finds the description and starts rank 0
// with affinity. (A third run, a fresh process starting without affinity,
// repeated the first's start: the same reads, the same checks, 80 s of the
// suite in CI; its assertions are the first run's now.) Ten minutes per
// run is a hang bound, not a speed target: the times are logged.
func TestFormatThreeAtFifteenMillionShards(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "description")
	args := []string{"plan", "--synthetic=10000000000", "--world-size=16384", "--rank=0", "--describe=" + dir}
	text, rss := runBounded(t, 10*time.Minute, args...)
	var rootBytes, groups int64
	var perShard float64
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, "description: written to "+dir+" in "); ok {
			_, after, _ := strings.Cut(rest, ": ")
			fmt.Sscanf(after, "root of %d bytes (what every node reads: %f bytes a shard), %d group objects", &rootBytes, &perShard, &groups)
		}
	}
	if rootBytes <= 0 || rootBytes > 64<<20 || groups != 14554 {
		t.Fatalf("root of %d bytes, %d group objects; want under 64 MiB, and 14,554 groups of 1,024 shards:\n%s", rootBytes, groups, text)
	}
	ents, err := os.ReadDir(filepath.Join(dir, "synthetic", "group", "synthetic"))
	if err != nil || len(ents) != int(groups) {
		t.Fatalf("%d group objects on the store (%v), the root lists %d", len(ents), err, groups)
	}
	if !strings.Contains(text, fmt.Sprintf("rank 0's start: root of %d bytes and 14903130 shards read and checked", rootBytes)) ||
		!strings.Contains(text, "610304 samples") || !strings.Contains(text, "located through 14554 group objects") ||
		!strings.Contains(text, "every one of the 610304 samples is where the even model places it") {
		t.Fatalf("rank 0's start from the description written:\n%s", text)
	}
	if rss > 2<<30 {
		t.Fatalf("the description and a rank's start held %d MiB, more than 2 GiB", rss>>20)
	}
	logStart := func(text string, rss int64) {
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, "rank 0's start") {
				t.Logf("root %d bytes (%.2f a shard); %s; process max RSS %d MiB", rootBytes, perShard, line, rss>>20)
			}
		}
	}
	logStart(text, rss)
	// Rank affinity (order version 3), in a fresh process that finds the
	// description: rank 0's range of 610,351 samples lies in about 910
	// shards, in one group or two: it reads those only.
	text, rss = runBounded(t, 10*time.Minute, append(args, "--affinity")...)
	if !strings.Contains(text, "description: found in "+dir+", not rewritten") ||
		!strings.Contains(text, fmt.Sprintf("rank 0's start: root of %d bytes and 14903130 shards read and checked", rootBytes)) ||
		!(strings.Contains(text, "located through 1 group objects") || strings.Contains(text, "located through 2 group objects")) ||
		!strings.Contains(text, "every one of the 610304 samples is where the even model places it") || rss > 2<<30 {
		t.Fatalf("rank-affine start, max RSS %d MiB:\n%s", rss>>20, text)
	}
	logStart(text, rss)
}

// plan --describe writes only into an empty or new directory, or reads the
// same description back; anything else is refused before any planning,
// naming the fix, and the directory is left as it was.
func TestDescribeRefusals(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	text, _ := runBounded(t, 2*time.Minute, "plan", "--synthetic=20000000", "--world-size=64", "--describe="+dir)
	if !strings.Contains(text, "30 group objects") || !strings.Contains(text, "every one of the 312320 samples is where the even model places it") {
		t.Fatalf("describe 20M:\n%s", text)
	}
	before, err := os.ReadDir(filepath.Join(dir, "synthetic", "group", "synthetic"))
	if err != nil {
		t.Fatal(err)
	}
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--synthetic=30000000", "--describe=" + dir}, "holds a description of 20000000 samples in 29807 shards and 100 strata, not of this one (30000000, 44710, 100): give an empty or new directory"},
		{[]string{"--synthetic=20000000", "--describe=" + full}, "the directory is not empty and holds no synthetic description: give an empty or new directory"},
		{[]string{"--synthetic=2000", "--describe=" + t.TempDir()}, "--describe needs --synthetic above 10000000 samples"},
	} {
		r := run(t, 2*time.Minute, nil, append([]string{"plan"}, tc.args...)...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("plan %v: want exit 1 and %q: %v", tc.args, tc.want, r)
		}
		// Refused before any work: no plan on stdout (the orders of 30M
		// samples took 15 s before the refusal came).
		if r.stdout != "" {
			t.Errorf("plan %v planned before it refused:\n%s", tc.args, r.stdout)
		}
	}
	after, err := os.ReadDir(filepath.Join(dir, "synthetic", "group", "synthetic"))
	if err != nil || len(after) != len(before) {
		t.Fatalf("the description has %d group objects after the refusals, %d before (%v)", len(after), len(before), err)
	}
	if b, err := os.ReadFile(filepath.Join(full, "x")); err != nil || string(b) != "mine" {
		t.Fatalf("the non-empty directory's file: %q %v", b, err)
	}
}
