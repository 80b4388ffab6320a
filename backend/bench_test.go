package backend_test

import (
	"context"
	"crypto/rand"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/miniotest"
)

// BenchmarkS3SmallGET is global order's GET: a 48 KiB range of a fragment,
// 16 at once, against a MinIO process. It reports the client's CPU per GET
// (cpu-µs/op, this process's user + system time), the cost issue 57 cuts:
// minio-go's Client.GetObject puts a goroutine behind the body, and every
// socket read went through it over channels.
func BenchmarkS3SmallGET(b *testing.B) {
	srv := miniotest.Start(b, "bucket")
	s, err := backend.Open(srv.URL("bucket/ds"), backend.OpenOptions{Credentials: &backend.Credentials{AccessKeyID: miniotest.AccessKey, SecretAccessKey: miniotest.SecretKey}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	obj := make([]byte, 16<<20)
	rand.Read(obj)
	if err := s.Put(ctx, "frag", obj); err != nil {
		b.Fatal(err)
	}
	const size = 48 << 10
	b.SetBytes(size)
	b.ReportAllocs()
	var next atomic.Int64
	cpu0 := selfCPU()
	b.ResetTimer()
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, size)
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				off := (i * 7919 * size) % int64(len(obj)-size)
				if err := s.ReadAt(ctx, "frag", buf, off); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric((selfCPU()-cpu0)*1e6/float64(b.N), "cpu-µs/op")
}

func selfCPU() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
