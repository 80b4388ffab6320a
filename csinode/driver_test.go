package csinode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardfs/shardfs/internal/synth"
)

// The driver in-process, under -race: publishes, stats, health and
// unpublishes of two views from many goroutines at once, with a daemon
// killed in the middle (the watch restarts it while publishes run). The
// daemons are the real binary's mount on file:// stores, on real FUSE.
func TestDriverConcurrentPublishes(t *testing.T) {
	d, root, state, stores := startTestDriver(t)
	const n = 12
	target := func(i int) string { return filepath.Join(root, "pods", fmt.Sprint(i), "vol") }
	attrs := func(i int) map[string]string {
		return map[string]string{"dataset": "train", "stores": stores, "batch-size": "8", "cache-size": "16MiB", "seed": fmt.Sprint(i % 2),
			"csi.storage.k8s.io/pod.name": fmt.Sprint("pod-", i)}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4*n)
	killed := make(chan int, 1)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := d.NodePublishVolume(context.Background(), publishRequest(fmt.Sprint("vol-", i), target(i), attrs(i)))
			if err != nil {
				errs <- fmt.Errorf("publish %d: %w", i, err)
				return
			}
			if i == 3 {
				// Kill this view's daemon while the others publish.
				d.mu.Lock()
				v := d.targets[target(i)]
				d.mu.Unlock()
				v.mu.Lock()
				pid := v.st.PID
				v.mu.Unlock()
				syscall.Kill(pid, syscall.SIGKILL)
				killed <- pid
			}
			for range 5 {
				d.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: fmt.Sprint("vol-", i), VolumePath: target(i)})
				d.NodeGetVolumeHealth(context.Background(), &csi.NodeGetVolumeHealthRequest{VolumeId: fmt.Sprint("vol-", i)})
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Every target serves, after the killed daemon's restart.
	for i := range n {
		if err := serves(target(i)); err != nil {
			t.Fatalf("target %d does not serve a minute after the publishes: %v", i, err)
		}
	}
	d.mu.Lock()
	views := len(d.views)
	d.mu.Unlock()
	if views != 2 {
		t.Fatalf("%d publishes of 2 attribute sets made %d views", n, views)
	}
	dead := <-killed
	d.mu.Lock()
	v := d.targets[target(3)]
	d.mu.Unlock()
	v.mu.Lock()
	now := v.st.PID
	v.mu.Unlock()
	if now == dead || syscall.Kill(now, 0) != nil {
		t.Fatalf("the killed daemon %d was not replaced: the view's pid is %d", dead, now)
	}
	var pids []int
	d.mu.Lock()
	for _, v := range d.views {
		v.mu.Lock()
		pids = append(pids, v.st.PID)
		v.mu.Unlock()
	}
	d.mu.Unlock()
	var uw sync.WaitGroup
	uerrs := make(chan error, n)
	for i := range n {
		uw.Add(1)
		go func() {
			defer uw.Done()
			if _, err := d.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: fmt.Sprint("vol-", i), TargetPath: target(i)}); err != nil {
				uerrs <- err
			}
		}()
	}
	uw.Wait()
	close(uerrs)
	for err := range uerrs {
		t.Fatal(err)
	}
	for _, pid := range pids {
		for deadline := time.Now().Add(20 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("daemon %d runs 20s after its view's last unpublish", pid)
			}
		}
	}
	if m := mountsOf(root); len(m) != 0 {
		t.Fatalf("mounts left: %v", m)
	}
	if left, _ := filepath.Glob(filepath.Join(state, "views", "*")); len(left) != 0 {
		t.Fatalf("views left: %v", left)
	}
}

// startTestDriver builds the binary, ingests a small dataset on file://
// stores and runs the driver in-process on a socket under the test's
// root; it is stopped, and every mount under the root taken off, at the
// test's end.
func startTestDriver(t *testing.T) (d *Driver, root, state, stores string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true: this test mounts FUSE and needs root")
		}
		t.Skip("needs root (FUSE mounts)")
	}
	root = t.TempDir()
	bin := filepath.Join(root, "shardfs")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/shardfs").CombinedOutput(); err != nil {
		t.Fatalf("build shardfs: %v\n%s", err, out)
	}
	src := filepath.Join(root, "src")
	if _, err := synth.Write(src, synth.Imbalanced(120, 3, 0.6, 1_000, 8_000, 3)); err != nil {
		t.Fatal(err)
	}
	stores = fmt.Sprintf("file://%s/s0,file://%s/s1,file://%s/s2", root, root, root)
	if out, err := exec.Command(bin, "ingest", "--stores="+stores, "--data=2", "--parity=1", src, "train").CombinedOutput(); err != nil {
		t.Fatalf("ingest: %v\n%s", err, out)
	}
	state = filepath.Join(root, "state")
	args := func(attrs map[string]string) ([]string, error) {
		keys := make([]string, 0, len(attrs))
		for k := range attrs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var out []string
		for _, k := range keys {
			if k != "dataset" {
				out = append(out, "--"+k+"="+attrs[k])
			}
		}
		return append(out, attrs["dataset"]), nil
	}
	d, err := New(Config{DriverName: "csi.shardfs.io", NodeID: "n", StateDir: state, MountCommand: []string{bin, "mount"}, Args: args,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- d.Run(ctx, "unix://"+filepath.Join(root, "csi.sock")) }()
	t.Cleanup(func() {
		cancel()
		<-served
		for _, m := range mountsOf(root) {
			syscall.Unmount(m, syscall.MNT_DETACH)
		}
	})
	return d, root, state, stores
}

// A publish to a view whose daemon has just died, before its watch
// restarts it: the publish starts the daemon again and binds, rather than
// binding to the dead mount (CI saw "transport endpoint is not connected"
// from the concurrent test). Three rounds of kill, then publish at once.
func TestPublishToADeadDaemon(t *testing.T) {
	d, root, _, stores := startTestDriver(t)
	attrs := map[string]string{"dataset": "train", "stores": stores, "batch-size": "8", "cache-size": "16MiB"}
	target := func(i int) string { return filepath.Join(root, "pods", fmt.Sprint(i), "vol") }
	if _, err := d.NodePublishVolume(context.Background(), publishRequest("vol-0", target(0), attrs)); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		d.mu.Lock()
		v := d.targets[target(0)]
		d.mu.Unlock()
		v.mu.Lock()
		pid := v.st.PID
		v.mu.Unlock()
		syscall.Kill(pid, syscall.SIGKILL)
		if _, err := d.NodePublishVolume(context.Background(), publishRequest(fmt.Sprint("vol-", i), target(i), attrs)); err != nil {
			t.Fatalf("round %d: a publish right after the view's daemon (pid %d) was killed: %v", i, pid, err)
		}
		for k := 0; k <= i; k++ {
			if err := serves(target(k)); err != nil {
				t.Fatalf("round %d: target %d does not serve: %v", i, k, err)
			}
		}
	}
	for i := 0; i <= 3; i++ {
		if _, err := d.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: fmt.Sprint("vol-", i), TargetPath: target(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if m := mountsOf(root); len(m) != 0 {
		t.Fatalf("mounts left: %v", m)
	}
}

// serves waits up to a minute for target to serve an index.csv.
func serves(target string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		b, err := os.ReadFile(filepath.Join(target, "epochs/0000/rank-000/index.csv"))
		if err == nil && len(b) > 0 {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("an empty index.csv")
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func publishRequest(id, target string, attrs map[string]string) *csi.NodePublishVolumeRequest {
	return &csi.NodePublishVolumeRequest{VolumeId: id, TargetPath: target, VolumeContext: attrs, Readonly: true,
		VolumeCapability: &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY}}}
}

// mountsOf lists the mount points under dir.
func mountsOf(dir string) []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, f[4])
		}
	}
	return out
}

// A view that is starting holds its lock for as long as its daemon takes
// to come up (up to the start timeout). Nothing may hold the driver's lock
// while it waits for that one: dropping an idle view and finding a
// volume's target must leave other publishes free meanwhile.
func TestSlowViewBlocksNoOther(t *testing.T) {
	d := &Driver{views: map[string]*view{}, targets: map[string]*view{}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	starting := &view{key: "a", dir: t.TempDir(), st: viewState{Targets: map[string]string{"/t/a": "vol-a"}}}
	d.views["a"], d.targets["/t/a"] = starting, starting
	starting.mu.Lock() // its daemon is starting
	defer starting.mu.Unlock()
	idle := &view{key: "b", dir: t.TempDir(), st: viewState{Targets: map[string]string{}}}
	d.views["b"] = idle

	go d.targetOf("vol-x")    // looks at every view's targets
	go d.dropIfIdle(starting) // a failed publish of the starting view
	time.Sleep(100 * time.Millisecond)
	took := make(chan struct{})
	go func() {
		d.mu.Lock() // what every other publish takes first
		d.mu.Unlock()
		close(took)
	}()
	select {
	case <-took:
	case <-time.After(5 * time.Second):
		t.Fatal("the driver's lock stayed held while a starting view held its own: other publishes wait for that start")
	}
	d.dropIfIdle(idle)
	d.mu.Lock()
	_, left := d.views["b"]
	d.mu.Unlock()
	if left {
		t.Fatal("an idle view was not dropped")
	}
}

// Issue 55 item 8: NodeUnpublish unmounts only what this driver published,
// for that volume. Before the fix, on a path it never published it
// unmounted a tmpfs placed there as bait and removed the directory; with
// another volume's id it removed the published target anyway; a symlinked
// target was mounted over at the link's destination, and its unpublish
// removed the link and left the bind; a target with ".." was cleaned and
// mounted where it pointed.
func TestUnpublishTouchesOnlyWhatItPublished(t *testing.T) {
	d, root, _, stores := startTestDriver(t)
	ctx := context.Background()
	attrs := map[string]string{"dataset": "train", "stores": stores, "batch-size": "8", "cache-size": "16MiB"}
	ours := filepath.Join(root, "pods", "a", "vol")
	if _, err := d.NodePublishVolume(ctx, publishRequest("vol-a", ours, attrs)); err != nil {
		t.Fatal(err)
	}

	// Bait: a tmpfs with a file, at a path the driver never published.
	bait := filepath.Join(root, "pods", "bait", "vol")
	if err := os.MkdirAll(bait, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", bait, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(bait, syscall.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(bait, "keep"), []byte("the user's"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"vol-a", "vol-never"} {
		if _, err := d.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: bait}); err != nil {
			t.Fatalf("unpublish (%s) of a path never published: %v; want OK, touching nothing", id, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(bait, "keep")); err != nil || string(b) != "the user's" || !slices.Contains(mountsOf(root), bait) {
		t.Fatalf("after an unpublish of a path never published: its file %q (%v), mounted: %v", b, err, slices.Contains(mountsOf(root), bait))
	}

	// Another volume's id: refused, and the target still serves.
	_, err := d.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "vol-b", TargetPath: ours})
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "published for volume vol-a, not vol-b") {
		t.Fatalf("unpublish of vol-a's target as vol-b: %v; want NotFound, naming both", err)
	}
	if err := serves(ours); err != nil {
		t.Fatalf("vol-a's target after a refused unpublish: %v", err)
	}

	// A symlinked target, and one with "..": refused, nothing mounted.
	dest := filepath.Join(root, "elsewhere")
	os.MkdirAll(dest, 0o755)
	link := filepath.Join(root, "pods", "c", "vol")
	os.MkdirAll(filepath.Dir(link), 0o755)
	if err := os.Symlink(dest, link); err != nil {
		t.Fatal(err)
	}
	if _, err := d.NodePublishVolume(ctx, publishRequest("vol-c", link, attrs)); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("publish at a symlink: %v; want InvalidArgument", err)
	}
	dotdot := filepath.Join(root, "pods", "d") + "/../../elsewhere"
	if _, err := d.NodePublishVolume(ctx, publishRequest("vol-d", dotdot, attrs)); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `".."`) {
		t.Fatalf("publish at a path with '..': %v; want InvalidArgument", err)
	}
	if slices.Contains(mountsOf(root), dest) {
		t.Fatalf("%s was mounted through a link or a '..'", dest)
	}

	// Its own volume: unmounted and removed.
	if _, err := d.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "vol-a", TargetPath: ours}); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(mountsOf(root), ours) {
		t.Fatal("vol-a's target is still mounted after its unpublish")
	}
	if _, err := os.Lstat(ours); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("vol-a's target after its unpublish: %v; want it removed", err)
	}
}
