// Package cache owns the byte-bounded block cache of a mount: verified
// sample chunks in memory, shared fetches for concurrent misses, and
// eviction that uses the known order.
//
// Entries are in one of two LRU lists: live (may still be read this epoch)
// and dead (the order says no reader needs it again). Eviction takes from
// dead first, so a chunk that was prefetched but not yet read is the last to
// go. A fetch in flight is a claim on one or many keys (a coalesced ranged
// GET fills several chunks at once); readers of a claimed key wait for it
// instead of fetching again.
package cache

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// Key names one chunk of one sample.
type Key struct {
	Sample int32
	Chunk  int32
}

// Result says how a Get was served.
type Result int

const (
	Hit     Result = iota // in the cache
	Waited                // waited for another caller's fetch
	Fetched               // this caller fetched it
)

type flight struct {
	done    chan struct{}
	val     []byte
	err     error
	waiters int // callers waiting on it; guarded by Cache.mu
}

// Cache is safe for concurrent use.
type Cache struct {
	budget int64

	mu      sync.Mutex // guards everything below
	used    int64
	live    *simplelru.LRU[Key, []byte]
	dead    *simplelru.LRU[Key, []byte]
	flights map[Key]*flight
	onSize  func(int64)

	// Evictions counts entries evicted to stay within the budget.
	Evictions atomic.Int64
}

// New returns a cache holding at most budget bytes. onSize, if not nil, is
// called (under the cache lock) with the new size after every change.
func New(budget int64, onSize func(int64)) *Cache {
	live, _ := simplelru.NewLRU[Key, []byte](math.MaxInt32, nil)
	dead, _ := simplelru.NewLRU[Key, []byte](math.MaxInt32, nil)
	if onSize == nil {
		onSize = func(int64) {}
	}
	return &Cache{budget: budget, live: live, dead: dead, flights: map[Key]*flight{}, onSize: onSize}
}

// Budget is the byte bound.
func (c *Cache) Budget() int64 { return c.budget }

// Used is the bytes held.
func (c *Cache) Used() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used
}

// Contains reports whether k is cached or being fetched.
func (c *Cache) Contains(k Key) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live.Contains(k) || c.dead.Contains(k) || c.flights[k] != nil
}

// Get returns k's bytes: from the cache, by waiting for a fetch in flight,
// or by calling fetch itself (once, however many callers ask).
func (c *Cache) Get(ctx context.Context, k Key, fetch func(ctx context.Context) ([]byte, error)) ([]byte, Result, error) {
	c.mu.Lock()
	if v, ok := c.lookup(k); ok {
		c.mu.Unlock()
		return v, Hit, nil
	}
	if f := c.flights[k]; f != nil {
		f.waiters++
		c.mu.Unlock()
		select {
		case <-f.done:
			return f.val, Waited, f.err
		case <-ctx.Done():
			return nil, Waited, ctx.Err()
		}
	}
	f := &flight{done: make(chan struct{})}
	c.flights[k] = f
	c.mu.Unlock()
	v, err := fetch(ctx)
	c.complete(k, f, v, err)
	return v, Fetched, err
}

// lookup finds k in either list. Caller holds mu.
func (c *Cache) lookup(k Key) ([]byte, bool) {
	if v, ok := c.live.Get(k); ok {
		return v, true
	}
	return c.dead.Get(k)
}

// Claim marks every key that is neither cached nor in flight as in flight,
// owned by the caller, and returns those keys. The caller must Fill or Fail
// each of them.
func (c *Cache) Claim(keys []Key) []Key {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Key
	for _, k := range keys {
		if c.live.Contains(k) || c.dead.Contains(k) || c.flights[k] != nil {
			continue
		}
		c.flights[k] = &flight{done: make(chan struct{})}
		out = append(out, k)
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
	if err == nil {
		c.addLocked(k, v)
	}
	c.mu.Unlock()
	f.val, f.err = v, err
	close(f.done)
}

func (c *Cache) addLocked(k Key, v []byte) {
	if old, ok := c.live.Peek(k); ok {
		c.used -= int64(len(old))
	}
	c.live.Add(k, v)
	c.used += int64(len(v))
	for c.used > c.budget {
		_, old, ok := c.dead.RemoveOldest()
		if !ok {
			if _, old, ok = c.live.RemoveOldest(); !ok {
				break
			}
		}
		c.used -= int64(len(old))
		c.Evictions.Add(1)
	}
	c.onSize(c.used)
}

// Done marks k as not needed again by the known order: it is evicted first.
func (c *Cache) Done(k Key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.live.Peek(k); ok {
		c.live.Remove(k)
		c.dead.Add(k, v)
	}
}
