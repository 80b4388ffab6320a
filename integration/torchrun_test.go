package integration

import (
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// writeClassImages writes counts[name] one-colour PNG images under
// dir/<name>/NNNN.png, classes in sorted order, and returns each image's
// colour by key (<name>/NNNN), so a decoded sample's first pixel names it.
func writeClassImages(t *testing.T, dir string, counts map[string]int) map[string][3]int {
	t.Helper()
	pixel := map[string][3]int{}
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	sort.Strings(names)
	for c, name := range names {
		os.MkdirAll(filepath.Join(dir, name), 0o755)
		for i := 0; i < counts[name]; i++ {
			px := [3]int{i % 256, c * 60 % 256, i / 256 * 32 % 256}
			pixel[fmt.Sprintf("%s/%04d", name, i)] = px
			img := image.NewRGBA(image.Rect(0, 0, 32, 24))
			for p := 0; p < len(img.Pix); p += 4 {
				copy(img.Pix[p:], []byte{uint8(px[0]), uint8(px[1]), uint8(px[2]), 255})
			}
			f, err := os.Create(filepath.Join(dir, name, fmt.Sprintf("%04d.png", i)))
			if err != nil {
				t.Fatal(err)
			}
			if err := png.Encode(f, img); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}
	return pixel
}

// orderRow is one row of a rank-epoch's index.csv.
type orderRow struct {
	key, stratum string
	batch        int
}

// rankOrder reads every rank's index.csv of epoch e in mnt.
func rankOrder(t *testing.T, mnt string, e, world int) [][]orderRow {
	t.Helper()
	var out [][]orderRow
	for r := 0; r < world; r++ {
		lines := strings.Split(strings.TrimSpace(string(mustRead(t, filepath.Join(mnt, "epochs", fmt.Sprintf("%04d", e), fmt.Sprintf("rank-%03d", r), "index.csv")))), "\n")
		var rows []orderRow
		for _, l := range lines[1:] {
			f := strings.Split(l, ",")
			b, _ := strconv.Atoi(f[1])
			rows = append(rows, orderRow{key: strings.TrimSuffix(f[2], ".png"), stratum: f[3], batch: b})
		}
		out = append(out, rows)
	}
	return out
}

type trainRecord struct {
	Classes []string `json:"classes"`
	Steps   []struct {
		Epoch int `json:"epoch"`
		Ranks [][]struct {
			Key   string `json:"key"`
			Class int    `json:"class"`
			Pixel [3]int `json:"pixel"`
		} `json:"ranks"`
	} `json:"steps"`
}

type trainProgress struct {
	Steps  int    `json:"steps"`
	Resume string `json:"resume"`
	Loader struct {
		Epoch         int `json:"epoch"`
		Batch         int `json:"batch"`
		GlobalBatches int `json:"global_batches"`
	} `json:"loader"`
}

// Issue 26: examples/train_ddp.py trains for 2 epochs with torchrun on a
// real mount through shardfs's Python loader, and is killed (SIGKILL, the
// whole process group) mid-epoch twice: resumed once with the same 2
// processes (exact resume from the loader's state_dict), then with 3 on a
// mount remounted with the --resume-at the script printed (elastic). Every
// sample trained on is checked against the epochs' orders: none twice,
// none lost, its class index and its decoded pixels its own.
func TestTorchrunKillAndResume(t *testing.T) {
	requireTorch(t)
	torchrun := requireTool(t, "torchrun")
	c := sharedCluster(t, 3)
	stores := "--stores=" + strings.Join(c.urls, ",")
	src := t.TempDir()
	pixel := writeClassImages(t, src, map[string]int{"c0": 150, "c1": 100, "c2": 70, "c3": 40}) // 360 images
	if r := run(t, 3*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--shard-size=256KiB", src, "pets"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	order := []string{stores, "--batch-size=8", "--seed=11"}
	work := t.TempDir()
	ckpt, progress, record := filepath.Join(work, "ckpt.pt"), filepath.Join(work, "progress.json"), filepath.Join(work, "record.json")
	script, _ := filepath.Abs("../examples/train_ddp.py")
	train := func(mnt string, procs int, killAfter int) trainProgress {
		t.Helper()
		// --redirects 1 --tee 1: Debian's torch 1.13 on Python 3.11 cannot
		// parse torchrun's default of 0 for either (IntFlag no longer
		// iterates its zero member) and fails before starting a worker.
		cmd := exec.Command(torchrun, "--nproc_per_node", strconv.Itoa(procs), "--master_port", strconv.Itoa(29500+procs+killAfter),
			"--redirects", "1", "--tee", "1", script,
			"--mount", mnt, "--checkpoint", ckpt, "--progress", progress, "--record", record, "--epochs=2", "--step-delay=0.2")
		cmd.Env = append(os.Environ(), "PYTHONUNBUFFERED=1", "OMP_NUM_THREADS=1")
		out, _ := os.Create(filepath.Join(work, fmt.Sprintf("torchrun-%d-%d.log", procs, killAfter)))
		defer out.Close()
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		// torchrun is /usr/bin/torchrun, a python3 script: Debian's torch imports in /usr/bin/python3.
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		read := func() trainProgress {
			var p trainProgress
			if b, err := os.ReadFile(progress); err == nil {
				json.Unmarshal(b, &p)
			}
			return p
		}
		deadline := time.After(8 * time.Minute)
		for {
			select {
			case err := <-done:
				log, _ := os.ReadFile(out.Name())
				if err != nil || killAfter > 0 {
					t.Fatalf("torchrun with %d processes ended (%v) before it was killed after step %d:\n%s", procs, err, killAfter, log)
				}
				return read()
			case <-deadline:
				log, _ := os.ReadFile(out.Name())
				t.Fatalf("torchrun with %d processes: no end in 8 minutes:\n%s", procs, log)
			case <-time.After(50 * time.Millisecond):
				if p := read(); killAfter > 0 && p.Steps >= killAfter {
					syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // mid-step, as a preempted node dies
					<-done
					return read()
				}
			}
		}
	}

	first := mountShardfs(t, append(append([]string{}, order...), "--world-size=2", "pets")...)
	train(first, 2, 5)
	p := train(first, 2, 12) // the same command again: an exact resume
	if p.Loader.Epoch != 0 || p.Loader.GlobalBatches < 24 || p.Resume != fmt.Sprintf("--resume-at 0:%d", p.Loader.GlobalBatches) {
		t.Fatalf("progress after the second kill: %+v", p)
	}
	consumed := p.Loader.GlobalBatches
	before := rankOrder(t, first, 0, 2)
	// The job goes on with 3 processes, on a mount resumed where it stopped.
	second := mountShardfs(t, append(append([]string{}, order...), "--world-size=3", "--resume-at="+strings.TrimPrefix(p.Resume, "--resume-at "), "pets")...)
	train(second, 3, 0)

	var rec trainRecord
	if err := json.Unmarshal(mustRead(t, record), &rec); err != nil {
		t.Fatal(err)
	}
	// What each epoch's order says was to be trained on, as a multiset.
	want := []map[string]int{{}, {}}
	stratum := map[string]string{}
	for _, rows := range before {
		for _, row := range rows {
			stratum[row.key] = row.stratum
			if row.batch < consumed/2 {
				want[0][row.key]++
			}
		}
	}
	for e := 0; e < 2; e++ {
		for _, rows := range rankOrder(t, second, e, 3) {
			for _, row := range rows {
				stratum[row.key] = row.stratum
				want[e][row.key]++
			}
		}
	}
	got := []map[string]int{{}, {}}
	for i, st := range rec.Steps {
		for r, batch := range st.Ranks {
			if len(batch) != 8 {
				t.Fatalf("step %d rank %d: %d samples, want a batch of 8", i, r, len(batch))
			}
			for _, s := range batch {
				if got[st.Epoch][s.Key]++; got[st.Epoch][s.Key] > 1 {
					t.Fatalf("epoch %d: sample %s trained on twice", st.Epoch, s.Key)
				}
				if s.Class < 0 || s.Class >= len(rec.Classes) || rec.Classes[s.Class] != stratum[s.Key] {
					t.Fatalf("sample %s: class index %d (%v), want its stratum %q", s.Key, s.Class, rec.Classes, stratum[s.Key])
				}
				if s.Pixel != pixel[s.Key] {
					t.Fatalf("sample %s: decoded pixel %v, want %v", s.Key, s.Pixel, pixel[s.Key])
				}
			}
		}
	}
	for e := 0; e < 2; e++ {
		if len(got[e]) != len(want[e]) {
			t.Fatalf("epoch %d: trained on %d samples, the order holds %d", e, len(got[e]), len(want[e]))
		}
		for k, n := range want[e] {
			if n != 1 || got[e][k] != 1 {
				t.Fatalf("epoch %d: sample %s is %d times in the order and was trained on %d times", e, k, n, got[e][k])
			}
		}
	}
	// Old part plus new part is the whole epoch, but for fewer than 3
	// batches of tail (drop).
	if n := len(got[0]); n > 360 || n < 360-3*8 {
		t.Fatalf("epoch 0: %d of 360 samples trained on", n)
	}
	t.Logf("epoch 0: %d samples (%d global batches before the resize), epoch 1: %d", len(got[0]), consumed, len(got[1]))
}

// TestPythonPackageInstalls: python/ installs with pip as the README says
// (here into a target directory, offline), and the installed package is
// the one imported.
func TestPythonPackageInstalls(t *testing.T) {
	requireTorch(t)
	work := t.TempDir()
	pkg := filepath.Join(work, "python")
	if out, err := exec.Command("cp", "-r", "../python", pkg).CombinedOutput(); err != nil {
		t.Fatalf("copy python/: %v: %s", err, out)
	}
	site := filepath.Join(work, "site")
	pip := exec.Command("/usr/bin/python3", "-m", "pip", "install", "--no-index", "--no-build-isolation", "--no-deps", "--target", site, pkg)
	if out, err := pip.CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" || !strings.Contains(string(out), "No module named") {
			t.Fatalf("pip install ./python: %v\n%s", err, out)
		}
		t.Skipf("pip or setuptools missing: %s", out)
	}
	cmd := exec.Command("/usr/bin/python3", "-c", "import shardfs; print(shardfs.__file__); print(shardfs.resume_at({'epoch': 3, 'global_batches': 1200}))")
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "PYTHONPATH="+site)
	out, err := cmd.CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err != nil || len(lines) != 2 || !strings.HasPrefix(lines[0], site+"/shardfs/") || lines[1] != "--resume-at 3:1200" {
		t.Fatalf("import the installed package: %v\n%s", err, out)
	}
}
