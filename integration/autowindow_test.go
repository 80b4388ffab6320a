package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDefaultWindowThroughAMount: a mount that gives no --window reads a
// dataset larger than one window (12,000 samples in many small shards) in
// the window layout.AutoWindow chooses, byte for byte the order of that
// window given by hand; info.json and plan say so. A job that pins order
// version 5 keeps the global order it had, byte for byte --window 0's, and
// so does a run whose options re-weight the order (--alpha). (Issue 57
// item 5: the default order must feed a fast GPU.)
func TestDefaultWindowThroughAMount(t *testing.T) {
	t.Parallel() // file:// stores: waits on its processes only
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	const n, strata = 12000, 4
	for c := range strata {
		os.MkdirAll(filepath.Join(src, fmt.Sprintf("c%d", c)), 0o755)
	}
	for i := range n {
		body := fmt.Appendf(nil, "sample %05d %s", i, strings.Repeat("y", 60+i%50))
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("c%d/s%05d.bin", i%strata, i)), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stores := fileStores(dir)
	if r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--shard-size=64KiB", src, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	var plan struct {
		Shards      int    `json:"shards"`
		Window      int    `json:"window"`
		WindowAuto  bool   `json:"window_auto"`
		WindowTrade string `json:"window_trade"`
	}
	r := run(t, time.Minute, nil, "plan", stores, "--batch-size=32", "--json", "ds")
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &plan) != nil {
		t.Fatalf("plan --json: %v", r)
	}
	// 12,000 samples of about 100 bytes in 64 KiB shards: the pool of
	// 10,000 samples binds, well under every shard.
	perShard := float64(n) / float64(plan.Shards)
	want := int(float64(10000)/perShard + 0.999999)
	if !plan.WindowAuto || plan.Window != want || want < 2 || want >= plan.Shards || !strings.Contains(plan.WindowTrade, "chosen because no window was given") {
		t.Fatalf("plan of %d shards: window %d (auto %v, %q), want the automatic %d", plan.Shards, plan.Window, plan.WindowAuto, plan.WindowTrade, want)
	}

	type served struct {
		window int
		auto   bool
		epoch  []byte
	}
	serve := func(flags ...string) served {
		t.Helper()
		mnt := mountShardfs(t, append(append([]string{stores, "--batch-size=32"}, flags...), "ds")...)
		var info struct {
			Order struct {
				Window     int  `json:"window"`
				WindowAuto bool `json:"window_auto"`
			} `json:"order"`
		}
		b, err := os.ReadFile(filepath.Join(mnt, ".shardfs/info.json"))
		if err != nil || json.Unmarshal(b, &info) != nil {
			t.Fatalf("info.json of a mount %v: %v", flags, err)
		}
		epoch, err := os.ReadFile(filepath.Join(mnt, "epochs/0000/rank-000/epoch.tar"))
		if err != nil {
			t.Fatal(err)
		}
		return served{info.Order.Window, info.Order.WindowAuto, epoch}
	}
	auto := serve()
	given := serve(fmt.Sprintf("--window=%d", want))
	global := serve("--window=0")
	pinned := serve("--order-version=5")
	alpha := serve("--alpha=0.5")
	switch {
	case auto.window != want || !auto.auto:
		t.Errorf("default mount: info.json window %d auto %v, want %d auto true", auto.window, auto.auto, want)
	case given.window != want || given.auto:
		t.Errorf("--window %d: info.json window %d auto %v", want, given.window, given.auto)
	case pinned.window != 0 || alpha.window != 0 || global.window != 0:
		t.Errorf("windows: pinned version 5 %d, --alpha 0.5 %d, --window 0 %d; want 0 each", pinned.window, alpha.window, global.window)
	}
	if !bytes.Equal(auto.epoch, given.epoch) {
		t.Errorf("the default mount's epoch.tar differs from --window %d's", want)
	}
	if bytes.Equal(auto.epoch, global.epoch) {
		t.Errorf("the default mount's epoch.tar is the global order's: no window was chosen")
	}
	if !bytes.Equal(pinned.epoch, global.epoch) {
		t.Errorf("--order-version 5 did not keep the global order: its epoch.tar differs from --window 0's")
	}
	for _, s := range []served{auto, global, alpha} {
		if got := bytes.Count(s.epoch, []byte("sample ")); got != n/32*32 {
			t.Errorf("an epoch.tar holds %d samples, want %d", got, n/32*32)
		}
	}
}

// TestWindowLargerThanTheCacheIsSaid: a window whose shards hold more than
// half the memory cache cannot keep the readers' window and the next one
// at once, so its shards are fetched again; the mount's log says so, names
// both sizes and the two ways out, and says nothing of the kind where the
// window fits. (The automatic window is chosen from the dataset alone, the
// same on every node, so it cannot know a node's --cache-size.)
func TestWindowLargerThanTheCacheIsSaid(t *testing.T) {
	t.Parallel() // file:// stores: waits on its processes only
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	for i := range 40 {
		c := filepath.Join(src, fmt.Sprintf("c%d", i%4))
		os.MkdirAll(c, 0o755)
		if err := os.WriteFile(filepath.Join(c, fmt.Sprintf("s%02d.bin", i)), bytes.Repeat([]byte{byte(i)}, 1<<20), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stores := fileStores(dir)
	if r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--shard-size=4MiB", src, "big"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	const warning = "the order's window holds more than half the memory cache"
	for _, tc := range []struct {
		window string
		warned bool
	}{{"--window=4", true}, {"--window=1", false}, {"--window=0", false}} {
		m := mountShardfsEnv(t, nil, stores, "--batch-size=4", "--cache-size=16MiB", tc.window, "big")
		b, err := os.ReadFile(filepath.Join(m.dir, "epochs/0000/rank-000/epoch.tar"))
		if err != nil || bytes.Count(b, bytes.Repeat([]byte{3}, 4096)) == 0 {
			t.Fatalf("%s: epoch.tar (%d bytes): %v", tc.window, len(b), err)
		}
		log, err := os.ReadFile(m.dir + ".log")
		if err != nil {
			t.Fatal(err)
		}
		said := strings.Contains(string(log), warning)
		if said != tc.warned || tc.warned && !(strings.Contains(string(log), `cache_size="16 MiB"`) && strings.Contains(string(log), "--cache-size")) {
			t.Errorf("%s with a 16 MiB cache: warned %v, want %v; log:\n%s", tc.window, said, tc.warned, log)
		}
	}
}
