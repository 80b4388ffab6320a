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
	for i := int32(0); i < 10; i++ {
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
			v, res, err := c.Get(context.Background(), Key{1, 0}, func(context.Context) ([]byte, error) {
				calls.Add(1)
				<-release
				return []byte("data"), nil
			})
			if err != nil || string(v) != "data" {
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
	claimed := c.Claim(keys)
	if len(claimed) != 3 || len(c.Claim(keys)) != 0 {
		t.Fatal("claim must hand each key out once")
	}
	got := make(chan []byte)
	go func() {
		v, res, err := c.Get(context.Background(), Key{2, 0}, nil)
		if err != nil || res != Waited {
			t.Errorf("waiter: %v %v", res, err)
		}
		got <- v
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
	v, res, err := c.Get(context.Background(), Key{3, 0}, func(context.Context) ([]byte, error) { return []byte("three"), nil })
	if err != nil || res != Fetched || string(v) != "three" {
		t.Fatalf("refetch after failure: %q %v %v", v, res, err)
	}
}

func TestWaiterHonoursContext(t *testing.T) {
	c := New(1<<20, nil)
	c.Claim([]Key{{1, 0}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, _, err := c.Get(ctx, Key{1, 0}, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
}
