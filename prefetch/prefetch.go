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
	if cfg.Disk != nil {
		if didx, ok := geo.(DiskIndex); ok {
			r.disk, r.didx = cfg.Disk, didx
		}
	}
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
		start := time.Now()
		b, err := r.readRange(ctx, shard, off, n, nil)
		r.observeLatency(time.Since(start))
		return b, err
	}
}

// readRange returns the verified bytes [off, off+n) of shard: from the disk
// tier where it holds whole samples, from the stores for the rest, which
// then go to the disk tier. need, if not nil, says which samples the caller
// will use: the others in the range (the gaps a coalesced prefetch spans)
// are left zero unless they ride along in a GET anyway. Missing samples at
// most MergeGap apart are fetched as one range.
func (r *Reader) readRange(ctx context.Context, shard int, off, n int64, need func(sample int) bool) ([]byte, error) {
	if r.disk == nil {
		return r.fetch.ReadRange(ctx, shard, off, n)
	}
	first, count := r.didx.ShardSamples(shard)
	end := off + n
	lo := first + sort.Search(count, func(i int) bool {
		_, o, size := r.geo.Locate(first + i)
		return o+size > off
	})
	out := make([]byte, n)
	// copyIn copies the part of b (shard bytes from at) that falls in [off, end).
	copyIn := func(b []byte, at int64) {
		a, z := max(at, off), min(at+int64(len(b)), end)
		if a < z {
			copy(out[a-off:z-off], b[a-at:z-at])
		}
	}
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
	for i := lo; i < first+count; i++ {
		sl := slot(i)
		if sl.Off >= end {
			break
		}
		if sl.Size > maxDiskSample {
			a, z := max(sl.Off, off), min(sl.Off+sl.Size, end)
			b, err := r.fetch.ReadRange(ctx, shard, a, z-a)
			if err != nil {
				return nil, err
			}
			copyIn(b, a)
			continue
		}
		whole := sl.Off >= off && sl.Off+sl.Size <= end
		dst := out[max(0, sl.Off-off):]
		if !whole {
			if int64(cap(buf)) < sl.Size {
				buf = make([]byte, sl.Size)
			}
			dst = buf
		}
		if (need == nil || need(i)) && r.disk.Get(sl, dst[:sl.Size]) {
			if !whole {
				copyIn(dst[:sl.Size], sl.Off)
			}
			continue
		}
		if need != nil && !need(i) {
			continue
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
			return nil, err
		}
		copyIn(b, rn.lo)
		for i := rn.first; i <= rn.last; i++ {
			if sl := slot(i); sl.Size <= maxDiskSample {
				r.disk.Put(sl, b[sl.Off-rn.lo:sl.Off-rn.lo+sl.Size])
			}
		}
	}
	return out, nil
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
		shard, off, size := r.geo.Locate(int(s))
		first, _ := r.didx.ShardSamples(shard)
		if size > maxDiskSample || r.disk.Has(cache.Slot{Shard: shard, Index: int(s) - first, Off: off, Size: size}) {
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
				if _, err := r.readRange(gctx, sh, lo, hi-lo, nil); err != nil {
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
// cache. It returns the time spent waiting on the backend, if any.
// Callers bound ctx by ReadTimeout (see boundRead).
func (r *Reader) readSample(ctx context.Context, s int, p []byte, off int64) (time.Duration, error) {
	var waited time.Duration
	for len(p) > 0 {
		k := cache.Key{Sample: int32(s), Chunk: int32(off / r.cfg.ChunkSize)}
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
			return waited, err
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

// boundRead bounds one read() by ReadTimeout from its start, however many
// fetches it waits on: a read that would wait longer fails instead.
func (r *Reader) boundRead(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, r.cfg.ReadTimeout)
}

// ReadSample serves the samples/ view: sample s's bytes at off. No prefetch.
func (r *Reader) ReadSample(ctx context.Context, s int, p []byte, off int64) (int, error) {
	ctx, cancel := r.boundRead(ctx)
	defer cancel()
	_, _, size := r.geo.Locate(s)
	if off >= size {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), size-off)]
	waited, err := r.readSample(ctx, s, p, off)
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
	ctx, cancel := h.r.boundRead(ctx)
	defer cancel()
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
		w, err := h.r.readSample(ctx, s, dst, e.Off)
		waited += w
		if err != nil {
			h.r.account(0, waited)
			return 0, err
		}
		if h.st != nil && e.Off+e.Len >= h.r.sampleSize(s) {
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

	mu        sync.Mutex // guards the fields below
	handles   map[*Handle]int
	scheduled int // members before this index have been scheduled or passed
	running   bool
	wake      chan struct{}
}

func newStream(r *Reader, m *layout.Members) *stream {
	return &stream{r: r, m: m, handles: map[*Handle]int{}, wake: make(chan struct{}, 1)}
}

func (s *stream) open(h *Handle, pos int) {
	s.mu.Lock()
	s.handles[h] = pos
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
	delete(s.handles, h)
	s.mu.Unlock()
}

func (s *stream) advance(h *Handle, member int) {
	s.mu.Lock()
	if pos, ok := s.handles[h]; ok && member > pos {
		s.handles[h] = member
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

// low is the lowest position of an open handle, or -1 when none is open.
func (s *stream) low() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	low := -1
	for _, pos := range s.handles {
		if low < 0 || pos < low {
			low = pos
		}
	}
	return low
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
		low := s.low()
		if low < 0 {
			// No reader for IdleAfter: drop the stream; the next open starts anew.
			if idle++; time.Duration(idle)*100*time.Millisecond >= s.r.cfg.IdleAfter && s.r.drop(s) {
				return
			}
			continue
		}
		idle = 0
		s.mu.Lock()
		if s.scheduled < low {
			s.scheduled = low
		}
		next := s.scheduled
		s.mu.Unlock()
		lead := s.r.lead()
		base := s.m.Offset(low)
		for next < s.m.Len() && s.m.Offset(next)-base < lead {
			// Schedule a group of members of about MaxGET bytes at a time.
			// Small groups near the reader get its next bytes first; further
			// ahead, larger groups coalesce better.
			group := min(s.r.cfg.MaxGET*4, max(1<<20, s.m.Offset(next)-base))
			end := next
			for end < s.m.Len() && s.m.Offset(end)-s.m.Offset(next) < group && s.m.Offset(end)-base < lead {
				end++
			}
			if !s.schedule(next, end) {
				break
			}
			next = end
			s.mu.Lock()
			s.scheduled = next
			s.mu.Unlock()
		}
		ahead := s.m.Offset(next) - base
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

// schedule issues coalesced GETs for the chunks of members [from, to) that
// are neither cached nor in flight, earliest member first. Each span's chunks
// are claimed only when its GET is issued, so a reader never waits on a
// claim that is still queued behind other prefetches: it fetches on demand.
// It returns false when the reader is closing.
func (s *stream) schedule(from, to int) bool {
	r := s.r
	type loc struct {
		k        cache.Key
		member   int
		shard    int
		off, end int64
	}
	var locs []loc
	for i := from; i < to; i++ {
		smp := s.m.Sample(i)
		size := r.sampleSize(smp)
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
			if last.shard == l.shard && l.off-last.end <= r.cfg.MergeGap && l.end-last.off <= r.cfg.MaxGET {
				last.end = max(last.end, l.end)
				last.keys = append(last.keys, l.k)
				last.first = min(last.first, l.member)
				continue
			}
		}
		spans = append(spans, pending{span{shard: l.shard, off: l.off, end: l.end, keys: []cache.Key{l.k}}, l.member})
	}
	slices.SortStableFunc(spans, func(a, b pending) int { return cmp.Compare(a.first, b.first) })
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
		sp.keys = r.cache.Claim(sp.keys)
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

func (r *Reader) fetchSpan(sp span) {
	ctx, cancel := context.WithTimeout(r.ctx, r.cfg.ReadTimeout)
	defer cancel()
	start := time.Now()
	// Only the span's own samples must be fetched; the gaps it spans only
	// ride along in a GET that is made anyway.
	need := map[int]bool{}
	for _, k := range sp.keys {
		need[int(k.Sample)] = true
	}
	b, err := r.readRange(ctx, sp.shard, sp.off, sp.end-sp.off, func(s int) bool { return need[s] })
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
	r.m.PrefetchBytes.Add(int64(len(b)))
	for _, k := range sp.keys {
		_, off, n := r.chunkRange(k)
		// Copy out so a cached chunk does not pin the whole span.
		r.cache.Fill(k, slices.Clone(b[off-sp.off:off-sp.off+n]))
	}
}
