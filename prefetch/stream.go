package prefetch

import (
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/shardfs/shardfs/cache"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/metrics"
)

// stream prefetches one rank-epoch.
type stream struct {
	r    *Reader
	m    *layout.Members
	rank *metrics.RankCounters
	// batchLeft[b] is how many members of batch b are not yet read to their end.
	batchLeft []atomic.Int32

	// uses finds where each sample is read in this rank-epoch, for the
	// cache's ranker.
	uses *memberIndex
	// readers is the sorted positions of the open handles (or, when none is
	// open, of the last one to close), for lock-free ranking.
	readers     atomic.Pointer[[]int]
	openHandles atomic.Int32
	// read has bit i set once member i was read to its end: its sample is
	// not needed there again, whichever reader position it lies after
	// (workers that take batches in stripes spread far apart, and the
	// batches they finished lie ahead of the slowest one).
	read []atomic.Uint64
	// frontier is the lowest member not yet read to its end, at or after
	// the lowest position any file was opened at (a resumed job's first
	// batch: what lies before it is never read): where the rank's progress
	// stands, whatever files are open. Paced workers close their files
	// between batches, and a member below every open file may still be the
	// next one a worker opens (issue 46). Len() before any open.
	frontier atomic.Int64

	mu      sync.Mutex // guards the fields below
	handles map[*Handle]int
	sched   []uint64 // bit i: member i has been scheduled
	running bool
	wake    chan struct{}
}

func newStream(r *Reader, m *layout.Members) *stream {
	p := m.Order().Params
	s := &stream{r: r, m: m, rank: r.m.Rank(p.Rank), handles: map[*Handle]int{}, wake: make(chan struct{}, 1), sched: make([]uint64, (m.Len()+63)/64),
		read: make([]atomic.Uint64, (m.Len()+63)/64)}
	s.rank.SetEpoch(p.Epoch)
	batch := max(p.Batch, 1)
	s.batchLeft = make([]atomic.Int32, (m.Len()+batch-1)/batch)
	for b := range s.batchLeft {
		s.batchLeft[b].Store(int32(min(batch, m.Len()-b*batch)))
	}
	s.uses = newMemberIndex(m)
	s.frontier.Store(int64(m.Len()))
	empty := []int{}
	s.readers.Store(&empty)
	return s
}

// nextUse is how many bytes of this rank-epoch lie between sample smp's next
// read and the nearest reader before it, or NoUse. A member read to its end
// is not a next read, even where it lies ahead of a slower reader. The
// frontier counts as a reader: a member below every open file that nobody
// has read yet is still to be read.
func (s *stream) nextUse(smp int64) int64 {
	ps := *s.readers.Load()
	if len(ps) == 0 {
		return cache.NoUse
	}
	// The slowest reader: the lowest open file, or the frontier if lower.
	front := int(s.frontier.Load())
	low := min(front, ps[0])
	m := int(s.uses.first(smp))
	if m >= 0 && (m < low || s.wasRead(m)) {
		m = -1
		for _, i := range s.uses.all(smp) {
			if int(i) >= low && !s.wasRead(int(i)) {
				m = int(i)
				break
			}
		}
	}
	if m < 0 {
		return cache.NoUse
	}
	p := low // the nearest reader at or before m, the frontier counted as one
	if front <= m {
		p = max(p, front)
	}
	if j := sort.SearchInts(ps, m+1) - 1; j >= 0 {
		p = max(p, ps[j])
	}
	return s.m.Offset(m) - s.m.Offset(p)
}

// markRead records member read to its end; the last member of a batch
// read makes the batch served.
func (s *stream) markRead(member int) {
	if member < 0 || member >= s.m.Len() {
		return
	}
	bit := uint64(1) << (member % 64)
	if s.read[member/64].Or(bit)&bit == 0 {
		if s.batchLeft[member/max(s.m.Order().Params.Batch, 1)].Add(-1) == 0 {
			s.rank.BatchesServed.Add(1)
		}
	}
	s.advanceFrontier()
}

// lowerFrontier brings the frontier back to pos, a position a file was
// opened at, if it lies beyond it, then past what is read from there.
func (s *stream) lowerFrontier(pos int) {
	for {
		f := s.frontier.Load()
		if int64(pos) >= f || s.frontier.CompareAndSwap(f, int64(pos)) {
			break
		}
	}
	s.advanceFrontier()
}

// advanceFrontier moves the frontier past every member read; concurrent
// callers each help, one member at a time.
func (s *stream) advanceFrontier() {
	for {
		f := s.frontier.Load()
		if f >= int64(s.m.Len()) || !s.wasRead(int(f)) {
			return
		}
		s.frontier.CompareAndSwap(f, f+1)
	}
}

// maxLeadWalk bounds the members readyLead looks at: beyond it, the lead
// is long enough for any decision made on it.
const maxLeadWalk = 4096

// readyLead is the bytes in the memory cache ahead of the reader at p,
// up to the first member not ready (or limit bytes, or maxLeadWalk
// members). Members a faster worker already read are passed over.
func (s *stream) readyLead(p int, limit int64) int64 {
	var ready int64
	for m := p; m < s.m.Len() && m < p+maxLeadWalk && ready < limit; m++ {
		if s.wasRead(m) {
			continue
		}
		smp := s.m.Sample(m)
		for c := int64(0); c*s.r.cfg.ChunkSize < max(s.r.sampleSize(smp), 1); c++ {
			if !s.r.cache.Ready(cache.Key{Sample: int64(smp), Chunk: int32(c)}) {
				return ready
			}
		}
		ready += s.m.Offset(m+1) - s.m.Offset(m)
	}
	return ready
}

func (s *stream) wasRead(member int) bool {
	return s.read[member/64].Load()&(1<<(member%64)) != 0
}

// NextUse is the distance in bytes to the next read of k by any stream
// of r, or cache.NoUse: what a cache shared by several readers (mount
// --follow) asks of each.
func (r *Reader) NextUse(k cache.Key) int64 { return r.nextUse(k) }

// nextUse is the cache's NextUse: the nearest next use of k over every
// open stream.
func (r *Reader) nextUse(k cache.Key) int64 {
	best := cache.NoUse
	for _, s := range *r.live.Load() {
		if d := s.nextUse(k.Sample); d != cache.NoUse {
			best = min(best, d+int64(k.Chunk)*r.cfg.ChunkSize)
		}
	}
	return best
}

// publishLocked makes the reader's stream set visible to nextUse. Caller holds r.mu.
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
	if !h.primer {
		s.lowerFrontier(pos)
	}
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
