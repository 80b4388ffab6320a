package heal

import (
	"context"

	"golang.org/x/time/rate"

	"github.com/shardfs/shardfs/backend"
)

// Rates bound what the healer asks of the stores, so a scrub never takes
// the bandwidth a training job reads with. Zero means no bound.
type Rates struct {
	BytesPerSec    int64   // bytes read and written, over all stores
	RequestsPerSec float64 // requests of any kind, over all stores
}

// limiter is one bound on bytes and one on requests, shared by every store
// the healer opens.
type limiter struct {
	bytes, requests *rate.Limiter
}

func newLimiter(r Rates) *limiter {
	l := &limiter{}
	if r.BytesPerSec > 0 {
		// A burst of a quarter second keeps the rate within a few percent
		// over any second, and lets one fragment through in pieces.
		l.bytes = rate.NewLimiter(rate.Limit(r.BytesPerSec), int(max(r.BytesPerSec/4, 64<<10)))
	}
	if r.RequestsPerSec > 0 {
		l.requests = rate.NewLimiter(rate.Limit(r.RequestsPerSec), max(int(r.RequestsPerSec/4), 1))
	}
	return l
}

// request waits for one request and n bytes.
func (l *limiter) request(ctx context.Context, n int64) error {
	if l.requests != nil {
		if err := l.requests.Wait(ctx); err != nil {
			return err
		}
	}
	if l.bytes == nil {
		return nil
	}
	for n > 0 {
		step := min(n, int64(l.bytes.Burst()))
		if err := l.bytes.WaitN(ctx, int(step)); err != nil {
			return err
		}
		n -= step
	}
	return nil
}

// limitedStore is a store whose requests wait for the healer's rates.
type limitedStore struct {
	backend.Store
	l *limiter
}

// Unwrap returns the store whose requests are limited.
func (s *limitedStore) Unwrap() backend.Store { return s.Store }

func (s *limitedStore) ReadAt(ctx context.Context, key string, p []byte, off int64) error {
	if err := s.l.request(ctx, int64(len(p))); err != nil {
		return err
	}
	return s.Store.ReadAt(ctx, key, p, off)
}

func (s *limitedStore) ReadAtV(ctx context.Context, key string, bufs [][]byte, off int64) error {
	var n int64
	for _, b := range bufs {
		n += int64(len(b))
	}
	if err := s.l.request(ctx, n); err != nil {
		return err
	}
	return s.Store.ReadAtV(ctx, key, bufs, off)
}

func (s *limitedStore) Put(ctx context.Context, key string, data []byte) error {
	if err := s.l.request(ctx, int64(len(data))); err != nil {
		return err
	}
	return s.Store.Put(ctx, key, data)
}

func (s *limitedStore) Create(ctx context.Context, key string, data []byte) error {
	if err := s.l.request(ctx, int64(len(data))); err != nil {
		return err
	}
	return s.Store.Create(ctx, key, data)
}

func (s *limitedStore) Stat(ctx context.Context, key string) (int64, error) {
	if err := s.l.request(ctx, 0); err != nil {
		return 0, err
	}
	return s.Store.Stat(ctx, key)
}

func (s *limitedStore) List(ctx context.Context, prefix string) ([]string, error) {
	if err := s.l.request(ctx, 0); err != nil {
		return nil, err
	}
	return s.Store.List(ctx, prefix)
}

func (s *limitedStore) Delete(ctx context.Context, key string) error {
	if err := s.l.request(ctx, 0); err != nil {
		return err
	}
	return s.Store.Delete(ctx, key)
}

// limitStores wraps every store in the shared bounds of r; with no bound,
// the stores as they are.
func limitStores(stores []backend.Store, r Rates) []backend.Store {
	if r.BytesPerSec <= 0 && r.RequestsPerSec <= 0 {
		return stores
	}
	l := newLimiter(r)
	out := make([]backend.Store, len(stores))
	for i, s := range stores {
		out[i] = &limitedStore{Store: s, l: l}
	}
	return out
}
