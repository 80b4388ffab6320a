package integration

import (
	npybin "encoding/binary"
	"encoding/csv"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Issue 59 item 4: what a new user found wrong when trying records.

// npyInt32 is a .npy file of one row of int32s, as numpy.save writes it.
func npyInt32(vals ...int32) string {
	header := fmt.Sprintf("{'descr': '<i4', 'fortran_order': False, 'shape': (%d,), }", len(vals))
	for (10+len(header)+1)%64 != 0 {
		header += " "
	}
	header += "\n"
	b := []byte("\x93NUMPY\x01\x00")
	b = npybin.LittleEndian.AppendUint16(b, uint16(len(header)))
	b = append(b, header...)
	for _, v := range vals {
		b = npybin.LittleEndian.AppendUint32(b, uint32(v))
	}
	return string(b)
}

// Keys came back renamed (laion.v1.2/r001746 as laion_v1_2/r001746, and
// a.b/x, a_b/x and "a b/x" as one key with __repeat__ 0, 1 and 2), and .npy
// members arrived as torch tensors. Through shardfs.Loader, every record's
// __key__ is the source's key and index.csv's, each once, and a .npy member
// is the numpy array the source holds.
func TestLoaderKeysAreTheSourcesAndNpyIsNumpy(t *testing.T) {
	requireTorch(t)
	_, urls := localStores(t, 3)
	stores := "--stores=" + strings.Join(urls, ",")
	dir := filepath.Join(t.TempDir(), "wds")
	os.MkdirAll(dir, 0o755)
	keys := []string{"laion.v1.2/r001746", "a.b/x", "a_b/x", "a b/x", "caf\u00e9/\u65e5\u672c", "-lead/dash", "x/y/z"}
	for i := range 25 {
		keys = append(keys, fmt.Sprintf("n/%03d", i))
	}
	var members [][2]string
	for i, k := range keys {
		members = append(members, [2]string{k + ".npy", npyInt32(int32(i), -int32(i), 7)},
			[2]string{k + ".json", fmt.Sprintf(`{"source": %q}`, []string{"web", "books"}[i%2])})
	}
	writeTar(t, filepath.Join(dir, "s0.tar"), members...)
	if r := run(t, time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--strata=source", dir, "keys"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	mnt := mountShardfs(t, stores, "--batch-size=8", "--epochs=1", "keys")
	rows, err := csv.NewReader(strings.NewReader(string(mustRead(t, filepath.Join(mnt, "epochs", "0000", "rank-000", "index.csv"))))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var indexKeys []string
	for _, row := range rows[1:] {
		indexKeys = append(indexKeys, row[2])
	}
	cmd := exec.Command("/usr/bin/python3", "-c", `
import sys
sys.path.insert(0, "../python")
import numpy, shardfs
for batch in shardfs.Loader(sys.argv[1], num_workers=2):
    for r in batch:
        a = r["npy"]
        print("%s\t%d\t%s\t%s" % (r["__key__"], r["__repeat__"], type(a).__module__ + "." + type(a).__name__, ",".join(str(v) for v in a.tolist())))
`, mnt)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the loader: %v\n%s", err, out)
	}
	var loaded []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 4 {
			t.Fatalf("loader line %q", line)
		}
		i := slices.Index(keys, f[0])
		if i < 0 {
			t.Errorf("__key__ %q is no key of the source", f[0])
			continue
		}
		if want := fmt.Sprintf("%d,%d,7", i, -i); f[1] != "0" || f[2] != "numpy.ndarray" || f[3] != want {
			t.Errorf("record %q: __repeat__ %s, npy a %s of %s; want 0, a numpy.ndarray of %s", f[0], f[1], f[2], f[3], want)
		}
		loaded = append(loaded, f[0])
	}
	if !slices.Equal(loaded, indexKeys) {
		t.Errorf("the loader's keys, in order:\n%q\nindex.csv's:\n%q", loaded, indexKeys)
	}
	slices.Sort(loaded)
	want := slices.Clone(keys)
	slices.Sort(want)
	if !slices.Equal(loaded, want) {
		t.Errorf("the loader's keys:\n%q\nthe source's:\n%q", loaded, want)
	}
}

// A refused ingest on fresh stores left an empty bucket on each. It now
// leaves the stores as it found them: no bucket on a MinIO store, no
// directory for a file:// one; and a store that was there keeps what it
// held.
func TestRefusedIngestLeavesTheStoresAsFound(t *testing.T) {
	sharedCluster(t, 3) // the shared MinIO processes, up
	corpus := filepath.Join(t.TempDir(), "c.jsonl")
	os.WriteFile(corpus, []byte("{\"text\": \"fine\", \"source\": \"web\"}\n{\"text\": \"ab\xff\xfe\", \"source\": \"web\"}\n"), 0o644)
	keyed := filepath.Join(t.TempDir(), "k.jsonl")
	os.WriteFile(keyed, []byte(`{"id": "doc.1", "text": "t", "source": "web"}`+"\n"), 0o644)
	for i, c := range []struct {
		src  string
		args []string
		why  string
	}{
		{corpus, []string{"--member=text=txt"}, "line 2: byte 12 (0xff) is not UTF-8"},
		{keyed, []string{"--member=text=txt", "--key=id"}, `key "doc.1" has a '.' after its last '/'`},
	} {
		shared.Lock()
		shared.buckets++
		bucket := fmt.Sprintf("fresh%04d", shared.buckets)
		shared.Unlock()
		local := filepath.Join(t.TempDir(), "new", "store")
		urls := []string{shared.servers[0].URL(bucket + "/ds"), shared.servers[1].URL(bucket + "/ds"), "file://" + local}
		t.Cleanup(func() {
			for _, s := range shared.servers[:2] {
				os.RemoveAll(filepath.Join(s.DataDir, bucket))
			}
		})
		r := run(t, time.Minute, nil, append([]string{"ingest", "--stores=" + strings.Join(urls, ","), "--data=2", "--parity=1", "--strata=source"}, append(c.args, c.src, "ds")...)...)
		if r.code == 0 || !strings.Contains(r.stderr, c.why) {
			t.Fatalf("case %d: %v\nwant it refused: %q", i, r, c.why)
		}
		for _, s := range shared.servers[:2] {
			if _, err := os.Stat(filepath.Join(s.DataDir, bucket)); !os.IsNotExist(err) {
				t.Errorf("case %d: the refused ingest left bucket %s on %s (%v)\n%v", i, bucket, s.DataDir, err, r)
			}
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(local))); !os.IsNotExist(err) {
			t.Errorf("case %d: the refused ingest left %s (%v)", i, filepath.Dir(local), err)
		}
	}

	// Stores that were there: the refusal takes nothing of theirs.
	_, urls := localStores(t, 3)
	mine := filepath.Join(strings.TrimPrefix(urls[0], "file://"), "mine.txt")
	os.MkdirAll(filepath.Dir(mine), 0o755)
	os.WriteFile(mine, []byte("not shardfs's"), 0o644)
	empty := filepath.Join(strings.TrimPrefix(urls[1], "file://"), "empty-dir")
	os.MkdirAll(empty, 0o755)
	r := run(t, time.Minute, nil, "ingest", "--stores="+strings.Join(urls, ","), "--data=2", "--parity=1", "--member=text=txt", corpus, "ds")
	if r.code == 0 {
		t.Fatalf("ingest: %v", r)
	}
	if b, err := os.ReadFile(mine); err != nil || string(b) != "not shardfs's" {
		t.Errorf("a file of the user's in a store: %q, %v", b, err)
	}
	if _, err := os.Stat(empty); err != nil {
		t.Errorf("an empty directory of the user's in a store: %v", err)
	}
}
