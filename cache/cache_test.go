package cache

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// waitersOf is how many callers wait on k's fetch (-1: none in flight).
func (c *Cache) waitersOf(k Key) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.flights[k]; f != nil {
		return f.waiters
	}
	return -1
}

// waitUntil synchronises on a condition, not on time; the bound only catches a hang.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		runtime.Gosched()
	}
}

func TestBoundedAndDeadFirst(t *testing.T) {
	c := New(1000, nil)
	ctx := context.Background()
	for i := int64(0); i < 10; i++ {
		c.Get(ctx, Key{i, 0}, func(context.Context) ([]byte, error) { return make([]byte, 100), nil })
	}
	if c.Used() != 1000 {
		t.Fatalf("used %d, want 1000", c.Used())
	}
	// Key 9 is the newest live entry; mark it dead: it must go before older live ones.
	c.Done(Key{9, 0})
	c.Get(ctx, Key{10, 0}, func(context.Context) ([]byte, error) { return make([]byte, 100), nil })
	if c.Contains(Key{9, 0}) {
		t.Fatal("dead entry survived while live ones were kept")
	}
	if !c.Contains(Key{0, 0}) {
		t.Fatal("oldest live entry evicted before the dead one")
	}
	c.Get(ctx, Key{11, 0}, func(context.Context) ([]byte, error) { return make([]byte, 100), nil })
	if c.Contains(Key{0, 0}) || c.Used() > 1000 {
		t.Fatalf("over budget or LRU order broken: used %d", c.Used())
	}
	if c.Evictions.Load() != 2 {
		t.Fatalf("%d evictions counted, want 2", c.Evictions.Load())
	}
}

func TestSingleFlight(t *testing.T) {
	c := New(1<<20, nil)
	var calls atomic.Int32
	release := make(chan struct{})
	var wg sync.WaitGroup
	results := make([]Result, 16)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, res, err := c.Get(context.Background(), Key{1, 0}, func(context.Context) ([]byte, error) {
				calls.Add(1)
				<-release
				return []byte("data"), nil
			})
			if v := h.Bytes; err != nil || string(v) != "data" {
				t.Errorf("got %q, %v", v, err)
			}
			results[i] = res
		}()
	}
	// Release the fetch only once the other 15 callers wait on it.
	waitUntil(t, func() bool { return c.waitersOf(Key{1, 0}) == 15 })
	close(release)
	wg.Wait()
	if calls.Load() != 1 {
		t.Fatalf("fetch ran %d times, want 1", calls.Load())
	}
	fetched := 0
	for _, r := range results {
		if r == Fetched {
			fetched++
		}
	}
	if fetched != 1 {
		t.Fatalf("%d callers report Fetched, want 1", fetched)
	}
}

func TestClaimFillFail(t *testing.T) {
	c := New(1<<20, nil)
	keys := []Key{{1, 0}, {2, 0}, {3, 0}}
	claimed := c.Claim(keys, size100)
	if len(claimed) != 3 || len(c.Claim(keys, size100)) != 0 {
		t.Fatal("claim must hand each key out once")
	}
	got := make(chan []byte)
	go func() {
		h, res, err := c.Get(context.Background(), Key{2, 0}, nil)
		if err != nil || res != Waited {
			t.Errorf("waiter: %v %v", res, err)
		}
		got <- h.Bytes
	}()
	waitUntil(t, func() bool { return c.waitersOf(Key{2, 0}) == 1 })
	c.Fill(Key{2, 0}, []byte("two"))
	if v := <-got; !bytes.Equal(v, []byte("two")) {
		t.Fatalf("waiter got %q", v)
	}
	c.Fill(Key{1, 0}, []byte("one"))
	c.Fail(Key{3, 0}, errors.New("store down"))
	if c.Contains(Key{3, 0}) {
		t.Fatal("failed key cached")
	}
	h, res, err := c.Get(context.Background(), Key{3, 0}, func(context.Context) ([]byte, error) { return []byte("three"), nil })
	v := h.Bytes
	if err != nil || res != Fetched || string(v) != "three" {
		t.Fatalf("refetch after failure: %q %v %v", v, res, err)
	}
}

func TestWaiterHonoursContext(t *testing.T) {
	c := New(1<<20, nil)
	c.Claim([]Key{{1, 0}}, size100)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, _, err := c.Get(ctx, Key{1, 0}, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
}

func size100(Key) int64 { return 100 }

// TestEvictsFurthestNextUse replays a known access order through a small
// cache whose ranker knows that order, and counts misses: they must equal
// those of Belady's offline optimum, computed here independently, and be
// fewer than LRU's on the same order.
func TestEvictsFurthestNextUse(t *testing.T) {
	// A cyclic scan with a hot set, the shape of epochs that share samples:
	// LRU misses on every access of a scan larger than the cache.
	var seq []int64
	for rep := 0; rep < 6; rep++ {
		for k := int64(0); k < 12; k++ {
			seq = append(seq, k)
			if k%3 == 0 {
				seq = append(seq, 100) // a hot key
			}
		}
	}
	const slots = 5
	nextUse := func(cursor int, k int64) int64 {
		for j := cursor + 1; j < len(seq); j++ {
			if seq[j] == k {
				return int64(j - cursor)
			}
		}
		return NoUse
	}
	replay := func(ranked bool) (misses int) {
		c := New(slots*100, nil)
		cursor := 0
		if ranked {
			c.SetNextUse(func(k Key) int64 { return nextUse(cursor, k.Sample) })
		}
		for i, k := range seq {
			cursor = i
			_, res, err := c.Get(context.Background(), Key{k, 0}, func(context.Context) ([]byte, error) { return make([]byte, 100), nil })
			if err != nil {
				t.Fatal(err)
			}
			if res != Hit {
				misses++
			}
			if c.Used() > slots*100 {
				t.Fatalf("used %d over the budget", c.Used())
			}
		}
		return misses
	}
	// Belady's OPT, offline: on a miss, the new key joins, and if the cache
	// is over, the key used furthest in the future goes (the new one too).
	opt := 0
	resident := map[int64]bool{}
	for i, k := range seq {
		if resident[k] {
			continue
		}
		opt++
		resident[k] = true
		if len(resident) > slots {
			var victim int64
			far := int64(-1)
			for r := range resident {
				if d := nextUse(i, r); d > far || (d == far && r < victim) {
					victim, far = r, d
				}
			}
			delete(resident, victim)
		}
	}
	got, lru := replay(true), replay(false)
	if got != opt {
		t.Fatalf("ranked cache: %d misses, Belady's optimum: %d (LRU: %d)", got, opt, lru)
	}
	if lru <= opt {
		t.Fatalf("the order does not tell the policies apart: LRU %d misses, optimum %d", lru, opt)
	}
	t.Logf("%d accesses: %d misses with the ranker (= optimum), %d with LRU", len(seq), got, lru)
}

// TestDoneYieldsToNextUse: a chunk read to its end by one reader is evicted
// first only if no other reader needs it.
func TestDoneYieldsToNextUse(t *testing.T) {
	c := New(300, nil)
	needed := map[int64]int64{1: 10, 2: 20}
	c.SetNextUse(func(k Key) int64 {
		if d, ok := needed[k.Sample]; ok {
			return d
		}
		return NoUse
	})
	get := func(s int64) {
		c.Get(context.Background(), Key{s, 0}, func(context.Context) ([]byte, error) { return make([]byte, 100), nil })
	}
	get(1)
	get(2)
	get(3)
	c.Done(Key{1, 0}) // read by one reader, but another reads it next
	get(4)
	if !c.Contains(Key{1, 0}) || c.Contains(Key{3, 0}) {
		t.Fatalf("kept 1: %v, kept 3: %v; want 1 kept (needed next) and 3 evicted (no use)", c.Contains(Key{1, 0}), c.Contains(Key{3, 0}))
	}
}

// TestReservationsCountInTheBudget: bytes claimed for GETs in flight are
// part of the one budget: they evict ready chunks, and are released on
// completion whether the GET succeeds or fails.
func TestReservationsCountInTheBudget(t *testing.T) {
	c := New(500, nil)
	for s := int64(0); s < 5; s++ {
		c.Get(context.Background(), Key{s, 0}, func(context.Context) ([]byte, error) { return make([]byte, 100), nil })
	}
	claimed := c.Claim([]Key{{10, 0}, {11, 0}}, size100)
	if len(claimed) != 2 || c.Used() != 500 || c.Reserved() != 200 {
		t.Fatalf("claimed %d, used %d, reserved %d; want 2, 500, 200", len(claimed), c.Used(), c.Reserved())
	}
	if n := len(c.entries); n != 3 {
		t.Fatalf("%d ready chunks kept beside 200 reserved bytes, want 3", n)
	}
	c.Fill(Key{10, 0}, make([]byte, 100))
	c.Fail(Key{11, 0}, errors.New("boom"))
	if c.Reserved() != 0 || c.Used() != 400 {
		t.Fatalf("after completion: reserved %d, used %d; want 0, 400", c.Reserved(), c.Used())
	}
}

// TestLookupServesOnlyHits: Lookup returns cached bytes and counts as a use
// for eviction, and never waits on or claims a fetch in flight.
func TestLookupServesOnlyHits(t *testing.T) {
	c := New(300, nil)
	ctx := context.Background()
	if h, ok := c.Lookup(Key{0, 0}); ok || h.Bytes != nil {
		t.Fatal("Lookup of an absent key reported a hit")
	}
	for i := int64(0); i < 3; i++ {
		c.Get(ctx, Key{i, 0}, func(context.Context) ([]byte, error) { return bytes.Repeat([]byte{byte(i + 1)}, 100), nil })
	}
	h, ok := c.Lookup(Key{0, 0})
	v := h.Bytes
	if !ok || !bytes.Equal(v, bytes.Repeat([]byte{1}, 100)) {
		t.Fatalf("Lookup of a cached key: ok %v, %d bytes", ok, len(v))
	}
	// Key 0 was just used, so key 1 is now the least recent and goes first.
	c.Get(ctx, Key{3, 0}, func(context.Context) ([]byte, error) { return make([]byte, 100), nil })
	if !c.Contains(Key{0, 0}) || c.Contains(Key{1, 0}) {
		t.Fatal("Lookup did not count as a use: the looked-up key was evicted first")
	}
	// A key in flight is not a hit, and Lookup does not block on it.
	c.Claim([]Key{{9, 0}}, func(Key) int64 { return 100 })
	if _, ok := c.Lookup(Key{9, 0}); ok {
		t.Fatal("Lookup reported a hit for a key still in flight")
	}
	c.Fill(Key{9, 0}, bytes.Repeat([]byte{9}, 100))
	if h, ok := c.Lookup(Key{9, 0}); !ok || !bytes.Equal(h.Bytes, bytes.Repeat([]byte{9}, 100)) {
		t.Fatal("Lookup after Fill did not return the filled bytes")
	}
}

// A chunk prefetched (Claim, Fill) and evicted before any reader took it
// counts as thrash; one a reader took (a hit, its own fetch, or waiting on
// the fetch) does not.
func TestEvictedUnreadCountsThrash(t *testing.T) {
	c := New(300, nil) // three chunks of 100 bytes
	val := bytes.Repeat([]byte{1}, 100)
	for _, k := range c.Claim([]Key{{1, 0}, {2, 0}, {3, 0}}, size100) {
		c.Fill(k, val)
	}
	if _, ok := c.Lookup(Key{1, 0}); !ok {
		t.Fatal("prefetched chunk 1 not cached")
	}
	// Two more prefetched: 2 and 3 (unread, least recently used) go.
	for _, k := range c.Claim([]Key{{4, 0}, {5, 0}}, size100) {
		c.Fill(k, val)
	}
	if e, u := c.Evictions.Load(), c.EvictedUnread.Load(); e != 2 || u != 2 {
		t.Fatalf("evictions %d, unread %d: want 2 and 2", e, u)
	}
	if c.Ready(Key{2, 0}) || !c.Ready(Key{1, 0}) {
		t.Fatal("chunk 2 should be evicted and chunk 1, read, kept")
	}
	// Read everything held, then fetch three more on demand: the three
	// evicted had all been read.
	for _, k := range []Key{{1, 0}, {4, 0}, {5, 0}} {
		if _, ok := c.Lookup(k); !ok {
			t.Fatalf("%v not cached", k)
		}
	}
	for s := int64(6); s <= 8; s++ {
		if _, res, err := c.Get(context.Background(), Key{s, 0}, func(context.Context) ([]byte, error) { return val, nil }); err != nil || res != Fetched {
			t.Fatalf("get %d: %v %v", s, res, err)
		}
	}
	if e, u := c.Evictions.Load(), c.EvictedUnread.Load(); e != 5 || u != 2 {
		t.Fatalf("evictions %d, unread %d: want 5 and 2", e, u)
	}
	// Chunks fetched on demand were taken by their callers: evicting them is not thrash.
	for _, k := range c.Claim([]Key{{9, 0}, {10, 0}, {11, 0}}, size100) {
		c.Fill(k, val)
	}
	if e, u := c.Evictions.Load(), c.EvictedUnread.Load(); e != 8 || u != 2 {
		t.Fatalf("evictions %d, unread %d: want 8 and 2", e, u)
	}
}
