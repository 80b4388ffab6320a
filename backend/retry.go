package backend

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// Retry wraps a Store and retries the requests the store refused for load
// (ErrThrottled: S3's 503 SlowDown, 500 InternalError, 429), as every S3
// client is expected to: real S3 throttles per prefix under load, and
// such a refusal says nothing about the data. It waits a jittered,
// doubling backoff ("full jitter") between attempts, and never past the
// caller's deadline: a read that cannot wait out the throttle fails in
// time, and the erasure reader reads another store. Other errors, a store
// that does not answer among them, are returned at once: erasure coding,
// not retries, absorbs them.
//
// Retry sits inside the concurrency limit (Limit wraps it): a request
// that backs off keeps its slot, so a throttling store gets fewer
// requests, and the reader, seeing it queueing, hedges to another.
type Retry struct {
	Store
	Attempts int           // attempts in all, at least 1
	Base     time.Duration // the first backoff's upper bound
	Cap      time.Duration // the largest backoff's upper bound
	// OnThrottle, if set, is called once per refusal (for metrics). Set it
	// before the store is used.
	OnThrottle func()
	throttled  atomic.Int64
}

// WithRetry retries throttled requests of s: 6 attempts, backoffs up to
// 50 ms, 100 ms, ... 1.6 s (capped at 2 s).
func WithRetry(s Store) *Retry {
	return &Retry{Store: s, Attempts: 6, Base: 50 * time.Millisecond, Cap: 2 * time.Second}
}

// Unwrap returns the store whose requests are retried.
func (r *Retry) Unwrap() Store { return r.Store }

// Throttled is the number of refusals for load seen so far.
func (r *Retry) Throttled() int64 { return r.throttled.Load() }

var _ Store = (*Retry)(nil)

// OnThrottle sets the throttle callback of the Retry below s's decorators,
// and reports whether s has one.
func OnThrottle(s Store, f func()) bool {
	r, ok := below[*Retry](s)
	if ok {
		r.OnThrottle = f
	}
	return ok
}

func (r *Retry) do(ctx context.Context, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || !errors.Is(err, ErrThrottled) {
			return err
		}
		r.throttled.Add(1)
		if r.OnThrottle != nil {
			r.OnThrottle()
		}
		if attempt >= r.Attempts {
			return err
		}
		bound := min(r.Cap, r.Base<<(attempt-1))
		wait := time.Duration(rand.Int64N(int64(bound) + 1))
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= wait {
			return err // no time left to wait it out: let the caller read elsewhere
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

func (r *Retry) ReadAt(ctx context.Context, key string, p []byte, off int64) error {
	return r.do(ctx, func() error { return r.Store.ReadAt(ctx, key, p, off) })
}

func (r *Retry) ReadAtV(ctx context.Context, key string, bufs [][]byte, off int64) error {
	return r.do(ctx, func() error { return r.Store.ReadAtV(ctx, key, bufs, off) })
}

func (r *Retry) Put(ctx context.Context, key string, data []byte) error {
	return r.do(ctx, func() error { return r.Store.Put(ctx, key, data) })
}

// Create is retried only while the store refused it for load: a refusal
// means it did not create the object, so the retry cannot find its own.
func (r *Retry) Create(ctx context.Context, key string, data []byte) error {
	return r.do(ctx, func() error { return r.Store.Create(ctx, key, data) })
}

func (r *Retry) ReadWhole(ctx context.Context, key string, max int64, into func(size int64) []byte) (size int64, whole bool, err error) {
	err = r.do(ctx, func() (e error) { size, whole, e = r.Store.ReadWhole(ctx, key, max, into); return e })
	return size, whole, err
}

func (r *Retry) Stat(ctx context.Context, key string) (n int64, err error) {
	err = r.do(ctx, func() (e error) { n, e = r.Store.Stat(ctx, key); return e })
	return n, err
}

func (r *Retry) List(ctx context.Context, prefix string) (keys []string, err error) {
	err = r.do(ctx, func() (e error) { keys, e = r.Store.List(ctx, prefix); return e })
	return keys, err
}

func (r *Retry) Delete(ctx context.Context, key string) error {
	return r.do(ctx, func() error { return r.Store.Delete(ctx, key) })
}
