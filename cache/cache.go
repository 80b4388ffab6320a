// Package cache owns the byte-bounded caches of a mount: verified sample
// chunks in memory, shared fetches for concurrent misses, and eviction that
// uses the known order (cache.go); and the disk tier below it, verified
// whole samples in local files that survive remounts and crashes, bounded
// in bytes across every process that shares it (disk.go).
//
// One budget holds everything the cache is responsible for: chunks ready to
// read and the bytes of prefetch GETs in flight, which are reserved when the
// GET is claimed. When the budget is exceeded, the cache evicts by Belady's
// rule: the entry whose next read in the known order is furthest away goes
// first. A NextUse function, supplied by the read path that knows the
// order, gives that distance; chunks no open reader needs again (NoUse) go before any
// other. A chunk read to its end is queued as a likely candidate (Done) and
// evicted first once NextUse confirms nothing needs it. Among the rest,
// the cache weighs all entries when it holds few and a random sample of
// them otherwise, the way Redis approximates its policies: exact where a
// test can check it, O(1) per eviction where the cache holds many entries.
// A fetch in flight is a claim on one or many keys (a coalesced ranged GET
// fills several chunks at once); readers of a claimed key wait for it
// instead of fetching again.
//
// Buffers are reused (spare.go): a fetch takes its buffer from Alloc, which
// hands out an evicted chunk's buffer of about the same size, so that a
// cache that has filled once reads on without first touches of new memory
// (each costs a page fault, and on some machines most of a CPU second per
// GB). A reader holds the bytes it copies out (Held, Release): an evicted
// chunk's buffer is reused only once nobody holds it, so no reader ever
// sees another chunk's bytes. The spare buffers count against the budget,
// up to a sixteenth of it. A buffer made new while no cache of the process
// has evicted lies in memory advised for transparent huge pages
// (hugepages_linux.go), so a cache filling for the first time faults 2 MiB
// at a time, not 4 KiB; the first eviction ends the advice.
package cache

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// Key names one chunk of one sample.
type Key struct {
	Sample int64
	Chunk  int32
}

// Result says how a Get was served.
type Result int

const (
	Hit     Result = iota // in the cache
	Waited                // waited for another caller's fetch
	Fetched               // this caller fetched it
)

// NoUse is the next use of a chunk no open reader will read again.
const NoUse = int64(math.MaxInt64)

// NextUse returns how far ahead, in bytes of the known order, k is next
// read, or NoUse. It is called with the cache's lock held and must not call
// back into the cache.
type NextUse func(k Key) int64

// exactBelow: with at most this many entries every one is weighed; above,
// sampleSize random ones are.
const (
	exactBelow = 64
	sampleSize = 16
)

type flight struct {
	done     chan struct{}
	held     Held // the bytes, once completed without error
	err      error
	waiters  int   // callers waiting on it; guarded by Cache.mu
	reserved int64 // budget bytes held for it until it completes
	taken    bool  // a caller takes its bytes (Get's own fetch, or a waiter)
	fetcher  bool  // Get's own fetch: its caller takes a hold too
	// completed is set, under Cache.mu, when the entry is added and a hold
	// taken for each waiter and the fetcher.
	completed bool
}

type entry struct {
	k Key
	v []byte
	// holders is how many callers hold v (Held); dead is set once the entry
	// left the cache. v goes back to the free list when both say nobody
	// can read it any more; recycled (guarded by Cache.mu) makes that once.
	holders  atomic.Int32
	dead     atomic.Bool
	recycled bool
	at       int    // index in Cache.all
	used     uint64 // access clock, for ties and when no NextUse is set
	done     bool   // queued in Cache.done
	read     bool   // a reader took its bytes: evicted unread, it was fetched for nothing
}

// Cache is safe for concurrent use.
type Cache struct {
	budget int64

	mu       sync.Mutex // guards everything below
	used     int64      // entries' bytes plus reservations
	entries  map[Key]*entry
	all      []*entry // every entry, for sampling
	done     []Key    // read to their end: evicted first unless nextUse objects
	clock    uint64
	flights  map[Key]*flight
	nextUse  NextUse
	onSize   func(int64)
	rng      *rand.Rand
	reserved int64
	spare    spares // evicted chunks' buffers, for the next fetches

	// Evictions counts entries evicted to stay within the budget;
	// EvictedUnread those of them no reader had taken: prefetched for
	// nothing, the sign of a cache too small for its readers (thrash).
	Evictions, EvictedUnread atomic.Int64
	// Inserted counts chunks added.
	Inserted atomic.Int64
}

// New returns a cache holding at most budget bytes. onSize, if not nil, is
// called (under the cache lock) with the new size after every change.
func New(budget int64, onSize func(int64)) *Cache {
	if onSize == nil {
		onSize = func(int64) {}
	}
	return &Cache{budget: budget, entries: map[Key]*entry{}, flights: map[Key]*flight{}, onSize: onSize,
		rng: rand.New(rand.NewPCG(1, 2))}
}

// SetNextUse gives the cache the distance to each chunk's next use. Without
// one, the least recently used entry goes first.
func (c *Cache) SetNextUse(r NextUse) {
	c.mu.Lock()
	c.nextUse = r
	c.mu.Unlock()
}

// Budget is the byte bound.
func (c *Cache) Budget() int64 { return c.budget }

// Used is the bytes held, reservations for GETs in flight included.
func (c *Cache) Used() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used
}

// Reserved is the bytes held for claimed GETs in flight.
func (c *Cache) Reserved() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reserved
}

// Contains reports whether k is cached or being fetched.
func (c *Cache) Contains(k Key) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.entries[k] != nil || c.flights[k] != nil
}

// Held is a chunk's bytes, held for the caller until it calls Release:
// until then the buffer is not reused, even if the chunk is evicted.
// Bytes must not be used after Release.
type Held struct {
	Bytes []byte
	e     *entry // nil: the bytes are the caller's own (nothing to release)
}

// Release ends the hold. Each Held is released at most once; one never
// released only keeps its buffer from being reused.
func (c *Cache) Release(h Held) {
	if h.e == nil || h.e.holders.Add(-1) != 0 || !h.e.dead.Load() {
		return
	}
	c.mu.Lock()
	c.recycleLocked(h.e, false)
	c.mu.Unlock()
}

// holdLocked takes a hold on e for a caller. Caller holds c.mu, and e is in
// the cache.
func holdLocked(e *entry, n int32) Held {
	e.holders.Add(n)
	return Held{Bytes: e.v, e: e}
}

// Lookup returns k's bytes if they are cached, as a hit: the read path's
// fast path, which needs no context and no fetch function.
func (c *Cache) Lookup(k Key) (Held, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[k]
	if e == nil {
		return Held{}, false
	}
	c.clock++
	e.used, e.read = c.clock, true
	return holdLocked(e, 1), true
}

// Ready reports whether k's bytes are in the cache (not only being fetched).
func (c *Cache) Ready(k Key) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.entries[k] != nil
}

// Get returns k's bytes, held (see Held): from the cache, by waiting for
// a fetch in flight, or by calling fetch itself (once, however many
// callers ask). fetch hands its buffer to the cache; Alloc gives one the
// cache can reuse.
func (c *Cache) Get(ctx context.Context, k Key, fetch func(ctx context.Context) ([]byte, error)) (Held, Result, error) {
	c.mu.Lock()
	if e := c.entries[k]; e != nil {
		c.clock++
		e.used, e.read = c.clock, true
		h := holdLocked(e, 1)
		c.mu.Unlock()
		return h, Hit, nil
	}
	if f := c.flights[k]; f != nil {
		f.waiters++
		f.taken = true
		c.mu.Unlock()
		select {
		case <-f.done:
			return f.held, Waited, f.err
		case <-ctx.Done():
			c.mu.Lock()
			if f.completed {
				c.mu.Unlock()
				c.Release(f.held) // the hold complete took for this waiter
			} else {
				f.waiters--
				c.mu.Unlock()
			}
			return Held{}, Waited, ctx.Err()
		}
	}
	f := &flight{done: make(chan struct{}), taken: true, fetcher: true} // this caller takes the bytes it fetches
	c.flights[k] = f
	c.mu.Unlock()
	v, err := fetch(ctx)
	c.complete(k, f, v, err)
	if err != nil {
		return Held{}, Fetched, err
	}
	return f.held, Fetched, nil
}

// Claim marks every key that is neither cached nor in flight as in flight,
// owned by the caller, reserves size(k) bytes of the budget for each, and
// returns those keys. The caller must Fill or Fail each of them.
func (c *Cache) Claim(keys []Key, size func(Key) int64) []Key {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Key
	for _, k := range keys {
		if c.entries[k] != nil || c.flights[k] != nil {
			continue
		}
		n := int64(sizeClass(int(size(k))))
		c.flights[k] = &flight{done: make(chan struct{}), reserved: n}
		c.used += n
		c.reserved += n
		out = append(out, k)
	}
	if len(out) > 0 {
		c.evictLocked()
		c.onSize(c.used)
	}
	return out
}

// Fill completes a claimed key with its verified bytes.
func (c *Cache) Fill(k Key, v []byte) { c.finish(k, v, nil) }

// Fail completes a claimed key with an error; waiters get the error, and
// the next Get fetches again.
func (c *Cache) Fail(k Key, err error) {
	if err == nil {
		err = errors.New("fetch failed")
	}
	c.finish(k, nil, err)
}

func (c *Cache) finish(k Key, v []byte, err error) {
	c.mu.Lock()
	f := c.flights[k]
	c.mu.Unlock()
	if f != nil {
		c.complete(k, f, v, err)
	}
}

func (c *Cache) complete(k Key, f *flight, v []byte, err error) {
	c.mu.Lock()
	delete(c.flights, k)
	c.used -= f.reserved
	c.reserved -= f.reserved
	if err == nil {
		e := c.addLocked(k, v, f.taken)
		// Held for every caller that takes the bytes before anything can
		// evict the entry.
		if n := int32(f.waiters); f.fetcher || n > 0 {
			if f.fetcher {
				n++
			}
			f.held = holdLocked(e, n)
		}
		c.evictLocked()
	}
	f.err = err
	f.completed = true
	c.onSize(c.used)
	c.mu.Unlock()
	close(f.done)
}

// addLocked caches v as k's bytes. A chunk already cached (two fetches of
// one key) is replaced by a new entry: holders of the old one keep its
// buffer until they release it.
func (c *Cache) addLocked(k Key, v []byte, read bool) *entry {
	c.clock++
	if old := c.entries[k]; old != nil {
		read = read || old.read
		c.removeLocked(old)
	}
	e := &entry{k: k, v: v, at: len(c.all), used: c.clock, read: read}
	c.Inserted.Add(1)
	c.entries[k] = e
	c.all = append(c.all, e)
	c.used += int64(cap(v))
	return e
}

// evictLocked evicts until the budget holds or only reservations are left.
//
// Spare buffers count against the budget too: they go first, down to the
// spare target, and an evicted chunk's buffer is kept spare only while
// the spares are below it; so the cache holds chunks up to its budget
// less the spares it keeps for the next fetches.
func (c *Cache) evictLocked() {
	for c.used+c.spare.bytes > c.budget {
		if c.spare.bytes > 0 && (c.spare.bytes > c.spareTarget() || len(c.all) == 0) {
			c.spare.trim(max(0, min(c.spareTarget(), c.budget-c.used)))
			continue
		}
		if len(c.all) == 0 {
			return
		}
		e := c.victimLocked()
		c.removeLocked(e)
		if c.Evictions.Add(1) == 1 {
			endHugePages() // the filling is over (hugepages_linux.go)
		}
		if !e.read {
			c.EvictedUnread.Add(1)
		}
	}
}

// victimLocked picks the entry to evict: a done entry nothing needs, else
// the entry with the furthest next use among those weighed.
func (c *Cache) victimLocked() *entry {
	for len(c.done) > 0 {
		k := c.done[0]
		c.done = c.done[1:]
		e := c.entries[k]
		if e == nil || !e.done {
			continue
		}
		e.done = false
		if c.nextUse == nil || c.nextUse(k) == NoUse {
			return e
		}
		// Another open reader still needs it: it stays, weighed like any other.
	}
	var best *entry
	var bestUse int64
	consider := func(e *entry) {
		r := int64(0)
		if c.nextUse != nil {
			r = c.nextUse(e.k)
		}
		if best == nil || r > bestUse || (r == bestUse && e.used < best.used) {
			best, bestUse = e, r
		}
	}
	if len(c.all) <= exactBelow {
		for _, e := range c.all {
			consider(e)
		}
	} else {
		for range sampleSize {
			consider(c.all[c.rng.IntN(len(c.all))])
		}
	}
	return best
}

func (c *Cache) removeLocked(e *entry) {
	last := c.all[len(c.all)-1]
	c.all[e.at], last.at = last, e.at
	c.all = c.all[:len(c.all)-1]
	delete(c.entries, e.k)
	c.used -= int64(cap(e.v))
	e.done = false
	e.dead.Store(true)
	if e.holders.Load() == 0 {
		// Evicting: the loop that evicts keeps the budget, spares included.
		c.recycleLocked(e, true)
	}
}

// recycleLocked keeps a dead entry's buffer for the next fetches, once
// and only while the spares are below their target (and, unless evicting,
// fit the budget beside the cached chunks).
func (c *Cache) recycleLocked(e *entry, evicting bool) {
	if e.recycled || e.holders.Load() != 0 {
		return
	}
	e.recycled = true
	c.keepSpareLocked(e.v, evicting)
	e.v = nil
}

// spareTarget is the most bytes of spare buffers the cache keeps: a
// sixteenth of its budget, enough for the fetches between two evictions.
func (c *Cache) spareTarget() int64 { return c.budget / 16 }

func (c *Cache) keepSpareLocked(b []byte, evicting bool) {
	if n := int64(cap(b)); n > 0 && c.spare.bytes+n <= c.spareTarget() && (evicting || c.used+c.spare.bytes+n <= c.budget) {
		c.spare.put(b)
	}
}

// Alloc returns a buffer of n bytes for a chunk's fetch: an evicted
// chunk's, when one of its size class is spare, so that a cache that has
// filled once reads on without touching new memory. Its contents are
// undefined. Hand it to the cache (Fill, or Get's fetch) or back (Free).
func (c *Cache) Alloc(n int) []byte {
	c.mu.Lock()
	b := c.spare.take(n)
	c.mu.Unlock()
	if b == nil {
		b = make([]byte, n, sizeClass(n))
		adviseHugePages(b)
	}
	return b
}

// Free takes back a buffer from Alloc that was never handed to the cache.
func (c *Cache) Free(b []byte) {
	c.mu.Lock()
	c.keepSpareLocked(b, false)
	c.mu.Unlock()
}

// Spare is the bytes of evicted chunks' buffers kept for reuse: with Used,
// never more than the budget.
func (c *Cache) Spare() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.spare.bytes
}

// Done marks k as read to its end by one reader: unless nextUse says
// another reader needs it, it is the next to go.
func (c *Cache) Done(k Key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[k]; e != nil && !e.done {
		e.done = true
		c.done = append(c.done, k)
	}
}
