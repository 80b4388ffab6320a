package backend

import (
	"context"
	"fmt"
	"time"
)

// Timeout wraps a Store and bounds every request, so a store that accepts
// connections and never answers (a hung process, a black-holed network)
// costs a caller at most one bounded wait per request instead of the HTTP
// client's minutes. The bound grows with the bytes moved, at MinRate.
type Timeout struct {
	Store
	Base    time.Duration // bound of a request that moves no bytes
	MinRate float64       // bytes per second a healthy store always exceeds
}

// DefaultRequestTimeout bounds one store request of no payload.
const DefaultRequestTimeout = 10 * time.Second

// WithTimeout bounds every request of s by base plus 1 s per MB moved.
func WithTimeout(s Store, base time.Duration) *Timeout {
	return &Timeout{Store: s, Base: base, MinRate: 1e6}
}

// Unwrap returns the store whose requests are bounded.
func (t *Timeout) Unwrap() Store { return t.Store }

// request is one request's bound: how long, and the scheduler's record
// from its start (stallWatch).
type request struct {
	d      time.Duration
	stalls stallWatch
}

func (t *Timeout) bound(ctx context.Context, bytes int) (context.Context, context.CancelFunc, request) {
	d := t.Base
	if t.MinRate > 0 {
		d += time.Duration(float64(bytes) / t.MinRate * float64(time.Second))
	}
	return t.within(ctx, d)
}

func (t *Timeout) within(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc, request) {
	req := request{d: d, stalls: watchStalls()}
	c, cancel := context.WithTimeout(ctx, d)
	return c, cancel, req
}

// timedOut turns the wrapper's own deadline into an availability error that
// names the store; a deadline or cancellation of the caller passes through.
// A deadline that ran out while this process itself stalled (stallWatch:
// a goroutine waited a quarter of the bound to run) is ErrStalled, not
// the store's fault: on a busy machine the wait was ours, and the store
// may never have been asked (Health.runProbe's CI failure, the same class).
func (t *Timeout) timedOut(parent, ctx context.Context, req request, op, key string, err error) error {
	if err != nil && parent.Err() == nil && context.Cause(ctx) == context.DeadlineExceeded {
		if req.stalls.stalled(req.d) {
			return &Error{Store: t.String(), Op: op, Key: key,
				Err: fmt.Errorf("%w: the %v request timeout ran out while this process could not run for a quarter of it; not counted against the store", ErrStalled, t.Base)}
		}
		return &Error{Store: t.String(), Op: op, Key: key, Err: noAnswer{t.Base}}
	}
	return err
}

// noAnswer is the request timeout's error: the store answered nothing
// within it (an ErrUnavailable). Health tells it from errors the store
// replied with: a store that replies, even with errors, is not hung.
type noAnswer struct{ base time.Duration }

func (e noAnswer) Error() string {
	return fmt.Sprintf("%v: no answer within the %v request timeout", ErrUnavailable, e.base)
}

func (e noAnswer) Unwrap() error { return ErrUnavailable }

var _ Store = (*Timeout)(nil)

func (t *Timeout) ReadAt(ctx context.Context, key string, p []byte, off int64) error {
	c, cancel, req := t.bound(ctx, len(p))
	defer cancel()
	return t.timedOut(ctx, c, req, "read", key, t.Store.ReadAt(c, key, p, off))
}

// ReadAtV passes a vectored read through, bounded like ReadAt.
func (t *Timeout) ReadAtV(ctx context.Context, key string, bufs [][]byte, off int64) error {
	c, cancel, req := t.bound(ctx, VecLen(bufs))
	defer cancel()
	return t.timedOut(ctx, c, req, "read", key, t.Store.ReadAtV(c, key, bufs, off))
}

func (t *Timeout) Put(ctx context.Context, key string, data []byte) error {
	c, cancel, req := t.bound(ctx, len(data))
	defer cancel()
	return t.timedOut(ctx, c, req, "write", key, t.Store.Put(c, key, data))
}

func (t *Timeout) Create(ctx context.Context, key string, data []byte) error {
	c, cancel, req := t.bound(ctx, len(data))
	defer cancel()
	return t.timedOut(ctx, c, req, "create", key, t.Store.Create(c, key, data))
}

// ReadWhole passes a whole read through, bounded by Base until the store
// says the object's size, then by a ReadAt's bound of its bytes from that
// moment: a bound of max bytes would let a hung store hold a small
// object's read for as long as the largest it could be.
func (t *Timeout) ReadWhole(ctx context.Context, key string, max int64, into func(size int64) []byte) (int64, bool, error) {
	req := request{d: t.Base, stalls: watchStalls()}
	c, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := time.AfterFunc(t.Base, func() { cancel(context.DeadlineExceeded) })
	defer timer.Stop()
	size, whole, err := t.Store.ReadWhole(c, key, max, func(n int64) []byte {
		if t.MinRate > 0 {
			req.d = t.Base + time.Duration(float64(n)/t.MinRate*float64(time.Second))
			timer.Reset(req.d)
		}
		return into(n)
	})
	return size, whole, t.timedOut(ctx, c, req, "read", key, err)
}

func (t *Timeout) Stat(ctx context.Context, key string) (int64, error) {
	c, cancel, req := t.bound(ctx, 0)
	defer cancel()
	n, err := t.Store.Stat(c, key)
	return n, t.timedOut(ctx, c, req, "stat", key, err)
}

// List may page through many objects: it gets four times the base bound.
func (t *Timeout) List(ctx context.Context, prefix string) ([]string, error) {
	c, cancel, req := t.within(ctx, 4*t.Base)
	defer cancel()
	keys, err := t.Store.List(c, prefix)
	return keys, t.timedOut(ctx, c, req, "list", prefix, err)
}

func (t *Timeout) Delete(ctx context.Context, key string) error {
	c, cancel, req := t.bound(ctx, 0)
	defer cancel()
	return t.timedOut(ctx, c, req, "delete", key, t.Store.Delete(c, key))
}
