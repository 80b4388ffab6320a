package integration

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/synth"
)

// TestAlphaSchedule: with --alpha-schedule 0:0,4:1 each epoch's class mix
// follows α = 0, 0.25, 0.5, 0.75, 1: every class's total in the epoch is
// within one of M·B·π_c with π_c ∝ n_c^α, and index.csv and info.json show
// each epoch's α.
func TestAlphaSchedule(t *testing.T) {
	counts := []int{300, 120, 50, 20, 10}
	stores := ingestLongTailed(t, counts, 61)
	mnt := mountShardfs(t, stores, "--batch-size=10", "--epochs=5", "--alpha-schedule=0:0,4:1", "ds")
	info := orderInfoOf(t, mnt)
	for e, want := range []float64{0, 0.25, 0.5, 0.75, 1} {
		if e >= len(info.Order.AlphaByEpoch) || info.Order.AlphaByEpoch[e] != want {
			t.Fatalf("info.json alpha_by_epoch %v, want epoch %d at %v", info.Order.AlphaByEpoch, e, want)
		}
		data, err := os.ReadFile(filepath.Join(mnt, "epochs", fmt.Sprintf("%04d", e), "rank-000", "index.csv"))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if lines[0] != "position,batch,key,stratum,size,alpha" {
			t.Fatalf("index.csv header %q", lines[0])
		}
		got := map[string]int{}
		for _, l := range lines[1:] {
			f := strings.Split(l, ",")
			if a, _ := strconv.ParseFloat(f[5], 64); a != want {
				t.Fatalf("epoch %d: index.csv row %q has alpha %s, want %v", e, l, f[5], want)
			}
			got[f[3]]++
		}
		slots := len(lines) - 1
		var z float64
		for _, n := range counts {
			z += math.Pow(float64(n), want)
		}
		for c, n := range counts {
			target := float64(slots) * math.Pow(float64(n), want) / z
			if g := got[synth.ClassName(c)]; math.Abs(float64(g)-target) > 1 {
				t.Errorf("epoch %d (alpha %v): class %d has %d of %d slots, target %.2f", e, want, c, g, slots, target)
			}
		}
	}
	if r := run(t, time.Minute, nil, "plan", stores, "--batch-size=10", "--alpha=0.5", "--alpha-schedule=0:0,4:1", "ds"); r.code == 0 || !strings.Contains(r.stderr, "both given") {
		t.Fatalf("--alpha with --alpha-schedule must be refused: %v", r)
	}
}

// TestRepeatsThroughTheLoader: at α = 0 the small classes are drawn more
// than once an epoch. With order version 4 no batch holds a sample twice
// (every class here has at least the batch's quota of it); the loader
// hands back plain keys, each with its repeat count, which counts the
// key's earlier appearances in the rank-epoch (the mount names a repeat
// <key>~N).
func TestRepeatsThroughTheLoader(t *testing.T) {
	requireTorch(t)
	stores := ingestLongTailed(t, []int{300, 120, 50, 20, 10}, 62)
	// B = 40 at α = 0: 8 a class, and the smallest class holds 10.
	mnt := mountShardfs(t, stores, "--batch-size=40", "--epochs=1", "--alpha=0", "ds")
	lines := runPython(t, "testdata/repeats.py", mnt)
	seen := map[string]int{}
	inBatch := map[string]map[string]bool{}
	repeats := 0
	for _, l := range lines {
		batch, key, repeat := l[0], l[1], l[2]
		if strings.Contains(key, "~") {
			t.Fatalf("batch %s: the loader handed back %q, not the plain key", batch, key)
		}
		if inBatch[batch] == nil {
			inBatch[batch] = map[string]bool{}
		}
		if inBatch[batch][key] {
			t.Fatalf("batch %s holds %s twice, though every class has at least the batch's 8 of it", batch, key)
		}
		inBatch[batch][key] = true
		if want := strconv.Itoa(seen[key]); repeat != want {
			t.Fatalf("batch %s: %s has repeat %s, but it came %s times before in the rank-epoch", batch, key, repeat, want)
		}
		if seen[key] > 0 {
			repeats++
		}
		seen[key]++
	}
	// 500 samples at α = 0: 12 batches of 40, 96 of each class; the class
	// of 10 is drawn almost 10 times over.
	if len(lines) != 12*40 || len(inBatch) != 12 || repeats < 96-10 {
		t.Fatalf("read %d samples in %d batches with %d repeats; want 480 in 12, with at least 86 repeats", len(lines), len(inBatch), repeats)
	}
}

// ingestLongTailed ingests classes of the given counts as dataset ds into
// 3 local stores, and returns the --stores flag.
func ingestLongTailed(t *testing.T, counts []int, seed uint64) string {
	t.Helper()
	_, urls := localStores(t, 3)
	stores := "--stores=" + strings.Join(urls, ",")
	src := writeSource(t, synth.Spec{Counts: counts, MinSize: 200, MaxSize: 2000, Seed: seed})
	if r := run(t, time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", src, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	return stores
}

// TestPresetAndMinShare: --preset decoupled:5 reads the natural mix for
// epochs 0-3 and balances the classes in epoch 4; --min-share 0.1 gives
// every class at least a tenth of each epoch (the others scaled down in
// proportion), within one sample per batch; info.json says both, and
// bad values are refused naming the flag.
func TestPresetAndMinShare(t *testing.T) {
	counts := []int{300, 120, 50, 20, 10}
	stores := ingestLongTailed(t, counts, 63)
	mnt := mountShardfs(t, stores, "--batch-size=10", "--epochs=5", "--preset=decoupled:5", "ds")
	info := orderInfoOf(t, mnt)
	if info.Order.Preset != "decoupled:5" || !slices.Equal(info.Order.AlphaByEpoch[:5], []float64{1, 1, 1, 1, 0}) {
		t.Fatalf("info.json: preset %q, alpha by epoch %v; want decoupled:5 and 1,1,1,1,0", info.Order.Preset, info.Order.AlphaByEpoch)
	}
	for e, alpha := range []float64{1, 1, 1, 1, 0} {
		got, slots := classSlots(t, mnt, e)
		var z float64
		for _, n := range counts {
			z += math.Pow(float64(n), alpha)
		}
		for c, n := range counts {
			if target := float64(slots) * math.Pow(float64(n), alpha) / z; math.Abs(float64(got[c])-target) > 1 {
				t.Errorf("epoch %d (alpha %v): class %d has %d of %d slots, target %.2f", e, alpha, c, got[c], slots, target)
			}
		}
	}

	// At alpha 1 the shares are 0.6, 0.24, 0.1, 0.04, 0.02: the last two
	// are raised to 0.1, the first two scaled to 0.7·0.6/0.84 = 0.5 and 0.2.
	mnt = mountShardfs(t, stores, "--batch-size=10", "--epochs=1", "--min-share=0.1", "ds")
	got, slots := classSlots(t, mnt, 0)
	for c, share := range []float64{0.5, 0.2, 0.1, 0.1, 0.1} {
		if target := float64(slots) * share; math.Abs(float64(got[c])-target) > 1 {
			t.Errorf("--min-share 0.1: class %d has %d of %d slots, target %.2f", c, got[c], slots, target)
		}
	}
	for _, tc := range []struct{ args []string }{
		{[]string{"--min-share=0.3"}}, {[]string{"--min-share=-1"}}, {[]string{"--preset=decoupled"}},
		{[]string{"--preset=decoupled:5", "--alpha=0.5"}}, {[]string{"--preset=decoupled:5", "--alpha-schedule=0:1"}},
	} {
		flag := strings.SplitN(tc.args[0], "=", 2)[0]
		if r := run(t, time.Minute, nil, append([]string{"plan", stores, "--batch-size=10"}, append(tc.args, "ds")...)...); r.code == 0 || !strings.Contains(r.stderr, flag) {
			t.Errorf("plan %v: want a refusal naming %s: %v", tc.args, flag, r)
		}
	}
}

// classSlots counts rank 0's slots of epoch e by class, from index.csv.
func classSlots(t *testing.T, mnt string, e int) (map[int]int, int) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(mnt, "epochs", fmt.Sprintf("%04d", e), "rank-000", "index.csv"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	got := map[int]int{}
	for _, l := range lines[1:] {
		f := strings.Split(l, ",")
		for c := 0; c < 10; c++ {
			if f[3] == synth.ClassName(c) {
				got[c]++
			}
		}
	}
	return got, len(lines) - 1
}

// orderInfo is what info.json says of the order's alpha.
type orderInfo struct {
	Order struct {
		AlphaByEpoch []float64 `json:"alpha_by_epoch"`
		Preset       string    `json:"preset"`
		MinShare     float64   `json:"min_share"`
	} `json:"order"`
}

func orderInfoOf(t *testing.T, mnt string) orderInfo {
	t.Helper()
	var info orderInfo
	if err := json.Unmarshal(mustRead(t, filepath.Join(mnt, ".shardfs", "info.json")), &info); err != nil {
		t.Fatal(err)
	}
	return info
}
