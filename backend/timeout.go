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

func (t *Timeout) bound(ctx context.Context, bytes int) (context.Context, context.CancelFunc) {
	d := t.Base
	if t.MinRate > 0 {
		d += time.Duration(float64(bytes) / t.MinRate * float64(time.Second))
	}
	return context.WithTimeout(ctx, d)
}

// timedOut turns the wrapper's own deadline into an availability error that
// names the store; a deadline or cancellation of the caller passes through.
func (t *Timeout) timedOut(parent, ctx context.Context, op, key string, err error) error {
	if err != nil && parent.Err() == nil && ctx.Err() == context.DeadlineExceeded {
		return &Error{Store: t.String(), Op: op, Key: key,
			Err: fmt.Errorf("%w: no answer within the %v request timeout", ErrUnavailable, t.Base)}
	}
	return err
}

var _ Store = (*Timeout)(nil)

func (t *Timeout) ReadAt(ctx context.Context, key string, p []byte, off int64) error {
	c, cancel := t.bound(ctx, len(p))
	defer cancel()
	return t.timedOut(ctx, c, "read", key, t.Store.ReadAt(c, key, p, off))
}

// ReadAtV passes a vectored read through, bounded like ReadAt.
func (t *Timeout) ReadAtV(ctx context.Context, key string, bufs [][]byte, off int64) error {
	c, cancel := t.bound(ctx, VecLen(bufs))
	defer cancel()
	return t.timedOut(ctx, c, "read", key, t.Store.ReadAtV(c, key, bufs, off))
}

func (t *Timeout) Put(ctx context.Context, key string, data []byte) error {
	c, cancel := t.bound(ctx, len(data))
	defer cancel()
	return t.timedOut(ctx, c, "write", key, t.Store.Put(c, key, data))
}

func (t *Timeout) Create(ctx context.Context, key string, data []byte) error {
	c, cancel := t.bound(ctx, len(data))
	defer cancel()
	return t.timedOut(ctx, c, "create", key, t.Store.Create(c, key, data))
}

func (t *Timeout) Stat(ctx context.Context, key string) (int64, error) {
	c, cancel := t.bound(ctx, 0)
	defer cancel()
	n, err := t.Store.Stat(c, key)
	return n, t.timedOut(ctx, c, "stat", key, err)
}

// List may page through many objects: it gets four times the base bound.
func (t *Timeout) List(ctx context.Context, prefix string) ([]string, error) {
	c, cancel := context.WithTimeout(ctx, 4*t.Base)
	defer cancel()
	keys, err := t.Store.List(c, prefix)
	return keys, t.timedOut(ctx, c, "list", prefix, err)
}

func (t *Timeout) Delete(ctx context.Context, key string) error {
	c, cancel := t.bound(ctx, 0)
	defer cancel()
	return t.timedOut(ctx, c, "delete", key, t.Store.Delete(c, key))
}
