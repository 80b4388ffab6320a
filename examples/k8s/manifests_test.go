// Package k8s holds the Kubernetes examples; its test decodes every
// manifest strictly into the typed API objects and checks what a cluster
// would only find out at run time.
package k8s

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// podSpec decodes one YAML document strictly (unknown fields, wrong types
// and duplicate keys fail) into the object its kind names, and returns its
// pod template.
// secrets are the Secrets the manifests define, with their keys.
var secrets = map[string][]string{}

// csiDrivers are the CSIDriver objects' names; csiVolumes the shardfs CSI
// volumes of pods and PersistentVolumes, to check once every document is read.
var (
	csiDrivers = map[string]bool{}
	csiVolumes []csiVolume
)

type csiVolume struct {
	where, driver, secret string
	attrs                 map[string]string
}

func podSpec(t *testing.T, name string, doc []byte) *corev1.PodSpec {
	t.Helper()
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &head); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	switch head.APIVersion + " " + head.Kind {
	case "v1 Secret":
		var sec corev1.Secret
		if err := yaml.UnmarshalStrict(doc, &sec); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for k := range sec.StringData {
			secrets[sec.Name] = append(secrets[sec.Name], k)
		}
		return nil
	case "storage.k8s.io/v1 CSIDriver":
		var d storagev1.CSIDriver
		if err := yaml.UnmarshalStrict(doc, &d); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		csiDrivers[d.Name] = true
		return nil
	case "v1 PersistentVolume":
		var pv corev1.PersistentVolume
		if err := yaml.UnmarshalStrict(doc, &pv); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c := pv.Spec.CSI; c != nil {
			v := csiVolume{where: name, driver: c.Driver, attrs: c.VolumeAttributes}
			if c.NodePublishSecretRef != nil {
				v.secret = c.NodePublishSecretRef.Name
			}
			csiVolumes = append(csiVolumes, v)
		}
		return nil
	case "v1 PersistentVolumeClaim":
		var pvc corev1.PersistentVolumeClaim
		if err := yaml.UnmarshalStrict(doc, &pvc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return nil
	case "v1 Pod":
		var pod corev1.Pod
		if err := yaml.UnmarshalStrict(doc, &pod); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return &pod.Spec
	case "apps/v1 DaemonSet":
		var ds appsv1.DaemonSet
		if err := yaml.UnmarshalStrict(doc, &ds); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return &ds.Spec.Template.Spec
	case "apps/v1 Deployment":
		var d appsv1.Deployment
		if err := yaml.UnmarshalStrict(doc, &d); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return &d.Spec.Template.Spec
	case "batch/v1 Job":
		var job batchv1.Job
		if err := yaml.UnmarshalStrict(doc, &job); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return &job.Spec.Template.Spec
	default:
		t.Fatalf("%s: kind %q of %q: this test knows DaemonSet and Deployment (apps/v1), Job (batch/v1), CSIDriver (storage.k8s.io/v1), Pod, PersistentVolume(Claim) and Secret (v1); teach it the new kind", name, head.Kind, head.APIVersion)
		return nil
	}
}

// TestManifests decodes every manifest in this directory and checks each
// shardfs container: its command and flags exist in the binary, every
// $(VAR) it uses is set, and a mount's mountpoint exists in the container
// when it starts (a volume's path, or below one with --mkdir).
func TestManifests(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "shardfs")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/shardfs").CombinedOutput(); err != nil {
		t.Fatalf("build shardfs: %v\n%s", err, out)
	}
	files, _ := filepath.Glob("*.yaml")
	if len(files) < 3 {
		t.Fatalf("found %d manifests, want the DaemonSet and the ingest and commit Jobs", len(files))
	}
	helps := map[string]string{}
	help := func(cmd string) string {
		if h, ok := helps[cmd]; ok {
			return h
		}
		out, err := exec.Command(bin, cmd, "--help").CombinedOutput()
		if err != nil {
			t.Fatalf("shardfs %s --help: %v\n%s", cmd, err, out)
		}
		helps[cmd] = string(out)
		return helps[cmd]
	}
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	containers := 0
	secretNames := map[string]bool{}
	var secretRefs []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(b, []byte("\n---")) {
			name := f
			if i > 0 {
				name += " document " + string(rune('1'+i))
			}
			spec := podSpec(t, name, doc)
			if spec == nil {
				continue
			}
			for _, v := range spec.Volumes {
				if c := v.CSI; c != nil {
					cv := csiVolume{where: name + " volume " + v.Name, driver: c.Driver, attrs: c.VolumeAttributes}
					if c.NodePublishSecretRef != nil {
						cv.secret = c.NodePublishSecretRef.Name
					}
					csiVolumes = append(csiVolumes, cv)
				}
			}
			for _, c := range spec.Containers {
				if !strings.HasPrefix(c.Image, "shardfs:") {
					continue
				}
				containers++
				where := name + " container " + c.Name
				// Issue 40 item 18: shardfs:latest, with no pull policy,
				// runs whatever image a node happens to hold.
				if c.Image == "shardfs:latest" || c.ImagePullPolicy == "" {
					t.Errorf("%s: image %s, pull policy %q: name a built tag and a pull policy", where, c.Image, c.ImagePullPolicy)
				}
				for _, ef := range c.EnvFrom {
					if ef.SecretRef != nil {
						secretRefs = append(secretRefs, where+" uses Secret "+ef.SecretRef.Name)
						secretNames[ef.SecretRef.Name] = true
					}
				}
				if len(c.Args) == 0 {
					t.Fatalf("%s: no args: the image's entrypoint is shardfs, args name the command", where)
				}
				h := help(c.Args[0])
				set := map[string]bool{}
				for _, e := range c.Env {
					set[e.Name] = true
				}
				var positional []string
				for _, a := range c.Args[1:] {
					for _, m := range ref.FindAllStringSubmatch(a, -1) {
						if !set[m[1]] {
							t.Errorf("%s: %s uses $(%s), which its env does not set", where, a, m[1])
						}
					}
					if !strings.HasPrefix(a, "--") {
						positional = append(positional, a)
						continue
					}
					flag, _, _ := strings.Cut(a, "=")
					if !strings.Contains(h, "  "+flag+" ") && !strings.Contains(h, ", "+flag+" ") {
						t.Errorf("%s: shardfs %s has no flag %s", where, c.Args[0], flag)
					}
				}
				for _, a := range c.Args {
					if addr, ok := strings.CutPrefix(a, "--metrics-addr="); ok && (strings.HasPrefix(addr, "0.0.0.0:") || strings.HasPrefix(addr, ":")) {
						t.Errorf("%s: --metrics-addr=%s listens on every address: bind the pod's IP ($(POD_IP)) or loopback", where, addr)
					}
				}
				if c.Args[0] == "csi" {
					checkCSIPlugin(t, where, c)
					continue
				}
				if c.Args[0] != "mount" {
					continue
				}
				checkMountPod(t, where, c)
				if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
					t.Errorf("%s: a mount needs a privileged container (mount(2), /dev/fuse)", where)
				}
				if len(positional) == 0 {
					t.Fatalf("%s: mount without a mountpoint", where)
				}
				mp := filepath.Clean(positional[len(positional)-1])
				mkdir := false
				for _, a := range c.Args {
					mkdir = mkdir || a == "--mkdir" || a == "--mkdir=true"
				}
				exists, shared := false, false
				for _, vm := range c.VolumeMounts {
					p := filepath.Clean(vm.MountPath)
					if mp == p || mkdir && strings.HasPrefix(mp, p+"/") {
						exists = true
						shared = vm.MountPropagation != nil && *vm.MountPropagation == corev1.MountPropagationBidirectional
					}
				}
				if !exists {
					t.Errorf("%s: the mountpoint %s does not exist when the container starts: mount it as a volume's path, or below one with --mkdir", where, mp)
				}
				if !shared {
					t.Errorf("%s: the volume holding %s needs mountPropagation: Bidirectional, or no other pod sees the mount", where, mp)
				}
			}
		}
	}
	if containers < 3 {
		t.Fatalf("checked %d shardfs containers, want at least 3", containers)
	}
	for name := range secretNames {
		if secrets[name] == nil {
			t.Errorf("Secret %s is used (%v) but no manifest here defines it: add a template", name, secretRefs)
		}
	}
	checkCSIVolumes(t, help("mount"))
	// The image is built from the repository root: a demo run's data must
	// stay out of it.
	b, err := os.ReadFile("../../.dockerignore")
	if err != nil {
		t.Fatalf(".dockerignore: %v", err)
	}
	for _, want := range []string{".git", "shardfs-demo"} {
		if !strings.Contains("\n"+string(b)+"\n", "\n"+want+"\n") {
			t.Errorf(".dockerignore does not leave out %s", want)
		}
	}
}

// checkMountPod checks what a node running a mount needs beyond its flags
// (issue 40 items 10 and 18): readiness from --ready-file, memory for the
// cache.
func checkMountPod(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	flags := map[string]string{}
	for _, a := range c.Args {
		if k, v, ok := strings.Cut(a, "="); ok {
			flags[k] = v
		}
	}
	ready := flags["--ready-file"]
	if ready == "" || c.ReadinessProbe == nil || c.ReadinessProbe.Exec == nil || !slices.Contains(c.ReadinessProbe.Exec.Command, ready) {
		t.Errorf("%s: no readiness probe on its --ready-file (%q)", where, ready)
	}
	mem, lim := c.Resources.Requests[corev1.ResourceMemory], c.Resources.Limits[corev1.ResourceMemory]
	if mem.IsZero() || lim.IsZero() {
		t.Errorf("%s: no memory request or limit", where)
	} else if cache := flags["--cache-size"]; cache != "" {
		q, err := resource.ParseQuantity(strings.TrimSuffix(cache, "B"))
		if err != nil {
			t.Fatalf("%s: --cache-size=%s: %v", where, cache, err)
		}
		if mem.Cmp(q) <= 0 || lim.Cmp(mem) < 0 {
			t.Errorf("%s: memory request %v and limit %v for --cache-size=%s: the request must exceed the cache, the limit the request", where, &mem, &lim, cache)
		}
	}

	if _, ok := flags["--pprof"]; ok || slices.Contains(c.Args, "--pprof") {
		t.Errorf("%s: --pprof in a shipped manifest serves profiles to the network", where)
	}
}

// checkCSIPlugin checks the node plugin's container: privileged, and the
// kubelet's pods directory and the plugin's state directory shared back to
// the host (Bidirectional), or the mounts it makes reach no pod.
func checkCSIPlugin(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Errorf("%s: the CSI plugin needs a privileged container (mount(2), /dev/fuse)", where)
	}
	state := ""
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--state-dir="); ok {
			state = v
		}
	}
	for _, dir := range []string{"/var/lib/kubelet/pods", state} {
		shared := false
		for _, vm := range c.VolumeMounts {
			if filepath.Clean(vm.MountPath) == filepath.Clean(dir) {
				shared = vm.MountPropagation != nil && *vm.MountPropagation == corev1.MountPropagationBidirectional
			}
		}
		if dir == "" || !shared {
			t.Errorf("%s: %q must be a volume mounted with mountPropagation: Bidirectional (give --state-dir)", where, dir)
		}
	}
}

// checkCSIVolumes checks every shardfs CSI volume: its driver is a
// CSIDriver defined here, each attribute is one the plugin takes (dataset,
// stores, a few global flags, or a mount flag; csi.go in cmd/shardfs), and
// its Secret is defined with only the keys the plugin reads.
func checkCSIVolumes(t *testing.T, mountHelp string) {
	t.Helper()
	if len(csiVolumes) < 3 {
		t.Fatalf("found %d shardfs CSI volumes, want the Pod's, the Job's and the PersistentVolume's", len(csiVolumes))
	}
	globals := []string{"dataset", "stores", "request-timeout", "store-concurrency", "log-level", "log-format"}
	owned := []string{"daemon", "mkdir", "ready-file", "log-file", "config", "allow-other", "help"}
	for _, v := range csiVolumes {
		if !csiDrivers[v.driver] {
			t.Errorf("%s: driver %q: no CSIDriver of that name here", v.where, v.driver)
		}
		for k := range v.attrs {
			ok := slices.Contains(globals, k) || !slices.Contains(owned, k) && strings.Contains(mountHelp, "  --"+k+" ")
			if !ok {
				t.Errorf("%s: volume attribute %q is not one the plugin takes", v.where, k)
			}
		}
		if v.attrs["dataset"] == "" || v.attrs["stores"] == "" {
			t.Errorf("%s: volume attributes dataset and stores are required", v.where)
		}
		keys, ok := secrets[v.secret]
		if !ok {
			t.Errorf("%s: Secret %q is not defined here", v.where, v.secret)
		}
		for _, k := range keys {
			if !slices.Contains([]string{"access_key_id", "secret_access_key", "session_token"}, k) {
				t.Errorf("Secret %s: key %q is refused by the plugin", v.secret, k)
			}
		}
	}
}
