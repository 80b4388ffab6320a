package heal

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardfs/shardfs/backend"
)

// Rates bound what the healer asks of the stores, so a scrub never takes
// the bandwidth a training job reads with. Zero means no bound.
type Rates struct {
	BytesPerSec    int64   // bytes read and written, over all stores
	RequestsPerSec float64 // requests of any kind, over all stores
}

// The healer's requests are counted as they go and paid for between steps
// (pacer.pay), not held back one by one: a request held in a queue looks,
// to the read path's clocks, like a slow store, which it would then mark
// down and hedge around (more requests). So each step runs at the stores'
// speed, and the healer then waits until what it used fits its rates.

// counter counts the requests and bytes of the healer's stores.
type counter struct {
	requests, bytes atomic.Int64
}

// countedStore is a store whose requests and bytes are counted.
type countedStore struct {
	backend.Store
	c *counter
}

// Unwrap returns the store whose requests are counted.
func (s *countedStore) Unwrap() backend.Store { return s.Store }

func (s *countedStore) add(n int64) {
	s.c.requests.Add(1)
	s.c.bytes.Add(n)
}

func (s *countedStore) ReadAt(ctx context.Context, key string, p []byte, off int64) error {
	s.add(int64(len(p)))
	return s.Store.ReadAt(ctx, key, p, off)
}

func (s *countedStore) ReadAtV(ctx context.Context, key string, bufs [][]byte, off int64) error {
	s.add(int64(backend.VecLen(bufs)))
	return s.Store.ReadAtV(ctx, key, bufs, off)
}

func (s *countedStore) Put(ctx context.Context, key string, data []byte) error {
	s.add(int64(len(data)))
	return s.Store.Put(ctx, key, data)
}

func (s *countedStore) Create(ctx context.Context, key string, data []byte) error {
	s.add(int64(len(data)))
	return s.Store.Create(ctx, key, data)
}

func (s *countedStore) ReadWhole(ctx context.Context, key string, max int64, into func(size int64) []byte) (int64, bool, error) {
	var read int64 // whole or its first max bytes
	size, whole, err := s.Store.ReadWhole(ctx, key, max, func(n int64) []byte {
		read = n
		return into(n)
	})
	if err != nil {
		read = 0
	}
	s.add(read)
	return size, whole, err
}

func (s *countedStore) Stat(ctx context.Context, key string) (int64, error) {
	s.add(0)
	return s.Store.Stat(ctx, key)
}

func (s *countedStore) List(ctx context.Context, prefix string) ([]string, error) {
	s.add(0)
	return s.Store.List(ctx, prefix)
}

func (s *countedStore) Delete(ctx context.Context, key string) error {
	s.add(0)
	return s.Store.Delete(ctx, key)
}

// pacer holds the healer to its rates: two token buckets (bytes and
// requests) that may run into debt by one step's use, which pay then
// waits off. A bucket holds at most a second of its rate, so a healer
// idle through its pause starts again at its rate, not in a burst.
type pacer struct {
	rates Rates
	c     *counter

	mu        sync.Mutex
	last      time.Time
	paidReq   int64
	paidBytes int64
	tokReq    float64
	tokBytes  float64
}

func newPacer(r Rates, c *counter) *pacer {
	return &pacer{rates: r, c: c, last: time.Now(), tokReq: r.RequestsPerSec, tokBytes: float64(r.BytesPerSec)}
}

// pay charges what the stores were asked since the last pay, and waits
// until both buckets are out of debt (or ctx ends).
func (p *pacer) pay(ctx context.Context) error {
	if p.rates.BytesPerSec <= 0 && p.rates.RequestsPerSec <= 0 {
		return nil
	}
	p.mu.Lock()
	now := time.Now()
	dt := now.Sub(p.last).Seconds()
	p.last = now
	req, b := p.c.requests.Load(), p.c.bytes.Load()
	var wait time.Duration
	if r := p.rates.RequestsPerSec; r > 0 {
		p.tokReq = min(r, p.tokReq+r*dt) - float64(req-p.paidReq)
		if p.tokReq < 0 {
			wait = max(wait, time.Duration(-p.tokReq/r*float64(time.Second)))
		}
	}
	if r := float64(p.rates.BytesPerSec); r > 0 {
		p.tokBytes = min(r, p.tokBytes+r*dt) - float64(b-p.paidBytes)
		if p.tokBytes < 0 {
			wait = max(wait, time.Duration(-p.tokBytes/r*float64(time.Second)))
		}
	}
	p.paidReq, p.paidBytes = req, b
	p.mu.Unlock()
	if wait <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(wait):
		return nil
	}
}

// countStores wraps every store so that c counts what is asked of it.
func countStores(stores []backend.Store, c *counter) []backend.Store {
	out := make([]backend.Store, len(stores))
	for i, s := range stores {
		out[i] = &countedStore{Store: s, c: c}
	}
	return out
}
