//go:build benchharness

package bench

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"

	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/internal/toxitest"
)

// baselineBinary builds the shardfs binary of git revision rev (a commit,
// tag or branch of this repository) in a worktree of its own, removed when
// the test ends.
func baselineBinary(t *testing.T, rev, work string) string {
	t.Helper()
	top := strings.TrimSpace(run(t, "git", "rev-parse", "--show-toplevel"))
	tree := filepath.Join(work, "baseline-tree")
	run(t, "git", "-C", top, "worktree", "add", "--detach", tree, rev)
	t.Cleanup(func() { exec.Command("git", "-C", top, "worktree", "remove", "--force", tree).Run() })
	bin := filepath.Join(work, "shardfs-baseline")
	cmd := exec.Command("go", "build", "-tags", "shardfs_testhooks", "-o", bin, "./cmd/shardfs")
	cmd.Dir = tree
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", rev, err, out)
	}
	return bin
}

// againstBaseline is the latency regime's shardfs rows, read by this tree's
// binary and by the binary of SHARDFS_BENCH_BASELINE (a git revision) in
// the same run, on the same dataset, proxy and MinIO: for each latency and
// mode, reps pairs, the two binaries alternating which reads first. Each
// pair gives one ratio, this tree over the baseline; a ratio near 1 is no
// change. The machine's noise moves both reads of a pair together, so the
// ratios vary much less than the rates.
func againstBaseline(t *testing.T, r *report, work string) {
	rev := os.Getenv("SHARDFS_BENCH_BASELINE")
	if rev == "" {
		t.Fatal("SHARDFS_BENCH_ONLY=baseline needs SHARDFS_BENCH_BASELINE=<git revision> to compare with")
	}
	base := baselineBinary(t, rev, work)
	const samples, batch = 4_000, 64
	src := filepath.Join(work, "baseline-src")
	if _, err := synth.Write(src, synth.Imbalanced(samples, 10, 0.75, 50_000, 150_000, 13)); err != nil {
		t.Fatal(err)
	}
	proxy, stores := proxiedStores(t, "minio-baseline")
	// The baseline ingests: a dataset it can read is one this tree must read too.
	run(t, base, "ingest", stores, "--data=4", "--parity=2", src, "lat")
	head := strings.TrimSpace(run(t, "git", "rev-parse", "--short", "HEAD"))
	baseRev := strings.TrimSpace(run(t, "git", "rev-parse", "--short", rev))

	n := 0
	// read returns a binary's samples/s and its daemon's CPU seconds per GB
	// served (user + system, from /proc, over the read alone).
	read := func(bin string, flags []string) (float64, float64) {
		n++
		mnt := filepath.Join(work, fmt.Sprintf("baseline-%d", n))
		args := append([]string{"mount", stores, "--rank=0", "--batch-size=64"}, flags...)
		args = append(args, "lat", mnt)
		d := startMount(t, mnt, exists(filepath.Join(mnt, ".shardfs/info.json")), nil, bin, args...)
		defer d.stop()
		rd := filepath.Join(mnt, "epochs/0000/rank-000")
		tars := tarBatches(rd, samples/batch)
		var bytes int64
		for _, b := range tars {
			fi, err := os.Stat(b[0])
			if err != nil {
				t.Fatal(err)
			}
			bytes += fi.Size()
		}
		before := procTimes()
		rate := float64(len(tars)*batch) / secs(func() { readBatches(tars) })
		cpu := cpuDelta(before, procTimes(), func(name string) string {
			if strings.HasPrefix(name, "shardfs") {
				return "daemon"
			}
			return ""
		})["daemon"]
		return rate, cpu / (float64(bytes) / 1e9)
	}
	steadyAgainstBaseline(t, r, work, base, stores, samples, head, baseRev, proxy)
	if os.Getenv("SHARDFS_BENCH_BASELINE_STEADY") == "only" {
		return
	}
	modes := []struct {
		name  string
		flags []string
	}{{"global", []string{"--window=0"}}, {"--window 4", []string{"--window=4"}}, {"--window 4 --direct-io", []string{"--window=4", "--direct-io"}}}
	r.printf("## This tree (%s) against %s, the latency regime\n\n", head, baseRev)
	r.printf("Cold reads of rank 0's epoch 0 (%d samples of 50–150 kB, RS(4,2) over 6 buckets of one MinIO behind one toxiproxy), 8 reader threads. For each cell, %d pairs of runs, the two binaries alternating which goes first; each pair gives one ratio, this tree's samples/s over the baseline's, and one of the daemons' CPU seconds per GB served (user + system from /proc, over the read). Median ratio (min–max), then each side's median.\n\n", samples, reps)
	r.printf("| latency | mode | samples/s, this / baseline | this tree, samples/s | baseline, samples/s | CPU s per GB, this / baseline | this tree, CPU s per GB | baseline, CPU s per GB |\n|---|---|---|---|---|---|---|---|\n")
	var all, allCPU []float64
	for _, lat := range []struct{ ms, jitter int }{{0, 0}, {20, 5}, {50, 10}} {
		toxitest.Heal(t, proxy)
		if lat.ms > 0 {
			toxitest.Latency(t, proxy, lat.ms, lat.jitter)
		}
		for _, m := range modes {
			var ratios, mine, theirs, cpuRatios, myCPU, theirCPU []float64
			for i := 0; i < reps; i++ {
				var a, b, ca, cb float64
				if i%2 == 0 {
					a, ca = read(binary, m.flags)
					b, cb = read(base, m.flags)
				} else {
					b, cb = read(base, m.flags)
					a, ca = read(binary, m.flags)
				}
				mine, theirs, ratios = append(mine, a), append(theirs, b), append(ratios, a/b)
				myCPU, theirCPU, cpuRatios = append(myCPU, ca), append(theirCPU, cb), append(cpuRatios, ca/cb)
			}
			all, allCPU = append(all, ratios...), append(allCPU, cpuRatios...)
			rs, cs, mc, tc := summarize(ratios), summarize(cpuRatios), summarize(myCPU), summarize(theirCPU)
			r.printf("| %d ± %d ms | %s | %.2f (%.2f–%.2f) | %s | %s | %.3f (%.3f–%.3f) | %.2f (%.2f–%.2f) | %.2f (%.2f–%.2f) |\n", lat.ms, lat.jitter, m.name, rs.med, rs.lo, rs.hi, summarize(mine), summarize(theirs),
				cs.med, cs.lo, cs.hi, mc.med, mc.lo, mc.hi, tc.med, tc.lo, tc.hi)
		}
	}
	toxitest.Heal(t, proxy)
	r.printf("\nAll %d pairs, samples/s: geometric mean ratio %.3f, median %.3f, %d of %d pairs at or above 1.\n\n",
		len(all), geomean(all), summarize(all).med, count(all, func(x float64) bool { return x >= 1 }), len(all))
	r.printf("All %d pairs, the daemon's CPU seconds per GB served: geometric mean ratio %.3f, median %.3f, %d of %d pairs at or below 1.\n\n",
		len(allCPU), geomean(allCPU), summarize(allCPU).med, count(allCPU, func(x float64) bool { return x <= 1 }), len(allCPU))
}

// steadyAgainstBaseline is issue 25's steady state, this tree against the
// baseline binary in the same run: at 20 ± 5 ms, --window 4 --direct-io
// --cache-size 128MiB over a dataset about 3× the cache, epoch 0 read
// untimed (the daemon's memory grows once), epoch 1 read and measured:
// samples/s, the daemon's CPU seconds and minor page faults per GB served,
// and the bytes fetched from the stores over the bytes served. reps pairs,
// the binaries alternating which goes first.
func steadyAgainstBaseline(t *testing.T, r *report, work, base, stores string, samples int, head, baseRev string, proxy *toxiproxy.Proxy) {
	const batch = 64
	toxitest.Heal(t, proxy)
	toxitest.Latency(t, proxy, 20, 5)
	defer toxitest.Heal(t, proxy)
	n := 0
	type result struct{ rate, cpu, faults, fetched float64 }
	read := func(bin string) result {
		n++
		mnt := filepath.Join(work, fmt.Sprintf("baseline-steady-%d", n))
		d := startMount(t, mnt, exists(filepath.Join(mnt, ".shardfs/info.json")), nil, bin, "mount", stores, "--rank=0", "--batch-size=64",
			"--window=4", "--direct-io", "--cache-size=128MiB", "--epochs=2", "lat", mnt)
		defer d.stop()
		readBatches(tarBatches(filepath.Join(mnt, "epochs/0000/rank-000"), samples/batch))
		tars := tarBatches(filepath.Join(mnt, "epochs/0001/rank-000"), samples/batch)
		var served float64
		for _, b := range tars {
			fi, err := os.Stat(b[0])
			if err != nil {
				t.Fatal(err)
			}
			served += float64(fi.Size())
		}
		storeBytes := func() float64 { return storeBytesOf(t, mnt) }
		b0, before := storeBytes(), procTimes()
		rate := float64(len(tars)*batch) / secs(func() { readBatches(tars) })
		// The daemon by its name: shardfs, or shardfs-baseline (cut to 15
		// characters in /proc).
		var cpu, faults float64
		for pid, a := range procTimes() {
			if b, ok := before[pid]; ok && b.name == a.name && strings.HasPrefix(a.name, "shardfs") {
				cpu, faults = cpu+a.secs-b.secs, faults+a.minflt-b.minflt
			}
		}
		return result{rate, cpu / (served / 1e9), faults / (served / 1e9), 100 * (storeBytes() - b0) / served}
	}
	var mine, theirs []result
	for i := 0; i < reps; i++ {
		if i%2 == 0 {
			mine, theirs = append(mine, read(binary)), append(theirs, read(base))
		} else {
			theirs, mine = append(theirs, read(base)), append(mine, read(binary))
		}
	}
	col := func(rs []result, f func(result) float64) stat {
		var xs []float64
		for _, x := range rs {
			xs = append(xs, f(x))
		}
		return summarize(xs)
	}
	ratio := func(f func(result) float64) stat {
		var xs []float64
		for i := range mine {
			xs = append(xs, f(mine[i])/f(theirs[i]))
		}
		return summarize(xs)
	}
	r.printf("## The steady state, this tree (%s) against %s\n\n", head, baseRev)
	r.printf("At 20 ± 5 ms, `--window 4 --direct-io --cache-size 128MiB`, %d samples of 50–150 kB (about 3× the cache), 8 reader threads: epoch 0 read untimed, epoch 1 measured. %d pairs, the binaries alternating which goes first; median (min–max).\n\n", samples, reps)
	r.printf("| | this tree | baseline | this / baseline, per pair |\n|---|---|---|---|\n")
	for _, row := range []struct {
		name string
		f    func(result) float64
		fmt  string
	}{
		{"samples/s", func(x result) float64 { return x.rate }, "%.0f"},
		{"daemon CPU s per GB served", func(x result) float64 { return x.cpu }, "%.2f"},
		{"daemon minor page faults per GB served", func(x result) float64 { return x.faults }, "%.0f"},
		{"bytes fetched, % of served", func(x result) float64 { return x.fetched }, "%.1f"},
	} {
		a, b, q := col(mine, row.f), col(theirs, row.f), ratio(row.f)
		r.printf("| %s | "+row.fmt+" ("+row.fmt+"–"+row.fmt+") | "+row.fmt+" ("+row.fmt+"–"+row.fmt+") | %.3f (%.3f–%.3f) |\n", row.name, a.med, a.lo, a.hi, b.med, b.lo, b.hi, q.med, q.lo, q.hi)
	}
	r.printf("\n")
}

// count is how many of xs satisfy ok.
func count(xs []float64, ok func(float64) bool) int {
	n := 0
	for _, x := range xs {
		if ok(x) {
			n++
		}
	}
	return n
}

// geomean is the geometric mean of xs.
func geomean(xs []float64) float64 {
	logSum := 0.0
	for _, x := range xs {
		logSum += math.Log(x)
	}
	return math.Exp(logSum / float64(len(xs)))
}
