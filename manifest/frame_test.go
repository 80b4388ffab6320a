package manifest

import (
	"bufio"
	"bytes"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// frame reuses its zstd encoders: every object it writes must be byte for
// byte what a fresh encoder writes (as frame did before), whatever was
// framed before it on the same encoder and however many frame at once.
func TestFrameReusedEncoderWritesWhatAFreshOneWrites(t *testing.T) {
	fresh := func(body []byte) []byte {
		if len(body) <= smallFrame {
			// A small body is compressed in one call (EncodeAll).
			zw, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithWindowSize(smallWindow), zstd.WithLowerEncoderMem(true))
			if err != nil {
				t.Fatal(err)
			}
			return zw.EncodeAll(body, nil)
		}
		var payload bytes.Buffer
		zw, err := newFrameEncoder(&payload)
		if err != nil {
			t.Fatal(err)
		}
		bw := bufio.NewWriterSize(zw, 1<<20)
		bw.Write(body)
		if err := bw.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		return payload.Bytes()
	}
	rng := rand.New(rand.NewPCG(5, 8))
	bodies := make([][]byte, 12)
	for i := range bodies {
		// Sizes from empty to past frame's 64 KiB buffer, the encoder's
		// blocks and its 1 MiB window; text-like bytes, so that matches
		// reach back.
		b := make([]byte, rng.IntN(3<<19)*(i%4)/3)
		for j := range b {
			b[j] = "shardfs group objects "[rng.IntN(22)]
		}
		bodies[i] = b
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(bodies); i += 2 {
				got, err := frame(magic, 1, func(e *encoder) { e.w.Write(bodies[i]) })
				if err != nil {
					t.Error(err)
					return
				}
				if want := fresh(bodies[i]); !bytes.Equal(got[headerSize:], want) {
					t.Errorf("body %d (%d bytes): a reused encoder wrote %d payload bytes, a fresh one %d, or other bytes", i, len(bodies[i]), len(got)-headerSize, len(want))
				}
			}
		}()
	}
	wg.Wait()
}
