package layout

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestUstarHeaderMatchesArchiveTar: the template-filled header is byte for
// byte what archive/tar writes, for names of every length TarName produces
// and sizes across the octal field's range.
func TestUstarHeaderMatchesArchiveTar(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	sizes := []int64{0, 1, 7, 8, 511, 512, 1 << 20, 1<<33 - 1}
	for range 50 {
		sizes = append(sizes, rng.Int64N(1<<33))
	}
	const chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
	n := 0
	for l := 1; l <= 100; l++ {
		for _, size := range sizes {
			var b strings.Builder
			for j := range l {
				if l > 4 && j == l/2 {
					b.WriteByte('/') // a class directory, as TarName keeps it
					continue
				}
				b.WriteByte(chars[rng.IntN(len(chars))])
			}
			name := b.String()
			var got [block]byte
			cut := rng.IntN(len(name) + 1)
			ustarHeaderInto(&got, size, name[:cut], name[cut:])
			if want := tarHeader(name, size); !bytes.Equal(got[:], want) {
				t.Fatalf("name %q (%d bytes), size %d: header differs from archive/tar's", name, l, size)
			}
			n++
		}
	}
	t.Logf("%d headers equal to archive/tar's", n)
}

func BenchmarkHeader(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(block)
	var h [block]byte
	for b.Loop() {
		ustarHeaderInto(&h, 123456, "class03/class03_00042", ".", "jpg")
	}
}

func BenchmarkHeaderArchiveTar(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(block)
	for b.Loop() {
		tarHeader("class03/class03_00042.jpg", 123456)
	}
}
