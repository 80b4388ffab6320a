//go:build benchharness

package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/internal/toxitest"
)

// trainerRun is one pass of trainer.py: its stall fraction and the wait
// before each batch.
type trainerRun struct {
	Batches int       `json:"batches"`
	Stall   float64   `json:"stall"`
	Waits   []float64 `json:"waits_ms"`
}

func runTrainer(t *testing.T, args ...string) trainerRun {
	t.Helper()
	out := run(t, "/usr/bin/python3", append([]string{"trainer.py"}, args...)...)
	var tr trainerRun
	if err := json.Unmarshal([]byte(lastLine(out)), &tr); err != nil || tr.Batches == 0 {
		t.Fatalf("trainer.py: %v: %s", err, out)
	}
	return tr
}

// trainerStall measures issue 46 item 1: the PyTorch DataLoader trainer
// (8 workers, 100 ms of compute per batch of 64) reading a cold shardfs
// epoch at 20 ± 5 ms, each repetition a fresh mount, with the wait before
// every batch; and the same trainer reading the same batch tars from
// tmpfs, nothing to fetch: the floor of this trainer on this machine
// (the DataLoader's own hand-over from worker to trainer is in it).
func trainerStall(t *testing.T, r *report, work string) {
	const compute = 0.1
	src := filepath.Join(work, "trainer-src")
	if _, err := synth.Write(src, synth.Imbalanced(4_000, 10, 0.75, 50_000, 150_000, 13)); err != nil {
		t.Fatal(err)
	}
	proxy, stores := proxiedStores(t, "minio-trainer")
	run(t, binary, "ingest", stores, "--data=4", "--parity=2", src, "train")
	toxitest.Latency(t, proxy, 20, 5)

	// The floor's copy of the epoch: rank 0's batch tars on tmpfs.
	floorDir, err := os.MkdirTemp("/dev/shm", "shardfs-trainer-floor")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(floorDir)
	{
		m := filepath.Join(work, "trainer-copy")
		d := startMount(t, m, exists(filepath.Join(m, ".shardfs/info.json")), nil, binary, "mount", stores, "--rank=0", "--batch-size=64", "train", m)
		rank := filepath.Join(m, "epochs/0000/rank-000")
		ents, err := os.ReadDir(rank)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "batch-") {
				os.WriteFile(filepath.Join(floorDir, e.Name()), mustReadFile(t, filepath.Join(rank, e.Name())), 0o644)
			}
		}
		d.stop()
	}

	var sfs, floor []trainerRun
	n := 0
	for range reps {
		n++
		mnt := filepath.Join(work, fmt.Sprintf("trainer-%d", n))
		d := startMount(t, mnt, exists(filepath.Join(mnt, ".shardfs/info.json")), nil, binary, "mount", stores, "--rank=0", "--batch-size=64", "train", mnt)
		sfs = append(sfs, runTrainer(t, "tars", filepath.Join(mnt, "epochs/0000/rank-000"), fmt.Sprint(compute)))
		d.stop()
		floor = append(floor, runTrainer(t, "tars", floorDir, fmt.Sprint(compute)))
	}
	stalls := func(runs []trainerRun) stat {
		var xs []float64
		for _, x := range runs {
			xs = append(xs, 100*x.Stall)
		}
		return summarize(xs)
	}
	s, f := stalls(sfs), stalls(floor)
	r.printf("## The trainer's stall at 20 ms (issue 46 item 1)\n\nPyTorch `DataLoader`, 8 workers, %.0f ms of compute per batch of 64, rank 0's whole epoch 0 (%d batches) of 4,000 samples of 50–150 kB, RS(4,2) on one MinIO behind toxiproxy at 20 ± 5 ms, each repetition a fresh mount (cold). Stall = time the trainer waited for a batch / compute time, batch 0 (start-up) not counted. The floor: the same trainer reading the same batch tars from tmpfs, nothing to fetch, so its waits are the DataLoader's own hand-over of a batch from worker to trainer, on the same cores.\n\n", compute*1000, sfs[0].Batches)
	r.printf("| | stall %% | waits of batches 1–8, ms | waits of batches 9 on, ms |\n|---|---|---|---|\n")
	row := func(name string, runs []trainerRun) {
		for i, x := range runs {
			var early, late float64
			for b, w := range x.Waits {
				switch {
				case b == 0:
				case b <= 8:
					early += w
				default:
					late += w
				}
			}
			r.printf("| %s, repetition %d | %.2f | %.0f | %.0f |\n", name, i+1, 100*x.Stall, early, late)
		}
	}
	row("shardfs", sfs)
	row("floor: tmpfs", floor)
	r.printf("| **shardfs, median** | **%s** | | |\n| **floor, median** | **%s** | | |\n| shardfs − floor (medians) | %.2f | | |\n\n", s.pct2(), f.pct2(), s.med-f.med)
	r.printf("Waits by batch index, ms (batches 0–11):\n\n")
	for i, x := range sfs {
		r.printf("- shardfs %d: %s\n", i+1, firstWaits(x.Waits, 12))
	}
	for i, x := range floor {
		r.printf("- floor %d: %s\n", i+1, firstWaits(x.Waits, 12))
	}
	r.printf("\n")
}

func firstWaits(ws []float64, n int) string {
	var parts []string
	for _, w := range ws[:min(n, len(ws))] {
		parts = append(parts, fmt.Sprintf("%.0f", w))
	}
	return strings.Join(parts, " ")
}
