package backend_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/shardfs/shardfs/backend"
)

func openAll(t *testing.T, urls ...string) []backend.Store {
	t.Helper()
	var out []backend.Store
	for _, u := range urls {
		s, err := backend.Open(u, backend.OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

func TestCheckDistinct(t *testing.T) {
	d := t.TempDir()
	for _, tc := range []struct {
		urls []string
		want string // "" = accepted
	}{
		{[]string{"file://" + d + "/a", "file://" + d + "/b", "file://" + d + "/ab"}, ""},
		{[]string{"file://" + d + "/a", "file://" + d + "/a/"}, "same place"},
		{[]string{"file://" + d + "/a", "file://" + d + "/./a"}, "same place"},
		{[]string{"file://" + d + "/a", "file://" + d + "/a/b"}, "inside"},
		{[]string{"http://127.0.0.1:9000/bkt/x", "http://127.0.0.1:9000/bkt/x"}, "same place"},
		{[]string{"http://127.0.0.1:9000/bkt/x", "http://127.0.0.1:9000/bkt/x/y"}, "inside"},
		{[]string{"http://127.0.0.1:9000/bkt", "http://127.0.0.1:9000/bkt/y"}, "inside"},
		{[]string{"http://127.0.0.1:9000/bkt/x", "http://127.0.0.1:9001/bkt/x", "http://127.0.0.1:9000/ckt/x", "http://127.0.0.1:9000/bkt/xy"}, ""},
	} {
		err := backend.CheckDistinct(openAll(t, tc.urls...))
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%v: %v, want %q", tc.urls, err, tc.want)
		}
	}
}

func TestOpenNeverEchoesSecrets(t *testing.T) {
	const secret = "wJalrXUtnFEMI-K7MDENG"
	for _, u := range []string{
		"http://AKIA:" + secret + "@127.0.0.1:notaport/b",
		"http://AKIA:" + secret + "@[::1/b",
		"AKIA:" + secret + "@host/b",
		"s3://AKIA:" + secret + "@bucket/p",
		"file://AKIA:" + secret + "@host/dir",
		"ftp://AKIA:" + secret + "@host/b",
		"http://AKIA:" + secret + "@127.0.0.1:9000/b\x7f",
	} {
		_, err := backend.Open(u, backend.OpenOptions{})
		if err == nil {
			t.Errorf("%q accepted", u)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error for a URL with credentials prints the secret: %v", err)
		}
	}
}

// hung answers nothing until its context ends, as a black-holed store.
type hung struct{ backend.Store }

func (hung) ReadAt(ctx context.Context, key string, p []byte, off int64) error {
	<-ctx.Done()
	return ctx.Err()
}

func (hung) ReadWhole(ctx context.Context, key string, max int64, into func(size int64) []byte) (int64, bool, error) {
	<-ctx.Done()
	return 0, false, ctx.Err()
}

// hungAfterSize says an object's size, then sends none of its bytes.
type hungAfterSize struct{ backend.Store }

func (hungAfterSize) ReadWhole(ctx context.Context, key string, max int64, into func(size int64) []byte) (int64, bool, error) {
	into(1000)
	<-ctx.Done()
	return 0, false, ctx.Err()
}

func TestTimeoutBoundsEveryRequest(t *testing.T) {
	s := backend.WithTimeout(hung{openAll(t, "file://"+t.TempDir())[0]}, 50*time.Millisecond)
	for _, read := range []struct {
		name string
		read func(backend.Store) error
	}{
		{"ReadAt", func(s backend.Store) error { return s.ReadAt(context.Background(), "k", make([]byte, 10), 0) }},
		// A whole read of up to 1 TB is bounded by the base until the
		// store says the size, and then by the size's bound.
		{"ReadWhole", func(s backend.Store) error {
			_, _, err := s.ReadWhole(context.Background(), "k", 1<<40, func(n int64) []byte { return make([]byte, n) })
			return err
		}},
		{"ReadWhole, hung after the size", func(backend.Store) error {
			s := backend.WithTimeout(hungAfterSize{openAll(t, "file://"+t.TempDir())[0]}, 50*time.Millisecond)
			_, _, err := s.ReadWhole(context.Background(), "k", 1<<40, func(n int64) []byte { return make([]byte, n) })
			return err
		}},
	} {
		start := time.Now()
		err := read.read(s)
		if !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "request timeout") {
			t.Fatalf("hung %s: %v, want ErrUnavailable naming the request timeout", read.name, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("hung %s returned after %v", read.name, d)
		}
	}
	// The caller's own cancellation is passed through, not turned into unavailability.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.ReadAt(ctx, "k", make([]byte, 10), 0); !errors.Is(err, context.Canceled) || errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("cancelled read: %v, want context.Canceled", err)
	}
}

// yieldsFirst is a store whose requests leave the core before they are
// sent, as a busy machine takes a goroutine off its core at any moment.
type yieldsFirst struct{ backend.Store }

func (s yieldsFirst) ReadAt(ctx context.Context, key string, p []byte, off int64) error {
	runtime.Gosched()
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.Store.ReadAt(ctx, key, p, off)
}

func (s yieldsFirst) ReadWhole(ctx context.Context, key string, max int64, into func(int64) []byte) (int64, bool, error) {
	runtime.Gosched()
	if err := ctx.Err(); err != nil {
		return 0, false, err
	}
	return s.Store.ReadWhole(ctx, key, max, into)
}

// TestTimeoutWhileStalledIsNotTheStores: a request timeout that ran out
// while this process could not run is ErrStalled, not a store fault, so
// Health strikes no healthy store for our own wait (the class of
// TestStarvedProbeIsNoVerdict's CI failure). The request yields before it
// is sent; one core and 64 spinning goroutines (starveCPU) make that wait
// about 600 ms, 12 times the 50 ms bound. With the cores free, the same store
// answers within the bound, and a hung one is still ErrUnavailable
// (TestTimeoutBoundsEveryRequest).
func TestTimeoutWhileStalledIsNotTheStores(t *testing.T) {
	local := openAll(t, "file://"+t.TempDir())[0]
	if err := local.Put(context.Background(), "k", []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	s := backend.WithTimeout(yieldsFirst{local}, 50*time.Millisecond)
	readWhole := func() error {
		_, _, err := s.ReadWhole(context.Background(), "k", 100, func(n int64) []byte { return make([]byte, n) })
		return err
	}
	stop := starveCPU()
	var errs [2][]error // ReadAt's, ReadWhole's
	for range 5 {
		errs[0] = append(errs[0], s.ReadAt(context.Background(), "k", make([]byte, 10), 0))
		errs[1] = append(errs[1], readWhole())
	}
	stop()
	for k, name := range []string{"ReadAt", "ReadWhole"} {
		stalled := 0
		for _, err := range errs[k] {
			switch {
			case err == nil:
			case errors.Is(err, backend.ErrStalled) && !backend.IsStoreFault(err):
				stalled++
			default:
				t.Fatalf("a %s whose bound ran out while this process stalled: %v, want ErrStalled and no store fault", name, err)
			}
		}
		if stalled == 0 {
			t.Fatalf("no %s of 5 outlived its bound on a starved process (%v): the test needs a longer stall", name, errs[k])
		}
	}
	if err := s.ReadAt(context.Background(), "k", make([]byte, 10), 0); err != nil {
		t.Fatalf("the same read with the cores free: %v", err)
	}
	if err := readWhole(); err != nil {
		t.Fatalf("the same whole read with the cores free: %v", err)
	}
}
