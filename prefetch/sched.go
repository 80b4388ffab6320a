package prefetch

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/shardfs/shardfs/cache"
	"github.com/shardfs/shardfs/erasure"
)

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
	var measured time.Time // when the lead was last measured
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
		if now := time.Now(); now.Sub(measured) >= leadEvery {
			measured = now
			ahead := s.readyLead(ps[0], lead)
			next := s.m.Offset(min(ps[0]+max(s.m.Order().Params.Batch, 1), s.m.Len())) - s.m.Offset(ps[0])
			s.rank.SetLead(ahead, ahead < next)
			s.r.m.PrefetchLead.Store(ahead)
			s.r.m.SetLeadSeconds(leadSeconds(ahead, s.r.currentRate()))
		}
	}
}

// leadEvery is how often a stream measures the bytes ready ahead of its
// slowest reader.
const leadEvery = 250 * time.Millisecond

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
// or read by an open reader within horizon bytes (its next use, as the cache's
// NextUse gives it): then they are fetched too, and a window's shards stream in large
// GETs instead of one GET per sample. They are also joined across at most
// RideGap bytes of samples the mount has fetched already, cached or read (a
// ride, fetchedAlready): the GET reads those and drops them. Each span's chunks
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
		if s.m.Lost(i) {
			continue // nothing of it can be read (layout.LostCatalog)
		}
		smp := s.m.Sample(i)
		size := r.sampleSize(smp)
		if r.adviseDisk(smp, size) {
			continue // served from the tier through the page cache (serveFromDisk)
		}
		for c := int64(0); c*r.cfg.ChunkSize < size; c++ {
			k := cache.Key{Sample: int64(smp), Chunk: int32(c)}
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
				gap := l.off - last.end
				if gap <= r.cfg.MergeGap || ok || (gap <= r.cfg.RideGap && r.fetchedAlready(l.shard, last.end, l.off)) {
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
		if err := r.prefGets.acquire(r.ctx); err != nil {
			r.inflight.Release(size)
			return false
		}
		sp.keys = r.cache.Claim(sp.keys, chunkLen)
		if len(sp.keys) == 0 { // all fetched on demand meanwhile
			r.prefGets.release()
			r.inflight.Release(size)
			continue
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer func() { r.prefGets.release(); r.inflight.Release(size) }()
			r.fetchSpan(sp.span)
		}()
	}
	return true
}

// fetchedAlready reports whether every sample of shard lying in [from,
// to) is cached, or read already by an open rank-epoch: bytes the mount
// has fetched once and will not fetch for them again. A span may then read
// them in passing and drop them (a ride, Config.RideGap): each ride saves
// a GET, and a GET costs the stores, the proxy and the daemon as much CPU
// as a few hundred KiB read. A sample still to be read and not cached never
// rides: dropped, it would be fetched again when due (in global order with
// a small cache that read 87 MB for 49 MB needed, and starved the depth),
// and a sample nobody reads, before or after, never rides: a job resumed
// at batch t fetches nothing before it.
func (r *Reader) fetchedAlready(shard int, from, to int64) bool {
	if !r.cat.Complete(shard) {
		return false
	}
	first, count := r.cat.ShardSamples(shard)
	i := first + sort.Search(count, func(i int) bool {
		_, o, size := r.cat.Locate(first + i)
		return o+size > from
	})
	for ; i < first+count; i++ {
		_, o, size := r.cat.Locate(i)
		if o >= to {
			break
		}
		k := cache.Key{Sample: int64(i)}
		if size > r.cfg.ChunkSize || (!r.cache.Contains(k) && !r.readAlready(k.Sample)) {
			return false
		}
	}
	return true
}

// readAlready reports whether some open rank-epoch has read sample smp.
func (r *Reader) readAlready(smp int64) bool {
	for _, s := range *r.live.Load() {
		m := s.uses.first(smp)
		if m < 0 {
			continue
		}
		if s.wasRead(int(m)) {
			return true
		}
		for _, i := range s.uses.all(smp) {
			if s.wasRead(int(i)) {
				return true
			}
		}
	}
	return false
}

// bridge reports whether the samples of shard lying in [from, to) may join
// their neighbours' span: each is cached or in flight, or is one chunk whose
// next read is within horizon bytes. It returns the keys of the latter, to
// be claimed with the span. The span's GET reads the former again, and
// drops them, where they are at most RideGap long, and splits around them
// where longer (fetchSpan).
func (r *Reader) bridge(shard int, from, to, horizon int64) ([]cache.Key, bool) {
	if to-from > r.cfg.MaxGET || !r.cat.Complete(shard) {
		return nil, false
	}
	first, count := r.cat.ShardSamples(shard)
	i := first + sort.Search(count, func(i int) bool {
		_, o, size := r.cat.Locate(first + i)
		return o+size > from
	})
	var keys []cache.Key
	for ; i < first+count; i++ {
		_, o, size := r.cat.Locate(i)
		if o >= to {
			break
		}
		k := cache.Key{Sample: int64(i)}
		switch {
		case size > r.cfg.ChunkSize:
			return nil, false
		case r.cache.Contains(k):
		case r.nextUse(k) <= horizon:
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
	ctx, cancel := context.WithTimeout(erasure.WithReadKind(r.ctx, erasure.ReadPrefetch), r.cfg.ReadTimeout)
	defer cancel()
	start := time.Now()
	pieces := make([]piece, len(sp.keys))
	var total int64
	for i, k := range sp.keys {
		_, off, n := r.chunkRange(k)
		if n < 0 {
			for _, p := range pieces[:i] {
				r.cache.Free(p.buf)
			}
			for _, k := range sp.keys {
				r.cache.Fail(k, errUnlocated(int(k.Sample)))
			}
			return
		}
		pieces[i] = piece{off: off, buf: r.cache.Alloc(int(n))}
		total += n
	}
	// Every gap between the pieces is bytes this mount has fetched: a ride
	// schedule chose (fetchedAlready), chunks cached or in flight that bridge
	// passed over, or a chunk a reader claimed on demand since. One GET
	// reads through it and drops it, up to RideGap; a longer one is split
	// around, and not read twice.
	for i := 1; i < len(pieces); i++ {
		if pieces[i].off-(pieces[i-1].off+int64(len(pieces[i-1].buf))) <= r.cfg.RideGap {
			pieces[i].joinPrev = true
		}
	}
	// Keys were claimed in shard order; a repeated chunk was skipped.
	err := r.src.readPieces(ctx, sp.shard, pieces)
	r.observeLatency(time.Since(start))
	r.observeSpan(total)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			r.log.Debug("prefetch failed; readers will retry on demand", "shard", sp.shard, "err", err)
		}
		for i, k := range sp.keys {
			r.cache.Free(pieces[i].buf)
			r.cache.Fail(k, err)
		}
		return
	}
	r.m.PrefetchBytes.Add(total)
	for i, k := range sp.keys {
		r.cache.Fill(k, pieces[i].buf)
	}
}
