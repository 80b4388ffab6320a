package prefetch_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/shardfs/shardfs/cache"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/internal/testds"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/metrics"
	"github.com/shardfs/shardfs/prefetch"
	"github.com/shardfs/shardfs/repository"
)

// expected renders file f from the source tree.
func expected(t *testing.T, f *layout.FileMap, src string, cat layout.SampleCatalog) []byte {
	out := make([]byte, f.Size())
	for _, e := range f.Extents(nil, 0, f.Size()) {
		p := out[e.FileOff : e.FileOff+e.Len]
		if e.Piece == layout.PieceSample {
			b, err := os.ReadFile(filepath.Join(src, cat.Key(f.Members().Sample(int(e.Member)))))
			if err != nil {
				t.Fatal(err)
			}
			copy(p, b[e.Off:])
		} else {
			f.Render(e, p)
		}
	}
	return out
}

// TestConcurrentReadersWithLatency: four readers read consecutive batch files
// in parallel, as DataLoader workers do, and one reads epoch.tar, while every
// store request is delayed; a small cache forces evictions. All bytes must match.
func TestConcurrentReadersWithLatency(t *testing.T) {
	met := metrics.New(make([]string, 6))
	ds := testds.New(t, synth.Spec{Counts: []int{200, 90, 40, 10}, MinSize: 1000, MaxSize: 40_000, Seed: 3}, met)
	for _, f := range ds.Faulty {
		f.SetDelay(3*time.Millisecond, 2*time.Millisecond)
	}
	in, err := repository.LayoutInput(ds.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	cat := repository.ManifestCatalog{M: ds.Manifest}
	o, err := layout.Order(in, layout.Params{Seed: 5, World: 1, Batch: 16, Alpha: 1})
	if err != nil {
		t.Fatal(err)
	}
	m := layout.NewMembers(o, cat)
	c := cache.New(2<<20, nil)
	cfg := prefetch.DefaultConfig()
	cfg.Budget, cfg.MinLead = 1<<20, 512<<10
	r := prefetch.New(ds, cat, c, met, cfg, nil)
	defer r.Close()

	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	readAll := func(f *layout.FileMap, bufSize int) {
		defer wg.Done()
		h := r.Open(f)
		defer h.Close()
		want := expected(t, f, ds.Src, cat)
		got := make([]byte, 0, f.Size())
		buf := make([]byte, bufSize)
		for off := int64(0); ; {
			n, err := h.ReadAt(ctx, buf, off)
			got = append(got, buf[:n]...)
			off += int64(n)
			if err == io.EOF || off >= f.Size() {
				break
			}
			if err != nil {
				errs <- err
				return
			}
		}
		if !bytes.Equal(got, want) {
			errs <- io.ErrUnexpectedEOF
		}
	}
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			for b := w; b < o.Batches; b += 4 {
				wg.Add(1)
				readAll(m.Batch(b), 128<<10)
			}
			wg.Done()
		}()
	}
	wg.Add(1)
	go readAll(m.Epoch(), 1<<20)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("reader: %v", err)
	}
	s := met.Snapshot()
	if s.PrefetchBytes == 0 || s.CacheHits == 0 || c.Used() > c.Budget() {
		t.Fatalf("prefetch %d bytes, %d hits, cache %d of %d", s.PrefetchBytes, s.CacheHits, c.Used(), c.Budget())
	}
	t.Logf("served %d bytes: %d hits, %d misses, %d stalls, %d prefetched", s.BytesServed, s.CacheHits, s.CacheMisses, s.Stalls, s.PrefetchBytes)
}

// TestReadsThroughFaults: with one store down and another flipping bits, every
// byte still matches; sample reads of the samples/ view too.
func TestReadsThroughFaults(t *testing.T) {
	met := metrics.New(make([]string, 6))
	ds := testds.New(t, synth.Spec{Counts: []int{50, 20}, MinSize: 100, MaxSize: 3_000_000, Seed: 9}, met)
	ds.Faulty[1].SetDown(true)
	ds.Faulty[4].SetFlipBits(true)
	cat := repository.ManifestCatalog{M: ds.Manifest}
	r := prefetch.New(ds, cat, cache.New(64<<20, nil), met, prefetch.DefaultConfig(), nil)
	defer r.Close()
	var wg sync.WaitGroup
	for s := 0; s < ds.Manifest.Samples.Len(); s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want, _ := os.ReadFile(filepath.Join(ds.Src, cat.Key(s)))
			got := make([]byte, len(want)+10)
			n, err := r.ReadSample(context.Background(), s, got, 0)
			if (err != nil && err != io.EOF) || !bytes.Equal(got[:n], want) {
				t.Errorf("sample %d: %d bytes, %v", s, n, err)
			}
		}()
	}
	wg.Wait()
	if met.Snapshot().DegradedReads == 0 {
		t.Fatal("no degraded reads with a store down")
	}
}
