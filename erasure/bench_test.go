package erasure

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
)

// raceEnabled trims the decode matrix under -race; the test script also runs it in full without -race.
var raceEnabled = false

func benchData(n int) []byte {
	b := make([]byte, n)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func BenchmarkEncode_4x2_64MiB(b *testing.B) { benchEncode(b, Params{4, 2, DefaultBlockSize}, 64<<20) }
func BenchmarkEncode_10x4_64MiB(b *testing.B) {
	benchEncode(b, Params{10, 4, DefaultBlockSize}, 64<<20)
}

func benchEncode(b *testing.B, p Params, size int) {
	c, err := NewCodec(p)
	if err != nil {
		b.Fatal(err)
	}
	data := benchData(size)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := c.Encode(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadRange_healthy_4x2_1MiB(b *testing.B)   { benchReadRange(b, 0, 1<<20) }
func BenchmarkReadRange_degraded_4x2_1MiB(b *testing.B)  { benchReadRange(b, 1, 1<<20) }
func BenchmarkReadRange_degraded2_4x2_1MiB(b *testing.B) { benchReadRange(b, 2, 1<<20) }
func BenchmarkReadRange_healthy_4x2_128KiB(b *testing.B) { benchReadRange(b, 0, 128<<10) }
func BenchmarkReadRange_degraded_4x2_128KiB(b *testing.B) {
	benchReadRange(b, 1, 128<<10)
}

// benchReadRange reads random ranges of n bytes from a 64 MiB shard on local
// stores (page cache), with the first `lost` data fragments erased.
func benchReadRange(b *testing.B, lost, n int) {
	p := Params{4, 2, DefaultBlockSize}
	data := benchData(64 << 20)
	r, sh, dirs := testShard(b, p, 0, data)
	for f := 0; f < lost; f++ {
		apply(b, erase, p, dirs, 0, f, nil)
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, n)
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		// Ranges inside the erased fragments when degraded, so every read decodes.
		span := int64(len(data))
		if lost > 0 {
			span = sh.FragSize * int64(lost)
		}
		off := rng.Int64N(span - int64(n))
		if err := r.ReadRangeInto(ctx, sh, buf, off); err != nil && (lost == 0 || Heal(err) == nil) {
			b.Fatal(fmt.Errorf("read: %w", err)) // degraded, it served every byte with a HealNeeded
		}
	}
}
