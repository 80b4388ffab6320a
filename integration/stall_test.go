package integration

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/synth"
)

// TestStallsPrefetch is a measurement, not a timed assertion: a simulated
// trainer reads one rank-epoch batch by batch with a fixed compute time per
// batch, while every store request is delayed 20 ms ± 10 ms. It reports the
// fraction of wall time spent waiting on reads with prefetch on and off, and
// asserts only that both runs read the same, complete bytes.
func TestStallsPrefetch(t *testing.T) {
	base := t.TempDir()
	src := filepath.Join(base, "src")
	// 3,375 samples of 5-25 kB in the demo's 10 imbalanced classes: 105 batches of 32.
	spec := synth.Demo
	spec.Counts = nil
	for _, n := range synth.Demo.Counts {
		spec.Counts = append(spec.Counts, 3*n)
	}
	spec.MinSize, spec.MaxSize = 5_000, 25_000
	if _, err := synth.Write(src, spec); err != nil {
		t.Fatal(err)
	}
	var urls []string
	for i := 0; i < 6; i++ {
		urls = append(urls, "file://"+filepath.Join(base, fmt.Sprint("store", i)))
	}
	stores := "--stores=" + strings.Join(urls, ",")
	if r := run(t, 5*time.Minute, nil, "ingest", stores, "--data=4", "--parity=2", "--shard-size=8MiB", src, "demo"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	const compute = 40 * time.Millisecond
	type result struct {
		wall, waited time.Duration
		stall        float64 // the daemon's stall_seconds: time reads waited on the backend
		batches      int
		sums         [][32]byte
	}
	trainer := func(prefetch bool, maxBatches int) result {
		args := []string{stores, "--inject-latency=20ms±10ms", "--rank=0", "--world-size=1", "--batch-size=32", "--cache-size=256MiB"}
		if !prefetch {
			args = append(args, "--no-prefetch")
		}
		mnt := mountBinary(t, testBinary, nil, append(args, "demo")...).dir
		dir := filepath.Join(mnt, "epochs", "0000", "rank-000")
		var res result
		before := daemonStalls(t, mnt)
		start := time.Now()
		for b := 0; b < maxBatches; b++ {
			p := filepath.Join(dir, fmt.Sprintf("batch-%06d.tar", b))
			fi, err := os.Stat(p)
			if err != nil {
				break
			}
			t0 := time.Now()
			data, err := os.ReadFile(p)
			res.waited += time.Since(t0)
			if os.Getenv("STALL_DEBUG") != "" && prefetch {
				t.Logf("batch %d read %v", b, time.Since(t0))
			}
			if err != nil || int64(len(data)) != fi.Size() {
				t.Fatalf("batch %d: %d of %d bytes, %v", b, len(data), fi.Size(), err)
			}
			res.sums = append(res.sums, sha256.Sum256(data))
			res.batches++
			time.Sleep(compute) // the training step
		}
		res.wall = time.Since(start)
		res.stall = daemonStalls(t, mnt) - before
		return res
	}
	// Without prefetch every batch waits ~0.5 s: its run stops after 35 batches.
	on := trainer(true, 1<<30)
	off := trainer(false, 35)
	if on.batches != 105 || off.batches != 35 {
		t.Fatalf("batches: %d with prefetch (want 105), %d without (want 35)", on.batches, off.batches)
	}
	for i := range off.sums {
		if on.sums[i] != off.sums[i] {
			t.Fatalf("batch %d differs between the prefetch and no-prefetch mounts", i)
		}
	}
	msg := fmt.Sprintf("20ms±10ms per store request, %v compute per batch; %d batches of 32 with prefetch, the first %d without:\n"+
		"  prefetch on:  stall (daemon, waits on the backend) %.2f%% of wall; trainer time in read() %.2f%% (%v of %v)\n"+
		"  prefetch off: stall (daemon, waits on the backend) %.2f%% of wall; trainer time in read() %.2f%% (%v of %v)",
		compute, on.batches, off.batches,
		100*on.stall/on.wall.Seconds(), 100*on.waited.Seconds()/on.wall.Seconds(), on.waited.Round(time.Millisecond), on.wall.Round(time.Millisecond),
		100*off.stall/off.wall.Seconds(), 100*off.waited.Seconds()/off.wall.Seconds(), off.waited.Round(time.Millisecond), off.wall.Round(time.Millisecond))
	t.Log(msg)
	// No timing thresholds: only that prefetch removes waiting, measured in the same run.
	if on.stall/on.wall.Seconds() >= off.stall/off.wall.Seconds() {
		t.Errorf("stall fraction with prefetch (%.4f) is not below the one without (%.4f)", on.stall/on.wall.Seconds(), off.stall/off.wall.Seconds())
	}
	if off.stall <= 0 {
		t.Errorf("without prefetch the daemon counted no stall at all: the stall counter is not working")
	}
	if out := os.Getenv("SHARDFS_BENCH_OUT"); out != "" {
		os.WriteFile(filepath.Join(out, "stalls.txt"), []byte(msg+"\n"), 0o644)
	}
}

// daemonStalls reads stall_seconds from the mount's stats.json.
func daemonStalls(t *testing.T, mnt string) float64 {
	t.Helper()
	var s struct {
		StallSeconds float64 `json:"stall_seconds"`
	}
	if err := json.Unmarshal(mustRead(t, filepath.Join(mnt, ".shardfs", "stats.json")), &s); err != nil {
		t.Fatal(err)
	}
	return s.StallSeconds
}
