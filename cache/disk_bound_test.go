package cache

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// duAll is what every file under root occupies on disk, as du counts it:
// shard files, index objects and the tier's own bookkeeping.
func duAll(t *testing.T, root string) int64 {
	t.Helper()
	var total int64
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			total += fi.Sys().(*syscall.Stat_t).Blocks * 512
		}
		return nil
	})
	return total
}

// ownFileSystem mounts a tmpfs of its own for a test's tier, and returns
// its root and what the file system holds: the blocks of every file in it,
// those unlinked but still open in some process among them, which a walk
// of the tree (duAll) does not see, and read at once, not file by file
// while other processes write. Three mounts sharing a tier held up to 98
// MB by this count for a limit of 32 MiB, while the walk saw 34 MB: each
// kept the files others had evicted open, and their blocks with them.
func ownFileSystem(t *testing.T) (root string, held func() int64) {
	t.Helper()
	root = t.TempDir()
	if err := syscall.Mount("tmpfs", root, "tmpfs", 0, "size=512m"); err != nil {
		t.Fatalf("mount a tmpfs for the tier (the test runs as root): %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(root, 0); err != nil {
			t.Errorf("unmount the tier's tmpfs %s: %v", root, err)
		}
	})
	base := func() int64 {
		var st syscall.Statfs_t
		if err := syscall.Statfs(root, &st); err != nil {
			t.Fatalf("statfs %s: %v", root, err)
		}
		return int64(st.Blocks-st.Bfree) * st.Bsize
	}
	empty := base() // the root directory's own
	return root, func() int64 { return base() - empty }
}

// boundShard is the shard size of the bound tests; the bound a tier promises
// is its limit plus one shard's worth.
const boundShard = 2 << 20

// burnCPU keeps n goroutines spinning until stop is called: a training
// node's cores are all busy, and the bounds must hold there.
func burnCPU(n int) (stop func()) {
	done := make(chan struct{})
	for range n {
		go func() {
			x := 1
			for {
				select {
				case <-done:
					return
				default:
				}
				for i := range 100000 {
					x = x*31 + i
				}
			}
		}()
	}
	return func() { close(done) }
}

// Many goroutines of one process put at once, with every core busy: the
// tier stays within its limit (the flock alone did not exclude them, since
// they share its file).
func TestDiskBoundManyGoroutines(t *testing.T) {
	defer burnCPU(2 * runtime.NumCPU())()
	root, held := ownFileSystem(t)
	const limit = 32 << 20
	d, err := OpenDisk(root, "ns", limit)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	slots, data := testSlots(1600, boundShard, 11) // ~50 MB a pass
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < len(slots); i += 8 {
				d.Put(slots[i], data[i])
			}
		}()
	}
	// Sample du while the goroutines run.
	done := make(chan struct{})
	var peak int64
	go func() {
		defer close(done)
		for {
			if got := max(duAll(t, root), held()); got > peak {
				peak = got
			}
			select {
			case <-time.After(5 * time.Millisecond):
			case <-waitCh(&wg):
				return
			}
		}
	}()
	<-done
	if got := max(duAll(t, root), held()); got > peak {
		peak = got
	}
	if peak > limit+boundShard {
		t.Fatalf("8 goroutines: du peaked at %d bytes, limit %d + one shard %d", peak, limit, boundShard)
	}
	if d.Evictions.Load() == 0 {
		t.Fatal("1.5x the limit written and nothing evicted")
	}
	t.Logf("8 goroutines: du peak %d bytes, limit %d, %d evictions", peak, limit, d.Evictions.Load())
}

func waitCh(wg *sync.WaitGroup) <-chan struct{} {
	c := make(chan struct{})
	go func() { wg.Wait(); close(c) }()
	return c
}

// TestMain lets a test start this binary as a helper process that puts into
// a tier: SHARDFS_DISK_HELPER=root,ns,limit,seed.
func TestMain(m *testing.M) {
	if spec := os.Getenv("SHARDFS_DISK_HELPER"); spec != "" {
		os.Exit(diskHelper(spec))
	}
	os.Exit(m.Run())
}

func diskHelper(spec string) int {
	var root, ns string
	var limit int64
	var seed uint64
	var loops int
	if _, err := fmt.Sscanf(spec, "%s %s %d %d %d", &root, &ns, &limit, &seed, &loops); err != nil {
		fmt.Fprintln(os.Stderr, "bad helper spec:", spec, err)
		return 2
	}
	d, err := OpenDisk(root, ns, limit)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer d.Close()
	slots, data := testSlots(800, boundShard, seed)
	fmt.Println("ready")
	for l := 0; loops == 0 || l < loops; l++ {
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g; i < len(slots); i += 4 {
					s := slots[i]
					s.Shard += 1000 * l // new shards each loop, so every loop writes
					d.Put(s, data[i])
				}
			}()
		}
		wg.Wait()
	}
	return 0
}

func startHelper(t *testing.T, root, ns string, limit int64, seed uint64, loops int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SHARDFS_DISK_HELPER="+fmt.Sprintf("%s %s %d %d %d", root, ns, limit, seed, loops))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd
}

// Three processes share one tier directory, each with four goroutines,
// with every core busy: du stays within the limit plus one shard.
func TestDiskBoundThreeProcesses(t *testing.T) {
	defer burnCPU(2 * runtime.NumCPU())()
	root, held := ownFileSystem(t)
	const limit = 32 << 20
	var cmds []*exec.Cmd
	for p := range 3 {
		cmds = append(cmds, startHelper(t, root, "ns-"+strconv.Itoa(p%2), limit, uint64(20+p), 2))
	}
	var wg sync.WaitGroup
	errs := make([]error, len(cmds))
	for i, c := range cmds {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = c.Wait() }()
	}
	all := waitCh(&wg)
	var peak int64
	for running := true; running; {
		if got := max(duAll(t, root), held()); got > peak {
			peak = got
		}
		select {
		case <-all:
			running = false
		case <-time.After(5 * time.Millisecond):
		}
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("helper %d: %v", i, err)
		}
	}
	if got := max(duAll(t, root), held()); got > peak {
		peak = got
	}
	if peak > limit+boundShard {
		t.Fatalf("3 processes: du peaked at %d bytes, limit %d + one shard %d", peak, limit, boundShard)
	}
	if peak < limit/2 {
		t.Fatalf("3 processes wrote 4x the limit and du peaked at only %d bytes", peak)
	}
	t.Logf("3 processes: du peak %d bytes, limit %d", peak, limit)
}

// A process killed with SIGKILL while it writes leaves a tier that is within
// its bound, whose bookkeeping a later mount can still use: more writes after
// the crash keep du within the limit plus one shard.
func TestDiskBoundAfterKill9(t *testing.T) {
	root := t.TempDir()
	const limit = 24 << 20
	for round := range 3 {
		cmd := startHelper(t, root, "ns", limit, uint64(40+round), 0)
		// Killed while it writes: once its usage record is there (on
		// busy cores a helper can take longer than the pause below to
		// start, and was killed before its first write), then a moment on.
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(root, TierDir, ".usage")); err == nil {
				break
			}
			if time.Now().After(deadline) {
				cmd.Process.Signal(syscall.SIGKILL)
				t.Fatalf("round %d: the helper wrote no usage record within 30 s", round)
			}
		}
		time.Sleep(time.Duration(150+100*round) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		if got := duAll(t, root); got > limit+boundShard {
			t.Fatalf("round %d: after kill -9, du %d bytes, limit %d + one shard", round, got, limit)
		}
	}
	if b, err := os.ReadFile(filepath.Join(root, TierDir, ".usage")); err != nil || len(b) == 0 {
		t.Fatalf("after kill -9 the usage record is %q (%v)", b, err)
	}
	d, err := OpenDisk(root, "ns", limit)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	slots, data := testSlots(800, boundShard, 99)
	for i, s := range slots {
		s.Shard += 500
		d.Put(s, data[i])
	}
	if got := duAll(t, root); got > limit+boundShard {
		t.Fatalf("writes after kill -9: du %d bytes, limit %d + one shard", got, limit)
	}
}
