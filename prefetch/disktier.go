package prefetch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"golang.org/x/sync/errgroup"

	"github.com/shardfs/shardfs/cache"
)

// maxDiskSample: larger samples bypass the disk tier, so a chunk read never
// has to read and verify a huge sample from disk.
const maxDiskSample = 16 << 20

// piece is a destination for the shard bytes [off, off+len(buf)).
type piece struct {
	off int64
	buf []byte
}

// readRange returns the verified bytes [off, off+n) of shard (see readInto).
func (r *Reader) readRange(ctx context.Context, shard int, off, n int64) ([]byte, error) {
	if r.disk == nil {
		return r.fetch.ReadRange(ctx, shard, off, n) // no copy into a buffer of our own
	}
	out := make([]byte, n)
	return out, r.readInto(ctx, shard, []piece{{off, out}})
}

// readInto fills each piece (sorted by offset, not overlapping) with the
// verified bytes of shard at its offset: from the disk tier where it holds
// whole samples, from the stores for the rest, which then go to the disk
// tier. A piece that is exactly one sample is read from the tier straight
// into its buffer. Missing samples at most MergeGap apart are fetched as one
// range; samples no piece overlaps are not read at all unless they lie in
// such a gap.
func (r *Reader) readInto(ctx context.Context, shard int, pieces []piece) error {
	if len(pieces) == 0 {
		return nil
	}
	// copyIn copies the part of b (shard bytes from at) that falls in the pieces.
	copyIn := func(b []byte, at int64) {
		end := at + int64(len(b))
		i := sort.Search(len(pieces), func(i int) bool { return pieces[i].off+int64(len(pieces[i].buf)) > at })
		for ; i < len(pieces) && pieces[i].off < end; i++ {
			p := pieces[i]
			a, z := max(at, p.off), min(end, p.off+int64(len(p.buf)))
			copy(p.buf[a-p.off:z-p.off], b[a-at:z-at])
		}
	}
	lo, hi := pieces[0].off, pieces[len(pieces)-1].off+int64(len(pieces[len(pieces)-1].buf))
	if r.disk == nil || !r.cat.Complete(shard) {
		// One GET per run of pieces at most MergeGap apart: a span's pieces
		// are what it claimed, and a sample between them that it did not
		// claim (fetched on demand meanwhile) must not be read twice.
		for i := 0; i < len(pieces); {
			z := pieces[i].off + int64(len(pieces[i].buf))
			j := i + 1
			for ; j < len(pieces) && pieces[j].off-z <= r.cfg.MergeGap; j++ {
				z = pieces[j].off + int64(len(pieces[j].buf))
			}
			if err := r.readPieces(ctx, shard, pieces[i:j]); err != nil {
				return err
			}
			i = j
		}
		return nil
	}
	first, count := r.cat.ShardSamples(shard)
	i := first + sort.Search(count, func(i int) bool {
		_, o, size := r.cat.Locate(first + i)
		return o+size > lo
	})
	slot := func(i int) cache.Slot {
		_, o, size := r.cat.Locate(i)
		return cache.Slot{Shard: shard, Index: i - first, Off: o, Size: size, Sum: r.cat.SampleSum(i)}
	}
	type run struct {
		lo, hi      int64
		first, last int // samples [first, last]
	}
	var runs []run
	var buf []byte
	pi := 0
	for ; i < first+count; i++ {
		sl := slot(i)
		if sl.Off >= hi {
			break
		}
		for pi < len(pieces) && pieces[pi].off+int64(len(pieces[pi].buf)) <= sl.Off {
			pi++
		}
		if pi == len(pieces) {
			break
		}
		if pieces[pi].off >= sl.Off+sl.Size {
			continue // no piece wants this sample
		}
		if sl.Size > maxDiskSample {
			a, z := max(sl.Off, lo), min(sl.Off+sl.Size, hi)
			b, err := r.fetch.ReadRange(ctx, shard, a, z-a)
			if err != nil {
				return err
			}
			copyIn(b, a)
			continue
		}
		p := pieces[pi]
		if p.off == sl.Off && int64(len(p.buf)) == sl.Size {
			if r.disk.Get(sl, p.buf) {
				continue
			}
		} else {
			if int64(cap(buf)) < sl.Size {
				buf = make([]byte, sl.Size)
			}
			if r.disk.Get(sl, buf[:sl.Size]) {
				copyIn(buf[:sl.Size], sl.Off)
				continue
			}
		}
		if k := len(runs) - 1; k >= 0 && sl.Off-runs[k].hi <= r.cfg.MergeGap {
			runs[k].hi, runs[k].last = sl.Off+sl.Size, i
		} else {
			runs = append(runs, run{sl.Off, sl.Off + sl.Size, i, i})
		}
	}
	for _, rn := range runs {
		b, err := r.fetch.ReadRange(ctx, shard, rn.lo, rn.hi-rn.lo)
		if err != nil {
			return err
		}
		copyIn(b, rn.lo)
		for i := rn.first; i <= rn.last; i++ {
			// A sample between two wanted ones may already be held.
			if sl := slot(i); sl.Size <= maxDiskSample && !r.disk.Has(sl) {
				r.disk.Put(sl, b[sl.Off-rn.lo:sl.Off-rn.lo+sl.Size])
			}
		}
	}
	return nil
}

// Warm fetches the given samples into the disk tier, skipping those it
// already holds: exactly what a set of ranks will read, before they read it.
// Samples are grouped by shard and fetched as ranges of up to MaxGET bytes,
// PrefetchGET at a time. progress, if set, receives the sample bytes handled.
func (r *Reader) Warm(ctx context.Context, samples []int32, progress func(bytes int64)) error {
	if r.disk == nil {
		return errors.New("warm needs a disk tier: pass --cache-dir")
	}
	type want struct {
		off, size int64
	}
	byShard := map[int][]want{}
	seen := map[int32]bool{}
	for _, s := range samples {
		if seen[s] {
			continue
		}
		seen[s] = true
		sl := r.diskSlot(int(s))
		shard, off, size := sl.Shard, sl.Off, sl.Size
		if size > maxDiskSample || r.disk.Has(sl) {
			if progress != nil {
				progress(size)
			}
			continue
		}
		byShard[shard] = append(byShard[shard], want{off, size})
	}
	shards := make([]int, 0, len(byShard))
	for sh := range byShard {
		shards = append(shards, sh)
	}
	slices.Sort(shards)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(r.cfg.PrefetchGET)
	for _, sh := range shards {
		ws := byShard[sh]
		slices.SortFunc(ws, func(a, b want) int { return cmp.Compare(a.off, b.off) })
		for i := 0; i < len(ws); {
			lo, hi, j := ws[i].off, ws[i].off+ws[i].size, i+1
			// Only back-to-back samples merge: warm fetches exactly what the ranks read.
			for j < len(ws) && ws[j].off == hi && ws[j].off+ws[j].size-lo <= r.cfg.MaxGET {
				hi = max(hi, ws[j].off+ws[j].size)
				j++
			}
			var bytes int64
			for _, w := range ws[i:j] {
				bytes += w.size
			}
			g.Go(func() error {
				if _, err := r.readRange(gctx, sh, lo, hi-lo); err != nil {
					return fmt.Errorf("warm shard %d: %w", sh, err)
				}
				if progress != nil {
					progress(bytes)
				}
				return nil
			})
			i = j
		}
	}
	return g.Wait()
}

// diskSlot is where sample s lives in the disk tier.
func (r *Reader) diskSlot(s int) cache.Slot {
	shard, off, size := r.cat.Locate(s)
	first, _ := r.cat.ShardSamples(shard)
	return cache.Slot{Shard: shard, Index: s - first, Off: off, Size: size, Sum: r.cat.SampleSum(s)}
}

// serveFromDisk fills p with the whole of sample s straight from the disk
// tier, verified, when p is the whole sample, the tier holds it and the
// memory cache does not: one copy out of the kernel's page cache, where
// prefetch has asked the kernel to bring it (Disk.Advise), instead of a
// copy into a cached chunk and another out of it.
func (r *Reader) serveFromDisk(s int, p []byte, off int64) bool {
	if r.disk == nil || off != 0 {
		return false
	}
	size := r.sampleSize(s)
	if int64(len(p)) != size || size > maxDiskSample || size > r.cfg.ChunkSize || r.cache.Contains(cache.Key{Sample: int32(s)}) {
		return false
	}
	return r.disk.Serve(r.diskSlot(s), p)
}
