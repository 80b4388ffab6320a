package backend

import (
	"context"
	"sync/atomic"
)

// Limit bounds the requests in flight to one store, as restic bounds each
// backend's connections: a request past the limit waits here, in order of
// arrival, until a slot frees or its context ends. Prefetch and hedges
// then queue in shardfs, where a caller can see it (Queueing) and ask
// another store, instead of on a store that is already behind.
//
// Limit sits below the request timeout (Timeout wraps the store it
// wraps), so a request's time bound starts when it leaves the queue: our
// own load is never counted against a store as a timeout.
type Limit struct {
	Store
	slots   chan struct{}
	waiting atomic.Int64
}

// DefaultStoreConcurrency is how many requests shardfs sends one store at
// once, unless told: above what the prefetcher's GET slots (64 prefetch,
// 32 demand) put on one store in a healthy run, so it binds only when a
// store falls behind.
const DefaultStoreConcurrency = 64

// WithLimit lets at most n requests to s be in flight at once.
func WithLimit(s Store, n int) *Limit {
	return &Limit{Store: s, slots: make(chan struct{}, max(n, 1))}
}

// Slots is the most requests in flight at once.
func (l *Limit) Slots() int { return cap(l.slots) }

// Concurrency is the most requests shardfs sends s at once: the slots of
// the Limit among its decorators, or 0 when it has none (no bound).
func Concurrency(s Store) int {
	if l, ok := below[*Limit](s); ok {
		return l.Slots()
	}
	return 0
}

// Unwrap returns the store whose requests are limited.
func (l *Limit) Unwrap() Store { return l.Store }

// Queueing reports whether a request sent now would wait: every slot is
// taken.
func (l *Limit) Queueing() bool { return len(l.slots) == cap(l.slots) }

// Waiting is the number of requests waiting for a slot.
func (l *Limit) Waiting() int64 { return l.waiting.Load() }

func (l *Limit) acquire(ctx context.Context) error {
	select {
	case l.slots <- struct{}{}:
		return nil
	default:
	}
	l.waiting.Add(1)
	defer l.waiting.Add(-1)
	select {
	case l.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *Limit) release() { <-l.slots }

var _ Store = (*Limit)(nil)

func (l *Limit) ReadAt(ctx context.Context, key string, p []byte, off int64) error {
	if err := l.acquire(ctx); err != nil {
		return err
	}
	defer l.release()
	return l.Store.ReadAt(ctx, key, p, off)
}

func (l *Limit) ReadAtV(ctx context.Context, key string, bufs [][]byte, off int64) error {
	if err := l.acquire(ctx); err != nil {
		return err
	}
	defer l.release()
	return l.Store.ReadAtV(ctx, key, bufs, off)
}

func (l *Limit) Put(ctx context.Context, key string, data []byte) error {
	if err := l.acquire(ctx); err != nil {
		return err
	}
	defer l.release()
	return l.Store.Put(ctx, key, data)
}

func (l *Limit) Create(ctx context.Context, key string, data []byte) error {
	if err := l.acquire(ctx); err != nil {
		return err
	}
	defer l.release()
	return l.Store.Create(ctx, key, data)
}

func (l *Limit) ReadWhole(ctx context.Context, key string, max int64, into func(size int64) []byte) (int64, bool, error) {
	if err := l.acquire(ctx); err != nil {
		return 0, false, err
	}
	defer l.release()
	return l.Store.ReadWhole(ctx, key, max, into)
}

func (l *Limit) Stat(ctx context.Context, key string) (int64, error) {
	if err := l.acquire(ctx); err != nil {
		return 0, err
	}
	defer l.release()
	return l.Store.Stat(ctx, key)
}

func (l *Limit) List(ctx context.Context, prefix string) ([]string, error) {
	if err := l.acquire(ctx); err != nil {
		return nil, err
	}
	defer l.release()
	return l.Store.List(ctx, prefix)
}

func (l *Limit) Delete(ctx context.Context, key string) error {
	if err := l.acquire(ctx); err != nil {
		return err
	}
	defer l.release()
	return l.Store.Delete(ctx, key)
}

// Queueing reports whether s, or a store under its decorators, is a Limit
// whose every slot is taken: a request to it now would wait.
func Queueing(s Store) bool {
	l, ok := below[*Limit](s)
	return ok && l.Queueing()
}
