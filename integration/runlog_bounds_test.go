package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/synth"
)

// busyProcesses starts n processes that spin until stopped (ended by PID),
// so that a test's bounds hold with other processes, not only goroutines,
// on the cores.
func busyProcesses(t *testing.T, n int) (stop func()) {
	t.Helper()
	var cmds []*exec.Cmd
	for range n {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			for _, c := range cmds {
				c.Process.Kill()
				c.Wait()
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// vmKB reads a field (VmRSS, VmHWM) of /proc/PID/status in KiB.
func vmKB(pid int, field string) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb
		}
	}
	return 0
}

// The bounds of a --follow mount hold on a busy machine: both cores spun by
// goroutines and by processes, three epochs served from three dataset
// versions at once (two appends while it runs), 12 readers. The memory
// cache never holds more than --cache-size, the daemon's peak RSS stays
// within the cache plus 256 MiB, and every batch is byte-identical to its
// source. Then, still busy, a feedback mount with --report-wait 5s answers
// the opens of an unreported epoch by 8 ranks at once with EIO, none
// before its wait and none waiting for the others' waits.
func TestRunLogBoundsOnBusyCores(t *testing.T) {
	requireTool(t, "python3")
	c := sharedCluster(t, 6)
	specs := []synth.Spec{
		{Counts: []int{300, 200, 100}, MinSize: 20_000, MaxSize: 60_000, Seed: 91},
		{Counts: []int{80, 80, 80}, MinSize: 20_000, MaxSize: 60_000, Seed: 92, Tag: "b-"},
		{Counts: []int{80, 80, 80}, MinSize: 20_000, MaxSize: 60_000, Seed: 93, Tag: "c-"},
	}
	all := t.TempDir()
	var srcs []string
	for _, s := range specs {
		srcs = append(srcs, writeSource(t, s))
		if _, err := synth.Write(all, s); err != nil {
			t.Fatal(err)
		}
	}
	storesFlag := "--stores=" + strings.Join(c.urls, ",")
	if r := run(t, 2*time.Minute, nil, "ingest", storesFlag, "--data=4", "--parity=2", srcs[0], "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	stopG := burnCPU(2 * runtime.NumCPU())
	defer stopG()
	stopP := busyProcesses(t, runtime.NumCPU())

	const cacheSize = 16 << 20 // the least a mount takes; the epochs read hold 100 MB
	mp := mountShardfsEnv(t, nil, storesFlag, "--world-size=1", "--batch-size=16", "--seed=4", "--follow", "--run=busy",
		fmt.Sprintf("--cache-size=%d", cacheSize), "--report-wait=2m", "ds")
	pid := mp.cmd.Process.Pid
	// Each epoch is first opened after the append before it: epoch e is
	// served from version e+1.
	for e := range 3 {
		if e > 0 {
			if r := run(t, 2*time.Minute, nil, "ingest", storesFlag, "--append", srcs[e], "ds"); r.code != 0 {
				t.Fatalf("append %d: %v", e, r)
			}
		}
		if _, err := os.ReadDir(filepath.Join(mp.dir, "epochs", fmt.Sprintf("%04d", e), "rank-000")); err != nil {
			t.Fatal(err)
		}
	}
	var maxCache int64
	done := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			var st struct {
				CacheBytes int64 `json:"cache_bytes"`
			}
			if b, err := os.ReadFile(filepath.Join(mp.dir, ".shardfs", "stats.json")); err == nil && json.Unmarshal(b, &st) == nil {
				maxCache = max(maxCache, st.CacheBytes)
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	// 4 readers per epoch, each reading every 4th batch of it, all at once.
	var wg sync.WaitGroup
	var readErr error
	var mu sync.Mutex
	for e := range 3 {
		dir := filepath.Join(mp.dir, "epochs", fmt.Sprintf("%04d", e), "rank-000")
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n := 0
				for _, ent := range ents {
					if !strings.HasPrefix(ent.Name(), "batch-") {
						continue
					}
					if n++; n%4 != w {
						continue
					}
					if _, err := os.ReadFile(filepath.Join(dir, ent.Name())); err != nil {
						mu.Lock()
						readErr = errors.Join(readErr, err)
						mu.Unlock()
					}
				}
			}()
		}
	}
	wg.Wait()
	close(done)
	<-polled
	if readErr != nil {
		t.Fatalf("reads: %v", readErr)
	}
	hwm := vmKB(pid, "VmHWM") << 10
	if maxCache == 0 || maxCache > cacheSize {
		t.Fatalf("the memory cache held up to %d bytes, --cache-size is %d", maxCache, cacheSize)
	}
	if hwm > cacheSize+256<<20 {
		t.Fatalf("the daemon's peak RSS was %d MiB, over the cache (%d MiB) + 256 MiB", hwm>>20, cacheSize>>20)
	}
	for e := range 3 {
		checkEpochTars(t, mp.dir, all, e)
	}
	var stats struct {
		Follow struct {
			Epochs []struct{ Epoch, Version int }
		}
	}
	if err := json.Unmarshal(mustRead(t, filepath.Join(mp.dir, ".shardfs", "stats.json")), &stats); err != nil {
		t.Fatal(err)
	}
	if ep := stats.Follow.Epochs; len(ep) != 3 || ep[0].Version != 1 || ep[1].Version != 2 || ep[2].Version != 3 {
		t.Fatalf("stats.json follow epochs %+v, want epochs 0, 1, 2 at versions 1, 2, 3", ep)
	}
	t.Logf("busy: 3 epochs from 3 versions, 12 readers: memory cache at most %d KiB of %d KiB, daemon peak RSS %d MiB", maxCache>>10, cacheSize>>10, hwm>>20)

	// --report-wait on the busy machine: the 8 ranks of a node open an
	// epoch whose report never comes, at once. (The kernel serializes
	// lookups of one name: 8 processes opening the same rank directory
	// would each wait in turn.)
	const wait = 5 * time.Second
	fb := mountShardfsEnv(t, nil, storesFlag, "--world-size=8", "--batch-size=4", "--seed=4", "--feedback=eg", "--run=fb",
		fmt.Sprintf("--report-wait=%v", wait), "ds")
	var took [8]time.Duration
	var errs [8]error
	for i := range took {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			_, errs[i] = os.Stat(filepath.Join(fb.dir, "epochs", "0001", fmt.Sprintf("rank-%03d", i)))
			took[i] = time.Since(start)
		}()
	}
	wg.Wait()
	for i := range took {
		if !errorsIsErrno(errs[i], 5 /* EIO */) {
			t.Fatalf("open %d of an unreported epoch: %v, want EIO", i, errs[i])
		}
		// Each open waits its own --report-wait: not less, and not 8 of
		// them one after another (40 s; the slack is the busy machine's).
		if took[i] < wait || took[i] > wait+20*time.Second {
			t.Fatalf("open %d of an unreported epoch was refused after %v (all: %v), with --report-wait %v\n%s", i, took[i], took, wait, mustRead(t, fb.log))
		}
	}
	stopP()
	t.Logf("busy: 8 opens of an unreported epoch refused after %v to %v with --report-wait %v", minDur(took[:]), maxDur(took[:]), wait)
}

func minDur(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds {
		m = min(m, d)
	}
	return m
}

func maxDur(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}
