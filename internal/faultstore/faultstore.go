// Package faultstore is the fault-injecting store wrapper, for tests and
// benchmarks only: it is imported by test files and by the test build of
// the shardfs binary (build tag shardfs_testhooks), never by the shipped
// binary.
package faultstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/shardfs/shardfs/backend"
)

// Faulty wraps a Store and injects faults, for tests of degraded paths only.
// Its zero faults pass every call through. All setters are safe to call
// while other goroutines use the store.
type Faulty struct {
	backend.Store

	mu        sync.Mutex // guards the fields below
	down      bool
	delay     time.Duration
	jitter    time.Duration
	failNth   int // fail the n-th call from now (1 = the next); 0 = never
	calls     int
	total     int // every call since New
	shortBody bool
	flipBits  bool
	stream    time.Duration // a read answers at once, then takes this long to finish
	rng       *rand.Rand
}

// New wraps s with no faults enabled.
func New(s backend.Store) *Faulty {
	return &Faulty{Store: s, rng: rand.New(rand.NewPCG(1, 2))}
}

// Calls is the number of calls the store has received.
func (f *Faulty) Calls() int { f.mu.Lock(); defer f.mu.Unlock(); return f.total }

// SetDown makes every call fail with ErrUnavailable.
func (f *Faulty) SetDown(down bool) { f.mu.Lock(); f.down = down; f.mu.Unlock() }

// SetDelay adds delay ± jitter (uniform) before every call. The wait honours ctx.
func (f *Faulty) SetDelay(delay, jitter time.Duration) {
	f.mu.Lock()
	f.delay, f.jitter = delay, jitter
	f.mu.Unlock()
}

// FailNth makes the n-th call from now fail once with ErrUnavailable.
func (f *Faulty) FailNth(n int) { f.mu.Lock(); f.failNth, f.calls = n, 0; f.mu.Unlock() }

// SetShortBody makes ReadAt return one byte fewer than asked, as a cut
// connection would, with no error: the layer above must catch it.
func (f *Faulty) SetShortBody(on bool) { f.mu.Lock(); f.shortBody = on; f.mu.Unlock() }

// SetFlipBits makes ReadAt flip one bit of every result, silently.
func (f *Faulty) SetFlipBits(on bool) { f.mu.Lock(); f.flipBits = on; f.mu.Unlock() }

// SetStreaming makes every read answer at once (its first byte arrives,
// see FirstByte) and then take d to finish, as a healthy store does whose
// bandwidth the reader's other requests share.
func (f *Faulty) SetStreaming(d time.Duration) { f.mu.Lock(); f.stream = d; f.mu.Unlock() }

// before applies down, n-th-call and delay faults.
func (f *Faulty) before(ctx context.Context, op string) error {
	f.mu.Lock()
	f.calls++
	f.total++
	fail := f.down || (f.failNth > 0 && f.calls == f.failNth)
	d := f.delay
	if f.jitter > 0 {
		d += time.Duration(f.rng.Int64N(int64(2*f.jitter))) - f.jitter
	}
	f.mu.Unlock()
	if fail {
		return &backend.Error{Store: f.String(), Op: op, Err: fmt.Errorf("%w: injected fault", backend.ErrUnavailable)}
	}
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

var _ backend.Store = (*Faulty)(nil)

func (f *Faulty) ReadAt(ctx context.Context, key string, p []byte, off int64) error {
	return f.ReadAtV(ctx, key, [][]byte{p}, off)
}

// ReadAtV applies the faults to a vectored read and passes it on as a
// vectored read, so what is measured through Faulty is the path production
// reads by.
func (f *Faulty) ReadAtV(ctx context.Context, key string, bufs [][]byte, off int64) error {
	if err := f.before(ctx, "read"); err != nil {
		return err
	}
	f.mu.Lock()
	short, flip, stream := f.shortBody, f.flipBits, f.stream
	f.mu.Unlock()
	if stream > 0 {
		backend.MarkFirstByte(ctx)
		t := time.NewTimer(stream)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	n := backend.VecLen(bufs)
	if short && n > 0 {
		// Read one byte less and leave the last byte zeroed: a silent truncation.
		last := len(bufs) - 1
		for last > 0 && len(bufs[last]) == 0 {
			last--
		}
		head := append(bufs[:last:last], bufs[last][:len(bufs[last])-1])
		if err := f.Store.ReadAtV(ctx, key, head, off); err != nil {
			return err
		}
		bufs[last][len(bufs[last])-1] = 0
		return nil
	}
	if err := f.Store.ReadAtV(ctx, key, bufs, off); err != nil {
		return err
	}
	if flip && n > 0 {
		f.mu.Lock()
		i := f.rng.IntN(n)
		f.mu.Unlock()
		for _, b := range bufs {
			if i < len(b) {
				b[i] ^= 0x10
				break
			}
			i -= len(b)
		}
	}
	return nil
}

func (f *Faulty) Put(ctx context.Context, key string, data []byte) error {
	if err := f.before(ctx, "write"); err != nil {
		return err
	}
	return f.Store.Put(ctx, key, data)
}

func (f *Faulty) Create(ctx context.Context, key string, data []byte) error {
	if err := f.before(ctx, "create"); err != nil {
		return err
	}
	return f.Store.Create(ctx, key, data)
}

func (f *Faulty) ReadWhole(ctx context.Context, key string, max int64, into func(size int64) []byte) (int64, bool, error) {
	if err := f.before(ctx, "read"); err != nil {
		return 0, false, err
	}
	return f.Store.ReadWhole(ctx, key, max, into)
}

func (f *Faulty) Stat(ctx context.Context, key string) (int64, error) {
	if err := f.before(ctx, "stat"); err != nil {
		return 0, err
	}
	return f.Store.Stat(ctx, key)
}

func (f *Faulty) List(ctx context.Context, prefix string) ([]string, error) {
	if err := f.before(ctx, "list"); err != nil {
		return nil, err
	}
	return f.Store.List(ctx, prefix)
}

func (f *Faulty) Delete(ctx context.Context, key string) error {
	if err := f.before(ctx, "delete"); err != nil {
		return err
	}
	return f.Store.Delete(ctx, key)
}
