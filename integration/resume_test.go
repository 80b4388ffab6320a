package integration

import (
	"encoding/csv"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/synth"
)

// TestElasticResume: on real MinIO, 2 ranks read 10 batches each; the mount
// stops; 3 ranks resume from global batch 20 with --resume-at 0:20. The keys
// read before and after are exactly the epoch's global order up to the
// documented tail (fewer than W batches): no sample twice, none missing.
func TestElasticResume(t *testing.T) {
	c := startCluster(t, 3)
	stores := "--stores=" + strings.Join(c.urls, ",")
	src := writeSource(t, synth.Imbalanced(996, 5, 0.7, 2_000, 20_000, 51)) // 124 batches of 8
	if r := run(t, 3*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--shard-size=1MiB", src, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	order := []string{stores, "--batch-size=8", "--seed=5", "--epochs=2"}
	// batchKeys reads batch b of a rank directory, checks its members against
	// the source, and returns the keys index.csv gives it.
	batchKeys := func(rankDir string, b int, rows []indexRow) []string {
		t.Helper()
		names := tarMembers(t, mustRead(t, filepath.Join(rankDir, fmt.Sprintf("batch-%06d.tar", b))))
		var keys []string
		for _, row := range rows {
			if row.batch == b {
				keys = append(keys, row.key)
			}
		}
		if len(names) != 2*len(keys) || len(keys) != 8 {
			t.Fatalf("%s batch %d: %d members for %d index rows", rankDir, b, len(names), len(keys))
		}
		for i, k := range keys {
			if string(names[2*i]) != string(mustRead(t, filepath.Join(src, k))) {
				t.Fatalf("%s batch %d: %s: wrong bytes", rankDir, b, k)
			}
		}
		return keys
	}
	seen := map[string]string{}
	add := func(keys []string, where string) {
		for _, k := range keys {
			if prev, dup := seen[k]; dup {
				t.Fatalf("sample %s read twice: %s and %s", k, prev, where)
			}
			seen[k] = where
		}
	}
	first := mountShardfsEnv(t, nil, append(append([]string{}, order...), "--world-size=2", "ds")...)
	for r := 0; r < 2; r++ {
		dir := filepath.Join(first.dir, "epochs", "0000", fmt.Sprintf("rank-%03d", r))
		rows := readIndex(t, filepath.Join(dir, "index.csv"))
		for b := 0; b < 10; b++ {
			add(batchKeys(dir, b, rows), fmt.Sprintf("W=2 rank %d batch %d", r, b))
		}
	}
	first.cmd.Process.Signal(syscall.SIGTERM) // the job stops after 20 global batches
	resumed := mountShardfs(t, append(append([]string{}, order...), "--world-size=3", "--resume-at=0:20", "ds")...)
	steps := -1
	for r := 0; r < 3; r++ {
		dir := filepath.Join(resumed, "epochs", "0000", fmt.Sprintf("rank-%03d", r))
		rows := readIndex(t, filepath.Join(dir, "index.csv"))
		n := len(rows) / 8
		if steps >= 0 && n != steps {
			t.Fatalf("rank %d has %d batches after the resume, rank 0 %d", r, n, steps)
		}
		steps = n
		for b := 0; b < n; b++ {
			add(batchKeys(dir, b, rows), fmt.Sprintf("W=3 rank %d batch %d", r, b))
		}
	}
	if steps != (124-20)/3 {
		t.Fatalf("%d batches per rank after resuming at 20 of 124 with W=3, want %d", steps, (124-20)/3)
	}
	// The whole epoch's global order, as one rank of W=1 sees it.
	r := run(t, time.Minute, nil, append(append([]string{"plan"}, order...), "--world-size=1", "--rank=0", "--emit=index", "ds")...)
	if r.code != 0 {
		t.Fatalf("plan --emit index: %v", r)
	}
	rows, err := csv.NewReader(strings.NewReader(r.stdout)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, row := range rows[1:][:(20+3*steps)*8] {
		want = append(want, row[2])
	}
	var got []string
	for k := range seen {
		got = append(got, k)
	}
	sort.Strings(want)
	sort.Strings(got)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("old part + resumed part: %d samples; the epoch's first %d global batches hold %d: not the same keys", len(got), 20+3*steps, len(want))
	}
	if left := 124 - (20 + 3*steps); left >= 3 {
		t.Fatalf("%d global batches left out, want fewer than W=3", left)
	}
	// The next epoch is as usual: epoch 1 of the resumed mount is a plain W=3 mount's.
	plain := mountShardfs(t, append(append([]string{}, order...), "--world-size=3", "ds")...)
	for r := 0; r < 3; r++ {
		idx := filepath.Join("epochs", "0001", fmt.Sprintf("rank-%03d", r), "index.csv")
		if string(mustRead(t, filepath.Join(resumed, idx))) != string(mustRead(t, filepath.Join(plain, idx))) {
			t.Fatalf("%s differs between the resumed mount and a plain one", idx)
		}
	}
}
