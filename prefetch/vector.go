package prefetch

import (
	"context"
	"sync"
)

// VectorFetcher is a Fetcher that reads a range straight into several
// buffers, which its bytes fill in turn (see dataset.ReadRangeV).
type VectorFetcher interface {
	ReadRangeV(ctx context.Context, shard int, off int64, bufs [][]byte) error
}

// gapPool holds the buffers that take the bytes between a GET's pieces
// (at most MergeGap each), read only to be dropped.
var gapPool = sync.Pool{New: func() any { return new([]byte) }}

// readPieces fills pieces (sorted, not overlapping) with one GET from the
// first's offset to the last's end: with a VectorFetcher the response lands
// in the pieces' own buffers, the bytes between them in pooled scratch.
func (r *Reader) readPieces(ctx context.Context, shard int, pieces []piece) error {
	a := pieces[0].off
	last := pieces[len(pieces)-1]
	z := last.off + int64(len(last.buf))
	vf, ok := r.fetch.(VectorFetcher)
	if !ok {
		b, err := r.fetch.ReadRange(ctx, shard, a, z-a)
		if err != nil {
			return err
		}
		for _, p := range pieces {
			copy(p.buf, b[p.off-a:])
		}
		return nil
	}
	bufs := make([][]byte, 0, 2*len(pieces))
	var gaps []*[]byte
	defer func() {
		for _, g := range gaps {
			gapPool.Put(g)
		}
	}()
	pos := a
	for _, p := range pieces {
		if gap := p.off - pos; gap > 0 {
			g := gapPool.Get().(*[]byte)
			if int64(cap(*g)) < gap {
				*g = make([]byte, max(gap, r.cfg.MergeGap))
			}
			gaps = append(gaps, g)
			bufs = append(bufs, (*g)[:gap])
		}
		bufs = append(bufs, p.buf)
		pos = p.off + int64(len(p.buf))
	}
	return vf.ReadRangeV(ctx, shard, a, bufs)
}
