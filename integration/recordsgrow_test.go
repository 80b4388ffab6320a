package integration

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// recordsSource writes n records as WebDataset shards of 30 records each
// under a new directory: keys prefix/NNNN, the members names gives (a .json
// with the record's source among them), and returns the directory and
// every member's bytes by "key.member".
func recordsSource(t *testing.T, prefix string, n int, names ...string) (string, map[string][]byte) {
	t.Helper()
	dir := t.TempDir()
	bytesOf := map[string][]byte{}
	var members [][2]string
	flush := func(s int) {
		writeTar(t, filepath.Join(dir, fmt.Sprintf("%s-%03d.tar", prefix, s)), members...)
		members = nil
	}
	for i := range n {
		key := fmt.Sprintf("%s/%04d", prefix, i)
		for _, name := range names {
			body := strings.Repeat(fmt.Sprintf("%s %s %d;", prefix, name, i), 3+i%40)
			if name == "json" {
				body = fmt.Sprintf(`{"source": %q, "i": %d}`, []string{"web", "books", "news"}[i%3], i)
			}
			members = append(members, [2]string{key + "." + name, body})
			bytesOf[key+"."+name] = []byte(body)
		}
		if (i+1)%30 == 0 {
			flush(i / 30)
		}
	}
	if len(members) > 0 {
		flush(n / 30)
	}
	return dir, bytesOf
}

// checkRecordEpoch reads every batch tar of epoch e of every rank of mnt
// and checks each member against want ("key.member" -> bytes; a mix's keys
// are "dataset/key"), byte for byte; it returns how often each key came.
func checkRecordEpoch(t *testing.T, mnt string, e, ranks int, want map[string][]byte) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for r := range ranks {
		dir := filepath.Join(mnt, "epochs", fmt.Sprintf("%04d", e), fmt.Sprintf("rank-%03d", r))
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range entries {
			if !strings.HasPrefix(en.Name(), "batch-") {
				continue
			}
			tr := tar.NewReader(bytes.NewReader(mustRead(t, filepath.Join(dir, en.Name()))))
			last := ""
			for {
				h, err := tr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("epoch %d rank %d %s: %v", e, r, en.Name(), err)
				}
				got, _ := io.ReadAll(tr)
				d, b := filepath.Split(h.Name)
				stem, member, _ := strings.Cut(b, ".")
				key := d + strings.SplitN(stem, "~", 2)[0]
				if w, ok := want[key+"."+member]; !ok || !bytes.Equal(got, w) {
					t.Fatalf("epoch %d rank %d %s: member %s (%d bytes): not the source's bytes (in the source: %v)", e, r, en.Name(), h.Name, len(got), ok)
				}
				if key != last {
					seen[key]++
					last = key
				}
			}
		}
	}
	return seen
}

// Issue 59 item 3: records datasets grow. An append of records (with a
// member the dataset did not have), --follow over it, and a --mix of two
// datasets of records each serve every member byte for byte, W = 2, two
// epochs.
func TestRecordsGrow(t *testing.T) {
	requireTorch(t)
	c := sharedCluster(t, 3)
	stores := "--stores=" + strings.Join(c.urls, ",")
	srcA, bytesA := recordsSource(t, "a", 160, "bin", "json")
	srcB, bytesB := recordsSource(t, "b", 80, "bin", "txt", "json")
	if r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--shard-size=64KiB", "--strata=source", srcA, "grow"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	follow := mountShardfsEnv(t, nil, stores, "--world-size=2", "--rank=all", "--batch-size=10", "--follow", "--run=g1", "grow")
	if seen := checkRecordEpoch(t, follow.dir, 0, 2, bytesA); len(seen) != 160 {
		t.Fatalf("epoch 0 served %d of version 1's 160 records", len(seen))
	}
	// The append names no --strata: it takes the dataset's.
	r := run(t, 2*time.Minute, nil, "ingest", stores, "--append", srcB, "grow")
	if r.code != 0 || !strings.Contains(r.stdout, "committed version 2 of grow (after version 1): appended 80 samples") {
		t.Fatalf("append of records: %v", r)
	}
	all := map[string][]byte{}
	for k, v := range bytesA {
		all[k] = v
	}
	for k, v := range bytesB {
		all[k] = v
	}
	// --follow: epoch 1 is version 2's, every record once.
	seen := checkRecordEpoch(t, follow.dir, 1, 2, all)
	if len(seen) != 240 {
		t.Fatalf("--follow: epoch 1 served %d records, want version 2's 240", len(seen))
	}
	// A fresh mount of version 2, two epochs: every record, once each.
	fresh := mountShardfs(t, stores, "--world-size=2", "--rank=all", "--batch-size=10", "--epochs=2", "grow")
	for e := range 2 {
		for k, n := range checkRecordEpoch(t, fresh, e, 2, all) {
			if n != 1 {
				t.Fatalf("epoch %d served %s %d times", e, k, n)
			}
		}
	}

	// A mix of two datasets of records.
	srcC, bytesC := recordsSource(t, "c", 60, "dat", "json")
	if r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--strata=source", srcC, "other"); r.code != 0 {
		t.Fatalf("ingest other: %v", r)
	}
	mixed := map[string][]byte{}
	for k, v := range all {
		mixed["grow/"+k] = v
	}
	for k, v := range bytesC {
		mixed["other/"+k] = v
	}
	mix := mountShardfs(t, stores, "--mix=grow:0.8,other:0.2", "--world-size=2", "--rank=all", "--batch-size=10", "--epochs=2")
	for e := range 2 {
		seen := checkRecordEpoch(t, mix, e, 2, mixed)
		g, o := 0, 0
		for k := range seen {
			if strings.HasPrefix(k, "grow/") {
				g++
			} else {
				o++
			}
		}
		if g == 0 || o == 0 {
			t.Fatalf("mix epoch %d served %d records of grow and %d of other", e, g, o)
		}
	}
	// The loader reads a mix of records as records.
	out, err := exec.Command("/usr/bin/python3", "-c", `
import sys
sys.path.insert(0, "../python")
import shardfs
n, names = 0, set()
for batch in shardfs.Loader(sys.argv[1], rank=0, world_size=2, num_workers=2):
    for rec in batch:
        names |= set(k for k in rec if not k.startswith("__"))
        n += 1
print(n, ",".join(sorted(names)))
`, mix).CombinedOutput()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "bin,dat,json,txt") {
		t.Fatalf("the loader on a mix of records: %v\n%s", err, out)
	}
}
