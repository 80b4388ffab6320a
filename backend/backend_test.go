package backend_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/backend/storetest"
	"github.com/shardfs/shardfs/internal/faultstore"
	"github.com/shardfs/shardfs/internal/miniotest"
)

func TestLocalConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) backend.Store {
		s, err := backend.Open("file://"+t.TempDir(), backend.OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestS3Conformance(t *testing.T) {
	srv := miniotest.Start(t, "bucket")
	creds := &backend.Credentials{AccessKeyID: miniotest.AccessKey, SecretAccessKey: miniotest.SecretKey}
	n := 0
	storetest.Run(t, func(t *testing.T) backend.Store {
		n++
		s, err := backend.Open(srv.URL("bucket/prefix"+strings.Repeat("x", n)), backend.OpenOptions{Credentials: creds})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestS3Errors(t *testing.T) {
	srv := miniotest.Start(t, "bucket")
	ctx := context.Background()
	good := &backend.Credentials{AccessKeyID: miniotest.AccessKey, SecretAccessKey: miniotest.SecretKey}
	bad := &backend.Credentials{AccessKeyID: miniotest.AccessKey, SecretAccessKey: "wrong-secret-value"}

	s, _ := backend.Open(srv.URL("nobucket"), backend.OpenOptions{Credentials: good})
	if err := backend.Ping(ctx, s); !errors.Is(err, backend.ErrNoBucket) {
		t.Errorf("missing bucket: %v, want ErrNoBucket", err)
	}
	s, _ = backend.Open(srv.URL("bucket"), backend.OpenOptions{Credentials: bad})
	err := backend.Ping(ctx, s)
	if !errors.Is(err, backend.ErrAccessDenied) {
		t.Errorf("bad credentials: %v, want ErrAccessDenied", err)
	}
	if err != nil && strings.Contains(err.Error(), "wrong-secret-value") {
		t.Errorf("error leaks the secret: %v", err)
	}
	s, _ = backend.Open("http://127.0.0.1:1/bucket", backend.OpenOptions{Credentials: good})
	ctx2, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := backend.Ping(ctx2, s); !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("unreachable: %v, want ErrUnavailable naming the endpoint", err)
	}
}

func TestOpenRejects(t *testing.T) {
	for _, u := range []string{"ftp://x/y", "http://user:secretpw@host:9000/b", "http://host:9000/", "s3://", "file://host/dir", "::"} {
		_, err := backend.Open(u, backend.OpenOptions{})
		if err == nil {
			t.Errorf("Open(%q) succeeded", u)
			continue
		}
		if strings.Contains(err.Error(), "secretpw") {
			t.Errorf("Open(%q) leaks the password: %v", u, err)
		}
	}
}

func TestCredentialsNeverPrint(t *testing.T) {
	c := backend.Credentials{AccessKeyID: "AKIAEXAMPLE", SecretAccessKey: "topsecret"}
	for _, s := range []string{c.String(), c.GoString()} {
		if strings.Contains(s, "topsecret") || strings.Contains(s, "AKIAEXAMPLE") {
			t.Fatalf("credentials printed: %s", s)
		}
	}
}

func TestFaulty(t *testing.T) {
	ctx := context.Background()
	local, _ := backend.NewLocal(t.TempDir())
	data := bytes.Repeat([]byte{7}, 1000)
	if err := local.Put(ctx, "k", data); err != nil {
		t.Fatal(err)
	}
	f := faultstore.New(local)
	p := make([]byte, 100)

	f.SetDown(true)
	if err := f.ReadAt(ctx, "k", p, 0); !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("down: %v", err)
	}
	f.SetDown(false)

	f.FailNth(2)
	if err := f.ReadAt(ctx, "k", p, 0); err != nil {
		t.Fatalf("call 1: %v", err)
	}
	if err := f.ReadAt(ctx, "k", p, 0); !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("call 2: %v, want injected failure", err)
	}
	if err := f.ReadAt(ctx, "k", p, 0); err != nil {
		t.Fatalf("call 3: %v", err)
	}

	f.SetFlipBits(true)
	if err := f.ReadAt(ctx, "k", p, 0); err != nil || bytes.Equal(p, data[:100]) {
		t.Fatalf("flip bits: err %v, bytes unchanged=%v", err, bytes.Equal(p, data[:100]))
	}
	f.SetFlipBits(false)

	f.SetShortBody(true)
	if err := f.ReadAt(ctx, "k", p, 0); err != nil || p[99] != 0 {
		t.Fatalf("short body: err %v, last byte %d", err, p[99])
	}
	f.SetShortBody(false)

	f.SetDelay(200*time.Millisecond, 0)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := f.ReadAt(cctx, "k", p, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("slow store under deadline: %v", err)
	}
}

// The wrappers pass every call on, vectored reads as vectored reads: the
// conformance suite runs through Faulty (with no fault set) and Timeout,
// and a Faulty's vectored read reaches the store below as one.
func TestWrappersConform(t *testing.T) {
	t.Run("faulty", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) backend.Store {
			s, err := backend.NewLocal(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return faultstore.New(s)
		})
	})
	t.Run("timeout", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) backend.Store {
			s, err := backend.NewLocal(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return backend.WithTimeout(s, 10*time.Second)
		})
	})
	rec := &vectorRecorder{}
	s, _ := backend.NewLocal(t.TempDir())
	rec.Store = s
	f := faultstore.New(rec)
	ctx := context.Background()
	f.Put(ctx, "k", []byte("0123456789"))
	bufs := [][]byte{make([]byte, 3), make([]byte, 4)}
	if err := f.ReadAtV(ctx, "k", bufs, 2); err != nil || string(bufs[0])+string(bufs[1]) != "2345678" {
		t.Fatalf("ReadAtV through Faulty: %q %q, %v", bufs[0], bufs[1], err)
	}
	if rec.vectors != 1 {
		t.Fatalf("the store below saw %d vectored reads, want 1", rec.vectors)
	}
}

// vectorRecorder counts the vectored reads of more than one buffer it passes on.
type vectorRecorder struct {
	backend.Store
	vectors int
}

func (v *vectorRecorder) ReadAtV(ctx context.Context, key string, bufs [][]byte, off int64) error {
	if len(bufs) > 1 {
		v.vectors++
	}
	return v.Store.ReadAtV(ctx, key, bufs, off)
}
