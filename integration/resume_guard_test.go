package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// guard runs testdata/resume_guard.py with the package's python/ on the path.
func guard(t *testing.T, args ...string) map[string]any {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", append([]string{"testdata/resume_guard.py"}, args...)...)
	abs, _ := filepath.Abs("../python")
	cmd.Env = append(os.Environ(), "PYTHONPATH="+abs)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("resume_guard.py %v: %v\n%s%s", args, err, out, stderr)
	}
	var v map[string]any
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("resume_guard.py %v printed %q: %v", args, out, err)
	}
	return v
}

// Issue 40 item 16: the loader's state_dict did not say which order it
// belonged to, so a state from a --seed 7 mount loaded into a --seed 8
// one and samples were silently repeated or skipped; bad states were
// accepted, len() ignored a resume, Loader(batch_size=...) failed only
// when iterated, and persistent_workers did nothing. Now the state carries
// the order (seed, order version, alpha, dataset version, ...), and a
// resume under another one is refused naming what differs; the same order
// resumes exactly, another world size elastically.
func TestLoaderResumeGuards(t *testing.T) {
	requireTorch(t)
	_, urls := localStores(t, 3)
	stores := "--stores=" + strings.Join(urls, ",")
	src1 := taggedSource(t, 200, 3, "", 1)
	src2 := taggedSource(t, 40, 3, "b", 2)
	for _, args := range [][]string{
		{"ingest", stores, "--data=2", "--parity=1", src1, "ds"},
		{"ingest", stores, "--append", src2, "ds"},
	} {
		if r := run(t, 2*time.Minute, nil, args...); r.code != 0 {
			t.Fatalf("%v: %v", args, r)
		}
	}
	mount := func(args ...string) *mountProc {
		return mountShardfsEnv(t, nil, append(append([]string{stores, "--world-size=1", "--batch-size=8"}, args...), "ds")...)
	}
	stop := func(mp *mountProc) {
		mp.cmd.Process.Signal(syscall.SIGTERM)
		<-mp.exited
	}
	state := filepath.Join(t.TempDir(), "state.json")
	mp := mount("--seed=7")
	saved := guard(t, "save", mp.dir, state)
	stop(mp)

	for _, tc := range []struct {
		flags []string
		want  string // in the refusal; "" resumes
	}{
		{[]string{"--seed=8"}, "--seed 7 (this mount: 8)"},
		{[]string{"--seed=7", "--alpha=0.5"}, "--alpha"},
		{[]string{"--seed=7", "--version=1"}, "dataset version (--version) 2 (this mount: 1)"},
		{[]string{"--seed=7"}, ""},
	} {
		mp := mount(tc.flags...)
		got := guard(t, "resume", mp.dir, state)
		stop(mp)
		switch {
		case tc.want != "":
			if e, _ := got["error"].(string); !strings.Contains(e, tc.want) || !strings.Contains(e, "another order") {
				t.Fatalf("resume under %v: want refused naming %q, got %v", tc.flags, tc.want, got)
			}
		case got["error"] != nil:
			t.Fatalf("resume under the same order: %v", got)
		default:
			if !slices.Equal(toStrings(got["next"]), toStrings(saved["next"])) {
				t.Fatalf("resume under the same order: first batch %v, want the saved run's 4th %v", got["next"], saved["next"])
			}
			if got["batch"].(float64) != 4 {
				t.Fatalf("after one batch of the resumed run, batch %v, want 4", got["batch"])
			}
		}
	}
	// Another world size: elastic, through the mount's --resume-at.
	var st map[string]any
	if err := json.Unmarshal(mustRead(t, state), &st); err != nil {
		t.Fatal(err)
	}
	mp = mountShardfsEnv(t, nil, stores, "--world-size=2", "--batch-size=8", "--seed=7", "--resume-at=0:3", "ds")
	if got := guard(t, "resume", mp.dir, state, "2"); got["error"] != nil || len(toStrings(got["next"])) != 8 {
		t.Fatalf("an elastic resume on 2 ranks: %v", got)
	}
	stop(mp)

	mp = mount("--seed=7")
	bad := guard(t, "misuse", mp.dir, state)
	for name, want := range map[string]string{
		"negative batch":               "state['batch'] = -3",
		"batch without global batches": "global_batches 0 is not",
		"not a number":                 "state['epoch'] = '1'",
		"batch_size":                   "the mount already batches",
	} {
		if got, _ := bad[name].(string); !strings.Contains(got, want) {
			t.Errorf("%s: want refused with %q, got %q", name, want, got)
		}
	}
	// len() counts what is left after a resume.
	if got := guard(t, "resume", mp.dir, state); got["len"].(float64) != float64(240/8-3) {
		t.Errorf("len() after resuming at batch 3 of 30: %v, want 27", got["len"])
	}
	// Persistent workers stay up across epochs.
	pids := guard(t, "workers", mp.dir)["pids"].([]any)
	if len(pids) != 2 || len(toStrings(pids[0])) == 0 || !slices.Equal(toStrings(pids[0]), toStrings(pids[1])) {
		t.Errorf("worker pids of epochs 0 and 1 with persistent_workers=True: %v, want the same", pids)
	}
	stop(mp)
}

func toStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, strings.TrimSpace(strings.Trim(jsonString(x), `"`)))
	}
	return out
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
