package fs_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shardfs/shardfs/cache"
	"github.com/shardfs/shardfs/fs"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/internal/testds"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/metrics"
	"github.com/shardfs/shardfs/prefetch"
	"github.com/shardfs/shardfs/repository"
)

// mount mounts a fresh test dataset in-process on t.TempDir, unmounted in Cleanup.
func mount(t *testing.T) (string, *testds.DS) {
	t.Helper()
	requireFUSE(t)
	met := metrics.New(make([]string, 6))
	ds := testds.New(t, synth.Spec{Counts: []int{60, 30, 9}, MinSize: 500, MaxSize: 90_000, Seed: 2}, met)
	return mountTree(t, ds, met, 2, []int{0, 1}, layout.Params{Seed: 1, World: 2, Batch: 8, Alpha: 1}), ds
}

func requireFUSE(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true: /dev/fuse is missing")
		}
		t.Skip("no /dev/fuse")
	}
}

// mountTree mounts ds's tree with the given epochs, ranks and order on a
// new directory in t.TempDir, unmounted in Cleanup.
func mountTree(t *testing.T, ds *testds.DS, met *metrics.Metrics, epochs int, ranks []int, p layout.Params) string {
	t.Helper()
	in, err := repository.LayoutInput(ds.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	cat := repository.ManifestCatalog{M: ds.Manifest}
	r := prefetch.New(ds, cat, cache.New(32<<20, nil), met, prefetch.DefaultConfig(), nil)
	root := fs.NewRoot(fs.Options{Catalog: cat, Input: in, Reader: r, Epochs: epochs, Ranks: ranks, Order: p,
		Info: []byte("{}\n"), Stats: func() []byte { return []byte("{\"ok\":1}\n") }, Created: time.Unix(1700000000, 0)})
	dir := filepath.Join(t.TempDir(), "mnt")
	os.Mkdir(dir, 0o755)
	server, err := fs.Mount(dir, root, fs.MountOptions{Name: "test"})
	if err != nil {
		r.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := server.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
		server.Wait()
		r.Close()
	})
	return dir
}

func TestMountTree(t *testing.T) {
	mnt, ds := mount(t)
	// Every sample file under samples/ has its source bytes.
	n := 0
	err := filepath.Walk(filepath.Join(mnt, "samples"), func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(filepath.Join(mnt, "samples"), p)
		got, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		want, err := os.ReadFile(filepath.Join(ds.Src, rel))
		if err != nil || !bytes.Equal(got, want) || fi.Size() != int64(len(want)) {
			t.Errorf("samples/%s: %d bytes (stat %d), want %d: %v", rel, len(got), fi.Size(), len(want), err)
		}
		n++
		return nil
	})
	if err != nil || n != 99 {
		t.Fatalf("walked %d sample files, want 99: %v", n, err)
	}
	// Concurrent random preads equal the sequential bytes, for every rank-epoch file.
	var wg sync.WaitGroup
	for _, rel := range []string{"epochs/0000/rank-000/epoch.tar", "epochs/0001/rank-001/epoch.tar", "epochs/0000/rank-001/batch-000002.tar", "epochs/0001/rank-000/index.csv"} {
		p := filepath.Join(mnt, rel)
		seq, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := os.Stat(p)
		if fi.Size() != int64(len(seq)) {
			t.Fatalf("%s: stat size %d, read %d", rel, fi.Size(), len(seq))
		}
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				f, err := os.Open(p)
				if err != nil {
					t.Error(err)
					return
				}
				defer f.Close()
				rng := rand.New(rand.NewPCG(uint64(g), 1))
				for i := 0; i < 50; i++ {
					off := rng.IntN(len(seq))
					buf := make([]byte, 1+rng.IntN(200_000))
					k, _ := f.ReadAt(buf, int64(off))
					if !bytes.Equal(buf[:k], seq[off:min(len(seq), off+len(buf))]) {
						t.Errorf("%s: pread(%d,%d) differs", rel, off, len(buf))
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	// Read-only, stable inodes, unknown names.
	if err := os.WriteFile(filepath.Join(mnt, "x"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("create: %v, want EROFS", err)
	}
	for _, missing := range []string{"epochs/0002", "epochs/0000/rank-002", "epochs/0000/rank-000/batch-999999.tar", "samples/nope", "epochs/00000"} {
		if _, err := os.Stat(filepath.Join(mnt, missing)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v, want ENOENT", missing, err)
		}
	}
	a, _ := os.Stat(filepath.Join(mnt, "epochs/0000/rank-000/epoch.tar"))
	b, _ := os.Stat(filepath.Join(mnt, "epochs/0000/rank-000/epoch.tar"))
	if a.Sys().(*syscall.Stat_t).Ino != b.Sys().(*syscall.Stat_t).Ino {
		t.Error("inode numbers change")
	}
}
