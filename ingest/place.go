package ingest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"

	"golang.org/x/sync/errgroup"

	"github.com/shardfs/shardfs/manifest"
)

// Where a plan puts a source's items, and how the upload reads them.
//
// Records from WebDataset shards are placed window by window. A window is
// a run of consecutive source shards holding about readWindow bytes of
// records (a source shard is never split between two windows), and its
// records fill output shards of their own. Uploading a window then reads
// each of its source shards once, whole, in one GET from a store (where a
// ranged GET per record ran a 100,000-record ingest from MinIO at 3 MB/s),
// or one read from local disk, and holds only that window in memory, so
// memory follows the window, not the dataset. Each output shard mirrors
// its window's stratum mix: the whole dataset's, when the source's shards
// hold shuffled records, as WebDataset's writers make them. The mount's
// batches mirror the global mix whatever the shards hold; only a
// window-local read order (--window) sees a window's mix.
//
// Every other source is one window, read item by item, placed as before
// windows existed.

// readWindow is the source bytes of a window: eight output shards' worth,
// so most of a window's shards are full, and a window's memory is a few
// times what ShardsInFlight holds anyway.
func readWindow(shardSize int64) int64 { return 8 * shardSize }

// placement is a plan's shards (item indexes, in stored order) and the
// windows they are read in: windows[w] is window w's first shard; nil
// means one window, read item by item.
type placement struct {
	shards  [][]int
	windows []int
}

// fromTarShards says whether src's items are records read from WebDataset
// tar shards (local or on a store), the source placed window by window.
func (s *Source) fromTarShards() bool {
	return s.Members != nil && s.corpus == nil && s.table == nil
}

// place orders src's items so every stretch of a window mirrors its
// stratum mix, and cuts them into shards of about shardSize bytes. The
// first window is placed with seed itself, so a source of one window is
// placed exactly as before windows existed.
func place(src *Source, strata []uint32, nStrata int, seed uint64, shardSize int64) placement {
	if !src.fromTarShards() {
		order := stratifiedOrder(strata, nStrata, seed)
		return placement{shards: cutShards(src.Items, order, shardSize)}
	}
	var p placement
	for w, span := range windowSpans(src.Items, readWindow(shardSize)) {
		lo, hi := span[0], span[1]
		order := stratifiedOrder(strata[lo:hi], nStrata, seed^(uint64(w)*0x9e3779b97f4a7c15))
		p.windows = append(p.windows, len(p.shards))
		for _, sh := range cutShards(src.Items[lo:hi], order, shardSize) {
			for k := range sh {
				sh[k] += lo
			}
			p.shards = append(p.shards, sh)
		}
	}
	if len(p.windows) == 1 {
		p.windows = nil // one window: nothing to gain from reading it whole
	}
	return p
}

// windowSpans cuts items (records in source-shard order) into windows of
// whole source shards, each [lo, hi) of about budget bytes.
func windowSpans(items []Item, budget int64) [][2]int {
	var spans [][2]int
	lo, bytes := 0, int64(0)
	for i := 0; i < len(items); {
		j, shard := i, int64(0)
		for j < len(items) && items[j].Path == items[i].Path {
			shard += items[j].Size
			j++
		}
		if bytes > 0 && bytes+shard > budget {
			spans = append(spans, [2]int{lo, i})
			lo, bytes = i, 0
		}
		bytes += shard
		i = j
	}
	if lo < len(items) {
		spans = append(spans, [2]int{lo, len(items)})
	}
	return spans
}

// windowsOf groups shards (sorted) by the window they lie in.
func windowsOf(windows []int, shards []int) [][]int {
	if windows == nil {
		return [][]int{shards}
	}
	var out [][]int
	w := -1
	for _, si := range shards {
		k, found := slices.BinarySearch(windows, si)
		if !found {
			k--
		}
		if k != w || len(out) == 0 {
			out = append(out, nil)
			w = k
		}
		out[len(out)-1] = append(out[len(out)-1], si)
	}
	return out
}

// windowFiles reads whole the source shards that the given shards' records
// lie in, a few at once, and serves them from memory.
func windowFiles(ctx context.Context, src *Source, m *manifest.Manifest, shards []int) (sourceFiles, error) {
	keyIndex := src.keyIndex()
	var paths []string
	seen := map[string]bool{}
	for _, si := range shards {
		sh := &m.Shards[si]
		for j := sh.FirstSample; j < sh.FirstSample+sh.NumSamples; j++ {
			if p := src.Items[keyIndex[m.Samples.Key(j)]].Path; !seen[p] {
				seen[p] = true
				paths = append(paths, p)
			}
		}
	}
	files := src.filesOf()
	defer files.close()
	data := make([][]byte, len(paths))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, p := range paths {
		g.Go(func() error {
			f, size, err := files.open(gctx, p)
			if err != nil {
				return fmt.Errorf("read source shard %s: %w", p, err)
			}
			b := make([]byte, size)
			if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
				return fmt.Errorf("read source shard %s: %w (did it change during ingest?)", p, err)
			}
			data[i] = b
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	mem := memFiles{}
	for i, p := range paths {
		mem[p] = data[i]
	}
	return mem, nil
}

// memFiles are source shards read whole into memory.
type memFiles map[string][]byte

func (f memFiles) open(_ context.Context, name string) (io.ReaderAt, int64, error) {
	b, ok := f[name]
	if !ok {
		return nil, 0, fmt.Errorf("source shard %s is not in the window read", name)
	}
	return bytes.NewReader(b), int64(len(b)), nil
}

func (memFiles) close() {}
