package prefetch

import (
	"context"
	"sort"

	"github.com/shardfs/shardfs/cache"
	"github.com/shardfs/shardfs/erasure"
)

// maxDiskSample: larger samples bypass the disk tier, so a chunk read never
// has to read and verify a huge sample from disk.
const maxDiskSample = 16 << 20

// piece is a destination for the shard bytes [off, off+len(buf)).
// joinPrev: the bytes between the piece before and this one may be read
// in the same GET and dropped, however many (a span's ride, see schedule).
type piece struct {
	off      int64
	buf      []byte
	joinPrev bool
}

// source is how the reader gets verified shard bytes: a Fetcher that can
// also fill several pieces of a shard that need not touch (readPieces). It
// is either the stores' Fetcher as given (direct) or a DiskTier wrapping it.
type source interface {
	Fetcher
	// readPieces fills each piece (sorted by offset, not overlapping) with
	// the verified bytes of shard at its offset.
	readPieces(ctx context.Context, shard int, pieces []piece) error
}

// direct reads pieces from the Fetcher with one GET per run of pieces at
// most mergeGap apart: a span's pieces are what it claimed, and a sample
// between them that it did not claim (fetched on demand meanwhile) must not
// be read twice, except as the few bytes of a merged gap.
type direct struct {
	Fetcher
	mergeGap int64
	heal     func(*erasure.HealNeeded) // Config.Heal; nil: dropped
}

// served is a Fetcher's err as the reader sees it: a HealNeeded came with
// every byte, so it is handed to heal and the read succeeded.
func (d direct) served(err error) error {
	if h := erasure.Heal(err); h != nil {
		if d.heal != nil {
			d.heal(h)
		}
		return nil
	}
	return err
}

// ReadRange is the Fetcher's, with its HealNeeded handed on (served).
func (d direct) ReadRange(ctx context.Context, shard int, off, n int64) ([]byte, error) {
	b, err := d.Fetcher.ReadRange(ctx, shard, off, n)
	if err = d.served(err); err != nil {
		return nil, err
	}
	return b, nil
}

// ReadRangeV is the Fetcher's, with its HealNeeded handed on (served).
func (d direct) ReadRangeV(ctx context.Context, shard int, off int64, bufs [][]byte) error {
	return d.served(d.Fetcher.ReadRangeV(ctx, shard, off, bufs))
}

func (d direct) readPieces(ctx context.Context, shard int, pieces []piece) error {
	for i := 0; i < len(pieces); {
		z := pieces[i].off + int64(len(pieces[i].buf))
		j := i + 1
		for ; j < len(pieces) && (pieces[j].off-z <= d.mergeGap || pieces[j].joinPrev); j++ {
			z = pieces[j].off + int64(len(pieces[j].buf))
		}
		if err := readRun(ctx, d, shard, pieces[i:j], d.mergeGap); err != nil {
			return err
		}
		i = j
	}
	return nil
}

// DiskTier is a Fetcher in front of another Fetcher that keeps whole,
// verified samples on local disk (cache.Disk): it serves the samples it
// holds from disk and fetches the rest from next, storing what it fetched.
// It wraps next as restic's cache backend wraps a backend, so the reader
// sees one Fetcher whether or not the tier is there. A shard whose samples
// cannot all be looked up (ReadCatalog.Complete is false) passes straight to
// next.
type DiskTier struct {
	next direct // the wrapped Fetcher, and how it reads pieces
	disk *cache.Disk
	cat  ReadCatalog
}

// NewDiskTier returns the tier disk in front of next. Missing samples at
// most mergeGap apart are fetched from next as one range.
func NewDiskTier(next Fetcher, disk *cache.Disk, cat ReadCatalog, mergeGap int64) *DiskTier {
	return &DiskTier{next: direct{Fetcher: next, mergeGap: mergeGap}, disk: disk, cat: cat}
}

// Unwrap returns the Fetcher the tier is in front of.
func (t *DiskTier) Unwrap() Fetcher { return t.next.Fetcher }

// ReadRange returns the verified bytes [off, off+n) of shard.
func (t *DiskTier) ReadRange(ctx context.Context, shard int, off, n int64) ([]byte, error) {
	out := make([]byte, n)
	return out, t.readPieces(ctx, shard, []piece{{off: off, buf: out}})
}

// ReadRangeV fills bufs in turn with the verified bytes of shard from off.
func (t *DiskTier) ReadRangeV(ctx context.Context, shard int, off int64, bufs [][]byte) error {
	pieces := make([]piece, 0, len(bufs))
	for _, b := range bufs {
		if len(b) > 0 {
			pieces = append(pieces, piece{off: off, buf: b})
			off += int64(len(b))
		}
	}
	return t.readPieces(ctx, shard, pieces)
}

// slot is where sample i of shard lies in the tier; first is the shard's
// first sample.
func (t *DiskTier) slot(shard, first, i int) cache.Slot {
	_, o, size := t.cat.Locate(i)
	return cache.Slot{Shard: shard, Index: i - first, Off: o, Size: size, Sum: t.cat.SampleSum(i)}
}

// sampleSlot is where sample s lies in the tier.
func (t *DiskTier) sampleSlot(s int) cache.Slot {
	shard, off, size := t.cat.Locate(s)
	first, _ := t.cat.ShardSamples(shard)
	return cache.Slot{Shard: shard, Index: s - first, Off: off, Size: size, Sum: t.cat.SampleSum(s)}
}

// advise asks the kernel to bring sample s into its page cache, if the tier
// holds it, and reports whether it does.
func (t *DiskTier) advise(s int) bool { return t.disk.Advise(t.sampleSlot(s)) }

// serve fills p, exactly the size of sample s, from the tier, verified.
func (t *DiskTier) serve(s int, p []byte) bool { return t.disk.Serve(t.sampleSlot(s), p) }

// readPieces fills each piece with the verified bytes of shard at its
// offset: from the disk where it holds whole samples, from next for the
// rest, which then go to the disk. A piece that is exactly one sample is
// read from disk straight into its buffer. Missing samples at most mergeGap
// apart are fetched as one range; samples no piece overlaps are not read at
// all unless they lie in such a gap.
func (t *DiskTier) readPieces(ctx context.Context, shard int, pieces []piece) error {
	if len(pieces) == 0 {
		return nil
	}
	if !t.cat.Complete(shard) {
		return t.next.readPieces(ctx, shard, pieces)
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
	first, count := t.cat.ShardSamples(shard)
	i := first + sort.Search(count, func(i int) bool {
		_, o, size := t.cat.Locate(first + i)
		return o+size > lo
	})
	type run struct {
		lo, hi      int64
		first, last int // samples [first, last]
	}
	var runs []run
	var buf []byte
	pi := 0
	for ; i < first+count; i++ {
		sl := t.slot(shard, first, i)
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
			b, err := t.next.ReadRange(ctx, shard, a, z-a)
			if err != nil {
				return err
			}
			copyIn(b, a)
			continue
		}
		p := pieces[pi]
		if p.off == sl.Off && int64(len(p.buf)) == sl.Size {
			if t.disk.Get(sl, p.buf) {
				continue
			}
		} else {
			if int64(cap(buf)) < sl.Size {
				buf = make([]byte, sl.Size)
			}
			if t.disk.Get(sl, buf[:sl.Size]) {
				copyIn(buf[:sl.Size], sl.Off)
				continue
			}
		}
		if k := len(runs) - 1; k >= 0 && sl.Off-runs[k].hi <= t.next.mergeGap {
			runs[k].hi, runs[k].last = sl.Off+sl.Size, i
		} else {
			runs = append(runs, run{sl.Off, sl.Off + sl.Size, i, i})
		}
	}
	for _, rn := range runs {
		b, err := t.next.ReadRange(ctx, shard, rn.lo, rn.hi-rn.lo)
		if err != nil {
			return err
		}
		copyIn(b, rn.lo)
		for i := rn.first; i <= rn.last; i++ {
			// A sample between two wanted ones may already be held.
			if sl := t.slot(shard, first, i); sl.Size <= maxDiskSample && !t.disk.Has(sl) {
				t.disk.Put(sl, b[sl.Off-rn.lo:sl.Off-rn.lo+sl.Size])
			}
		}
	}
	return nil
}
