package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/synth"
)

// Issue 24: mount, warm and plan compute the same order, for every order
// mode and both metadata formats (a mount reads a format-2 dataset's
// indexes lazily and orders from its counts; plan and warm hold it whole).
// The mount's index.csv is plan --emit index byte for byte, and warm
// fetches exactly the distinct samples that index lists.
func TestMountWarmPlanAgree(t *testing.T) {
	t.Parallel() // waits more than it computes, asserts bytes, states and hang bounds (main_test.go, parallelTests)
	_, urls := localStores(t, 3)
	stores := "--stores=" + strings.Join(urls, ",")
	src := writeSource(t, synth.Imbalanced(300, 4, 0.6, 300, 3_000, 21))
	for _, format := range []string{"1", "2", "3"} {
		if r := run(t, time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--shard-size=64KiB", "--format="+format, src, "f"+format); r.code != 0 {
			t.Fatalf("ingest format %s: %v", format, r)
		}
	}
	warmed := regexp.MustCompile(`warmed \S+: (\d+) samples`)
	for _, mode := range [][]string{
		{},
		{"--alpha=0.4"},
		{"--alpha=0", "--epoch-size=400"},
		{"--window=2"},
		{"--affinity"},
		{"--affinity", "--order-version=2"},
		{"--order-version=1"},
		{"--resume-at=0:5"},
	} {
		for _, format := range []string{"1", "2", "3"} {
			name := "f" + format
			t.Run(fmt.Sprintf("format %s %s", format, strings.Join(mode, " ")), func(t *testing.T) {
				order := append([]string{"--world-size=3", "--batch-size=8", "--seed=5"}, mode...)
				mnt := mountShardfs(t, append(append([]string{stores}, order...), name)...)
				got, err := os.ReadFile(filepath.Join(mnt, "epochs/0000/rank-001/index.csv"))
				if err != nil {
					t.Fatal(err)
				}
				r := run(t, time.Minute, nil, append(append([]string{"plan", stores, "--emit=index", "--epoch=0", "--rank=1"}, order...), name)...)
				if r.code != 0 || r.stdout != string(got) {
					t.Fatalf("plan --emit index differs from the mount's index.csv (%d vs %d bytes): %v", len(r.stdout), len(got), r)
				}
				distinct := map[string]bool{}
				for _, row := range readIndex(t, filepath.Join(mnt, "epochs/0000/rank-001/index.csv")) {
					distinct[row.key] = true
				}
				r = run(t, time.Minute, nil, append(append([]string{"warm", stores, "--cache-dir=" + t.TempDir(), "--cache-dir-size=64MiB", "--epochs=1", "--rank=1"}, order...), name)...)
				m := warmed.FindStringSubmatch(r.stdout)
				if r.code != 0 || m == nil || m[1] != fmt.Sprint(len(distinct)) {
					t.Fatalf("warm fetched other samples than the %d distinct ones rank 1 reads: %v", len(distinct), r)
				}
			})
		}
	}
}
