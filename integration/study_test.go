package integration

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestStudyPlumbing runs the study (examples/study) in its quick form,
// twice: every arm runs through real mounts and the Python loader, every
// number is finite, and the two runs write the same numbers. It asserts no
// accuracy: that is what the study measures, not what a test may demand.
func TestStudyPlumbing(t *testing.T) {
	requireTorch(t)
	for _, mod := range []string{"sklearn", "matplotlib"} {
		if err := exec.Command("/usr/bin/python3", "-c", "import "+mod).Run(); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("python3 cannot import %s: scripts/deps.sh installs python3-%s", mod, mod)
			}
			t.Skipf("python3 cannot import %s", mod)
		}
	}
	var runs [][]byte
	for i := 0; i < 2; i++ {
		out := t.TempDir()
		cmd := exec.Command("/usr/bin/python3", "../examples/study/study.py", "--quick", "--shardfs", binary, "--out", out)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("study run %d: %v\n%s", i, err, b)
		}
		b, err := os.ReadFile(filepath.Join(out, "results.json"))
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, b)
		for _, f := range []string{"results.md", "results.png"} {
			if fi, err := os.Stat(filepath.Join(out, f)); err != nil || fi.Size() == 0 {
				t.Fatalf("study run %d wrote no %s: %v", i, f, err)
			}
		}
	}
	if !bytes.Equal(runs[0], runs[1]) {
		t.Fatalf("two runs of the study with the same seeds wrote different numbers")
	}
	var res struct {
		Seeds   int
		Results []map[string]any
	}
	if err := json.Unmarshal(runs[0], &res); err != nil {
		t.Fatal(err)
	}
	arms := map[string]int{}
	for _, r := range res.Results {
		arms[r["arm"].(string)]++
		for _, k := range []string{"accuracy", "balanced_accuracy", "worst_class_recall", "loss_change_variance", "grad_norm_change_variance", "batch_tv", "steps"} {
			v, ok := r[k].(float64)
			if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("arm %v seed %v: %s is %v", r["arm"], r["seed"], k, r[k])
			}
		}
		// The arms of several fields: each field's per-batch deviation is a
		// number, and order version 5 holds every batch within one sample
		// of its share of each label and each source (issue 60).
		if arm := r["arm"].(string); strings.HasPrefix(arm, "fields:") {
			for _, f := range []string{"label", "source", "value"} {
				for _, k := range []string{f + "_deviation", f + "_deviation_max"} {
					if v, ok := r[k].(float64); !ok || math.IsNaN(v) || math.IsInf(v, 0) {
						t.Fatalf("arm %v seed %v: %s is %v", arm, r["seed"], k, r[k])
					}
				}
			}
			if arm == "fields:marginal" && (r["label_deviation_max"].(float64) > 1 || r["source_deviation_max"].(float64) > 1) {
				t.Fatalf("arm %v seed %v: a batch is %v off its share of a label, %v of a source: more than one sample", arm, r["seed"], r["label_deviation_max"], r["source_deviation_max"])
			}
		}
		if r["steps"].(float64) < 4*13 {
			t.Fatalf("arm %v seed %v ran %v steps; 4 epochs of 427 samples in batches of 32 are 52", r["arm"], r["seed"], r["steps"])
		}
	}
	for _, arm := range []string{"shuffle", "alpha=1", "alpha=0.5", "alpha=0", "decoupled", "min-share", "feedback", "fields:shuffle", "fields:joint", "fields:marginal"} {
		if arms[arm] != res.Seeds || res.Seeds != 2 {
			t.Fatalf("arm %s ran %d times, want once per seed (%d): %v", arm, arms[arm], res.Seeds, arms)
		}
	}
}
