package backend

import (
	"testing"
	"time"
)

// Issue 42 item 3: the decorator stack is built in one place, in one
// order: Limit outside Retry outside Timeout, with the bounds given (or
// the defaults).
func TestStackOrderAndBounds(t *testing.T) {
	base, err := Open("file://"+t.TempDir(), OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		o       StackOptions
		timeout time.Duration
		slots   int
	}{{StackOptions{}, DefaultRequestTimeout, DefaultStoreConcurrency}, {StackOptions{RequestTimeout: 3 * time.Second, Concurrency: 5}, 3 * time.Second, 5}} {
		l := Stack(base, tc.o)
		r, ok := l.Unwrap().(*Retry)
		if !ok {
			t.Fatalf("under Limit: %T, want *Retry", l.Unwrap())
		}
		to, ok := r.Unwrap().(*Timeout)
		if !ok {
			t.Fatalf("under Retry: %T, want *Timeout", r.Unwrap())
		}
		if to.Unwrap() != base || to.Base != tc.timeout || cap(l.slots) != tc.slots {
			t.Fatalf("%+v: timeout %v, %d slots, innermost %T; want %v, %d, the store opened", tc.o, to.Base, cap(l.slots), to.Unwrap(), tc.timeout, tc.slots)
		}
	}
}
