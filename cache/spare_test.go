package cache

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

func TestSizeClass(t *testing.T) {
	for n := 0; n < 1<<21; n += 1 + n/50 {
		c := sizeClass(n)
		if c < n || (n > 64 && c-n > n/16) {
			t.Fatalf("sizeClass(%d) = %d: below n, or more than n/16 above", n, c)
		}
		if sizeClass(c) != c {
			t.Fatalf("sizeClass(%d) = %d, not its own class (%d)", n, c, sizeClass(c))
		}
	}
}

// fill writes k's pattern into b: every 8 bytes, the key and the offset.
func fill(b []byte, k Key) {
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], uint64(k.Sample)<<32^uint64(i))
	}
}

func holdsPattern(b []byte, k Key) bool {
	for i := 0; i+8 <= len(b); i += 8 {
		if binary.LittleEndian.Uint64(b[i:]) != uint64(k.Sample)<<32^uint64(i) {
			return false
		}
	}
	return true
}

// An evicted chunk's buffer is reused for the next fetch only once no
// caller holds it: held bytes stay the chunk's own through evictions and
// refills, and then the buffer comes back from Alloc.
func TestHeldBufferIsNotReused(t *testing.T) {
	c := New(3200, nil) // spares up to 200 bytes: one buffer
	ctx := context.Background()
	get := func(k Key) Held {
		h, _, err := c.Get(ctx, k, func(context.Context) ([]byte, error) {
			b := c.Alloc(200)
			fill(b, k)
			return b, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	held := get(Key{Sample: 1})
	c.Release(get(Key{Sample: 2}))
	for s := int64(3); s < 40; s++ { // evicts 1 and 2, many times over
		c.Release(get(Key{Sample: s}))
	}
	if c.Contains(Key{Sample: 1}) {
		t.Fatal("key 1 was never evicted: the test proves nothing")
	}
	if !holdsPattern(held.Bytes, Key{Sample: 1}) {
		t.Fatal("a held chunk's bytes were overwritten after its eviction")
	}
	if c.Used()+c.Spare() > c.Budget() {
		t.Fatalf("used %d + spare %d over the budget %d", c.Used(), c.Spare(), c.Budget())
	}
	// Released, its buffer is spare again, where the spares and the
	// budget have room: make it.
	c.mu.Lock()
	c.spare.trim(0)
	for c.used+200 > c.budget {
		e := c.all[0]
		e.holders.Add(1) // dropped, not kept spare
		c.removeLocked(e)
	}
	c.mu.Unlock()
	c.Release(held)
	if c.Spare() != 200 {
		t.Fatalf("spare %d after the release, want the released 200", c.Spare())
	}
	reused := false
	for range 10 {
		b := c.Alloc(200)
		reused = reused || &b[:1][0] == &held.Bytes[:1][0]
	}
	if !reused {
		t.Fatal("a released, evicted chunk's buffer was not reused")
	}
}

// A waiter that gives up before the fetch completes takes no hold, so the
// chunk's buffer is reused once evicted.
func TestCancelledWaiterHoldsNothing(t *testing.T) {
	c := New(3200, nil) // spares up to 200 bytes: one buffer
	c.Claim([]Key{{Sample: 1}}, func(Key) int64 { return 200 })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, _, err := c.Get(ctx, Key{Sample: 1}, nil)
		done <- err
	}()
	waitUntil(t, func() bool { return c.waitersOf(Key{Sample: 1}) == 1 })
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled waiter got no error")
	}
	b := c.Alloc(200)
	c.Fill(Key{Sample: 1}, b)
	c.mu.Lock()
	e := c.entries[Key{Sample: 1}]
	c.mu.Unlock()
	if n := e.holders.Load(); n != 0 {
		t.Fatalf("%d holds after the only waiter gave up", n)
	}
	for s := int64(2); c.Contains(Key{Sample: 1}); s++ {
		c.Release(get200(t, c, Key{Sample: s}))
	}
	if c.Spare() != 200 || &c.Alloc(200)[:1][0] != &b[:1][0] {
		t.Fatalf("spare %d: key 1's buffer was not taken back when it was evicted", c.Spare())
	}
}

func get200(t *testing.T, c *Cache, k Key) Held {
	h, _, err := c.Get(context.Background(), k, func(context.Context) ([]byte, error) { return c.Alloc(200), nil })
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// Many readers, a cache a fraction of what they read, prefetch-style claims
// beside demand fetches: every byte a reader copies out while holding a
// chunk is that chunk's, and the cache and its spares stay within budget.
func TestRecycledBuffersUnderConcurrency(t *testing.T) {
	const keys, size = 200, 4000
	c := New(40*size, nil)
	var wg sync.WaitGroup
	stop := time.Now().Add(2 * time.Second)
	errs := make(chan string, 16)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			out := make([]byte, size)
			for time.Now().Before(stop) {
				k := Key{Sample: int64(rng.IntN(keys))}
				if rng.IntN(4) == 0 { // a prefetcher's claim and fill
					for _, ck := range c.Claim([]Key{k}, func(Key) int64 { return size }) {
						b := c.Alloc(size)
						fill(b, ck)
						c.Fill(ck, b)
					}
					continue
				}
				h, ok := c.Lookup(k)
				if !ok {
					var err error
					h, _, err = c.Get(context.Background(), k, func(context.Context) ([]byte, error) {
						b := c.Alloc(size)
						fill(b, k)
						return b, nil
					})
					if err != nil {
						errs <- err.Error()
						return
					}
				}
				copy(out, h.Bytes)
				time.Sleep(time.Duration(rng.IntN(20)) * time.Microsecond) // hold it a while
				ok = holdsPattern(h.Bytes, k)
				c.Release(h)
				if !ok || !holdsPattern(out, k) {
					errs <- "a reader saw another chunk's bytes"
					return
				}
				c.mu.Lock()
				held := c.used + c.spare.bytes
				c.mu.Unlock()
				if held > c.budget {
					errs <- fmt.Sprintf("cached, reserved and spare: %d bytes, over the budget of %d", held, c.budget)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	if c.Evictions.Load() < 1000 {
		t.Fatalf("%d evictions: the test did not churn the cache", c.Evictions.Load())
	}
	t.Logf("%d evictions, %d spare bytes at the end", c.Evictions.Load(), c.Spare())
}
