package integration

import (
	"archive/tar"
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/layout"
)

// Issue 40 item 5, the mount: a format-2 shard index or a format-3 group
// object lost on every store took every rank-epoch that held one of its
// samples down whole (EIO for every batch and index.csv). Now only what needs the lost index fails: a
// batch tar holding one of its samples, the rows of index.csv naming them,
// and epoch.tar from the first of them on; every other batch reads byte for
// byte as before the loss, and no batch ever holds a stand-in.
func TestLostIndexFailsOnlyItsSamples(t *testing.T) {
	c := sharedCluster(t, 3)
	src := writeSource(t, synth.Imbalanced(300, 3, 0.7, 2_000, 20_000, 8))
	t.Run("format 2, a shard index", func(t *testing.T) { lostMetadataMount(t, c, src, "f2", "index", "--format=2") })
	t.Run("format 3, a group object", func(t *testing.T) {
		lostMetadataMount(t, c, src, "f3", "group", "--format=3", "--group-shards=2")
	})
}

// lostMetadataMount ingests src as name, mounts it and reads every batch,
// deletes the second object under name/<kind>/ on every store, and mounts
// again.
func lostMetadataMount(t *testing.T, c *cluster, src, name, kind string, format ...string) {
	stores := "--stores=" + strings.Join(c.urls, ",")
	clients := c.clients(t)
	ctx := t.Context()
	if r := run(t, 2*time.Minute, nil, append(append([]string{"ingest", stores, "--data=2", "--parity=1", "--shard-size=256KiB"}, format...), src, name)...); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	flags := []string{stores, "--batch-size=16", "--epochs=1"}
	before := mountShardfs(t, append(flags, name)...)
	rankDir := filepath.Join("epochs", "0000", "rank-000")
	batches, err := filepath.Glob(filepath.Join(before, rankDir, "batch-*.tar"))
	if err != nil || len(batches) < 10 {
		t.Fatalf("%d batches before the loss: %v", len(batches), err)
	}
	want := map[string][]byte{}
	for _, b := range batches {
		want[filepath.Base(b)] = mustRead(t, b)
	}
	wantEpoch := mustRead(t, filepath.Join(before, rankDir, "epoch.tar"))
	keysBefore := sampleKeys(t, before)

	objs, _ := clients[0].List(ctx, name+"/"+kind+"/")
	slices.Sort(objs)
	if len(objs) < 3 {
		t.Fatalf("%d objects under %s/%s/", len(objs), name, kind)
	}
	for _, s := range clients {
		if err := s.Delete(ctx, objs[1]); err != nil {
			t.Fatal(err)
		}
	}
	after := mountShardfs(t, append(flags, name)...)
	keysAfter := sampleKeys(t, after)
	lost := map[string]bool{} // tar stems of the lost shard's samples
	for k := range keysBefore {
		if !keysAfter[k] {
			stem, _ := layout.TarName(k)
			lost[stem] = true
		}
	}
	if len(lost) == 0 || len(keysAfter) == 0 || len(keysAfter)+len(lost) != len(keysBefore) {
		t.Fatalf("samples/ lists %d of %d samples after the loss, %d lost", len(keysAfter), len(keysBefore), len(lost))
	}
	holdsLost := func(tarBytes []byte) (first int64, ok bool) {
		tr := tar.NewReader(bytes.NewReader(tarBytes))
		var off int64
		for {
			h, err := tr.Next()
			if err == io.EOF {
				return 0, false
			}
			if err != nil {
				t.Fatal(err)
			}
			if lost[strings.SplitN(strings.TrimSuffix(h.Name, filepath.Ext(h.Name)), "~", 2)[0]] {
				return off, true
			}
			off += 512 + (h.Size+511)/512*512
		}
	}
	failed, served := 0, 0
	for name, wantBytes := range want {
		got, err := os.ReadFile(filepath.Join(after, rankDir, name))
		if _, hit := holdsLost(wantBytes); hit {
			if !errorsIsErrno(err, syscall.EIO) {
				t.Fatalf("%s holds a lost sample: read %d bytes, %v; want EIO", name, len(got), err)
			}
			failed++
			continue
		}
		if err != nil || !bytes.Equal(got, wantBytes) {
			t.Fatalf("%s holds no lost sample: %d bytes, %v; want its %d bytes from before the loss", name, len(got), err, len(wantBytes))
		}
		served++
	}
	if failed == 0 || served == 0 {
		t.Fatalf("%d batches failed, %d served: want some of each", failed, served)
	}
	// epoch.tar reads as before up to the first lost member, and fails there.
	cut, hit := holdsLost(wantEpoch)
	if !hit {
		t.Fatal("epoch.tar held no lost sample before the loss")
	}
	f, err := os.Open(filepath.Join(after, rankDir, "epoch.tar"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	prefix := make([]byte, cut)
	if n, err := f.ReadAt(prefix, 0); int64(n) != cut || err != nil || !bytes.Equal(prefix, wantEpoch[:cut]) {
		t.Fatalf("epoch.tar before its first lost member: %d of %d bytes, %v", n, cut, err)
	}
	if n, err := f.ReadAt(make([]byte, 1), cut); !errorsIsErrno(err, syscall.EIO) {
		t.Fatalf("epoch.tar at its first lost member: %d bytes, %v; want EIO", n, err)
	}
	// index.csv reads as before up to the first row of a lost sample, and
	// fails there (a whole read fails).
	wantIndex := string(mustRead(t, filepath.Join(before, rankDir, "index.csv")))
	rowAt := int64(-1)
	for off, line := int64(0), ""; len(wantIndex[off:]) > 0; off += int64(len(line)) {
		line, _, _ = strings.Cut(wantIndex[off:], "\n")
		line += "\n"
		if f := strings.Split(line, ","); off > 0 && len(f) > 2 {
			if stem, _ := layout.TarName(f[2]); lost[stem] {
				rowAt = off
				break
			}
		}
	}
	g, err := os.Open(filepath.Join(after, rankDir, "index.csv"))
	if err != nil || rowAt < 0 {
		t.Fatalf("index.csv: %v; first lost row at %d", err, rowAt)
	}
	defer g.Close()
	head := make([]byte, rowAt)
	if n, err := g.ReadAt(head, 0); int64(n) != rowAt || err != nil || string(head) != wantIndex[:rowAt] {
		t.Fatalf("index.csv before its first lost row: %d of %d bytes, %v", n, rowAt, err)
	}
	if n, err := g.ReadAt(make([]byte, 10), rowAt); !errorsIsErrno(err, syscall.EIO) {
		t.Fatalf("index.csv at its first lost row: %d bytes, %v; want EIO", n, err)
	}
	// Issue 55: a read that spans the lost row gets the bytes before it
	// (a short read), and the next read fails: 64 KiB reads got 0 bytes.
	for _, name := range []string{"index.csv", "epoch.tar"} {
		want, at := wantIndex, rowAt
		if name == "epoch.tar" {
			want, at = string(wantEpoch), cut
		}
		h, err := os.Open(filepath.Join(after, rankDir, name))
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		buf := make([]byte, 64<<10)
		for {
			n, err := h.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				if !errorsIsErrno(err, syscall.EIO) || int64(len(got)) != at || string(got) != want[:at] {
					t.Fatalf("%s read in 64 KiB reads: %d bytes, then %v; want the %d before its first lost member or row, then EIO", name, len(got), err, at)
				}
				break
			}
			if n == 0 || int64(len(got)) > at {
				t.Fatalf("%s read in 64 KiB reads: %d bytes and no error, past the lost part at %d", name, len(got), at)
			}
		}
		h.Close()
	}
	if b, err := os.ReadFile(filepath.Join(after, rankDir, "index.csv")); !errorsIsErrno(err, syscall.EIO) {
		t.Fatalf("index.csv with lost rows, read whole: %d bytes, %v; want EIO", len(b), err)
	}
}

// sampleKeys lists the samples under mnt/samples/ by their paths there:
// their keys, for a tree (samples/<class>/<file> of key <class>/<file>).
func sampleKeys(t *testing.T, mnt string) map[string]bool {
	t.Helper()
	keys := map[string]bool{}
	root := filepath.Join(mnt, "samples")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		keys[rel] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}
