package integration

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
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
	c := sharedCluster(t, 3)
	stores := "--stores=" + strings.Join(c.urls, ",")
	src := writeSource(t, synth.Imbalanced(996, 5, 0.7, 2_000, 20_000, 51)) // 124 batches of 8
	if r := run(t, 3*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--shard-size=1MiB", src, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	order := []string{stores, "--batch-size=8", "--seed=5", "--epochs=2"}
	seen := map[string]string{}
	add := func(keys []string, where string) {
		if len(keys) != 8 {
			t.Fatalf("%s: %d samples, want a batch of 8", where, len(keys))
		}
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
			add(batchKeysOf(t, dir, b, rows, src), fmt.Sprintf("W=2 rank %d batch %d", r, b))
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
			add(batchKeysOf(t, dir, b, rows, src), fmt.Sprintf("W=3 rank %d batch %d", r, b))
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

// TestExactResumeFetchesNothingBefore: a job that restarts at batch t opens
// batch-t.tar and reads on. The store bytes fetched (stats.json) are exactly
// the bytes of batches t.. : prefetch starts there and takes nothing before
// it. Samples are larger than the 256 KiB ride gap (prefetch.Config.RideGap),
// so no sample is read twice in passing, and the bytes fetched are exactly
// the samples': a sample before t could not hide among re-read bytes.
func TestExactResumeFetchesNothingBefore(t *testing.T) {
	_, urls := localStores(t, 3)
	stores := "--stores=" + strings.Join(urls, ",")
	src := writeSource(t, synth.Spec{Counts: []int{120, 60, 20}, MinSize: 270_000, MaxSize: 400_000, Seed: 71})
	if r := run(t, time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--shard-size=12MiB", src, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	// --prime=false: a job that restarts without telling its mount where
	// (no --resume-at) would have the epoch's first batches primed, one
	// lead fetched for nothing (docs/operations.md); this is of the
	// prefetcher's own start at the reader.
	mnt := mountShardfs(t, stores, "--batch-size=8", "--seed=3", "--prime=false", "ds")
	dir := filepath.Join(mnt, "epochs", "0000", "rank-000")
	rows := readIndex(t, filepath.Join(dir, "index.csv"))
	batches := rows[len(rows)-1].batch + 1
	const resumeAt = 12
	var want int64
	samples := 0
	for _, row := range rows {
		if row.batch >= resumeAt {
			fi, err := os.Stat(filepath.Join(src, row.key))
			if err != nil {
				t.Fatal(err)
			}
			want += fi.Size()
			samples++
		}
	}
	for b := resumeAt; b < batches; b++ {
		batchKeysOf(t, dir, b, rows, src)
	}
	time.Sleep(500 * time.Millisecond) // let any prefetch still running land in the counters
	var st struct {
		Hedged    int64            `json:"hedged_reads"`
		Degraded  int64            `json:"degraded_reads"`
		Evictions int64            `json:"cache_evictions"`
		GETs      map[string]int64 `json:"gets_by_kind"`
		GETBytes  map[string]int64 `json:"get_bytes_by_kind"`
		Stores    []struct {
			Bytes, Requests int64
		} `json:"stores"`
	}
	if err := json.Unmarshal(mustRead(t, filepath.Join(mnt, ".shardfs", "stats.json")), &st); err != nil {
		t.Fatal(err)
	}
	var got int64
	for _, s := range st.Stores {
		got += s.Bytes
	}
	// The order's own GETs (demand and prefetch, counted at the bytes
	// they ask, answered or not) are exactly batches t.. . A GET slow
	// enough on a busy machine is hedged with a parity decode (CI: one
	// hedge, 278 KB more fetched): those GETs are the hedge's, counted
	// apart, and bound what the stores may send beyond the order's.
	order := st.GETBytes["demand"] + st.GETBytes["prefetch"]
	extra := st.GETBytes["hedge"] + st.GETBytes["degraded"]
	if order < want || order > want+64<<10 {
		t.Fatalf("resuming at batch %d of %d, the order's GETs asked %d bytes; batches %d.. hold %d (hedged reads %d, degraded %d, cache evictions %d)",
			resumeAt, batches, order, resumeAt, want, st.Hedged, st.Degraded, st.Evictions)
	}
	if got > want+64<<10+extra {
		t.Fatalf("resuming at batch %d of %d fetched %d bytes; batches %d.. hold %d, and hedges and degraded reads asked %d more",
			resumeAt, batches, got, resumeAt, want, extra)
	}
	if extra == 0 && got < want {
		t.Fatalf("with no hedge or degraded read, the stores sent %d bytes of batches holding %d", got, want)
	}
	if gets := st.GETs["demand"] + st.GETs["prefetch"]; gets > int64(samples) {
		t.Fatalf("%d GETs of the order for %d samples", gets, samples)
	}
}

// batchKeysOf reads batch b of rankDir, checks every member against the
// source, and returns the keys index.csv gives the batch.
func batchKeysOf(t *testing.T, rankDir string, b int, rows []indexRow, src string) []string {
	t.Helper()
	members := tarMembers(t, mustRead(t, filepath.Join(rankDir, fmt.Sprintf("batch-%06d.tar", b))))
	var keys []string
	for _, row := range rows {
		if row.batch != b {
			continue
		}
		if i := len(keys); 2*i >= len(members) || string(members[2*i]) != string(mustRead(t, filepath.Join(src, row.key))) {
			t.Fatalf("batch %d: %s: wrong bytes or missing member", b, row.key)
		}
		keys = append(keys, row.key)
	}
	if 2*len(keys) != len(members) || len(keys) == 0 {
		t.Fatalf("batch %d: %d members for %d index rows", b, len(members), len(keys))
	}
	return keys
}
