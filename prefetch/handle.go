package prefetch

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/shardfs/shardfs/cache"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/metrics"
)

var extentPool = sync.Pool{New: func() any { s := make([]layout.Extent, 0, 256); return &s }}

// Handle is one open virtual file of a rank-epoch.
type Handle struct {
	r    *Reader
	f    *layout.FileMap
	st   *stream
	rank *metrics.RankCounters // of the rank whose file it reads
	// primer marks a handle Prime opened: no reader's, so it moves no
	// frontier; ended asks Prime's goroutine to close it.
	primer bool
	ended  chan struct{}
}

// Open returns a handle on f that drives prefetch for f's rank-epoch.
func (r *Reader) Open(f *layout.FileMap) *Handle { return r.open(f, false) }

func (r *Reader) open(f *layout.FileMap, primer bool) *Handle {
	rank := f.Members().Order().Params.Rank
	h := &Handle{r: r, f: f, rank: r.m.Rank(rank), primer: primer}
	if primer {
		h.ended = make(chan struct{}, 1)
	}
	if !primer {
		r.mu.Lock()
		r.endPrimesOfLocked(rank)
		r.mu.Unlock()
	}
	if f.Kind() == layout.IndexCSV {
		return h // no sample bytes: nothing to prefetch
	}
	first, _ := f.Range()
	// Under r.mu, so a stream being dropped for idleness is never handed out.
	r.mu.Lock()
	st := r.streams[f.Members()]
	if st == nil {
		st = newStream(r, f.Members())
		r.streams[f.Members()] = st
		r.publishLocked()
		r.m.PrefetchStreams.Add(1)
	}
	st.open(h, first)
	r.mu.Unlock()
	h.st = st
	return h
}

// Streams is the number of rank-epochs the reader keeps state for.
func (r *Reader) Streams() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.streams)
}

// drop forgets stream s if it is idle: its pump stops and its rank-epoch's
// order is no longer pinned. It reports whether s was dropped.
func (r *Reader) drop(s *stream) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !s.stopIfIdle() {
		return false
	}
	if r.streams[s.m] == s {
		delete(r.streams, s.m)
		r.publishLocked()
		r.m.PrefetchStreams.Add(-1)
		s.rank.LeadBytes.Store(0) // no reader: nothing is ahead of one (another epoch's stream of the rank sets it again at its next measure)
	}
	return true
}

// Close releases the handle.
func (h *Handle) Close() {
	if h.st != nil {
		h.st.close(h)
	}
}

// ReadAt fills p with the file's bytes at off. It returns fewer bytes only at
// the end of the file, with io.EOF.
func (h *Handle) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	deadline := h.r.boundRead()
	size := h.f.Size()
	if off >= size {
		return 0, io.EOF
	}
	short := int64(len(p)) > size-off
	p = p[:min(int64(len(p)), size-off)]
	ep := extentPool.Get().(*[]layout.Extent)
	exts := h.f.Extents((*ep)[:0], off, int64(len(p)))
	defer func() { *ep = exts[:0]; extentPool.Put(ep) }()
	var waited time.Duration
	var lastMember int32 = -1
	for _, e := range exts {
		dst := p[e.FileOff-off : e.FileOff-off+e.Len]
		if e.Member >= 0 {
			lastMember = e.Member
		}
		if e.Piece == layout.PieceLost {
			// The bytes before this extent are in p, verified: they are
			// given (io.ReaderAt: n < len(p) with the error), so a reader
			// gets a file up to its first lost member or row.
			h.r.account(0, waited, h.rank)
			return int(e.FileOff - off), fmt.Errorf("position %d of the rank-epoch: %w", e.Member, layout.ErrLost)
		}
		if e.Piece != layout.PieceSample {
			h.f.Render(e, dst)
			continue
		}
		s := h.f.Members().Sample(int(e.Member))
		if h.r.serveFromDisk(s, dst, e.Off) {
			if h.st != nil {
				h.st.markRead(int(e.Member))
				h.r.done(s)
			}
			continue
		}
		w, err := h.r.readSample(ctx, deadline, s, dst, e.Off)
		waited += w
		if err != nil {
			h.r.account(0, waited, h.rank)
			return 0, err
		}
		if h.st != nil && e.Off+e.Len >= h.r.sampleSize(s) {
			h.st.markRead(int(e.Member))
			h.r.done(s)
		}
	}
	h.r.account(len(p), waited, h.rank)
	if h.st != nil && lastMember >= 0 {
		h.st.advance(h, int(lastMember))
	}
	if short {
		return len(p), io.EOF
	}
	return len(p), nil
}

// done tells the cache sample s was read to its end: the order needs it no more.
func (r *Reader) done(s int) {
	size := r.sampleSize(s)
	for c := int64(0); c*r.cfg.ChunkSize < max(size, 1); c++ {
		r.cache.Done(cache.Key{Sample: int64(s), Chunk: int32(c)})
	}
}
