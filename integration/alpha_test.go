package integration

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
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
	_, urls := localStores(t, 3)
	stores := "--stores=" + strings.Join(urls, ",")
	counts := []int{300, 120, 50, 20, 10}
	src := writeSource(t, synth.Spec{Counts: counts, MinSize: 200, MaxSize: 2000, Seed: 61})
	if r := run(t, time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", src, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	mnt := mountShardfs(t, stores, "--batch-size=10", "--epochs=5", "--alpha-schedule=0:0,4:1", "ds")
	var info struct {
		Order struct {
			AlphaByEpoch []float64 `json:"alpha_by_epoch"`
		} `json:"order"`
	}
	if err := json.Unmarshal(mustRead(t, filepath.Join(mnt, ".shardfs", "info.json")), &info); err != nil {
		t.Fatal(err)
	}
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
