package prefetch_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/cache"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/internal/testds"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/metrics"
	"github.com/shardfs/shardfs/prefetch"
	"github.com/shardfs/shardfs/repository"
)

// countingFetcher counts the ranges asked of the stores.
type countingFetcher struct {
	prefetch.Fetcher
	ranges, bytes atomic.Int64
}

func (c *countingFetcher) ReadRange(ctx context.Context, shard int, off, n int64) ([]byte, error) {
	c.ranges.Add(1)
	c.bytes.Add(n)
	return c.Fetcher.ReadRange(ctx, shard, off, n)
}

func (c *countingFetcher) ReadRangeV(ctx context.Context, shard int, off int64, bufs [][]byte) error {
	c.ranges.Add(1)
	c.bytes.Add(int64(backend.VecLen(bufs)))
	return c.Fetcher.ReadRangeV(ctx, shard, off, bufs)
}

// TestDiskTierServesAfterRemount reads one epoch through a reader with a
// disk tier, then reads it again through a new reader and a new memory
// cache on the same directory (a remount, or a restart after kill -9: the
// first tier is never closed): the stores are not asked again. Bytes flipped
// in the tier's files are never served: they are fetched again and counted.
func TestDiskTierServesAfterRemount(t *testing.T) {
	met := metrics.New(make([]string, 6))
	ds := testds.New(t, synth.Spec{Counts: []int{120, 60, 20}, MinSize: 1000, MaxSize: 40_000, Seed: 8}, met)
	in, err := repository.LayoutInput(ds.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	cat := repository.ManifestCatalog{M: ds.Manifest}
	o, err := layout.Order(in, layout.Params{Seed: 2, World: 1, Batch: 16, Alpha: 1})
	if err != nil {
		t.Fatal(err)
	}
	m := layout.NewMembers(o, cat)
	want := expected(t, m.Epoch(), ds.Src, cat)
	dir := t.TempDir()
	ns := ds.Manifest.Name + "-" + ds.Manifest.IngestID
	var mem *cache.Cache
	readEpoch := func(label string) (*countingFetcher, *cache.Disk) {
		t.Helper()
		disk, err := cache.OpenDisk(dir, ns, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		fetch := &countingFetcher{Fetcher: ds}
		cfg := prefetch.DefaultConfig()
		cfg.Disk = disk
		mem = cache.New(64<<20, nil)
		r := prefetch.New(fetch, cat, mem, met, cfg, nil)
		defer r.Close()
		h := r.Open(m.Epoch())
		defer h.Close()
		got := make([]byte, len(want))
		for off := 0; off < len(got); off += 1 << 20 {
			n, err := h.ReadAt(context.Background(), got[off:min(len(got), off+1<<20)], int64(off))
			if err != nil && n != min(len(got)-off, 1<<20) {
				t.Fatalf("%s: read at %d: %v", label, off, err)
			}
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: wrong bytes", label)
		}
		return fetch, disk
	}
	cold, disk1 := readEpoch("cold")
	// The epoch holds each of m.Len() samples once (tail=drop). A demand read
	// racing the prefetcher may fetch (and store) a sample twice.
	if cold.ranges.Load() == 0 || disk1.Writes.Load() < int64(m.Len()) {
		t.Fatalf("cold epoch: %d ranges fetched, %d samples written to disk; want >0 and at least the epoch's %d", cold.ranges.Load(), disk1.Writes.Load(), m.Len())
	}
	warm, disk2 := readEpoch("after remount")
	if warm.ranges.Load() != 0 {
		t.Fatalf("after a remount the epoch asked the stores for %d ranges (%d bytes); want 0", warm.ranges.Load(), warm.bytes.Load())
	}
	// Coalesced prefetch ranges also cover samples read again later: at least every sample hits.
	if disk2.Hits.Load() < int64(m.Len()) {
		t.Fatalf("disk hits %d, want at least the epoch's %d", disk2.Hits.Load(), m.Len())
	}
	// A sample a read holds whole is served from the tier straight into the
	// reader's buffer; only samples split across two reads pass through the
	// memory cache.
	var split int64
	f := m.Epoch()
	for off := int64(0); off < f.Size(); off += 1 << 20 {
		for _, e := range f.Extents(nil, off, min(f.Size()-off, 1<<20)) {
			if e.Piece != layout.PieceSample {
				continue
			}
			if size := cat.Size(m.Sample(int(e.Member))); e.Len != size {
				split += size
			}
		}
	}
	if used := mem.Used(); used > split {
		t.Fatalf("after remount the memory cache holds %d bytes; only the %d bytes of samples split across reads should pass through it", used, split)
	}
	// Flip a byte in the middle of every shard file.
	files, _ := filepath.Glob(filepath.Join(dir, cache.TierDir, ns, "*.dat"))
	for _, name := range files {
		b, _ := os.ReadFile(name)
		b[len(b)/2] ^= 0x08
		os.WriteFile(name, b, 0o644)
	}
	rot, disk3 := readEpoch("after bit rot")
	if disk3.Corrupt.Load() != int64(len(files)) || rot.ranges.Load() == 0 {
		t.Fatalf("%d corrupt samples counted and %d ranges re-fetched after flipping a byte in each of %d shard files", disk3.Corrupt.Load(), rot.ranges.Load(), len(files))
	}
}

// TestDiskTierIsAFetcher uses the tier alone, as any Fetcher is used: its
// bytes are the stores' bytes, through ReadRange and through ReadRangeV
// with the range cut at points that are not sample bounds, and a second
// tier on the same directory serves a range it stored without asking the
// Fetcher it wraps.
func TestDiskTierIsAFetcher(t *testing.T) {
	met := metrics.New(make([]string, 6))
	ds := testds.New(t, synth.Spec{Counts: []int{40, 20}, MinSize: 1000, MaxSize: 30_000, Seed: 9}, met)
	cat := repository.ManifestCatalog{M: ds.Manifest}
	dir, ns := t.TempDir(), ds.Manifest.Name+"-"+ds.Manifest.IngestID
	shard := 0
	first, count := cat.ShardSamples(shard)
	if count < 8 {
		t.Fatalf("shard 0 holds %d samples, want 8 or more", count)
	}
	_, lo, _ := cat.Locate(first + 2)
	_, last, lastSize := cat.Locate(first + count - 3)
	hi := last + lastSize - 17 // ends inside a sample
	lo += 5                    // starts inside one
	want, err := ds.ReadRange(context.Background(), shard, lo, hi-lo)
	if err != nil {
		t.Fatal(err)
	}
	tier := func() (*prefetch.DiskTier, *countingFetcher) {
		disk, err := cache.OpenDisk(dir, ns, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { disk.Close() })
		next := &countingFetcher{Fetcher: ds}
		tr := prefetch.NewDiskTier(next, disk, cat, 64<<10)
		if tr.Unwrap() != prefetch.Fetcher(next) {
			t.Fatal("Unwrap does not return the wrapped Fetcher")
		}
		return tr, next
	}
	cold, coldNext := tier()
	got, err := cold.ReadRange(context.Background(), shard, lo, hi-lo)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("cold ReadRange: %v, equal %v", err, bytes.Equal(got, want))
	}
	if coldNext.ranges.Load() == 0 {
		t.Fatal("a cold tier served a range without asking the Fetcher it wraps")
	}
	warm, warmNext := tier()
	n := hi - lo
	bufs := [][]byte{make([]byte, 3), make([]byte, n/2-3), nil, make([]byte, n-n/2)}
	if err := warm.ReadRangeV(context.Background(), shard, lo, bufs); err != nil {
		t.Fatal(err)
	}
	if got := bytes.Join(bufs, nil); !bytes.Equal(got, want) {
		t.Fatal("warm ReadRangeV: wrong bytes")
	}
	// The first and last samples are only partly in the range: the cold
	// read fetched and stored them whole, so nothing is asked again.
	if r := warmNext.ranges.Load(); r != 0 {
		t.Fatalf("a warm tier asked the Fetcher it wraps for %d ranges; want 0", r)
	}
}
