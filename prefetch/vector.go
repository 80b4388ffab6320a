package prefetch

import (
	"context"
	"sync"
)

// gapPool holds the buffers that take the bytes between a GET's pieces
// (at most MergeGap each, or a ride's RideGap), read only to be dropped.
var gapPool = sync.Pool{New: func() any { return new([]byte) }}

// readRun fills pieces (sorted, not overlapping) with one GET from the
// first's offset to the last's end: the response lands in the pieces' own
// buffers, the bytes between them in pooled scratch of at least mergeGap.
func readRun(ctx context.Context, f Fetcher, shard int, pieces []piece, mergeGap int64) error {
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
				*g = make([]byte, max(gap, mergeGap))
			}
			gaps = append(gaps, g)
			bufs = append(bufs, (*g)[:gap])
		}
		bufs = append(bufs, p.buf)
		pos = p.off + int64(len(p.buf))
	}
	return f.ReadRangeV(ctx, shard, a, bufs)
}
