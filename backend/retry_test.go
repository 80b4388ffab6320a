package backend

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// refusing answers its first n calls with err.
type refusing struct {
	Store
	n     int
	calls int
	err   error
}

func (r *refusing) Stat(ctx context.Context, key string) (int64, error) {
	r.calls++
	if r.calls <= r.n {
		return 0, r.err
	}
	return 7, nil
}

var errSlowDown = &Error{Store: "s", Op: "stat", Err: fmt.Errorf("%w (%w): SlowDown (HTTP 503)", ErrUnavailable, ErrThrottled)}

// Retry waits out a throttle, counts each refusal, returns other errors at
// once, and never waits past the caller's deadline.
func TestRetry(t *testing.T) {
	ctx := context.Background()
	t.Run("throttled, then answers", func(t *testing.T) {
		r := &refusing{n: 3, err: errSlowDown}
		s := WithRetry(r)
		s.Base = time.Millisecond
		seen := 0
		s.OnThrottle = func() { seen++ }
		if n, err := s.Stat(ctx, "k"); err != nil || n != 7 || r.calls != 4 || seen != 3 || s.Throttled() != 3 {
			t.Fatalf("got %d, %v after %d calls, %d counted", n, err, r.calls, seen)
		}
	})
	t.Run("gives up after its attempts", func(t *testing.T) {
		r := &refusing{n: 100, err: errSlowDown}
		s := WithRetry(r)
		s.Base = time.Millisecond
		if _, err := s.Stat(ctx, "k"); !errors.Is(err, ErrThrottled) || r.calls != s.Attempts {
			t.Fatalf("%v after %d calls, want the refusal after %d", err, r.calls, s.Attempts)
		}
	})
	t.Run("other errors at once", func(t *testing.T) {
		r := &refusing{n: 100, err: &Error{Store: "s", Op: "stat", Err: ErrUnavailable}}
		if _, err := WithRetry(r).Stat(ctx, "k"); !errors.Is(err, ErrUnavailable) || r.calls != 1 {
			t.Fatalf("%v after %d calls, want 1", err, r.calls)
		}
	})
	t.Run("within the deadline", func(t *testing.T) {
		r := &refusing{n: 100, err: errSlowDown}
		s := WithRetry(r)
		s.Base, s.Cap, s.Attempts = time.Second, time.Second, 100
		dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := s.Stat(dctx, "k")
		if !errors.Is(err, ErrThrottled) || time.Since(start) > 5*time.Second {
			t.Fatalf("%v after %v", err, time.Since(start))
		}
	})
}
