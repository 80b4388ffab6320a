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
	val      []byte
	err      error
	waiters  int   // callers waiting on it; guarded by Cache.mu
	reserved int64 // budget bytes held for it until it completes
	taken    bool  // a caller takes its bytes (Get's own fetch, or a waiter)
}

type entry struct {
	k    Key
	v    []byte
	at   int    // index in Cache.all
	used uint64 // access clock, for ties and when no NextUse is set
	done bool   // queued in Cache.done
	read bool   // a reader took its bytes: evicted unread, it was fetched for nothing
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

// Lookup returns k's bytes if they are cached, as a hit: the read path's
// fast path, which needs no context and no fetch function.
func (c *Cache) Lookup(k Key) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[k]
	if e == nil {
		return nil, false
	}
	c.clock++
	e.used, e.read = c.clock, true
	return e.v, true
}

// Ready reports whether k's bytes are in the cache (not only being fetched).
func (c *Cache) Ready(k Key) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.entries[k] != nil
}

// Get returns k's bytes: from the cache, by waiting for a fetch in flight,
// or by calling fetch itself (once, however many callers ask).
func (c *Cache) Get(ctx context.Context, k Key, fetch func(ctx context.Context) ([]byte, error)) ([]byte, Result, error) {
	c.mu.Lock()
	if e := c.entries[k]; e != nil {
		c.clock++
		e.used, e.read = c.clock, true
		c.mu.Unlock()
		return e.v, Hit, nil
	}
	if f := c.flights[k]; f != nil {
		f.waiters++
		f.taken = true
		c.mu.Unlock()
		select {
		case <-f.done:
			return f.val, Waited, f.err
		case <-ctx.Done():
			return nil, Waited, ctx.Err()
		}
	}
	f := &flight{done: make(chan struct{}), taken: true} // this caller takes the bytes it fetches
	c.flights[k] = f
	c.mu.Unlock()
	v, err := fetch(ctx)
	c.complete(k, f, v, err)
	return v, Fetched, err
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
		n := size(k)
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
		c.addLocked(k, v, f.taken)
	}
	c.onSize(c.used)
	c.mu.Unlock()
	f.val, f.err = v, err
	close(f.done)
}

func (c *Cache) addLocked(k Key, v []byte, read bool) {
	c.clock++
	if e := c.entries[k]; e != nil {
		c.used += int64(len(v)) - int64(len(e.v))
		e.v, e.used, e.read = v, c.clock, e.read || read
	} else {
		e := &entry{k: k, v: v, at: len(c.all), used: c.clock, read: read}
		c.Inserted.Add(1)
		c.entries[k] = e
		c.all = append(c.all, e)
		c.used += int64(len(v))
	}
	c.evictLocked()
}

// evictLocked evicts until the budget holds or only reservations are left.
func (c *Cache) evictLocked() {
	for c.used > c.budget && len(c.all) > 0 {
		e := c.victimLocked()
		c.removeLocked(e)
		c.Evictions.Add(1)
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
	c.used -= int64(len(e.v))
	e.done = false
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
