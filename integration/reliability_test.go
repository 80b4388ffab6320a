package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/layout"
)

// localStores makes n file:// store directories and returns their URLs.
func localStores(t *testing.T, n int) (dirs, urls []string) {
	t.Helper()
	base := t.TempDir()
	for i := 0; i < n; i++ {
		d := filepath.Join(base, fmt.Sprintf("store%d", i))
		dirs = append(dirs, d)
		urls = append(urls, "file://"+d)
	}
	return dirs, urls
}

func writeSource(t *testing.T, spec synth.Spec) string {
	t.Helper()
	src := t.TempDir()
	if _, err := synth.Write(src, spec); err != nil {
		t.Fatal(err)
	}
	return src
}

// snapshot maps every file below the dirs to its contents' hash, to prove
// that a refused command wrote nothing.
func snapshot(t *testing.T, dirs []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, d := range dirs {
		filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err == nil && !e.IsDir() {
				b, _ := os.ReadFile(p)
				out[p] = fmt.Sprintf("%x", b[:min(len(b), 64)]) + fmt.Sprint(len(b))
			}
			return nil
		})
	}
	return out
}

func equalSnapshots(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Issue 9 item 1: a dataset name may not fall inside another's namespace.
func TestNestedNamesCannotCollide(t *testing.T) {
	_, urls := localStores(t, 3)
	stores := "--stores=" + strings.Join(urls, ",")
	src := writeSource(t, synth.Spec{Counts: []int{8, 4}, MinSize: 100, MaxSize: 900, Seed: 3})
	ingest := func(name string, extra ...string) result {
		// "--" ends the flags, so a name such as "-dash" reaches the name check.
		return run(t, time.Minute, nil, append(append([]string{"ingest", stores, "--data=2", "--parity=1"}, extra...), "--", src, name)...)
	}
	if r := ingest("proj"); r.code != 0 {
		t.Fatalf("ingest proj: %v", r)
	}
	// A nested name is refused, so it can never sit inside proj's namespace.
	if r := ingest("proj/data"); r.code == 0 || !strings.Contains(r.stderr, "letters, digits") {
		t.Fatalf("ingest proj/data: want a refusal that states the name rules: %v", r)
	}
	if r := ingest("proj.data"); r.code != 0 {
		t.Fatalf("ingest proj.data: %v", r)
	}
	if r := ingest("proj", "--force"); r.code != 0 {
		t.Fatalf("ingest --force proj: %v", r)
	}
	if r := run(t, time.Minute, nil, "verify", stores, "proj.data"); r.code != 0 {
		t.Fatalf("proj.data after ingest --force proj: %v", r)
	}
	for _, bad := range []string{"a b", "a\nb", "a\x01b", "..", ".hidden", "-dash", "a/b", "ü"} {
		if r := ingest(bad); r.code == 0 || !strings.Contains(r.stderr, "letters, digits") {
			t.Errorf("ingest %q: want a refusal that states the name rules: %v", bad, r)
		}
	}
}

// Issue 9 item 4: the same store twice, or one inside another, halves the fault tolerance.
func TestDuplicateStoresRefused(t *testing.T) {
	dirs, urls := localStores(t, 6)
	src := writeSource(t, synth.Spec{Counts: []int{8, 4}, MinSize: 100, MaxSize: 900, Seed: 3})
	for _, tc := range []struct {
		name   string
		stores []string
		want   string
	}{
		{"same URL", append([]string{urls[0]}, urls[0:5]...), "same place"},
		{"same directory spelled differently", append([]string{"file://" + dirs[0] + "/"}, urls[0:5]...), "same place"},
		{"one inside another", append([]string{"file://" + dirs[0] + "/sub"}, urls[0:5]...), "inside"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, time.Minute, nil, "ingest", "--stores="+strings.Join(tc.stores, ","), "--data=4", "--parity=2", src, "ds")
			if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("want a refusal mentioning %q: %v", tc.want, r)
			}
		})
	}
}

// Issue 9 item 5: store order is checked against identities written at ingest.
func TestStoreOrderChecked(t *testing.T) {
	dirs, urls := localStores(t, 6)
	src := writeSource(t, synth.Spec{Counts: []int{40, 20, 8}, MinSize: 1000, MaxSize: 20_000, Seed: 5})
	stores := "--stores=" + strings.Join(urls, ",")
	if r := run(t, time.Minute, nil, "ingest", stores, "--data=4", "--parity=2", "--shard-size=64KiB", src, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	reversed := slices.Clone(urls)
	slices.Reverse(reversed)
	t.Run("reversed verify names the order", func(t *testing.T) {
		r := run(t, time.Minute, nil, "verify", "--stores="+strings.Join(reversed, ","), "ds")
		if r.code == 0 || r.code == 1 || r.code == 2 || !strings.Contains(r.stderr, strings.Join(urls, ",")) {
			t.Fatalf("want 'could not check' naming the order to pass (%s): %v", strings.Join(urls, ","), r)
		}
	})
	t.Run("swapped repair writes nothing", func(t *testing.T) {
		swapped := slices.Clone(urls)
		swapped[1], swapped[4] = swapped[4], swapped[1]
		before := snapshot(t, dirs)
		r := run(t, time.Minute, nil, "repair", "--stores="+strings.Join(swapped, ","), "ds")
		if r.code == 0 || !strings.Contains(r.stderr, strings.Join(urls, ",")) {
			t.Fatalf("want a refusal naming the order to pass: %v", r)
		}
		if after := snapshot(t, dirs); !equalSnapshots(before, after) {
			t.Fatalf("repair with swapped stores wrote into them: %d objects before, %d after", len(before), len(after))
		}
		if r := run(t, time.Minute, nil, "verify", stores, "ds"); r.code != 0 {
			t.Fatalf("verify in the right order: %v", r)
		}
	})
	t.Run("empty replacement store is filled", func(t *testing.T) {
		os.RemoveAll(dirs[3])
		if r := run(t, time.Minute, nil, "verify", stores, "ds"); r.code != 1 {
			t.Fatalf("verify with an empty store 3: want exit 1 (damaged, recoverable): %v", r)
		}
		if r := run(t, time.Minute, nil, "repair", stores, "ds"); r.code != 0 {
			t.Fatalf("repair: %v", r)
		}
		if r := run(t, time.Minute, nil, "verify", stores, "ds"); r.code != 0 {
			t.Fatalf("verify after repair: %v", r)
		}
	})
}

// Issue 9 item 6: a store holding another dataset of the same name is
// outvoted, reported, and not overwritten; repair --force makes it whole,
// in every metadata format (format 2 needs its shard index copies too,
// format 3 its group object copies).
func TestForeignStoreOutvoted(t *testing.T) {
	for _, format := range []string{"--format=1", "--format=2", "--format=3"} {
		t.Run(format, func(t *testing.T) { foreignStoreOutvoted(t, format) })
	}
}

func foreignStoreOutvoted(t *testing.T, format string) {
	dirs, urls := localStores(t, 6)
	otherDirs, otherURLs := localStores(t, 6)
	src := writeSource(t, synth.Spec{Counts: []int{30, 10}, MinSize: 1000, MaxSize: 9000, Seed: 6})
	other := writeSource(t, synth.Spec{Counts: []int{5, 5, 5}, MinSize: 1000, MaxSize: 9000, Seed: 7})
	if r := run(t, time.Minute, nil, "ingest", "--stores="+strings.Join(urls, ","), "--data=4", "--parity=2", format, src, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	time.Sleep(1100 * time.Millisecond) // the foreign copy is newer by the manifest's clock
	if r := run(t, time.Minute, nil, "ingest", "--stores="+strings.Join(otherURLs, ","), "--data=4", "--parity=2", format, other, "ds"); r.code != 0 {
		t.Fatalf("ingest other: %v", r)
	}
	mixed := slices.Clone(urls)
	mixed[2] = otherURLs[2]
	stores := "--stores=" + strings.Join(mixed, ",")
	r := run(t, time.Minute, nil, "plan", stores, "--batch-size=8", "ds")
	if r.code != 0 || !strings.Contains(r.stdout, "40 samples") {
		t.Fatalf("plan must show the dataset the 5 agreeing stores hold (40 samples): %v", r)
	}
	r = run(t, time.Minute, nil, "verify", stores, "ds")
	if r.code != 1 || !strings.Contains(r.stdout+r.stderr, otherURLs[2]) {
		t.Fatalf("verify: want exit 1 naming the foreign store %s: %v", otherURLs[2], r)
	}
	before := snapshot(t, []string{otherDirs[2]})
	r = run(t, time.Minute, nil, "repair", stores, "ds")
	if r.code == 0 || !strings.Contains(r.stderr, "--force") {
		t.Fatalf("repair must refuse to overwrite the foreign store without --force: %v", r)
	}
	if after := snapshot(t, []string{otherDirs[2]}); !equalSnapshots(before, after) {
		t.Fatal("repair without --force wrote into the foreign store")
	}
	if r := run(t, time.Minute, nil, "repair", "--force", stores, "ds"); r.code != 0 {
		t.Fatalf("repair --force: %v", r)
	}
	if r := run(t, time.Minute, nil, "verify", stores, "ds"); r.code != 0 {
		t.Fatalf("verify after repair --force: %v", r)
	}
	_ = dirs
}

// Issue 9 item 17: bad input gets a clear error.
func TestBadInputMessages(t *testing.T) {
	_, urls := localStores(t, 3)
	stores := "--stores=" + strings.Join(urls, ",")
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.bin"), []byte("aaaa"), 0o644)
	os.WriteFile(filepath.Join(dir, "b.bin"), []byte("bbbb"), 0o644)
	listing := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o644)
		return p
	}
	symTree := t.TempDir()
	real := t.TempDir()
	os.WriteFile(filepath.Join(real, "x.bin"), []byte("xxxx"), 0o644)
	os.Mkdir(filepath.Join(symTree, "plain"), 0o755)
	os.WriteFile(filepath.Join(symTree, "plain", "y.bin"), []byte("yyyy"), 0o644)
	os.Symlink(real, filepath.Join(symTree, "linked"))

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"null label", []string{"ingest", stores, "--data=2", "--parity=1", listing("null.jsonl", `{"path":"a.bin","label":null}`+"\n"), "x"}, "label"},
		{"list label", []string{"ingest", stores, "--data=2", "--parity=1", listing("list.jsonl", `{"path":"a.bin","label":["a","b"]}`+"\n"), "x"}, "label"},
		{"object label", []string{"ingest", stores, "--data=2", "--parity=1", listing("obj.jsonl", `{"path":"a.bin","label":{"x":1}}`+"\n"), "x"}, "label"},
		{"newline label", []string{"ingest", stores, "--data=2", "--parity=1", listing("nl.jsonl", `{"path":"a.bin","label":"a\nb"}`+"\n"), "x"}, "control"},
		{"newline label csv", []string{"ingest", stores, "--data=2", "--parity=1", listing("nl.csv", "a.bin,\"a\nb\"\n"), "x"}, "control"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, time.Minute, nil, tc.args...)
			if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("want failure mentioning %q: %v", tc.want, r)
			}
		})
	}
	// Issue 23 item 13: a link out of the source is refused unless asked for.
	t.Run("symlinked class directory outside the source is refused", func(t *testing.T) {
		r := run(t, time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", symTree, "sym")
		if r.code == 0 || !strings.Contains(r.stderr, "linked is a symbolic link to") || !strings.Contains(r.stderr, "--follow-symlinks") {
			t.Fatalf("want the link out of the source refused, naming --follow-symlinks: %v", r)
		}
	})
	t.Run("symlinked class directory is followed when asked", func(t *testing.T) {
		r := run(t, time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--follow-symlinks", symTree, "sym")
		if r.code != 0 || !strings.Contains(r.stdout, "2 samples in 2 strata") || !strings.Contains(r.stderr, "followed 1 symbolic links, 1 of them out of the source") {
			t.Fatalf("want both classes ingested, the symlinked one followed and counted: %v", r)
		}
	})
	src := writeSource(t, synth.Spec{Counts: []int{20, 10}, MinSize: 100, MaxSize: 900, Seed: 3})
	if r := run(t, time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", src, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	mnt := t.TempDir()
	// Should a refused mount come up after all, it must not outlive the test.
	t.Cleanup(func() { exec.Command("fusermount3", "-uz", mnt).Run() })
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"rank -2", []string{"plan", stores, "--rank=-2", "--world-size=2", "--batch-size=4", "ds"}, "--rank"},
		{"read timeout 0", []string{"mount", stores, "--read-timeout=0s", "ds", mnt}, "--read-timeout"},
		{"read timeout negative", []string{"mount", stores, "--read-timeout=-1s", "ds", mnt}, "--read-timeout"},
		{"batch larger than a rank's share", []string{"plan", stores, "--world-size=4", "--batch-size=16", "ds"}, "--batch-size"},
		{"another order version", []string{"mount", stores, "--order-version=99", "ds", mnt}, "order version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, time.Minute, nil, tc.args...)
			if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("want failure mentioning %q: %v", tc.want, r)
			}
		})
	}
}

// Issue 9 item 16: a malformed store URL with credentials never echoes the secret.
func TestMalformedURLSecretRedacted(t *testing.T) {
	const secret = "s3cr3t-Pa55"
	src := writeSource(t, synth.Spec{Counts: []int{2, 2}, MinSize: 100, MaxSize: 200, Seed: 1})
	bad := []string{
		"http://AKIAX:" + secret + "@127.0.0.1:notaport/b",
		"http://AKIAX:" + secret + "@[::1/b",
		"AKIAX:" + secret + "@127.0.0.1:9000/b",
		"http://AKIAX:" + secret + "@127.0.0.1:9000/b\x7f",
	}
	cfgDir := t.TempDir()
	for i, u := range bad {
		cfg := filepath.Join(cfgDir, fmt.Sprintf("c%d.json", i))
		os.WriteFile(cfg, []byte(fmt.Sprintf(`{"stores": [%q, "file:///tmp/x1", "file:///tmp/x2"]}`, u)), 0o600)
		for _, how := range []struct {
			name string
			env  []string
			args []string
		}{
			{"argv", nil, []string{"--stores=" + u + ",file:///tmp/x1,file:///tmp/x2"}},
			{"env", []string{"SHARDFS_STORES=" + u + ",file:///tmp/x1,file:///tmp/x2"}, nil},
			{"config", nil, []string{"--config=" + cfg}},
		} {
			r := run(t, time.Minute, how.env, append(append([]string{"ingest"}, how.args...), "--data=2", "--parity=1", src, "x")...)
			if r.code == 0 {
				t.Errorf("%s %d: malformed URL accepted: %v", how.name, i, r)
			}
			if strings.Contains(r.stdout+r.stderr, secret) {
				t.Errorf("%s %d: the secret is printed: %v", how.name, i, r)
			}
		}
	}
}

// Issue 9 item 2: of two ingests of one name at once, at most one commits,
// the other fails naming the cause, and the committed dataset verifies.
func TestConcurrentIngestsOfOneName(t *testing.T) {
	c := sharedCluster(t, 3)
	stores := "--stores=" + strings.Join(c.urls, ",")
	srcA := writeSource(t, synth.Imbalanced(300, 4, 0.7, 20_000, 60_000, 11))
	srcB := writeSource(t, synth.Imbalanced(300, 4, 0.7, 20_000, 60_000, 12))
	for round, force := range []bool{false, true} {
		name := fmt.Sprintf("same%d", round)
		args := func(src string) []string {
			a := []string{"ingest", stores, "--data=2", "--parity=1", "--shard-size=1MiB", src, name}
			if force {
				a = append(a, "--force")
			}
			return a
		}
		if force {
			if r := run(t, 2*time.Minute, nil, args(srcA)...); r.code != 0 {
				t.Fatalf("first ingest: %v", r)
			}
		}
		var wg sync.WaitGroup
		res := make([]result, 2)
		for i, src := range []string{srcA, srcB} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res[i] = run(t, 2*time.Minute, nil, args(src)...)
			}()
		}
		wg.Wait()
		ok := 0
		for _, r := range res {
			if r.code == 0 {
				ok++
			} else if !strings.Contains(r.stderr, "another ingest") {
				t.Errorf("force=%v: the losing ingest must name the cause: %v", force, r)
			}
		}
		if ok != 1 {
			t.Errorf("force=%v: %d ingests reported success, want exactly 1:\n%v\n%v", force, ok, res[0], res[1])
		}
		if r := run(t, 2*time.Minute, nil, "verify", stores, name); r.code != 0 {
			t.Fatalf("force=%v: the committed dataset must verify: %v", force, r)
		}
	}
}

// Issue 9 item 18: a mount left behind by a killed daemon is named and cleared.
func TestStaleMountCleared(t *testing.T) {
	requireTool(t, "fusermount3")
	_, urls := localStores(t, 3)
	stores := "--stores=" + strings.Join(urls, ",")
	src := writeSource(t, synth.Spec{Counts: []int{20, 10}, MinSize: 100, MaxSize: 900, Seed: 3})
	if r := run(t, time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", src, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	mp := mountShardfsEnv(t, nil, stores, "--batch-size=4", "ds")
	mp.cmd.Process.Signal(syscall.SIGKILL)
	abortFUSE(mp.dir) // the mount stays, dead, as any killed daemon's
	time.Sleep(300 * time.Millisecond)
	t.Cleanup(func() { exec.Command("fusermount3", "-uz", mp.dir).Run() })
	if _, err := os.ReadDir(mp.dir); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("after kill -9 the mountpoint should be dead (ENOTCONN), got %v", err)
	}
	cmd := execShardfs("mount", stores, "--batch-size=4", "ds", mp.dir)
	// A file, written by the daemon itself: what it logged before mounting is there once the mount is.
	logf, err := os.Create(mp.dir + ".log2")
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	logText := func() string { b, _ := os.ReadFile(logf.Name()); return string(b) }
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		// readdir needs a live daemon (a stat may be answered from the dead mount's cached entries).
		if _, err := os.ReadDir(filepath.Join(mp.dir, "samples")); err == nil {
			if !strings.Contains(logText(), "stale") {
				t.Errorf("the log must say a stale mount was cleared: %s", logText())
			}
			return
		}
		select {
		case <-exited:
			t.Fatalf("remount over a dead shardfs mount failed: %v\n%s", waitErr, logText())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("remount did not come up: %s", logText())
}

// Issue 9 item 18, as versions (issue 28) changed it: after a forced
// re-ingest a running mount keeps serving the version it opened, whose
// objects stay until gc; a mount whose version gc removed (it held no
// lease) says the dataset was replaced and the mount should be restarted.
func TestReplacedDatasetNamed(t *testing.T) {
	requireTool(t, "fusermount3")
	dirs, urls := localStores(t, 3)
	stores := "--stores=" + strings.Join(urls, ",")
	src := writeSource(t, synth.Spec{Counts: []int{40, 20}, MinSize: 1000, MaxSize: 9000, Seed: 3})
	other := writeSource(t, synth.Spec{Counts: []int{30, 30}, MinSize: 1000, MaxSize: 9000, Seed: 4})
	if r := run(t, time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", src, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	mp := mountShardfsEnv(t, nil, stores, "--batch-size=4", "--no-prefetch", "ds")
	var info struct {
		Order struct {
			Version int `json:"version"`
		} `json:"order"`
	}
	if err := json.Unmarshal(mustRead(t, filepath.Join(mp.dir, ".shardfs", "info.json")), &info); err != nil || info.Order.Version != layout.OrderVersion {
		t.Errorf("info.json must record the default order version, %d: %+v, %v", layout.OrderVersion, info, err)
	}
	// A job that started on order version 1 pins it and gets that order.
	v1 := mountShardfsEnv(t, nil, stores, "--batch-size=4", "--no-prefetch", "--order-version=1", "ds")
	info.Order.Version = 0
	if err := json.Unmarshal(mustRead(t, filepath.Join(v1.dir, ".shardfs", "info.json")), &info); err != nil || info.Order.Version != 1 {
		t.Errorf("with --order-version=1 info.json must record 1: %+v, %v", info, err)
	}
	i1, i2 := mustRead(t, filepath.Join(v1.dir, "epochs/0000/rank-000/index.csv")), mustRead(t, filepath.Join(mp.dir, "epochs/0000/rank-000/index.csv"))
	if bytes.Equal(i1, i2) || len(i1) != len(i2) {
		t.Errorf("order versions 1 and 3 must list the same samples in other orders: %d and %d bytes, equal %v", len(i1), len(i2), bytes.Equal(i1, i2))
	}
	first := filepath.Join(mp.dir, "epochs", "0000", "rank-000", "batch-000000.tar")
	before := mustRead(t, first)
	if r := run(t, time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--force", other, "ds"); r.code != 0 {
		t.Fatalf("ingest --force: %v", r)
	}
	// The replaced dataset is the previous version now: a running mount
	// keeps serving it, byte for byte.
	second := filepath.Join(mp.dir, "epochs", "0000", "rank-000", "batch-000001.tar")
	if got := mustRead(t, first); !bytes.Equal(got, before) {
		t.Fatal("the running mount's batch changed when the dataset was replaced")
	}
	if _, err := os.ReadFile(second); err != nil {
		t.Fatalf("the running mount after the dataset was replaced: %v", err)
	}
	// Its objects go only with gc, which honours the mounts' leases: a
	// mount without one (read-only credentials take none) finds them gone,
	// and says why.
	for _, d := range dirs {
		if err := os.RemoveAll(filepath.Join(d, "ds", "leases")); err != nil {
			t.Fatal(err)
		}
	}
	if r := run(t, time.Minute, nil, "gc", stores, "ds", "--keep-last=1", "--yes"); r.code != 0 || !strings.Contains(r.stdout, "removed versions [1]") {
		t.Fatalf("gc: %v", r)
	}
	_, err := os.ReadFile(filepath.Join(mp.dir, "epochs", "0000", "rank-000", "batch-000002.tar"))
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("reading a batch of the replaced dataset after gc: %v, want EIO", err)
	}
	log, _ := os.ReadFile(mp.log)
	if !strings.Contains(string(log), "was replaced") || !strings.Contains(string(log), "restart the mount") {
		t.Fatalf("the mount's log must say the dataset was replaced and the mount needs a restart:\n%s", log)
	}
}
