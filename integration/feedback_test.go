package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/miniotest"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/repository"
)

// Issue 43 item 3: weights that follow the trainer's reports, on six
// MinIO stores and real mounts, W = 2.
//   - Epoch 1 cannot open before the trainer reports epoch 0: a mount
//     waits --report-wait, then answers EIO and logs what to report.
//   - The trainer reads epoch 0 through the Python loader (a DataLoader
//     with workers), sums a loss per stratum (one stratum's 4× the rest)
//     and reports it with loader.report(), which runs shardfs report.
//   - Epoch 1 then aims at π¹ ∝ n·exp(η·r), each stratum at least the
//     floor: every batch of both ranks holds each stratum within one
//     sample of B·π¹, and the stratum reported high rises.
//   - A second mount (another process, its own cache) serves byte-
//     identical epoch 1 files; a fresh mount of another world size
//     resuming inside epoch 1 (--resume-at) deals the same global batches.
//   - A second report of epoch 0 with other numbers is refused and changes
//     nothing.
func TestFeedbackWeights(t *testing.T) {
	requireTorch(t)
	c := sharedCluster(t, 6)
	counts := []int{300, 120, 50, 20, 10}
	src := writeSource(t, synth.Spec{Counts: counts, MinSize: 200, MaxSize: 2000, Seed: 71})
	storesFlag := "--stores=" + strings.Join(c.urls, ",")
	if r := run(t, 2*time.Minute, nil, "ingest", storesFlag, "--data=4", "--parity=2", src, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	const world, batch, step, floor = 2, 10, 1.0, 0.02
	order := []string{storesFlag, fmt.Sprintf("--world-size=%d", world), fmt.Sprintf("--batch-size=%d", batch), "--seed=5",
		fmt.Sprintf("--feedback=eg:step=%g,floor=%g", step, floor), "--run=r1"}
	a := mountShardfsEnv(t, nil, append(order, "--report-wait=1m", "ds")...)
	b := mountShardfsEnv(t, nil, append(order, "--report-wait=1s", "ds")...)

	// Before the report: epoch 1 is refused once the wait runs out.
	start := time.Now()
	if _, err := os.Stat(filepath.Join(b.dir, "epochs", "0001", "rank-000")); !errorsIsErrno(err, 5 /* EIO */) {
		t.Fatalf("epoch 1 before the trainer's report: %v, want EIO", err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("the refusal took %v with --report-wait 1s", took)
	}
	if log := string(mustRead(t, b.log)); !strings.Contains(log, "none is recorded") || !strings.Contains(log, "report it on rank 0") {
		t.Fatalf("the mount's log does not say what is missing:\n%s", log)
	}

	// Epoch 0 is the natural mix.
	shares0 := layout.WithMinShare(naturalShares(counts), floor)
	checkEpochShares(t, a.dir, 0, world, batch, shares0)

	// The trainer reads epoch 0 and reports.
	high := synth.ClassName(3)
	cmd := exec.Command("/usr/bin/python3", "testdata/feedback.py", a.dir, strconv.Itoa(world), high, binary)
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+miniotest.AccessKey, "AWS_SECRET_ACCESS_KEY="+miniotest.SecretKey,
		"SHARDFS_STORES="+strings.Join(c.urls, ","))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("feedback.py: %v\n%s", err, stderr.String())
	}
	var py struct {
		Samples int
		Strata  []string
		Report  map[string]float64
		Out     string
	}
	if err := json.Unmarshal(out, &py); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if py.Samples != 500/world || len(py.Report) != len(counts) || py.Report[high] != 4 || !strings.Contains(py.Out, "recorded run r1, epoch 0") {
		t.Fatalf("the trainer read %d samples and reported %v (%q); want %d samples, all %d strata, %s at 4", py.Samples, py.Report, py.Out, 500/world, len(counts), high)
	}

	// Epoch 1 follows the rule.
	r := make([]float64, len(counts))
	for c := range counts {
		r[c] = py.Report[synth.ClassName(c)]
	}
	raw := make([]float64, len(counts))
	sum := 0.0
	for c, n := range counts {
		raw[c] = float64(n) * math.Exp(step*r[c])
		sum += raw[c]
	}
	for c := range raw {
		raw[c] /= sum
	}
	shares1 := layout.WithMinShare(raw, floor)
	if !(shares1[3] > 2*shares0[3]) {
		t.Fatalf("the stratum reported high has share %v in epoch 1, %v in epoch 0", shares1[3], shares0[3])
	}
	checkEpochShares(t, a.dir, 1, world, batch, shares1)
	// stats.json shows the shares the rule gave each epoch so far.
	var stats struct {
		Feedback struct {
			Rule, Run string
			Epochs    []struct {
				Epoch  int
				Shares map[string]float64
			}
		}
	}
	if err := json.Unmarshal(mustRead(t, filepath.Join(a.dir, ".shardfs", "stats.json")), &stats); err != nil {
		t.Fatal(err)
	}
	if f := stats.Feedback; f.Rule != "eg:step=1,floor=0.02" || f.Run != "r1" || len(f.Epochs) != 2 || math.Abs(f.Epochs[1].Shares[high]-shares1[3]) > 1e-9 || math.Abs(f.Epochs[0].Shares[high]-shares0[3]) > 1e-9 {
		t.Fatalf("stats.json's feedback: %+v; want epoch 0 and 1 with %s at %v and %v", f, high, shares0[3], shares1[3])
	}

	// The other mount: byte-identical epoch 1 (it failed once; it reads
	// the report now).
	for rank := range world {
		dir := filepath.Join("epochs", "0001", fmt.Sprintf("rank-%03d", rank))
		entries, err := os.ReadDir(filepath.Join(a.dir, dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !bytes.Equal(mustRead(t, filepath.Join(a.dir, dir, e.Name())), mustRead(t, filepath.Join(b.dir, dir, e.Name()))) {
				t.Fatalf("%s/%s differs between two mounts of the run", dir, e.Name())
			}
		}
	}

	// An elastic resume: world size 1 from global batch 6 of epoch 1.
	const skip = 6
	cm := mountShardfsEnv(t, nil, storesFlag, "--world-size=1", fmt.Sprintf("--batch-size=%d", batch), "--seed=5",
		fmt.Sprintf("--feedback=eg:step=%g,floor=%g", step, floor), "--run=r1", fmt.Sprintf("--resume-at=1:%d", skip), "ds")
	resumed := batchKeys(t, filepath.Join(cm.dir, "epochs", "0001", "rank-000", "index.csv"))
	ranks := make([][][]string, world)
	for rank := range world {
		ranks[rank] = batchKeys(t, filepath.Join(a.dir, "epochs", "0001", fmt.Sprintf("rank-%03d", rank), "index.csv"))
	}
	if len(resumed) != world*len(ranks[0])-skip {
		t.Fatalf("the resumed mount has %d batches of epoch 1, want %d", len(resumed), world*len(ranks[0])-skip)
	}
	for i, keys := range resumed {
		g := skip + i
		if want := ranks[g%world][g/world]; !slices.Equal(keys, want) {
			t.Fatalf("resumed batch %d (global %d): %v, the run's %v", i, g, keys, want)
		}
	}

	// The first report stands.
	other := filepath.Join(t.TempDir(), "r.json")
	os.WriteFile(other, []byte(`{"`+synth.ClassName(0)+`": 9}`), 0o644)
	if r := run(t, time.Minute, nil, "report", storesFlag, "--run=r1", "--epoch=0", "ds", other); r.code == 0 || !strings.Contains(r.stderr, "the first report of an epoch stands") {
		t.Fatalf("a second report of epoch 0: %v", r)
	}
	if r := run(t, time.Minute, nil, "report", storesFlag, "--run=r1", "--epoch=1", "ds", other+".missing"); r.code == 0 || !strings.Contains(r.stderr, "r.json.missing") {
		t.Fatalf("a missing report file: %v", r)
	}
	os.WriteFile(other, []byte(`{"nosuch": 1}`), 0o644)
	if r := run(t, time.Minute, nil, "report", storesFlag, "--run=r1", "--epoch=1", "ds", other); r.code == 0 || !strings.Contains(r.stderr, `stratum "nosuch" is not one of the dataset's 5`) {
		t.Fatalf("a report naming no stratum of the dataset: %v", r)
	}
	checkEpochShares(t, b.dir, 1, world, batch, shares1)
}

// naturalShares is n_c / N.
func naturalShares(counts []int) []float64 {
	total := 0
	for _, n := range counts {
		total += n
	}
	out := make([]float64, len(counts))
	for c, n := range counts {
		out[c] = float64(n) / float64(total)
	}
	return out
}

// checkEpochShares checks that every batch of every rank of epoch e holds
// each class (synth.ClassName) within one sample of batch × its share.
func checkEpochShares(t *testing.T, mnt string, e, world, batch int, shares []float64) {
	t.Helper()
	for rank := range world {
		data := mustRead(t, filepath.Join(mnt, "epochs", fmt.Sprintf("%04d", e), fmt.Sprintf("rank-%03d", rank), "index.csv"))
		per := map[int]map[string]int{}
		for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n")[1:] {
			f := strings.Split(l, ",")
			b, _ := strconv.Atoi(f[1])
			if per[b] == nil {
				per[b] = map[string]int{}
			}
			per[b][f[3]]++
		}
		if len(per) == 0 {
			t.Fatalf("epoch %d rank %d: no batch", e, rank)
		}
		for b, got := range per {
			for c, pi := range shares {
				n := got[synth.ClassName(c)]
				lo, hi := math.Floor(float64(batch)*pi-1e-9), math.Ceil(float64(batch)*pi+1e-9)
				if float64(n) < lo || float64(n) > hi {
					t.Fatalf("epoch %d rank %d batch %d: %s has %d of %d, want %v..%v (share %.4f)", e, rank, b, synth.ClassName(c), n, batch, lo, hi, pi)
				}
			}
		}
	}
}

// batchKeys is an index.csv's keys, batch by batch.
func batchKeys(t *testing.T, path string) [][]string {
	t.Helper()
	var out [][]string
	for _, l := range strings.Split(strings.TrimSpace(string(mustRead(t, path))), "\n")[1:] {
		f := strings.Split(l, ",")
		b, _ := strconv.Atoi(f[1])
		for len(out) <= b {
			out = append(out, nil)
		}
		out[b] = append(out[b], f[2])
	}
	return out
}

// The run log under kills and store failures: shardfs report is killed
// (SIGKILL) at random moments while one store at a time may be down, and a
// second report of the same epoch with other numbers follows. Whatever
// each step left, readers that see different stores (every set of n−1 of
// the 6, and all 6) never take two different reports of one epoch: they
// take the same one, or none yet. A report that returned success is the
// one every reader of all the stores takes.
func TestReportsUnderKills(t *testing.T) {
	c := startCluster(t, 6)
	src := writeSource(t, synth.Spec{Counts: []int{30, 20, 10}, MinSize: 200, MaxSize: 500, Seed: 72})
	storesFlag := "--stores=" + strings.Join(c.urls, ",")
	if r := run(t, 2*time.Minute, nil, "ingest", storesFlag, "--data=4", "--parity=2", src, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	rng := rand.New(rand.NewPCG(72, 9))
	dir := t.TempDir()
	killedMidway, splits := 0, 0
	for epoch := range 12 {
		down := -1
		if epoch%2 == 1 {
			down = rng.IntN(6)
			c.servers[down].Kill()
		}
		first := filepath.Join(dir, fmt.Sprintf("a%d.json", epoch))
		os.WriteFile(first, []byte(fmt.Sprintf(`{"%s": %d}`, synth.ClassName(0), epoch+1)), 0o644)
		cmd := execShardfs("report", storesFlag, "--run=k", fmt.Sprintf("--epoch=%d", epoch), "ds", first)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(rng.IntN(120)) * time.Millisecond)
		cmd.Process.Kill()
		if err := cmd.Wait(); err != nil {
			killedMidway++
		}
		if down >= 0 {
			c.servers[down].Restart()
		}
		second := filepath.Join(dir, fmt.Sprintf("b%d.json", epoch))
		os.WriteFile(second, []byte(fmt.Sprintf(`{"%s": %d}`, synth.ClassName(1), 100+epoch)), 0o644)
		r := run(t, time.Minute, nil, "report", storesFlag, "--run=k", fmt.Sprintf("--epoch=%d", epoch), "ds", second)
		// The second report succeeds, or is refused because the first
		// counts (or, the stores split between the two with a copy on
		// each, settles them to the first), or falls short if a store
		// failed its request: then no reader may take either (checked
		// below), and the same report again completes or settles it.
		stands := func(r result) bool {
			return strings.Contains(r.stderr, "the first report of an epoch stands") || strings.Contains(r.stderr, "it stands for the epoch")
		}
		split := r.code != 0 && strings.Contains(r.stderr, "fewer than the 4 a report needs")
		if r.code != 0 && !split && !stands(r) {
			t.Fatalf("epoch %d: the second report failed otherwise: %v", epoch, r)
		}
		all := c.clients(t)
		var taken []string
		for skip := -1; skip < len(all); skip++ {
			// A reader that does not reach store skip (-1: it reaches all).
			view := slices.Clone(all)
			if skip >= 0 {
				view[skip] = deadStore{all[skip]}
			}
			got, err := repository.ReadReport(context.Background(), view, "ds", "k", epoch)
			if err != nil && !errors.Is(err, repository.ErrReportIncomplete) {
				t.Fatalf("epoch %d, reader without store %d: %v", epoch, skip, err)
			}
			if got != nil {
				b, _ := json.Marshal(got.Strata)
				taken = append(taken, string(b))
			}
		}
		if distinct := slices.Compact(slices.Sorted(slices.Values(taken))); len(distinct) > 1 {
			t.Fatalf("epoch %d: readers took different reports: %v", epoch, taken)
		}
		if split && len(taken) > 0 {
			t.Fatalf("epoch %d: the stores are split between two reports, and readers took %v", epoch, taken)
		}
		if split {
			splits++ // every store was restarted above, and answers
			again := run(t, time.Minute, nil, "report", storesFlag, "--run=k", fmt.Sprintf("--epoch=%d", epoch), "ds", second)
			if again.code != 0 && !stands(again) {
				t.Fatalf("epoch %d: the second report again, every store answering: %v", epoch, again)
			}
			got, err := repository.ReadReport(context.Background(), c.clients(t), "ds", "k", epoch)
			if err != nil || got == nil {
				t.Fatalf("epoch %d: after the second report again, readers take %+v (%v)", epoch, got, err)
			}
		}
		if r.code == 0 {
			want := fmt.Sprintf(`{"%s":%d}`, synth.ClassName(1), 100+epoch)
			if len(taken) == 0 || taken[0] != want {
				t.Fatalf("epoch %d: the second report succeeded, readers took %v, want %s", epoch, taken, want)
			}
		}
		t.Logf("epoch %d: store %d down for the first (killed) report; the second exited %d; readers took %v", epoch, down, r.code, taken)
	}
	t.Logf("%d of 12 first reports were killed before they exited; %d second reports fell short while a store did not answer", killedMidway, splits)
}

// deadStore answers nothing, as a store a reader cannot reach.
type deadStore struct{ backend.Store }

func (deadStore) Stat(context.Context, string) (int64, error) {
	return 0, errors.New("store unreachable")
}

func (deadStore) ReadWhole(context.Context, string, int64, func(int64) []byte) (int64, bool, error) {
	return 0, false, errors.New("store unreachable")
}
