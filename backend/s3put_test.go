package backend_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"hash/crc32"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/miniotest"
)

// A PUT to an S3 store goes unsigned, as one plain request, with the
// payload's CRC32C in a header the store checks: MinIO stores what
// matches it and refuses a payload that does not, storing nothing.
// (Signed in chunks, as minio-go does over plain HTTP by default, every
// byte was hashed with SHA-256 here and in the store: issue 59.)
func TestS3PutIsCheckedByItsCRC32C(t *testing.T) {
	srv := miniotest.Start(t, "bucket")
	target, _ := url.Parse("http://" + srv.Addr)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var mu sync.Mutex
	var puts []http.Header
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			mu.Lock()
			puts = append(puts, r.Header.Clone())
			mu.Unlock()
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	ctx := context.Background()
	st := openFront(t, front)
	data := bytes.Repeat([]byte("shardfs fragment bytes "), 50_000) // 1.1 MB: more than one signed chunk
	if err := st.Put(ctx, "a", data); err != nil {
		t.Fatal(err)
	}
	if err := st.Create(ctx, "b", data[:1000]); err != nil {
		t.Fatal(err)
	}
	for _, k := range []struct {
		key  string
		want []byte
	}{{"a", data}, {"b", data[:1000]}} {
		got := make([]byte, len(k.want))
		if err := st.ReadAt(ctx, k.key, got, 0); err != nil || !bytes.Equal(got, k.want) {
			t.Fatalf("%s read back: %v, equal %v", k.key, err, bytes.Equal(got, k.want))
		}
	}
	mu.Lock()
	if len(puts) != 2 {
		t.Fatalf("%d PUT requests for a Put and a Create, want 2", len(puts))
	}
	for i, h := range puts {
		body := data
		if i == 1 {
			body = data[:1000]
		}
		var sum [4]byte
		binary.BigEndian.PutUint32(sum[:], crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
		if got := h.Get("X-Amz-Content-Sha256"); got != "UNSIGNED-PAYLOAD" {
			t.Errorf("PUT %d: X-Amz-Content-Sha256 %q, want UNSIGNED-PAYLOAD", i, got)
		}
		if got, want := h.Get("X-Amz-Checksum-Crc32c"), base64.StdEncoding.EncodeToString(sum[:]); got != want {
			t.Errorf("PUT %d: X-Amz-Checksum-Crc32c %q, want %q", i, got, want)
		}
		if enc := h.Get("Content-Encoding") + h.Get("X-Amz-Trailer"); strings.Contains(enc, "aws-chunked") || strings.Contains(enc, "checksum") {
			t.Errorf("PUT %d: chunked or trailed (%q): want one plain request", i, enc)
		}
	}
	mu.Unlock()
	// A payload that is not the one its checksum was taken over.
	other := bytes.Clone(data)
	other[len(other)/2] ^= 1
	err := st.(*backend.S3).PutClaiming(ctx, "c", data, other)
	if err == nil {
		t.Fatal("a payload whose CRC32C is not its header's was stored")
	}
	if _, serr := st.Stat(ctx, "c"); serr == nil {
		t.Fatalf("refused (%v), yet the object is there", err)
	}
	t.Logf("refused: %v", err)
}
