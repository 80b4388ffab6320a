package backend_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/miniotest"
)

// A store that does no conditional PUT answers 501 Not Implemented to
// one with If-Match: a pinned Put there writes unconditionally, as the
// lock's read then write did before, rather than failing every refresh
// of an ingest's lock. On MinIO, which does them, a pinned Put over
// another version is still refused.
func TestS3PinnedPutWhereTheStoreDoesNoConditionalPut(t *testing.T) {
	srv := miniotest.Start(t, "bucket")
	target, _ := url.Parse("http://" + srv.Addr)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var refused atomic.Int32
	noIfMatch := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && r.Header.Get("If-Match") != "" {
			refused.Add(1)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusNotImplemented)
			w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>NotImplemented</Code><Message>A header you provided implies functionality that is not implemented</Message></Error>`))
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer noIfMatch.Close()
	ctx := context.Background()
	st := openFront(t, noIfMatch)
	if err := st.Put(ctx, "lock", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	pinned := backend.NewVersions().Pin(ctx)
	if _, err := st.Stat(pinned, "lock"); err != nil {
		t.Fatal(err)
	}
	if err := st.Put(pinned, "lock", []byte("v2")); err != nil {
		t.Fatalf("pinned Put on a store without conditional PUT: %v, want it written", err)
	}
	got := make([]byte, 2)
	if err := st.ReadAt(ctx, "lock", got, 0); err != nil || !bytes.Equal(got, []byte("v2")) || refused.Load() != 1 {
		t.Fatalf("the object holds %q (%v) after %d refused conditional PUTs; want v2, after 1", got, err, refused.Load())
	}

	direct, err := backend.Open(srv.URL("bucket"), backend.OpenOptions{Credentials: &backend.Credentials{AccessKeyID: miniotest.AccessKey, SecretAccessKey: miniotest.SecretKey}})
	if err != nil {
		t.Fatal(err)
	}
	pinned = backend.NewVersions().Pin(ctx)
	if _, err := direct.Stat(pinned, "lock"); err != nil {
		t.Fatal(err)
	}
	if err := direct.Put(ctx, "lock", []byte("v3")); err != nil {
		t.Fatal(err)
	}
	if err := direct.Put(pinned, "lock", []byte("v4")); !errors.Is(err, backend.ErrChanged) {
		t.Fatalf("pinned Put over another version on MinIO: %v, want ErrChanged", err)
	}
}
