package integration

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestDemoOnce runs the README's first command end to end.
func TestDemoOnce(t *testing.T) {
	requireTool(t, "fusermount3")
	dir := filepath.Join(t.TempDir(), "demo")
	r := run(t, 5*time.Minute, nil, "demo", "--once", dir)
	if r.code != 0 {
		t.Fatalf("demo --once: %v", r)
	}
	for _, want := range []string{
		"committed demo: 1125 samples in 10 strata",
		"OK: every fragment, block and sample checksum verified",
		"read rank 0, healthy: epoch.tar",
		"544 samples byte-identical to the source",
		"read rank 1, 2 of 6 stores lost",
		"damaged but recoverable",
		"done (--once)",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("demo output lacks %q:\n%v", want, r)
		}
	}
	// The target column is 32 x the class's share of the dataset: class00
	// holds 400 of 1,125 samples.
	if !regexp.MustCompile(`(?m)^ +class00( +\d+){6} +11\.38$`).MatchString(r.stdout) {
		t.Fatalf("demo's class table: want class00's target 32 x 400/1125 = 11.38:\n%v", r)
	}
	if isMounted(filepath.Join(dir, "mnt")) {
		t.Fatal("demo --once left its mount up")
	}
}
