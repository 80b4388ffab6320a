package ingest

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/repository"
)

// countingStore records the byte ranges read of each key.
type countingStore struct {
	backend.Store
	mu    sync.Mutex
	reads map[string][][2]int64 // [off, end) of each read; a ReadWhole of the object, [0, size)
	stats int                   // Stat calls
}

func (c *countingStore) count(key string, off, n int64) {
	c.mu.Lock()
	c.reads[key] = append(c.reads[key], [2]int64{off, off + n})
	c.mu.Unlock()
}

func (c *countingStore) ReadAt(ctx context.Context, key string, p []byte, off int64) error {
	c.count(key, off, int64(len(p)))
	return c.Store.ReadAt(ctx, key, p, off)
}

func (c *countingStore) ReadWhole(ctx context.Context, key string, max int64, into func(size int64) []byte) (int64, bool, error) {
	var read int64 // the whole object, or its first max bytes
	size, whole, err := c.Store.ReadWhole(ctx, key, max, func(n int64) []byte {
		read = n
		return into(n)
	})
	if err == nil && read > 0 {
		c.count(key, 0, read)
	}
	return size, whole, err
}

func (c *countingStore) Stat(ctx context.Context, key string) (int64, error) {
	c.mu.Lock()
	c.stats++
	c.mu.Unlock()
	return c.Store.Stat(ctx, key)
}

func (c *countingStore) ReadAtV(ctx context.Context, key string, bufs [][]byte, off int64) error {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	c.count(key, off, int64(n))
	return c.Store.ReadAtV(ctx, key, bufs, off)
}

// writeShards writes a WebDataset set of shards × per records (a .bin of
// 500-3,000 random bytes, a .txt and a .json with a skewed source) into a
// file:// store's directory, and returns the records' members by key.
func writeShards(t *testing.T, dir string, shards, per int) map[string]map[string][]byte {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	want := map[string]map[string][]byte{}
	sources := []string{"web", "web", "web", "books", "code"}
	for s := 0; s < shards; s++ {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for r := 0; r < per; r++ {
			key := fmt.Sprintf("%06d", s*per+r)
			bin := make([]byte, 500+rng.IntN(2500))
			for i := range bin {
				bin[i] = byte(rng.Uint32())
			}
			members := map[string][]byte{
				"bin":  bin,
				"txt":  []byte("caption " + key),
				"json": []byte(fmt.Sprintf(`{"source": %q}`, sources[rng.IntN(len(sources))])),
			}
			want[key] = members
			for _, name := range []string{"bin", "json", "txt"} {
				b := members[name]
				if err := tw.WriteHeader(&tar.Header{Name: key + "." + name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
					t.Fatal(err)
				}
				tw.Write(b)
			}
		}
		tw.Close()
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("shard-%04d.tar", s)), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return want
}

// An ingest from WebDataset shards on a store reads no byte of a source
// shard twice when uploading, in reads of up to readChunk (it used to make
// one ranged GET per record), in a single process and split among parts,
// with windows smaller than a source shard and a window of the whole
// source; every record comes back byte for byte, and the parts commit the
// single process's manifest.
func TestWindowsReadEachSourceShardOnce(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	want := writeShards(t, dir, 24, 40)
	raw, err := backend.Open("file://"+dir, backend.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srcStore := &countingStore{Store: raw, reads: map[string][][2]int64{}}
	src, err := ScanStore(ctx, ScanOptions{Store: srcStore, Strata: []string{"source"}})
	if err != nil {
		t.Fatal(err)
	}
	base := Options{Data: 2, Parity: 1, ShardSize: 16 << 10, Seed: 5, BlockSize: 4096, Format: 2}
	// Windows of 64 KiB of records: smaller than a source shard's 120 KiB.
	if _, windows, err := plan(src, base, "x"); err != nil || len(windows) < 24 {
		t.Fatalf("the plan has %d windows (%v); the test wants more than one per source shard", len(windows), err)
	}

	single := base
	single.Name, single.Stores = "single", localStores(t, t.TempDir(), 3)
	srcStore.reads = map[string][][2]int64{}
	res, err := Run(ctx, src, single)
	if err != nil {
		t.Fatal(err)
	}
	onceEach(t, "single process", srcStore.reads, 24)
	recordsBack(t, single.Stores, "single", want)

	dist := base
	dist.Name, dist.Stores = "dist", localStores(t, t.TempDir(), 3)
	srcStore.reads = map[string][][2]int64{}
	for i := 0; i < 3; i++ {
		if _, err := RunPart(ctx, src, dist, Part{i, 3}, "job"); err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
	}
	onceEach(t, "3 parts", srcStore.reads, 24)
	if _, err := Commit(ctx, CommitOptions{Name: "dist", Stores: dist.Stores}); err != nil {
		t.Fatal(err)
	}
	ds, err := repository.Open(ctx, dist.Stores, "dist", repository.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sameManifest(t, res.Manifest, ds.Manifest)
	recordsBack(t, dist.Stores, "dist", want)

	// A source of one window is read so too (it was read record by record:
	// 10,000 records from MinIO at 0.8 MB/s).
	one := base
	one.Name, one.Stores, one.ShardSize = "one", localStores(t, t.TempDir(), 3), 4<<20
	if _, windows, err := plan(src, one, "x"); err != nil || len(windows) != 1 {
		t.Fatalf("the plan has %d windows (%v), want 1", len(windows), err)
	}
	srcStore.reads = map[string][][2]int64{}
	if _, err := Run(ctx, src, one); err != nil {
		t.Fatal(err)
	}
	onceEach(t, "one window", srcStore.reads, 24)
	recordsBack(t, one.Stores, "one", want)
}

func onceEach(t *testing.T, what string, reads map[string][][2]int64, shards int) {
	t.Helper()
	if len(reads) != shards {
		t.Errorf("%s: the upload read %d source shards, want %d", what, len(reads), shards)
	}
	for key, rs := range reads {
		slices.SortFunc(rs, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
		for i, r := range rs {
			if r[1]-r[0] > readChunk+16<<10 {
				t.Errorf("%s: source shard %s: a read of %d bytes, more than a chunk", what, key, r[1]-r[0])
			}
			if i > 0 && r[0] < rs[i-1][1] {
				t.Errorf("%s: source shard %s: bytes %d..%d read twice", what, key, r[0], min(r[1], rs[i-1][1]))
			}
		}
	}
}
