package integration

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"image/jpeg"
	"os"
)

// requireVision checks that Debian's python3-torchvision and python3-pil import.
func requireVision(t *testing.T) {
	t.Helper()
	requireTorch(t)
	if err := exec.Command("/usr/bin/python3", "-c", "import torchvision, PIL").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true: /usr/bin/python3 cannot import torchvision and PIL (apt-get install python3-torchvision python3-pil): %v", err)
		}
		t.Skipf("no torchvision/PIL: %v", err)
	}
}

// TestRealImageLoaders: real JPEGs written with PIL, ingested and mounted,
// read by torchvision's ImageFolder over samples/ and by a WebDataset-style
// pipeline (tarfile, PIL, torchvision transforms, DataLoader workers) over
// the batch tars. Both decode every image and see the right labels and counts.
func TestRealImageLoaders(t *testing.T) {
	t.Parallel() // waits more than it computes, asserts bytes, states and hang bounds (main_test.go, parallelTests)
	requireVision(t)
	src := t.TempDir()
	out, err := exec.Command("/usr/bin/python3", "testdata/make_jpegs.py", src, "40,25,12,5").Output()
	if err != nil {
		t.Fatalf("make_jpegs.py: %v", err)
	}
	label := map[string]string{} // key -> class directory
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		key, _, _ := strings.Cut(line, " ")
		label[key] = filepath.Dir(key)
	}
	if len(label) != 82 {
		t.Fatalf("%d images written, want 82", len(label))
	}
	// The source images are real JPEGs (Go's decoder agrees with PIL's).
	size := map[string]string{}
	for key := range label {
		f, err := os.Open(filepath.Join(src, key))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := jpeg.DecodeConfig(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s is not a JPEG: %v", key, err)
		}
		size[key] = fmt.Sprintf("%dx%d", cfg.Width, cfg.Height)
	}
	_, urls := localStores(t, 3)
	stores := "--stores=" + strings.Join(urls, ",")
	if r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", src, "images"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	mnt := mountShardfs(t, stores, "--batch-size=8", "images")

	t.Run("ImageFolder over samples", func(t *testing.T) {
		lines := runLoader(t, "imagefolder", mnt)
		seen := map[string]bool{}
		for _, f := range lines {
			key, cls, sz := f[0], f[1], f[2]
			if label[key] != cls || size[key] != sz {
				t.Fatalf("%s: ImageFolder saw class %s size %s, want %s %s", key, cls, sz, label[key], size[key])
			}
			seen[key] = true
		}
		if len(seen) != len(label) {
			t.Fatalf("ImageFolder saw %d images, the dataset has %d", len(seen), len(label))
		}
	})
	t.Run("WebDataset-style batch tars", func(t *testing.T) {
		rankDir := filepath.Join(mnt, "epochs", "0000", "rank-000")
		rows := readIndex(t, filepath.Join(rankDir, "index.csv"))
		names := tarMemberNames(t, filepath.Join(rankDir, "epoch.tar"))
		want := map[string]string{} // tar key -> "cls size"
		for i, row := range rows {
			stem := strings.TrimSuffix(names[i], ".jpg")
			want[stem] = fmt.Sprintf("%d %s", row.stratum, size[row.key])
		}
		lines := runLoader(t, "webdataset", rankDir)
		got := map[string]bool{}
		for _, f := range lines {
			if w, ok := want[f[0]]; !ok || w != f[1]+" "+f[2] || got[f[0]] {
				t.Fatalf("sample %s: got cls %s size %s, want %q (seen before: %v)", f[0], f[1], f[2], w, got[f[0]])
			}
			got[f[0]] = true
		}
		if len(got) != len(want) || len(want) != len(rows) || len(rows) != 80 {
			t.Fatalf("the pipeline decoded %d samples; the rank-epoch has %d (index rows %d, want 80: 82 samples, batches of 8, tail dropped)", len(got), len(want), len(rows))
		}
	})
}

// runLoader runs torchvision_loaders.py and returns its output lines' fields.
func runLoader(t *testing.T, mode, arg string) [][]string {
	t.Helper()
	return runPython(t, "testdata/torchvision_loaders.py", mode, arg)
}

// runPython runs a loader script with Debian's python3 and returns the
// fields of its output lines, each "<name> <value> <value>".
func runPython(t *testing.T, script string, args ...string) [][]string {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", append([]string{script}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", script, args, err, stderr.String())
	}
	var lines [][]string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			t.Fatalf("bad line %q", sc.Text())
		}
		lines = append(lines, f)
	}
	return lines
}
