package prefetch

import (
	"context"
	"sync"
)

// gapPool holds the buffers that take the bytes between a GET's pieces
// (at most MergeGap each), read only to be dropped.
var gapPool = sync.Pool{New: func() any { return new([]byte) }}

// readPieces fills pieces (sorted, not overlapping) with one GET from the
// first's offset to the last's end: the response lands in the pieces' own
// buffers, the bytes between them in pooled scratch.
func (r *Reader) readPieces(ctx context.Context, shard int, pieces []piece) error {
	a := pieces[0].off
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
	return r.fetch.ReadRangeV(ctx, shard, a, bufs)
}
