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
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// podSpec decodes one YAML document strictly (unknown fields, wrong types
// and duplicate keys fail) into the object its kind names, and returns its
// pod template.
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
	case "apps/v1 DaemonSet":
		var ds appsv1.DaemonSet
		if err := yaml.UnmarshalStrict(doc, &ds); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return &ds.Spec.Template.Spec
	case "batch/v1 Job":
		var job batchv1.Job
		if err := yaml.UnmarshalStrict(doc, &job); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return &job.Spec.Template.Spec
	default:
		t.Fatalf("%s: kind %q of %q: this test knows DaemonSet (apps/v1) and Job (batch/v1); teach it the new kind", name, head.Kind, head.APIVersion)
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
			for _, c := range spec.Containers {
				if c.Image != "shardfs:latest" {
					continue
				}
				containers++
				where := name + " container " + c.Name
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
				if c.Args[0] != "mount" {
					continue
				}
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
}
