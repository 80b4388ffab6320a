package backend_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/busy"
)

// gate is a store whose reads count themselves in flight and wait until
// released (or their context ends).
type gate struct {
	backend.Store
	inFlight, most atomic.Int64
	open           chan struct{}
}

func (g *gate) ReadAt(ctx context.Context, key string, p []byte, off int64) error {
	n := g.inFlight.Add(1)
	defer g.inFlight.Add(-1)
	for {
		m := g.most.Load()
		if n <= m || g.most.CompareAndSwap(m, n) {
			break
		}
	}
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// 64 goroutines reading through a limit of 4, with every core busy: never
// more than 4 reach the store at once, all 4 slots are used, and every
// read completes.
func TestLimitBoundsRequestsInFlight(t *testing.T) {
	busy.Burn(t, 2*runtime.GOMAXPROCS(0))
	g := &gate{open: make(chan struct{})}
	l := backend.WithLimit(g, 4)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- l.ReadAt(context.Background(), "k", nil, 0)
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for l.Waiting() != 60 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if w, n := l.Waiting(), g.inFlight.Load(); w != 60 || n != 4 || !l.Queueing() || !backend.Queueing(backend.WithHealth(l, "probe", backend.HealthOptions{}, nil)) {
		t.Fatalf("%d waiting, %d in flight, queueing %v: want 60, 4, true (also seen through a Health wrapper)", w, n, l.Queueing())
	}
	close(g.open)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if most := g.most.Load(); most != 4 {
		t.Fatalf("at most %d requests reached the store at once, want exactly the limit 4", most)
	}
	if l.Queueing() || l.Waiting() != 0 {
		t.Fatalf("after every read: queueing %v, %d waiting", l.Queueing(), l.Waiting())
	}
}

// A request waiting for a slot ends with its context, takes no slot, and
// leaves the limit whole: once the store frees, the next request runs.
func TestLimitWaitEndsWithContext(t *testing.T) {
	g := &gate{open: make(chan struct{})}
	l := backend.WithLimit(g, 2)
	hold, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); l.ReadAt(hold, "k", nil, 0) }()
	}
	for g.inFlight.Load() != 2 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := l.ReadAt(ctx, "k", nil, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a wait past its deadline: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the wait ended %v after a 50ms deadline", d)
	}
	stop()
	wg.Wait()
	close(g.open)
	if err := l.ReadAt(context.Background(), "k", nil, 0); err != nil || l.Waiting() != 0 || l.Queueing() {
		t.Fatalf("after the holders ended: %v, %d waiting, queueing %v", err, l.Waiting(), l.Queueing())
	}
}
