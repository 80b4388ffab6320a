package backend_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/miniotest"
	"github.com/shardfs/shardfs/internal/toxitest"
)

// TestS3MarksFirstByteWhileStreaming: hedging tells a store that has not
// answered from one whose answer is still streaming by the read's
// FirstByte, so an S3 read must mark it when the response starts, not when
// the whole body is in (minio-go fills the caller's buffer in one Read).
// The body crawls through toxiproxy at 64 KB/s; the first byte must be
// marked while the read is still running.
func TestS3MarksFirstByteWhileStreaming(t *testing.T) {
	srv := miniotest.Start(t, "bucket")
	creds := &backend.Credentials{AccessKeyID: miniotest.AccessKey, SecretAccessKey: miniotest.SecretKey}
	direct, err := backend.Open(srv.URL("bucket"), backend.OpenOptions{Credentials: creds})
	if err != nil {
		t.Fatal(err)
	}
	blob := make([]byte, 1<<20)
	rand.Read(blob)
	ctx := context.Background()
	if err := direct.Put(ctx, "blob", blob); err != nil {
		t.Fatal(err)
	}
	tp := toxitest.Start(t)
	proxy := tp.Proxy("slow-body", srv.Addr)
	if _, err := proxy.AddToxic("rate", "bandwidth", "downstream", 1, toxiproxy.Attributes{"rate": 64}); err != nil {
		t.Fatal(err)
	}
	slow, err := backend.Open("http://"+proxy.Listen+"/bucket", backend.OpenOptions{Credentials: creds})
	if err != nil {
		t.Fatal(err)
	}

	var fb backend.FirstByte
	rctx, cancel := context.WithTimeout(backend.WithFirstByte(ctx, &fb), 60*time.Second)
	defer cancel()
	got := make([]byte, 512<<10)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- slow.ReadAt(rctx, "blob", got, 4096) }()
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	for !fb.Arrived() {
		select {
		case err := <-done:
			t.Fatalf("the read ended (err %v) after %v with no first byte marked while it streamed", err, time.Since(start))
		case <-poll.C:
		}
	}
	// The first byte is marked; the rest of the body is still crawling in.
	select {
	case err := <-done:
		t.Fatalf("read already done (err %v) when its first byte was first seen: the mark came with the whole body", err)
	default:
	}
	// Let the body finish at full speed and check the bytes.
	proxy.RemoveToxic("rate")
	if err := <-done; err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("read did not finish after the bandwidth toxic was removed: %v", err)
		}
		t.Fatal(err)
	}
	if !bytes.Equal(got, blob[4096:4096+len(got)]) {
		t.Fatal("bytes differ from the object's")
	}
}
