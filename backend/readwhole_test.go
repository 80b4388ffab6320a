package backend_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/miniotest"
)

// wireCount is a front for a MinIO server that counts the bytes of GET
// bodies it hands on, once each response has ended.
type wireCount struct {
	mu     sync.Mutex
	sent   int64
	gets   int
	active sync.WaitGroup
}

func (c *wireCount) Write(w http.ResponseWriter, p []byte) (int, error) {
	n, err := w.Write(p)
	c.mu.Lock()
	c.sent += int64(n)
	c.mu.Unlock()
	return n, err
}

// countedResponse counts the body of a successful response: an error's
// body (an empty object's range is refused, 416) holds no object bytes.
type countedResponse struct {
	http.ResponseWriter
	c      *wireCount
	status int
}

func (r *countedResponse) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

func (r *countedResponse) Write(p []byte) (int, error) {
	if r.status >= 300 {
		return r.ResponseWriter.Write(p)
	}
	return r.c.Write(r.ResponseWriter, p)
}

// take waits for every response begun to end, then returns the bytes and
// GETs counted since the last take.
func (c *wireCount) take(t *testing.T) (int64, int) {
	t.Helper()
	done := make(chan struct{})
	go func() { c.active.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a response through the front did not end within 30 s")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	sent, gets := c.sent, c.gets
	c.sent, c.gets = 0, 0
	return sent, gets
}

// A ReadWhole of an object larger than max reads its first max bytes,
// and the store sends no byte more: the request asks for that range, so
// nothing is cut off unread in flight. Before, the GET asked for the
// whole object and was closed once its size was known: a source shard
// scanned in pieces cost the bytes the store had sent by then, which a
// part's count of what it read showed as 1.67× its slice (issue 59).
func TestS3ReadWholeSendsOnlyWhatItReads(t *testing.T) {
	srv := miniotest.Start(t, "bucket")
	target, _ := url.Parse("http://" + srv.Addr)
	proxy := httputil.NewSingleHostReverseProxy(target)
	count := &wireCount{}
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.RawQuery != "" {
			proxy.ServeHTTP(w, r)
			return
		}
		count.active.Add(1)
		defer count.active.Done()
		count.mu.Lock()
		count.gets++
		count.mu.Unlock()
		proxy.ServeHTTP(&countedResponse{ResponseWriter: w, c: count}, r)
	}))
	defer front.Close()
	ctx := context.Background()
	st := openFront(t, front)
	large := bytes.Repeat([]byte("0123456789abcdefghijklmnopqrstu\n"), 256<<10) // 8 MiB
	small := large[:100_000]
	for key, data := range map[string][]byte{"large": large, "small": small, "empty": {}} {
		if err := st.Put(ctx, key, data); err != nil {
			t.Fatal(err)
		}
	}
	count.take(t)
	for _, c := range []struct {
		key  string
		data []byte
		max  int64
	}{
		{"large", large, 64 << 10}, {"large", large, 1 << 20}, {"large", large, int64(len(large)) - 1}, {"large", large, 1},
		{"large", large, int64(len(large))}, {"small", small, 64 << 10}, {"small", small, 1 << 20},
		{"empty", nil, 10}, {"empty", nil, 0}, {"small", small, 0},
	} {
		var got []byte
		asked := 0
		size, whole, err := st.ReadWhole(ctx, c.key, c.max, func(n int64) []byte {
			asked++
			got = make([]byte, n)
			return got
		})
		if err != nil || size != int64(len(c.data)) {
			t.Fatalf("ReadWhole(%s, at most %d) = %d, %v; want %d", c.key, c.max, size, err, len(c.data))
		}
		want := c.data[:min(int64(len(c.data)), c.max)]
		if whole != (size <= c.max) || asked != 1 || !bytes.Equal(got, want) {
			t.Fatalf("ReadWhole(%s, at most %d): whole %v, %d buffers asked, %d bytes read (want %d), equal %v", c.key, c.max, whole, asked, len(got), len(want), bytes.Equal(got, want))
		}
		sent, gets := count.take(t)
		if sent != int64(len(want)) {
			t.Errorf("ReadWhole(%s, at most %d) of %d bytes: the store sent %d bytes in %d GETs, want the %d read", c.key, c.max, size, sent, gets, len(want))
		}
	}
}

// openFront opens the bucket "bucket" of a MinIO server through front,
// a proxy before it.
func openFront(t *testing.T, front *httptest.Server) backend.Store {
	t.Helper()
	creds := &backend.Credentials{AccessKeyID: miniotest.AccessKey, SecretAccessKey: miniotest.SecretKey}
	st, err := backend.Open(front.URL+"/bucket", backend.OpenOptions{Credentials: creds})
	if err != nil {
		t.Fatal(err)
	}
	return st
}
