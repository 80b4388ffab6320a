package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/synth"
)

// TestSeveralRanksPerMount: one mount serves ranks 8-9 of 16, as a node with
// several GPUs would, and a PyTorch DataLoader's workers read both ranks at
// once. Each rank's directory is byte for byte what a mount of that rank
// alone shows; the ranks are disjoint; every sample arrives with its label.
func TestSeveralRanksPerMount(t *testing.T) {
	t.Parallel() // waits more than it computes, asserts bytes, states and hang bounds (main_test.go, parallelTests)
	requireTorch(t)
	_, urls := localStores(t, 3)
	stores := "--stores=" + strings.Join(urls, ",")
	src := writeSource(t, synth.Imbalanced(1600, 5, 0.7, 500, 4000, 41))
	if r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", src, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	order := []string{stores, "--world-size=16", "--batch-size=8", "--seed=5"}
	two := mountShardfs(t, append(order, "--rank=8-9", "ds")...)
	alone := mountShardfs(t, append(order, "--rank=9", "ds")...)
	entries, err := os.ReadDir(filepath.Join(two, "epochs", "0000"))
	if err != nil || len(entries) != 2 || entries[0].Name() != "rank-008" || entries[1].Name() != "rank-009" {
		t.Fatalf("epochs/0000 of a --rank 8-9 mount: %v, %v; want rank-008 and rank-009", entries, err)
	}
	for _, f := range []string{"index.csv", "epoch.tar", "batch-000003.tar"} {
		a := sha256.Sum256(mustRead(t, filepath.Join(two, "epochs", "0000", "rank-009", f)))
		b := sha256.Sum256(mustRead(t, filepath.Join(alone, "epochs", "0000", "rank-009", f)))
		if a != b {
			t.Fatalf("rank-009/%s differs between a --rank 8-9 mount and a --rank 9 mount", f)
		}
	}
	want := map[string]string{} // rank/member -> sha256 and class
	keys := map[string]string{} // key -> rank
	for _, rank := range []string{"rank-008", "rank-009"} {
		dir := filepath.Join(two, "epochs", "0000", rank)
		rows := readIndex(t, filepath.Join(dir, "index.csv"))
		names := tarMemberNames(t, filepath.Join(dir, "epoch.tar"))
		if len(rows) == 0 || len(rows) != len(names) {
			t.Fatalf("%s: %d index rows, %d tar members", rank, len(rows), len(names))
		}
		for i, row := range rows {
			if other, dup := keys[row.key]; dup {
				t.Fatalf("sample %s is in %s and %s: ranks must be disjoint", row.key, other, rank)
			}
			keys[row.key] = rank
			sum := sha256.Sum256(mustRead(t, filepath.Join(src, row.key)))
			want[rank+"/"+names[i]] = hex.EncodeToString(sum[:]) + " " + strconv.Itoa(row.stratum)
		}
	}
	got := map[string]bool{}
	for _, f := range runPython(t, "testdata/torch_ranks.py",
		filepath.Join(two, "epochs", "0000", "rank-008"), filepath.Join(two, "epochs", "0000", "rank-009")) {
		if w, ok := want[f[0]]; !ok || w != f[1]+" "+f[2] {
			t.Fatalf("sample %s: got %s %s, want %q", f[0], f[1], f[2], w)
		}
		if got[f[0]] {
			t.Fatalf("sample %s delivered twice", f[0])
		}
		got[f[0]] = true
	}
	if len(got) != len(want) {
		t.Fatalf("the loader delivered %d samples of ranks 8-9, they hold %d", len(got), len(want))
	}
}
