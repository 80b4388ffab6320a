package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/shardfs/shardfs/internal/gobin"
	"github.com/shardfs/shardfs/internal/miniotest"
)

// csiPlugin is `shardfs csi` run by a test, with a gRPC client that plays
// the kubelet.
type csiPlugin struct {
	cmd   *exec.Cmd
	sock  string
	state string
	log   *lockedBuffer
	node  csi.NodeClient
	conn  *grpc.ClientConn
}

// startCSIPlugin runs the node plugin on a socket under dir, with its views
// in state, and waits until it answers a Probe. Its environment has no
// credentials: a volume's come from its secrets.
func startCSIPlugin(t *testing.T, dir, state string) *csiPlugin {
	t.Helper()
	p := &csiPlugin{sock: filepath.Join(dir, "csi.sock"), state: state, log: &lockedBuffer{}}
	p.cmd = exec.Command(binary, "csi", "--endpoint", "unix://"+p.sock, "--node-id", "test-node", "--state-dir", state, "--log-level", "debug")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("unix://"+p.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	p.conn, p.node = conn, csi.NewNodeClient(conn)
	id := csi.NewIdentityClient(conn)
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := id.Probe(ctx, &csi.ProbeRequest{})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			p.kill()
			t.Fatalf("the plugin did not answer a Probe in 2 minutes: %v\n%s", err, p.log)
		}
	}
	return p
}

// lockedBuffer is the plugin's output: written by exec's copying
// goroutine while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// kill ends the plugin with SIGKILL, as a node's OOM killer or a crash
// would, leaving its daemons running.
func (p *csiPlugin) kill() {
	p.conn.Close()
	p.cmd.Process.Kill()
	p.cmd.Wait()
}

// viewPIDs are the daemons the plugin's state names, by view key.
func viewPIDs(t *testing.T, state string) map[string]int {
	t.Helper()
	out := map[string]int{}
	files, _ := filepath.Glob(filepath.Join(state, "views", "*", "view.json"))
	for _, f := range files {
		var v struct {
			PID int `json:"pid"`
		}
		b, err := os.ReadFile(f)
		if err != nil || json.Unmarshal(b, &v) != nil {
			t.Fatalf("%s: %v %s", f, err, b)
		}
		out[filepath.Base(filepath.Dir(f))] = v.PID
	}
	return out
}

func alive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil && !zombie(pid) }

// mountsUnder lists the mount points under dir, from /proc/self/mountinfo.
func mountsUnder(dir string) []string {
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

// csiNode is a node's plugin directory for a test: the plugins it ran, and
// their views in state. Cleanup clears whatever a test left: the plugins,
// every daemon the state names, and every mount under root.
type csiNode struct {
	root, state string
	plugins     []*csiPlugin
}

func newCSINode(t *testing.T) *csiNode {
	t.Helper()
	requireTool(t, "fusermount3")
	n := &csiNode{root: t.TempDir()}
	n.state = filepath.Join(n.root, "state")
	t.Cleanup(func() {
		for _, p := range n.plugins {
			if p.cmd.ProcessState == nil {
				p.kill()
			}
		}
		for _, pid := range viewPIDs(t, n.state) {
			if alive(pid) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		for range 4 {
			for _, m := range mountsUnder(n.root) {
				syscall.Unmount(m, syscall.MNT_DETACH)
			}
		}
	})
	return n
}

// start runs a plugin on the node's socket and state.
func (n *csiNode) start(t *testing.T) *csiPlugin {
	t.Helper()
	p := startCSIPlugin(t, n.root, n.state)
	n.plugins = append(n.plugins, p)
	return p
}

// testSecrets are a volume's secrets holding the test stores' credentials.
var testSecrets = map[string]string{"access_key_id": miniotest.AccessKey, "secret_access_key": miniotest.SecretKey}

func publishReq(id, target string, attrs, secrets map[string]string) *csi.NodePublishVolumeRequest {
	return &csi.NodePublishVolumeRequest{VolumeId: id, TargetPath: target, VolumeContext: attrs, Secrets: secrets, Readonly: true,
		VolumeCapability: &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}}
}

func (p *csiPlugin) publish(t *testing.T, id, target string, attrs, secrets map[string]string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, err := p.node.NodePublishVolume(ctx, publishReq(id, target, attrs, secrets))
	return err
}

func (p *csiPlugin) unpublish(t *testing.T, id, target string) {
	t.Helper()
	if err := p.tryUnpublish(id, target); err != nil {
		t.Fatal(err)
	}
}

// tryUnpublish unpublishes target and checks that the path is gone, as
// the spec asks; safe from any goroutine.
func (p *csiPlugin) tryUnpublish(id, target string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := p.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		return fmt.Errorf("unpublish %s: %v\nplugin log:\n%s", target, err, p.log)
	}
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("unpublish %s: the target path is still there (%v); the spec says the plugin removes it", target, err)
	}
	return nil
}

// waitGone waits up to 20 s for a process to end.
func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); alive(pid); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) still runs 20s later", what, pid)
		}
	}
}

// Issue 45: the test that plays the kubelet. Two target paths with the
// same attributes share one daemon and both serve every sample byte for
// byte; after the first unpublish the other still reads; after the second
// the daemon exits and no mount is left; another seed is another daemon
// with other files. The secrets reach the daemon in a root-only file and
// nowhere else. Bad attributes get the spec's codes and leave nothing.
func TestCSIDriverPlaysKubelet(t *testing.T) {
	node := newCSINode(t)
	c := sharedCluster(t, 6)
	src := ingestSynthetic(t, c.urls, 400, "train", 4, 2)
	root, state, p := node.root, node.state, node.start(t)

	attrs := func(pod, seed string) map[string]string {
		return map[string]string{"dataset": "train", "stores": strings.Join(c.urls, ","), "world-size": "2", "batch-size": "16",
			"seed": seed, "cache-size": "64MiB", "csi.storage.k8s.io/pod.name": pod, "csi.storage.k8s.io/ephemeral": "true"}
	}
	secrets := testSecrets
	pods := filepath.Join(root, "pods")
	a, b := filepath.Join(pods, "a", "vol"), filepath.Join(pods, "b", "vol")

	start := time.Now()
	if err := p.publish(t, "vol-a", a, attrs("pod-a", "7"), secrets); err != nil {
		t.Fatalf("publish a: %v\nplugin log:\n%s", err, p.log)
	}
	first := time.Since(start)
	start = time.Now()
	if err := p.publish(t, "vol-b", b, attrs("pod-b", "7"), secrets); err != nil {
		t.Fatalf("publish b: %v\nplugin log:\n%s", err, p.log)
	}
	t.Logf("publish: %v starting the view's daemon, %v sharing it (a bind mount)", first.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	pids := viewPIDs(t, state)
	if len(pids) != 1 {
		t.Fatalf("two publishes of the same attributes (other pods) made %d views, want 1 daemon: %v", len(pids), pids)
	}
	var pid int
	for _, v := range pids {
		pid = v
	}
	if !alive(pid) {
		t.Fatalf("the view's daemon %d does not run", pid)
	}
	for _, tgt := range []string{a, b} {
		checkSamplesView(t, tgt, src)
	}
	idxA := mustRead(t, filepath.Join(a, "epochs/0000/rank-001/index.csv"))
	if tarA, tarB := mustRead(t, filepath.Join(a, "epochs/0000/rank-001/epoch.tar")), mustRead(t, filepath.Join(b, "epochs/0000/rank-001/epoch.tar")); !bytes.Equal(tarA, tarB) || len(tarA) == 0 {
		t.Fatalf("rank 1's epoch.tar differs between two targets of one view (%d and %d bytes)", len(tarA), len(tarB))
	}
	// Publishing again is idempotent; the same target with other
	// attributes is ALREADY_EXISTS.
	if err := p.publish(t, "vol-a", a, attrs("pod-a", "7"), secrets); err != nil {
		t.Fatalf("publish a again: %v", err)
	}
	if err := p.publish(t, "vol-a", a, attrs("pod-a", "8"), secrets); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("publish a again with another seed: %v, want ALREADY_EXISTS", err)
	}
	// A target is read-only.
	if err := os.WriteFile(filepath.Join(a, "x"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write into a target: %v, want EROFS", err)
	}

	t.Run("secrets stay hidden", func(t *testing.T) {
		secret := miniotest.SecretKey
		v := ""
		for k := range pids {
			v = k
		}
		cfg := filepath.Join(state, "views", v, "config.json")
		st, err := os.Stat(cfg)
		if err != nil || st.Mode().Perm() != 0o600 || st.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Fatalf("%s: %v %v: want mode 0600, owned by root", cfg, err, st)
		}
		if dst, err := os.Stat(filepath.Dir(cfg)); err != nil || dst.Mode().Perm() != 0o700 {
			t.Fatalf("%s: want mode 0700: %v %v", filepath.Dir(cfg), dst, err)
		}
		if b, _ := os.ReadFile(cfg); !bytes.Contains(b, []byte(secret)) {
			t.Fatalf("%s does not hold the secret: the daemon read it from somewhere else", cfg)
		}
		places := map[string][]byte{"the plugin's log": []byte(p.log.String()), "info.json": mustRead(t, filepath.Join(a, ".shardfs/info.json")),
			"stats.json": mustRead(t, filepath.Join(a, ".shardfs/stats.json"))}
		for _, f := range []string{"cmdline", "environ"} {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f))
			if err != nil {
				t.Fatal(err)
			}
			places["/proc/PID/"+f] = b
		}
		files, _ := filepath.Glob(filepath.Join(state, "views", v, "*"))
		for _, f := range files {
			if f != cfg && !strings.HasSuffix(f, "/mnt") {
				places[f] = mustRead(t, f)
			}
		}
		for where, b := range places {
			if bytes.Contains(b, []byte(secret)) {
				t.Errorf("the secret appears in %s", where)
			}
			if bytes.Contains(b, []byte(miniotest.AccessKey)) && strings.HasPrefix(where, "/proc") {
				t.Errorf("the access key appears in %s", where)
			}
		}
		if len(places) < 7 {
			t.Fatalf("looked in only %d places: %v", len(places), places)
		}
	})

	t.Run("unpublish one, the other reads", func(t *testing.T) {
		p.unpublish(t, "vol-a", a)
		if !alive(pid) {
			t.Fatalf("the daemon %d stopped while target b is published", pid)
		}
		checkSamplesView(t, b, src)
		if got := mustRead(t, filepath.Join(b, "epochs/0000/rank-001/index.csv")); !bytes.Equal(got, idxA) {
			t.Fatal("b's index differs from a's, read before")
		}
		p.unpublish(t, "vol-b", b)
		waitGone(t, pid, "the daemon after its last unpublish")
		if m := mountsUnder(root); len(m) != 0 {
			t.Fatalf("mounts left after the last unpublish: %v", m)
		}
		if v, _ := filepath.Glob(filepath.Join(state, "views", "*")); len(v) != 0 {
			t.Fatalf("view directories left: %v", v)
		}
		// Unpublishing again is idempotent.
		if _, err := p.node.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: "vol-b", TargetPath: b}); err != nil {
			t.Fatalf("unpublish b again: %v", err)
		}
	})

	t.Run("another seed, another daemon", func(t *testing.T) {
		c7, c8 := filepath.Join(pods, "c", "vol"), filepath.Join(pods, "d", "vol")
		if err := p.publish(t, "vol-c", c7, attrs("pod-c", "7"), secrets); err != nil {
			t.Fatal(err)
		}
		if err := p.publish(t, "vol-d", c8, attrs("pod-d", "8"), secrets); err != nil {
			t.Fatal(err)
		}
		if pids := viewPIDs(t, state); len(pids) != 2 {
			t.Fatalf("seeds 7 and 8: %d views, want 2: %v", len(pids), pids)
		}
		i7, i8 := mustRead(t, filepath.Join(c7, "epochs/0000/rank-001/index.csv")), mustRead(t, filepath.Join(c8, "epochs/0000/rank-001/index.csv"))
		if !bytes.Equal(i7, idxA) || bytes.Equal(i7, i8) {
			t.Fatalf("seed 7 must give a's index again (%v) and seed 8 another (%v)", bytes.Equal(i7, idxA), !bytes.Equal(i7, i8))
		}
		checkSamplesView(t, c8, src)
		stats, err := p.node.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: "vol-d", VolumePath: c8})
		if err != nil || len(stats.GetUsage()) != 1 || stats.Usage[0].Total != 64<<20 || stats.Usage[0].Used <= 0 {
			t.Fatalf("NodeGetVolumeStats after reading every sample: %v %v; want total 64 MiB (the cache) and some used", stats, err)
		}
		h, err := p.node.NodeGetVolumeHealth(context.Background(), &csi.NodeGetVolumeHealthRequest{VolumeId: "vol-d"})
		if err != nil || len(h.GetVolumeHealth().GetHealthStatuses()) != 0 {
			t.Fatalf("NodeGetVolumeHealth of a served volume: %v %v; want no adverse status", h, err)
		}
		p.unpublish(t, "vol-c", c7)
		p.unpublish(t, "vol-d", c8)
		if m := mountsUnder(root); len(m) != 0 {
			t.Fatalf("mounts left: %v", m)
		}
	})

	t.Run("many pods at once", func(t *testing.T) {
		// Eight publishes of one view and two of another, all at once,
		// as a Job's pods landing on a node: one daemon per view.
		var targets []string
		errs := make(chan error, 10)
		for i := range 10 {
			tgt := filepath.Join(pods, fmt.Sprintf("many-%d", i), "vol")
			targets = append(targets, tgt)
			seed := "7"
			if i >= 8 {
				seed = "9"
			}
			go func() {
				errs <- p.publish(t, fmt.Sprintf("vol-many-%d", i), tgt, attrs(fmt.Sprintf("pod-%d", i), seed), secrets)
			}()
		}
		for range targets {
			if err := <-errs; err != nil {
				t.Fatalf("a concurrent publish: %v\n%s", err, p.log)
			}
		}
		pids := viewPIDs(t, state)
		if len(pids) != 2 || len(daemonsOf(state)) != 2 {
			t.Fatalf("10 concurrent publishes of 2 views: %d views %v, daemons %v", len(pids), pids, daemonsOf(state))
		}
		for _, tgt := range targets {
			if b := mustRead(t, filepath.Join(tgt, ".shardfs/info.json")); !bytes.Contains(b, []byte(`"train"`)) {
				t.Fatalf("%s: info.json does not name the dataset", tgt)
			}
		}
		for i, tgt := range targets {
			go func() { errs <- p.tryUnpublish(fmt.Sprintf("vol-many-%d", i), tgt) }()
		}
		for range targets {
			if err := <-errs; err != nil {
				t.Fatalf("a concurrent unpublish: %v", err)
			}
		}
		for _, pid := range pids {
			waitGone(t, pid, "a daemon after its last of several concurrent unpublishes")
		}
		if m := mountsUnder(root); len(m) != 0 {
			t.Fatalf("mounts left: %v", m)
		}
	})

	t.Run("bad attributes", func(t *testing.T) {
		cases := []struct {
			name    string
			attrs   map[string]string
			secrets map[string]string
			code    codes.Code
			names   string
		}{
			{"unknown key", with(attrs("e", "7"), "batchsize", "16"), secrets, codes.InvalidArgument, `"batchsize" is not known`},
			{"not a number", with(attrs("e", "7"), "batch-size", "lots"), secrets, codes.InvalidArgument, `batch-size="lots"`},
			{"batch size 0", with(attrs("e", "7"), "batch-size", "0"), secrets, codes.InvalidArgument, "batch-size"},
			{"owned flag", with(attrs("e", "7"), "daemon", "true"), secrets, codes.InvalidArgument, `"daemon" is not known`},
			{"no dataset", with(attrs("e", "7"), "dataset", ""), secrets, codes.InvalidArgument, "dataset is required"},
			{"no such dataset", with(attrs("e", "7"), "dataset", "nosuch"), secrets, codes.NotFound, "dataset"},
			{"wrong secret", attrs("e", "7"), map[string]string{"access_key_id": miniotest.AccessKey, "secret_access_key": "wrong-" + miniotest.SecretKey}, codes.Unauthenticated, "secret_access_key"},
			{"unknown secret key", attrs("e", "7"), map[string]string{"password": "x"}, codes.InvalidArgument, "password"},
		}
		for _, tc := range cases {
			target := filepath.Join(pods, "e", "vol")
			err := p.publish(t, "vol-e", target, tc.attrs, tc.secrets)
			if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.names) {
				t.Errorf("%s: %v; want %v naming %q", tc.name, err, tc.code, tc.names)
			}
			if strings.Contains(p.log.String(), "wrong-"+miniotest.SecretKey) || strings.Contains(status.Convert(err).Message(), miniotest.SecretKey) {
				t.Errorf("%s: the secret appears in the log or the error", tc.name)
			}
			if m := mountsUnder(root); len(m) != 0 {
				t.Errorf("%s: mounts left: %v", tc.name, m)
			}
			if v, _ := filepath.Glob(filepath.Join(state, "views", "*")); len(v) != 0 {
				t.Errorf("%s: views left: %v", tc.name, v)
			}
			if d := daemonsOf(state); len(d) != 0 {
				t.Errorf("%s: daemons left: %v", tc.name, d)
			}
			t.Logf("%s: %v", tc.name, err)
		}
	})
}

// daemonsOf lists the processes whose command line names a view's mount
// point under state: the plugin's mount daemons.
func daemonsOf(state string) []int {
	var out []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err == nil && bytes.Contains(b, []byte(filepath.Join(state, "views")+"/")) {
			pid, _ := strconv.Atoi(filepath.Base(d))
			if alive(pid) {
				out = append(out, pid)
			}
		}
	}
	return out
}

func with(m map[string]string, k, v string) map[string]string {
	out := map[string]string{}
	for a, b := range m {
		out[a] = b
	}
	out[k] = v
	return out
}

// Issue 45: kill -9 of the node plugin while two volumes are published.
// Restarted, it adopts the daemons that still serve; with the daemons
// killed too (as a container's death kills them), it clears their dead
// FUSE mounts and serves both target paths again. A daemon that dies under
// a running plugin is started again. No dead mount is left at any point
// after a restart.
func TestCSIPluginKilled(t *testing.T) {
	t.Parallel() // waits more than it computes, asserts bytes, states and hang bounds (main_test.go, parallelTests)
	node := newCSINode(t)
	c := sharedCluster(t, 3)
	src := ingestSynthetic(t, c.urls, 200, "train", 2, 1)
	root, state, p := node.root, node.state, node.start(t)
	attrs := func(seed string) map[string]string {
		return map[string]string{"dataset": "train", "stores": strings.Join(c.urls, ","), "batch-size": "8", "seed": seed, "cache-size": "32MiB"}
	}
	a, b := filepath.Join(root, "pods/a/vol"), filepath.Join(root, "pods/b/vol")
	for _, x := range []struct{ id, target, seed string }{{"vol-a", a, "1"}, {"vol-b", b, "2"}} {
		if err := p.publish(t, x.id, x.target, attrs(x.seed), testSecrets); err != nil {
			t.Fatalf("publish %s: %v\n%s", x.target, err, p.log)
		}
	}
	want := map[string][]byte{a: mustRead(t, filepath.Join(a, "epochs/0000/rank-000/index.csv")), b: mustRead(t, filepath.Join(b, "epochs/0000/rank-000/index.csv"))}
	serves := func(stage string) {
		t.Helper()
		for tgt, idx := range want {
			if got := mustRead(t, filepath.Join(tgt, "epochs/0000/rank-000/index.csv")); !bytes.Equal(got, idx) {
				t.Fatalf("%s: %s's index changed", stage, tgt)
			}
			checkSamplesView(t, tgt, src)
		}
		for _, m := range mountsUnder(root) {
			if _, err := os.ReadFile(filepath.Join(m, ".shardfs/info.json")); err != nil {
				t.Fatalf("%s: a dead mount at %s: %v", stage, m, err)
			}
		}
	}
	before := viewPIDs(t, state)
	if len(before) != 2 {
		t.Fatalf("2 views expected: %v", before)
	}

	// 1. The plugin alone dies: its daemons serve on, and a new plugin
	// adopts them.
	p.kill()
	p = node.start(t)
	serves("plugin killed and restarted")
	if after := viewPIDs(t, state); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("the restarted plugin replaced running daemons: %v, were %v", after, before)
	}
	if !strings.Contains(p.log.String(), "adopted a running view") {
		t.Fatalf("the plugin's log does not say it adopted the views:\n%s", p.log)
	}

	// 2. A daemon dies under a running plugin: started again, its target
	// served again.
	var victim string
	for k := range before {
		victim = k
	}
	syscall.Kill(before[victim], syscall.SIGKILL)
	deadline := time.Now().Add(time.Minute)
	for {
		now := viewPIDs(t, state)[victim]
		if now != before[victim] && alive(now) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the killed daemon was not started again in a minute\n%s", p.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The new daemon is running before its mount is: until the plugin has
	// mounted it again, its target is not yet served (a CI run read it at
	// once and found no index.csv). Wait, bounded, for both targets to
	// serve (the view key does not say which target the daemon served).
	for tgt, idx := range want {
		for {
			got, err := os.ReadFile(filepath.Join(tgt, "epochs/0000/rank-000/index.csv"))
			if err == nil && bytes.Equal(got, idx) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s was not served again within a minute of its daemon's kill: %v\n%s", tgt, err, p.log)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	serves("a daemon killed under the plugin")

	// 3. The plugin and every daemon die, as when the plugin's container
	// is killed: the targets are dead FUSE mounts until the plugin is back.
	pids := viewPIDs(t, state)
	p.kill()
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
		waitGone(t, pid, "a killed daemon")
	}
	// The kernel answers ENOTCONN once the connection is gone, and
	// ECONNABORTED for a request caught by its abort.
	if _, err := os.ReadFile(filepath.Join(a, ".shardfs/info.json")); !errors.Is(err, syscall.ENOTCONN) && !errors.Is(err, syscall.ECONNABORTED) {
		t.Fatalf("with its daemon killed, a's mount should be dead (ENOTCONN or ECONNABORTED): %v", err)
	}
	p = node.start(t)
	serves("plugin and daemons killed, plugin restarted")
	for k, pid := range viewPIDs(t, state) {
		if pid == pids[k] || !alive(pid) {
			t.Fatalf("view %s: daemon %d, was %d: want a new one running", k, pid, pids[k])
		}
	}
	h, err := p.node.NodeGetVolumeHealth(context.Background(), &csi.NodeGetVolumeHealthRequest{VolumeId: "vol-a", VolumePublishPath: a})
	if err != nil || len(h.GetVolumeHealth().GetHealthStatuses()) != 0 {
		t.Fatalf("health after the restart: %v %v", h, err)
	}
	p.unpublish(t, "vol-a", a)
	p.unpublish(t, "vol-b", b)
	for _, pid := range viewPIDs(t, state) {
		waitGone(t, pid, "a daemon after its last unpublish")
	}
	if m := mountsUnder(root); len(m) != 0 {
		t.Fatalf("mounts left: %v", m)
	}
}

// Issue 45: the CSI conformance suite, csi-sanity, against the plugin's
// socket, with real FUSE mounts behind it. The specs that do not apply to a
// node-only plugin are skipped, by name, and listed in the README: the
// controller's, and the node specs that first create a volume through a
// controller (CreateVolume). csi-sanity skips on its own those of
// capabilities the plugin does not declare (staging, expansion, storage
// health, single-node multi-writer).
func TestCSISanity(t *testing.T) {
	node := newCSINode(t)
	bin := os.Getenv("CSI_SANITY_BIN")
	if bin == "" {
		bin = filepath.Join(gobin.Dir(), "csi-sanity")
	}
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true: csi-sanity is missing (scripts/deps.sh installs it): %v", err)
		}
		t.Skipf("csi-sanity is missing: %v", err)
	}
	root, p := node.root, node.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--csi.endpoint", p.sock, "--csi.mountdir", filepath.Join(root, "target"),
		"--csi.stagingdir", filepath.Join(root, "staging"), "--ginkgo.no-color", "--ginkgo.v",
		"--ginkgo.skip", csiSanitySkip)
	out, err := cmd.CombinedOutput()
	t.Logf("csi-sanity:\n%s", strings.ReplaceAll(lastLines(string(out), 12), " | ", "\n"))
	if err != nil {
		t.Fatalf("csi-sanity failed: %v\n%s\nplugin log:\n%s", err, out, p.log)
	}
	m := regexp.MustCompile(`Ran (\d+) of (\d+) Specs[\s\S]*?SUCCESS! -- (\d+) Passed \| 0 Failed \| (\d+) Pending \| (\d+) Skipped`).FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("no summary in csi-sanity's output:\n%s", out)
	}
	passed, _ := strconv.Atoi(m[3])
	if passed < 14 {
		t.Fatalf("csi-sanity passed %d specs, want at least the 14 that apply to a node-only plugin:\n%s", passed, out)
	}
	if mnt := mountsUnder(root); len(mnt) != 0 {
		t.Fatalf("mounts left by csi-sanity's run: %v", mnt)
	}
}

// csiSanitySkip names the csi-sanity specs that do not apply to a
// node-only plugin (README, "What csi-sanity skips").
const csiSanitySkip = `Controller Service|Controller Server|should remove target path|should fail when volume does not exist on the specified path|should return health for a valid volume`
