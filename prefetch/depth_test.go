package prefetch

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestDepthForLittlesLaw(t *testing.T) {
	const floor, ceiling = 64, 352
	for _, c := range []struct {
		name               string
		rate, latency, get float64
		want               int
	}{
		{"unmeasured", 0, 0, 0, floor},
		{"no GET yet", 100e6, 0.02, 0, floor},
		// 100 samples/s of 48 KiB at 20 ms: 2 in flight, the floor holds.
		{"slow readers", 100 * 49152, 0.02, 49152, floor},
		// 2,000 samples/s at 50 ms: 100 in flight, 200 with the margin.
		{"demand over the floor", 2000 * 49152, 0.05, 49152, 200},
		// 2,000 samples/s at 200 ms: 400, 800 with the margin; the stores' slots hold it.
		{"ceiling", 2000 * 49152, 0.2, 49152, ceiling},
		// Large GETs (window order): 8 MiB spans at 500 MB/s and 100 ms: 6, the floor.
		{"large GETs", 500e6, 0.1, 8 << 20, floor},
	} {
		if got := depthFor(c.rate, c.latency, c.get, floor, ceiling); got != c.want {
			t.Errorf("%s: depthFor(%v B/s, %v s, %v B) = %d, want %d", c.name, c.rate, c.latency, c.get, got, c.want)
		}
	}
	// Held back by the depth, the readers get depth ÷ latency GETs a
	// second; the next depth is twice that, until the ceiling.
	depth, steps := floor, 0
	for depth < ceiling {
		got := float64(depth) / 0.2 * 49152 // bytes/s the readers get at 200 ms
		next := depthFor(got, 0.2, 49152, floor, ceiling)
		if next <= depth && next < ceiling {
			t.Fatalf("a depth-bound reader at %d GETs in flight gets depth %d: it would never grow", depth, next)
		}
		depth, steps = next, steps+1
	}
	if steps > 3 {
		t.Errorf("the depth took %d steps from %d to %d; want 3 at most (it doubles)", steps, floor, ceiling)
	}
}

func TestDepthGate(t *testing.T) {
	g := newDepthGate(2)
	ctx := context.Background()
	for range 2 {
		if err := g.acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var got atomic.Int32
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if g.acquire(ctx) == nil {
				got.Add(1)
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	if n := got.Load(); n != 0 {
		t.Fatalf("%d acquired past a full gate of 2", n)
	}
	g.setLimit(4) // two more may go
	deadline := time.Now().Add(5 * time.Second)
	for got.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if n := got.Load(); n != 2 {
		t.Fatalf("raising the limit from 2 to 4 let %d waiters in, want 2", n)
	}
	g.setLimit(1) // lowered: the 4 in flight stay; none enters until 3 leave
	for range 3 {
		if got.Load() != 2 {
			t.Fatalf("a waiter entered while %d slots were in use of 1", 4)
		}
		g.release()
	}
	time.Sleep(50 * time.Millisecond)
	if n := got.Load(); n != 2 {
		t.Fatalf("after 3 releases of 4 in flight with a limit of 1, %d acquired, want 2 (1 still in use)", n)
	}
	g.release()
	wg.Wait()
	if limit, used := g.state(); limit != 1 || used != 1 {
		t.Fatalf("gate: limit %d, used %d; want 1 and 1", limit, used)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := g.acquire(cctx); err == nil {
		t.Fatal("acquire on a full gate with a cancelled context succeeded")
	}
}
