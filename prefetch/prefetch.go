// Package prefetch owns the read path of the mount below the file system:
// it turns a virtual file's extents into verified bytes through the cache,
// and, because it knows the exact order of every open rank-epoch, it fetches
// ahead of the readers — exactly the chunks they will read next, coalesced
// into large ranged GETs — within a memory budget.
//
// Each open rank-epoch is a stream. Every open file handle on it has a
// position (a member index); the stream keeps lead bytes fetched or in
// flight past the lowest position, so several DataLoader workers reading
// batch b, b+1, ... at once are all covered. The lead is
// rate × (latency + margin), both measured, clamped to [MinLead, Budget].
// Demand misses have their own GET slots, so prefetch never starves the
// bytes a reader is waiting for.
package prefetch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/shardfs/shardfs/cache"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/metrics"
)

// Fetcher reads verified byte ranges of shards.
type Fetcher interface {
	ReadRange(ctx context.Context, shard int, off, n int64) ([]byte, error)
}

// Config tunes the reader. Zero fields take the defaults of DefaultConfig.
type Config struct {
	ChunkSize   int64         // cache granularity within a sample
	Budget      int64         // most bytes ready or in flight ahead of the slowest reader (the lead's cap)
	InFlight    int64         // most bytes of prefetch GETs in flight at once (outside the cache)
	MinLead     int64         // lead kept even before rates are measured
	Margin      time.Duration // added to the measured latency
	PrefetchGET int           // concurrent prefetch GETs
	DemandGET   int           // concurrent demand GETs
	MaxGET      int64         // largest coalesced GET
	MergeGap    int64         // merge ranges on a shard this close
	ReadTimeout time.Duration // bound on one backend read
	Disabled    bool          // no prefetch: every miss is a demand read
	IdleAfter   time.Duration // a rank-epoch without readers this long is dropped
	// Disk, if set, is the persistent tier below the memory cache: every
	// fetch looks there first and stores what it fetched. The geometry
	// given to New must then implement DiskIndex.
	Disk *cache.Disk
}

// DiskIndex locates samples in their shards for the disk tier.
type DiskIndex interface {
	// ShardSamples is the range [first, first+n) of sample indexes in shard.
	ShardSamples(shard int) (first, n int)
	// SampleSum is sample i's checksum written at ingest.
	SampleSum(i int) uint32
}

// Partial is a geometry that may know only some samples of a shard (a
// format-2 dataset whose rank holds just its own rows): bridging between
// samples, and the disk tier, which walk every sample of a shard, use a
// shard only when it is Complete.
type Partial interface {
	Complete(shard int) bool
}

// complete reports whether every sample of shard can be looked up.
func (r *Reader) complete(shard int) bool {
	p, ok := r.geo.(Partial)
	return !ok || p.Complete(shard)
}

// maxDiskSample: larger samples bypass the disk tier, so a chunk read never
// has to read and verify a huge sample from disk.
const maxDiskSample = 16 << 20

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{ChunkSize: 1 << 20, Budget: 512 << 20, InFlight: 64 << 20, MinLead: 64 << 20, Margin: 2 * time.Second,
		PrefetchGET: 64, DemandGET: 32, MaxGET: 8 << 20, MergeGap: 64 << 10, ReadTimeout: 30 * time.Second}
}

func (c *Config) fill() {
	d := DefaultConfig()
	for _, f := range []struct{ v, def *int64 }{{&c.ChunkSize, &d.ChunkSize}, {&c.Budget, &d.Budget}, {&c.InFlight, &d.InFlight}, {&c.MinLead, &d.MinLead}, {&c.MaxGET, &d.MaxGET}, {&c.MergeGap, &d.MergeGap}} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	if c.Margin <= 0 {
		c.Margin = d.Margin
	}
	if c.PrefetchGET <= 0 {
		c.PrefetchGET = d.PrefetchGET
	}
	if c.DemandGET <= 0 {
		c.DemandGET = d.DemandGET
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = d.ReadTimeout
	}
	if c.IdleAfter <= 0 {
		c.IdleAfter = 5 * time.Second
	}
	c.MinLead = min(c.MinLead, c.Budget)
}

// Reader serves virtual files. It is safe for concurrent use.
type Reader struct {
	fetch Fetcher
	geo   layout.Geometry
	cache *cache.Cache
	m     *metrics.Metrics
	cfg   Config
	log   *slog.Logger

	disk     *cache.Disk
	didx     DiskIndex
	demand   chan struct{}       // demand GET slots
	prefGets chan struct{}       // prefetch GET slots
	inflight *semaphore.Weighted // prefetch bytes in flight

	ctx    context.Context // background work; cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	live atomic.Pointer[[]*stream] // the streams, for rank

	mu      sync.Mutex // guards streams and the estimates below
	streams map[*layout.Members]*stream
	rate    float64 // bytes/s served, EWMA
	latency float64 // seconds per GET, EWMA
}

// New returns a reader. Close stops its background work.
func New(fetch Fetcher, geo layout.Geometry, c *cache.Cache, m *metrics.Metrics, cfg Config, log *slog.Logger) *Reader {
	cfg.fill()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Reader{fetch: fetch, geo: geo, cache: c, m: m, cfg: cfg, log: log,
		demand: make(chan struct{}, cfg.DemandGET), prefGets: make(chan struct{}, cfg.PrefetchGET),
		inflight: semaphore.NewWeighted(max(cfg.InFlight, cfg.MaxGET)), ctx: ctx, cancel: cancel, streams: map[*layout.Members]*stream{}}
	r.didx, _ = geo.(DiskIndex)
	if cfg.Disk != nil && r.didx != nil {
		r.disk = cfg.Disk
	}
	r.publishLocked()
	c.SetRanker(r.rank)
	r.wg.Add(1)
	go r.measure()
	return r
}

// Close stops prefetching and waits for background work.
func (r *Reader) Close() {
	r.cancel()
	r.wg.Wait()
}

// measure updates the consumption-rate estimate once a second.
func (r *Reader) measure() {
	defer r.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last, lastT := r.m.BytesServed.Load(), time.Now()
	for {
		select {
		case <-r.ctx.Done():
			return
		case now := <-t.C:
			served := r.m.BytesServed.Load()
			inst := float64(served-last) / now.Sub(lastT).Seconds()
			last, lastT = served, now
			r.mu.Lock()
			r.rate = 0.5*r.rate + 0.5*inst
			r.mu.Unlock()
		}
	}
}

func (r *Reader) observeLatency(d time.Duration) {
	r.mu.Lock()
	if r.latency == 0 {
		r.latency = d.Seconds()
	} else {
		r.latency = 0.8*r.latency + 0.2*d.Seconds()
	}
	r.mu.Unlock()
}

// lead is the bytes to keep ahead of the slowest reader.
func (r *Reader) lead() int64 {
	r.mu.Lock()
	rate, lat := r.rate, r.latency
	r.mu.Unlock()
	want := rate * (lat + r.cfg.Margin.Seconds())
	if math.IsNaN(want) {
		want = 0
	}
	return min(r.cfg.Budget, max(r.cfg.MinLead, int64(want)))
}

// chunkRange is where chunk c of sample s lives: shard, offset in the shard, length.
func (r *Reader) chunkRange(k cache.Key) (shard int, off, n int64) {
	shard, soff, size := r.geo.Locate(int(k.Sample))
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
		select {
		case r.demand <- struct{}{}:
			defer func() { <-r.demand }()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		shard, off, n := r.chunkRange(k)
		if n < 0 {
			return nil, errUnlocated(int(k.Sample))
		}
		start := time.Now()
		b, err := r.readRange(ctx, shard, off, n)
		r.observeLatency(time.Since(start))
		return b, err
	}
}

// errUnlocated: the geometry could not say where a sample lies (its size is
// negative: a lazily loaded shard index that could not be fetched).
func errUnlocated(s int) error {
	return fmt.Errorf("sample %d: its shard's index could not be fetched", s)
}

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
	if r.disk == nil || !r.complete(shard) {
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
	first, count := r.didx.ShardSamples(shard)
	i := first + sort.Search(count, func(i int) bool {
		_, o, size := r.geo.Locate(first + i)
		return o+size > lo
	})
	slot := func(i int) cache.Slot {
		_, o, size := r.geo.Locate(i)
		return cache.Slot{Shard: shard, Index: i - first, Off: o, Size: size, Sum: r.didx.SampleSum(i)}
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

// readSample copies sample s's bytes [off, off+len(p)) into p through the
// cache. It returns the time spent waiting on the backend, if any. Chunks
// already cached are copied out directly; only a miss pays for a context
// bounded by deadline (the read's start plus ReadTimeout, see boundRead):
// on a warm epoch that timer per read() was 4% of the daemon's CPU under fio.
func (r *Reader) readSample(ctx context.Context, deadline time.Time, s int, p []byte, off int64) (time.Duration, error) {
	var waited time.Duration
	var bounded context.Context
	for len(p) > 0 {
		k := cache.Key{Sample: int32(s), Chunk: int32(off / r.cfg.ChunkSize)}
		v, ok := r.cache.Lookup(k)
		if ok {
			r.m.CacheHits.Add(1)
		} else {
			if bounded == nil {
				var cancel context.CancelFunc
				bounded, cancel = context.WithDeadline(ctx, deadline)
				defer cancel()
			}
			var err error
			if v, waited, err = r.fetchSample(bounded, k, waited); err != nil {
				return waited, err
			}
		}
		rel := off - int64(k.Chunk)*r.cfg.ChunkSize
		if rel >= int64(len(v)) {
			return waited, fmt.Errorf("sample %d chunk %d: %d bytes, need offset %d", s, k.Chunk, len(v), rel)
		}
		n := copy(p, v[rel:])
		p, off = p[n:], off+int64(n)
	}
	return waited, nil
}

// fetchSample gets chunk k through the cache on a miss: waiting on a fetch in
// flight, or fetching it on demand. It adds the time spent to waited.
func (r *Reader) fetchSample(ctx context.Context, k cache.Key, waited time.Duration) ([]byte, time.Duration, error) {
	start := time.Now()
	v, res, err := r.cache.Get(ctx, k, r.fetchChunk(k))
	if err != nil && res == cache.Waited && ctx.Err() == nil {
		// The prefetch this read waited on failed (a timeout, a store that
		// went down): try once more on demand, with the demand path's own
		// degraded reads.
		v, res, err = r.cache.Get(ctx, k, r.fetchChunk(k))
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
		return nil, waited, err
	}
	return v, waited, nil
}

// diskSlot is where sample s lives in the disk tier.
func (r *Reader) diskSlot(s int) cache.Slot {
	shard, off, size := r.geo.Locate(s)
	first, _ := r.didx.ShardSamples(shard)
	return cache.Slot{Shard: shard, Index: s - first, Off: off, Size: size, Sum: r.didx.SampleSum(s)}
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

// boundRead is when one read() started now must end: ReadTimeout from its
// start, however many fetches it waits on. A read that would wait longer
// fails instead.
func (r *Reader) boundRead() time.Time {
	return time.Now().Add(r.cfg.ReadTimeout)
}

// ReadSample serves the samples/ view: sample s's bytes at off. No prefetch.
func (r *Reader) ReadSample(ctx context.Context, s int, p []byte, off int64) (int, error) {
	deadline := r.boundRead()
	_, _, size := r.geo.Locate(s)
	if size < 0 {
		return 0, errUnlocated(s)
	}
	if off >= size {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), size-off)]
	if r.serveFromDisk(s, p, off) {
		r.account(len(p), 0)
		return len(p), nil
	}
	waited, err := r.readSample(ctx, deadline, s, p, off)
	r.account(len(p), waited)
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

func (r *Reader) account(n int, waited time.Duration) {
	r.m.Reads.Add(1)
	r.m.BytesServed.Add(int64(n))
	if waited > 0 {
		r.m.Stall(waited)
	}
}

var extentPool = sync.Pool{New: func() any { s := make([]layout.Extent, 0, 256); return &s }}

// Handle is one open virtual file of a rank-epoch.
type Handle struct {
	r  *Reader
	f  *layout.FileMap
	st *stream
}

// Open returns a handle on f that drives prefetch for f's rank-epoch.
func (r *Reader) Open(f *layout.FileMap) *Handle {
	h := &Handle{r: r, f: f}
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
			h.r.account(0, waited)
			return 0, err
		}
		if h.st != nil && e.Off+e.Len >= h.r.sampleSize(s) {
			h.st.markRead(int(e.Member))
			h.r.done(s)
		}
	}
	h.r.account(len(p), waited)
	if h.st != nil && lastMember >= 0 {
		h.st.advance(h, int(lastMember))
	}
	if short {
		return len(p), io.EOF
	}
	return len(p), nil
}

func (r *Reader) sampleSize(s int) int64 {
	_, _, size := r.geo.Locate(s)
	return size
}

// done tells the cache sample s was read to its end: the order needs it no more.
func (r *Reader) done(s int) {
	size := r.sampleSize(s)
	for c := int64(0); c*r.cfg.ChunkSize < max(size, 1); c++ {
		r.cache.Done(cache.Key{Sample: int32(s), Chunk: int32(c)})
	}
}

// stream prefetches one rank-epoch.
type stream struct {
	r *Reader
	m *layout.Members

	// Where each sample is read in this rank-epoch, for the cache's ranker:
	// first[s] is sample s's first member index (-1: none) and more holds
	// every member index of samples read more than once (re-weighted epochs).
	first []int32
	more  map[int32][]int32
	// readers is the sorted positions of the open handles (or, when none is
	// open, of the last one to close), for lock-free ranking.
	readers     atomic.Pointer[[]int]
	openHandles atomic.Int32
	// read has bit i set once member i was read to its end: its sample is
	// not needed there again, whichever reader position it lies after
	// (workers that take batches in stripes spread far apart, and the
	// batches they finished lie ahead of the slowest one).
	read []atomic.Uint64

	mu      sync.Mutex // guards the fields below
	handles map[*Handle]int
	sched   []uint64 // bit i: member i has been scheduled
	running bool
	wake    chan struct{}
}

func newStream(r *Reader, m *layout.Members) *stream {
	s := &stream{r: r, m: m, handles: map[*Handle]int{}, wake: make(chan struct{}, 1), sched: make([]uint64, (m.Len()+63)/64),
		read: make([]atomic.Uint64, (m.Len()+63)/64)}
	top := int32(-1)
	for i := 0; i < m.Len(); i++ {
		top = max(top, int32(m.Sample(i)))
	}
	s.first = make([]int32, top+1)
	for i := range s.first {
		s.first[i] = -1
	}
	for i := 0; i < m.Len(); i++ {
		smp := int32(m.Sample(i))
		switch f := s.first[smp]; {
		case f < 0:
			s.first[smp] = int32(i)
		default:
			if s.more == nil {
				s.more = map[int32][]int32{}
			}
			if len(s.more[smp]) == 0 {
				s.more[smp] = []int32{f}
			}
			s.more[smp] = append(s.more[smp], int32(i))
		}
	}
	empty := []int{}
	s.readers.Store(&empty)
	return s
}

// nextUse is how many bytes of this rank-epoch lie between sample smp's next
// read and the nearest reader before it, or NoUse. A member read to its end
// is not a next read, even where it lies ahead of a slower reader.
func (s *stream) nextUse(smp int32) int64 {
	ps := *s.readers.Load()
	if len(ps) == 0 || int(smp) >= len(s.first) || s.first[smp] < 0 {
		return cache.NoUse
	}
	m := int(s.first[smp])
	if m < ps[0] || s.wasRead(m) {
		m = -1
		for _, i := range s.more[smp] {
			if int(i) >= ps[0] && !s.wasRead(int(i)) {
				m = int(i)
				break
			}
		}
		if m < 0 {
			return cache.NoUse
		}
	}
	p := ps[sort.SearchInts(ps, m+1)-1]
	return s.m.Offset(m) - s.m.Offset(p)
}

func (s *stream) markRead(member int) {
	if member >= 0 && member < s.m.Len() {
		s.read[member/64].Or(1 << (member % 64))
	}
}

func (s *stream) wasRead(member int) bool {
	return s.read[member/64].Load()&(1<<(member%64)) != 0
}

// rank is the cache's Ranker: the nearest next use over every open stream.
func (r *Reader) rank(k cache.Key) int64 {
	best := cache.NoUse
	for _, s := range *r.live.Load() {
		if d := s.nextUse(k.Sample); d != cache.NoUse {
			best = min(best, d+int64(k.Chunk)*r.cfg.ChunkSize)
		}
	}
	return best
}

// publishLocked makes the reader's stream set visible to rank. Caller holds r.mu.
func (r *Reader) publishLocked() {
	all := make([]*stream, 0, len(r.streams))
	for _, s := range r.streams {
		all = append(all, s)
	}
	r.live.Store(&all)
}

// publishReaders stores the sorted positions of the open handles. Caller holds s.mu.
func (s *stream) publishReaders() {
	if len(s.handles) == 0 {
		return // keep the last positions: a worker between two batch files still reads on
	}
	ps := make([]int, 0, len(s.handles))
	for _, pos := range s.handles {
		ps = append(ps, pos)
	}
	slices.Sort(ps)
	ps = slices.Compact(ps)
	s.readers.Store(&ps)
}

func (s *stream) open(h *Handle, pos int) {
	s.mu.Lock()
	s.handles[h] = pos
	s.openHandles.Add(1)
	s.publishReaders()
	start := !s.running && !s.r.cfg.Disabled
	s.running = s.running || start
	s.mu.Unlock()
	if start {
		s.r.wg.Add(1)
		go s.pump()
	}
	s.poke()
}

func (s *stream) close(h *Handle) {
	s.mu.Lock()
	if _, ok := s.handles[h]; ok {
		delete(s.handles, h)
		s.openHandles.Add(-1)
		s.publishReaders()
	}
	s.mu.Unlock()
}

func (s *stream) advance(h *Handle, member int) {
	s.mu.Lock()
	if pos, ok := s.handles[h]; ok && member > pos {
		s.handles[h] = member
		s.publishReaders()
	}
	s.mu.Unlock()
	s.poke()
}

func (s *stream) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// stopIfIdle marks the pump stopped if no handle is open, atomically with open.
func (s *stream) stopIfIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.handles) > 0 {
		return false
	}
	s.running = false
	return true
}

// positions is the sorted, distinct positions of the open handles.
func (s *stream) positions() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.handles) == 0 {
		return nil
	}
	return *s.readers.Load()
}

// activeStreams is how many rank-epochs have an open handle: they share the lead.
func (r *Reader) activeStreams() int {
	n := 0
	for _, s := range *r.live.Load() {
		if s.openHandles.Load() > 0 {
			n++
		}
	}
	return max(n, 1)
}

// target is a member to have ready and its distance ahead of its reader.
type target struct {
	member int
	dist   int64
}

// targets returns the members not yet scheduled that the readers at ps
// (sorted) will read within the lead, nearest first. Each reader is served
// up to the next reader's position; the lead is shared by water-filling, so
// every reader gets the same distance ahead of it (members already cached
// count, as they hold part of the budget).
func (s *stream) targets(ps []int, lead int64) []target {
	type seg struct {
		from, to int
		bytes    int64
	}
	segs := make([]seg, len(ps))
	for i, p := range ps {
		to := s.m.Len()
		if i+1 < len(ps) {
			to = ps[i+1]
		}
		segs[i] = seg{p, to, s.m.Offset(to) - s.m.Offset(p)}
	}
	// The level d with sum(min(bytes_i, d)) = lead.
	lens := make([]int64, len(segs))
	for i, sg := range segs {
		lens[i] = sg.bytes
	}
	slices.Sort(lens)
	d, left := int64(math.MaxInt64), lead
	for i, l := range lens {
		if rest := int64(len(lens) - i); l*rest >= left {
			d = left / rest
			break
		}
		left -= l
	}
	var out []target
	for _, sg := range segs {
		base := s.m.Offset(sg.from)
		for m := sg.from; m < sg.to && s.m.Offset(m)-base < d; m++ {
			if s.sched[m/64]&(1<<(m%64)) != 0 || s.wasRead(m) {
				continue // read already: on demand, or by a worker now further on
			}
			out = append(out, target{m, s.m.Offset(m) - base})
		}
	}
	slices.SortStableFunc(out, func(a, b target) int { return cmp.Compare(a.dist, b.dist) })
	return out
}

// pump schedules fetches ahead of the readers until the reader closes.
func (s *stream) pump() {
	defer s.r.wg.Done()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	idle := 0
	for {
		select {
		case <-s.r.ctx.Done():
			return
		case <-s.wake:
		case <-tick.C:
		}
		ps := s.positions()
		if ps == nil {
			// No reader for IdleAfter: drop the stream; the next open starts anew.
			if idle++; time.Duration(idle)*100*time.Millisecond >= s.r.cfg.IdleAfter && s.r.drop(s) {
				return
			}
			continue
		}
		idle = 0
		active := int64(s.r.activeStreams())
		lead := s.r.lead() / active
		ts := s.targets(ps, lead)
		if len(ts) > 0 {
			members := make([]int, len(ts))
			s.mu.Lock()
			for i, t := range ts {
				members[i] = t.member
				s.sched[t.member/64] |= 1 << (t.member % 64)
			}
			s.mu.Unlock()
			// One call for the round: its GETs coalesce across every target,
			// and are issued nearest first.
			if !s.schedule(members, s.r.cfg.Budget/active) {
				return
			}
		}
		ahead := int64(0)
		if len(ts) > 0 {
			ahead = ts[len(ts)-1].dist
		}
		s.r.m.PrefetchLead.Store(ahead)
		if rate := s.r.currentRate(); rate > 0 {
			s.r.m.SetLeadSeconds(float64(ahead) / rate)
		}
	}
}

func (r *Reader) currentRate() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rate
}

// span is a coalesced ranged read of one shard and the chunks it fills.
type span struct {
	shard    int
	off, end int64
	keys     []cache.Key
}

// schedule issues coalesced GETs for the chunks of the given members that
// are neither cached nor in flight, earliest member first. Two ranges of a
// shard are joined into one GET across the samples between them when those
// are at most MergeGap bytes, or when every one of them is cached, in flight
// or read by an open reader within horizon bytes (its next use, the cache's
// rank): then they are fetched too, and a window's shards stream in large
// GETs instead of one GET per sample. Each span's chunks
// are claimed (and their bytes reserved in the cache's budget) only when its
// GET is issued, so a reader never waits on a claim that is still queued
// behind other prefetches: it fetches on demand. It returns false when the
// reader is closing.
func (s *stream) schedule(members []int, horizon int64) bool {
	r := s.r
	type loc struct {
		k        cache.Key
		member   int
		shard    int
		off, end int64
	}
	var locs []loc
	for _, i := range members {
		smp := s.m.Sample(i)
		size := r.sampleSize(smp)
		if r.disk != nil && size <= maxDiskSample && size <= r.cfg.ChunkSize &&
			!r.cache.Contains(cache.Key{Sample: int32(smp)}) && r.disk.Advise(r.diskSlot(smp)) {
			continue // served from the tier through the page cache (serveFromDisk)
		}
		for c := int64(0); c*r.cfg.ChunkSize < size; c++ {
			k := cache.Key{Sample: int32(smp), Chunk: int32(c)}
			if r.cache.Contains(k) {
				continue
			}
			shard, off, n := r.chunkRange(k)
			locs = append(locs, loc{k, i, shard, off, off + n})
		}
	}
	slices.SortFunc(locs, func(a, b loc) int { return cmp.Or(cmp.Compare(a.shard, b.shard), cmp.Compare(a.off, b.off)) })
	type pending struct {
		span
		first int // earliest member the span serves
	}
	var spans []pending
	for _, l := range locs {
		if n := len(spans); n > 0 {
			last := &spans[n-1]
			if last.shard == l.shard && l.end-last.off <= r.cfg.MaxGET {
				if l.off < last.end { // the same sample twice in a re-weighted epoch
					continue
				}
				bridge, ok := r.bridge(l.shard, last.end, l.off, horizon)
				if l.off-last.end <= r.cfg.MergeGap || ok {
					last.end = l.end
					last.keys = append(append(last.keys, bridge...), l.k)
					last.first = min(last.first, l.member)
					continue
				}
			}
		}
		spans = append(spans, pending{span{shard: l.shard, off: l.off, end: l.end, keys: []cache.Key{l.k}}, l.member})
	}
	slices.SortStableFunc(spans, func(a, b pending) int { return cmp.Compare(a.first, b.first) })
	chunkLen := func(k cache.Key) int64 { _, _, n := r.chunkRange(k); return n }
	for _, sp := range spans {
		size := sp.end - sp.off
		if err := r.inflight.Acquire(r.ctx, size); err != nil {
			return false
		}
		select {
		case r.prefGets <- struct{}{}:
		case <-r.ctx.Done():
			r.inflight.Release(size)
			return false
		}
		sp.keys = r.cache.Claim(sp.keys, chunkLen)
		if len(sp.keys) == 0 { // all fetched on demand meanwhile
			<-r.prefGets
			r.inflight.Release(size)
			continue
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer func() { <-r.prefGets; r.inflight.Release(size) }()
			r.fetchSpan(sp.span)
		}()
	}
	return true
}

// bridge reports whether the samples of shard lying in [from, to) may join
// their neighbours' span: each is cached or in flight, or is one chunk whose
// next read is within horizon bytes. It returns the keys of the latter, to
// be claimed with the span. readInto never reads the former again: the
// span's GET splits around them when they are more than MergeGap long.
func (r *Reader) bridge(shard int, from, to, horizon int64) ([]cache.Key, bool) {
	if r.didx == nil || to-from > r.cfg.MaxGET || !r.complete(shard) {
		return nil, false
	}
	first, count := r.didx.ShardSamples(shard)
	i := first + sort.Search(count, func(i int) bool {
		_, o, size := r.geo.Locate(first + i)
		return o+size > from
	})
	var keys []cache.Key
	for ; i < first+count; i++ {
		_, o, size := r.geo.Locate(i)
		if o >= to {
			break
		}
		k := cache.Key{Sample: int32(i)}
		switch {
		case size > r.cfg.ChunkSize:
			return nil, false
		case r.cache.Contains(k):
		case r.rank(k) <= horizon:
			keys = append(keys, k)
		default:
			return nil, false
		}
	}
	return keys, true
}

// fetchSpan reads a span's claimed chunks, each into a buffer of its own,
// so a cached chunk never pins the rest of the span, and the disk tier
// reads a whole-sample chunk straight into its buffer.
func (r *Reader) fetchSpan(sp span) {
	ctx, cancel := context.WithTimeout(r.ctx, r.cfg.ReadTimeout)
	defer cancel()
	start := time.Now()
	pieces := make([]piece, len(sp.keys))
	var total int64
	for i, k := range sp.keys {
		_, off, n := r.chunkRange(k)
		if n < 0 {
			for _, k := range sp.keys {
				r.cache.Fail(k, errUnlocated(int(k.Sample)))
			}
			return
		}
		pieces[i] = piece{off, make([]byte, n)}
		total += n
	}
	// Keys were claimed in shard order; a repeated chunk was skipped.
	err := r.readInto(ctx, sp.shard, pieces)
	r.observeLatency(time.Since(start))
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			r.log.Debug("prefetch failed; readers will retry on demand", "shard", sp.shard, "err", err)
		}
		for _, k := range sp.keys {
			r.cache.Fail(k, err)
		}
		return
	}
	r.m.PrefetchBytes.Add(total)
	for i, k := range sp.keys {
		r.cache.Fill(k, pieces[i].buf)
	}
}
