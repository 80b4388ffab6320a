package prefetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/shardfs/shardfs/cache"
	"github.com/shardfs/shardfs/metrics"
)

// chunkRange is where chunk c of sample s lives: shard, offset in the shard, length.
func (r *Reader) chunkRange(k cache.Key) (shard int, off, n int64) {
	shard, soff, size := r.cat.Locate(int(k.Sample))
	start := int64(k.Chunk) * r.cfg.ChunkSize
	return shard, soff + start, min(r.cfg.ChunkSize, size-start)
}

// fetchChunk is a demand read of one chunk.
func (r *Reader) fetchChunk(k cache.Key) func(context.Context) ([]byte, error) {
	return func(context.Context) ([]byte, error) {
		// The fetch may serve other waiters: it is bounded by its own
		// timeout, not by the first caller's request.
		ctx, cancel := context.WithTimeout(r.ctx, r.cfg.ReadTimeout)
		defer cancel()
		if err := r.demand.Acquire(ctx, 1); err != nil {
			return nil, err
		}
		defer r.demand.Release(1)
		shard, off, n := r.chunkRange(k)
		if n < 0 {
			return nil, errUnlocated(int(k.Sample))
		}
		start := time.Now()
		// Into a buffer the cache may reuse once the chunk is evicted:
		// every write into it has ended when readPieces returns (a hedged
		// read's loser writes only its own buffer).
		b := r.cache.Alloc(int(n))
		err := r.src.readPieces(ctx, shard, []piece{{off: off, buf: b}})
		r.observeLatency(time.Since(start))
		if err != nil {
			r.cache.Free(b)
			return nil, err
		}
		return b, nil
	}
}

// errUnlocated: the geometry could not say where a sample lies (its size is
// negative: a lazily loaded shard index that could not be fetched).
func errUnlocated(s int) error {
	return fmt.Errorf("sample %d: its shard's index could not be fetched", s)
}

// readSample copies sample s's bytes [off, off+len(p)) into p through the
// cache. It returns the time spent waiting on the backend, if any. Chunks
// already cached are copied out directly; only a miss pays for a context
// bounded by deadline (the read's start plus ReadTimeout, see boundRead):
// on a warm epoch that timer per read() was 4% of the daemon's CPU under fio.
func (r *Reader) readSample(ctx context.Context, deadline time.Time, s int, p []byte, off int64) (time.Duration, error) {
	var waited time.Duration
	var bounded context.Context
	for len(p) > 0 {
		k := cache.Key{Sample: int64(s), Chunk: int32(off / r.cfg.ChunkSize)}
		h, ok := r.cache.Lookup(k)
		if ok {
			r.m.CacheHits.Add(1)
		} else {
			if bounded == nil {
				var cancel context.CancelFunc
				bounded, cancel = context.WithDeadline(ctx, deadline)
				defer cancel()
			}
			var err error
			if h, waited, err = r.fetchSample(bounded, k, waited); err != nil {
				return waited, err
			}
		}
		v := h.Bytes
		rel := off - int64(k.Chunk)*r.cfg.ChunkSize
		if rel >= int64(len(v)) {
			r.cache.Release(h)
			return waited, fmt.Errorf("sample %d chunk %d: %d bytes, need offset %d", s, k.Chunk, len(v), rel)
		}
		n := copy(p, v[rel:])
		r.cache.Release(h)
		p, off = p[n:], off+int64(n)
	}
	return waited, nil
}

// fetchSample gets chunk k through the cache on a miss: waiting on a fetch in
// flight, or fetching it on demand. It adds the time spent to waited.
func (r *Reader) fetchSample(ctx context.Context, k cache.Key, waited time.Duration) (cache.Held, time.Duration, error) {
	start := time.Now()
	h, res, err := r.cache.Get(ctx, k, r.fetchChunk(k))
	if err != nil && res == cache.Waited && ctx.Err() == nil {
		// The prefetch this read waited on failed (a timeout, a store that
		// went down): try once more on demand, with the demand path's own
		// degraded reads.
		h, res, err = r.cache.Get(ctx, k, r.fetchChunk(k))
	}
	if res == cache.Hit {
		r.m.CacheHits.Add(1)
	} else {
		r.m.CacheMisses.Add(1)
		waited += time.Since(start)
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no verified bytes within the %v read timeout: %w", r.cfg.ReadTimeout, err)
		}
		return cache.Held{}, waited, err
	}
	return h, waited, nil
}

// boundRead is when one read() started now must end: ReadTimeout from its
// start, however many fetches it waits on. A read that would wait longer
// fails instead.
func (r *Reader) boundRead() time.Time {
	return time.Now().Add(r.cfg.ReadTimeout)
}

// ReadSample serves the samples/ view: sample s's bytes at off. No prefetch.
func (r *Reader) ReadSample(ctx context.Context, s int, p []byte, off int64) (int, error) {
	deadline := r.boundRead()
	_, _, size := r.cat.Locate(s)
	if size < 0 {
		return 0, errUnlocated(s)
	}
	if off >= size {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), size-off)]
	if r.serveFromDisk(s, p, off) {
		r.account(len(p), 0, r.samplesView)
		return len(p), nil
	}
	waited, err := r.readSample(ctx, deadline, s, p, off)
	r.account(len(p), waited, r.samplesView)
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// account counts a read of n bytes by a rank (r.samplesView: of samples/)
// that waited on the data path.
func (r *Reader) account(n int, waited time.Duration, rank *metrics.RankCounters) {
	r.m.Reads.Add(1)
	r.m.BytesServed.Add(int64(n))
	r.served.Add(int64(n))
	rank.ReadWait(waited)
	if waited > 0 {
		r.m.Stall(waited)
	}
}

func (r *Reader) sampleSize(s int) int64 {
	_, _, size := r.cat.Locate(s)
	return size
}
