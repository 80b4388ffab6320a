package ingest

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/shardfs/shardfs/erasure"
	"github.com/shardfs/shardfs/manifest"
	"github.com/shardfs/shardfs/repository"
)

// Where a plan puts a source's items, and how the upload reads them.
//
// Records from WebDataset shards are placed window by window. A window is
// a run of consecutive records, in source order, holding about readWindow
// bytes (a large source shard, as WebDataset shards of a GB often are,
// spans several windows), and its records fill output shards of their
// own. Uploading a window then reads the span of its records in each of
// its source shards once, front to back, in reads of readChunk (ranged
// GETs from a store, where a ranged GET per record ran a 100,000-record
// ingest from MinIO at 3 MB/s; or reads of local disk), and holds only
// the window's records in memory; the windows partition the records, so
// every source byte that holds a member is read once. Memory follows the
// window, not the dataset. Each output shard mirrors its window's stratum
// mix: the whole dataset's, when the source's shards hold shuffled
// records, as WebDataset's writers make them. The mount's batches mirror
// the global mix whatever the shards hold; only a shard-local read order
// (--window) sees a window's mix.
//
// Every other source is one window, read item by item, placed as before
// windows existed.

// readWindow is the record bytes of a window: four output shards' worth,
// so most of a window's shards are full, while the two windows an upload
// holds (one uploading, the next being read) are about what its
// ShardsInFlight hold.
func readWindow(shardSize int64) int64 { return 4 * shardSize }

// placement is a plan's shards (item indexes, in stored order) and the
// windows they are read in: windows[w] is window w's first shard; nil
// means one window, read item by item (a source other than tar shards).
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
	return p
}

// windowSpans cuts items (records in source order) into windows of
// consecutive records, each [lo, hi) of about budget bytes (a record
// larger than budget is a window of its own).
func windowSpans(items []Item, budget int64) [][2]int {
	var spans [][2]int
	lo, bytes := 0, int64(0)
	for i, it := range items {
		if bytes > 0 && bytes+it.Size > budget {
			spans = append(spans, [2]int{lo, i})
			lo, bytes = i, 0
		}
		bytes += it.Size
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

// windowRecords are the records of a window, read from their source
// shards in one pass each: a record's members back to back, by the
// sample's row in the window (the rows of its shards in turn). By key, a
// record cost two map entries (its source shard's and the window's) and
// two hashes of its key: the maps were 9% of what 1,000,000 WebDataset
// records at --shard-size 512KiB allocated (190 MB of 2.0 GB); the rows,
// with the sort by source shard, allocate 77 MB.
type windowRecords struct {
	first map[int]int // a shard's first sample's row in the window
	recs  [][]byte    // nil: not read; a record of no bytes is an empty slice, not nil
}

// of is sample j's record of shard si, if the window read it.
func (w *windowRecords) of(si, j int, sh *manifest.Shard) ([]byte, bool) {
	if w == nil {
		return nil, false
	}
	first, ok := w.first[si]
	if !ok || j < sh.FirstSample || j >= sh.FirstSample+sh.NumSamples {
		return nil, false
	}
	b := w.recs[first+j-sh.FirstSample]
	return b, b != nil
}

// readChunk bounds one read of a source shard: consecutive records are
// read together up to this span (one ranged GET from a store), and a
// record larger than it in one read of its own.
const readChunk = 1 << 20

// windowItem is a record a window reads: its item, and its row in the
// window.
type windowItem struct{ item, row int }

// readWindowRecords reads the records of the given shards of m from their
// source shards: the records' span in each source shard front to back,
// once, in reads of about readChunk, a few source shards at once. Only the
// members' bytes are kept (a WebDataset shard of small members is mostly
// tar headers and padding), so the window holds about its records' bytes.
func readWindowRecords(ctx context.Context, src *Source, m *manifest.Manifest, shards []int) (*windowRecords, error) {
	itemOf := src.itemOf(m)
	byShard := map[string][]windowItem{} // source shard -> its items in this window
	var paths []string
	w := &windowRecords{first: make(map[int]int, len(shards))}
	rows := 0
	for _, si := range shards {
		sh := &m.Shards[si]
		w.first[si] = rows
		for j := sh.FirstSample; j < sh.FirstSample+sh.NumSamples; j++ {
			i := itemOf(j)
			p := src.Items[i].Path
			if byShard[p] == nil {
				paths = append(paths, p)
			}
			byShard[p] = append(byShard[p], windowItem{i, rows})
			rows++
		}
	}
	w.recs = make([][]byte, rows)
	files := src.filesOf()
	defer files.close()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, p := range paths {
		// Each goroutine sets the rows of its own source shard's records,
		// which no other sets.
		g.Go(func() error {
			items := byShard[p]
			slices.SortFunc(items, func(a, b windowItem) int {
				return cmp.Compare(src.Items[a.item].Members[0].Off, src.Items[b.item].Members[0].Off)
			})
			f, _, err := files.open(gctx, p)
			if err != nil {
				return fmt.Errorf("read source shard %s: %w", p, err)
			}
			if kept, ok := f.(keptPieces); ok {
				// A shard a stream kept in memory: its records' bytes
				// are there already, each record's members side by
				// side; copied into a window arena too, they cost the
				// ingest a copy of every byte and the arena's memory.
				if keptRecords(src.Items, items, kept, w.recs) {
					return nil
				}
			}
			err = readShardRecordsOf(src.Items, items, f, w.recs)
			releaseShard(f)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return w, nil
}

// spanBufs are the buffers source shards are read into, a few MiB each.
var spanBufs = sync.Pool{New: func() any { return new([]byte) }}

// keptRecords sets the given records' rows of recs to their bytes in kept,
// not copied; false when kept lacks any of them, to be read through it as
// any shard is (which sets every one of their rows again).
func keptRecords(all []Item, items []windowItem, kept interface{ record(*Item) ([]byte, bool) }, recs [][]byte) bool {
	for _, wi := range items {
		b, ok := kept.record(&all[wi.item])
		if !ok {
			return false
		}
		if b == nil {
			b = []byte{}
		}
		recs[wi.row] = b
	}
	return true
}

// readShardRecordsOf reads the given records of one source shard (sorted
// by offset) through f, in runs of consecutive records of about readChunk
// bytes, into one buffer of their members' bytes, and sets their rows of
// recs.
func readShardRecordsOf(all []Item, items []windowItem, f io.ReaderAt, recs [][]byte) error {
	var total int64
	for _, wi := range items {
		total += all[wi.item].Size
	}
	arena := make([]byte, 0, total)
	bp := spanBufs.Get().(*[]byte)
	defer spanBufs.Put(bp)
	buf := *bp
	defer func() { *bp = buf }()
	for lo := 0; lo < len(items); {
		from := all[items[lo].item].Members[0].Off
		hi, to := lo, from
		for hi < len(items) {
			it := &all[items[hi].item]
			last := it.Members[len(it.Members)-1]
			end := last.Off + int64(last.Size)
			if hi > lo && end-from > readChunk {
				break
			}
			to = max(to, end)
			hi++
		}
		if int64(cap(buf)) < to-from {
			buf = make([]byte, to-from)
		}
		span := buf[:to-from]
		if _, err := f.ReadAt(span, from); err != nil && !(err == io.EOF && len(span) > 0) {
			return fmt.Errorf("read record %q at offset %d of %s: %w (did the shard change during ingest?)", all[items[lo].item].Key, from, all[items[lo].item].Path, err)
		}
		for _, wi := range items[lo:hi] {
			it := &all[wi.item]
			start := len(arena)
			for k, mb := range it.Members {
				if end := mb.Off + int64(mb.Size); mb.Off < from || end > to {
					return fmt.Errorf("record %q: member %d of %s lies apart from its record: a WebDataset record's members are consecutive", it.Key, k+1, it.Path)
				}
				arena = append(arena, span[mb.Off-from:mb.Off-from+int64(mb.Size)]...)
			}
			recs[wi.row] = arena[start:len(arena):len(arena)]
		}
		lo = hi
	}
	return nil
}

// checkPlan fills opts' defaults and checks what a plan needs of them:
// the erasure parameters and the name, no store.
func (opts *Options) checkPlan() error {
	opts.fillDefaults()
	if err := (erasure.Params{Data: opts.Data, Parity: opts.Parity, BlockSize: opts.BlockSize}).Validate(); err != nil {
		return err
	}
	return repository.CheckName(opts.Name)
}

// DryRun is what Run would write for a source, computed without touching
// a store.
type DryRun struct {
	Samples     int
	Bytes       int64 // sample bytes
	StoredBytes int64 // fragment bytes, parity included
	Strata      []manifest.Stratum
	Shards      int
	Windows     int // read windows (1: the source is read item by item)
	Chunks      int // the chunks a streaming plan read the source in (0: read whole)
}

// Plan places src as Run would with opts and says what it would write;
// it writes nothing and reads no store.
func Plan(src *Source, opts Options) (*DryRun, error) {
	if err := opts.checkPlan(); err != nil {
		return nil, err
	}
	m, windows, err := plan(src, opts, "dry-run")
	if err != nil {
		return nil, err
	}
	d := &DryRun{Samples: m.Samples.Len(), Bytes: m.TotalBytes(), Strata: m.Strata, Shards: len(m.Shards), Windows: max(1, len(windows))}
	for si := range m.Shards {
		d.StoredBytes += int64(opts.Data+opts.Parity) * m.FragSize(si)
	}
	return d, nil
}
