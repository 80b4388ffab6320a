package verify

import (
	"bytes"
	"hash/crc32"
	"testing"
)

// The rule is CRC32C: the sums a dataset written before this package holds
// are Castagnoli's, and stay verifiable.
func TestSumIsCRC32C(t *testing.T) {
	data := []byte("the quick brown fox jumps over the lazy dog")
	if got, want := Sum(data), crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli)); got != want {
		t.Fatalf("Sum = %08x, want CRC32C %08x", got, want)
	}
	if got := Update(Sum(data[:10]), data[10:]); got != Sum(data) {
		t.Fatalf("Update in two pieces = %08x, want %08x", got, Sum(data))
	}
	if Sum(nil) != 0 || !Bytes(nil, 0) {
		t.Fatal("no bytes sum to 0")
	}
}

func TestSumVec(t *testing.T) {
	data := []byte("the quick brown fox jumps over the lazy dog")
	bufs := [][]byte{data[:3], data[3:3], data[3:20], data[20:]}
	for _, rg := range [][2]int64{{0, int64(len(data))}, {2, 4}, {3, 20}, {19, 21}, {5, 5}, {20, 43}} {
		if got, want := SumVec(bufs, rg[0], rg[1]), Sum(data[rg[0]:rg[1]]); got != want {
			t.Errorf("SumVec%v = %08x, want %08x", rg, got, want)
		}
		if !Vec(bufs, rg[0], rg[1], Sum(data[rg[0]:rg[1]])) || Vec(bufs, rg[0], rg[1], Sum(data[rg[0]:rg[1]])^1) {
			t.Errorf("Vec%v does not follow the sum", rg)
		}
	}
}

// Samples.Whole accepts exactly the samples whose every byte matches, and
// finds one flipped bit in any of them, across buffer boundaries.
func TestSamplesWhole(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 20) // 320 bytes
	s := Samples{Off: []uint32{100, 130, 200, 201}, Size: []uint32{30, 70, 1, 99}}
	for k := range s.Off {
		s.Sum = append(s.Sum, Sum(data[s.Off[k]:s.Off[k]+s.Size[k]]))
	}
	const off = 100
	view := append([]byte(nil), data[off:300]...)
	bufs := [][]byte{view[:7], view[7:101], view[101:]}
	if !s.Whole(bufs, off, 0, 4) || !s.Whole(bufs, off, 1, 3) || !s.Whole(bufs, off, 2, 2) {
		t.Fatal("intact samples not verified")
	}
	for _, pos := range []int{0, 6, 7, 29, 30, 99, 100, 101, 199} {
		view[pos] ^= 0x10
		if s.Whole(bufs, off, 0, 4) {
			t.Errorf("a flipped bit at byte %d of the view verified", pos)
		}
		view[pos] ^= 0x10
	}
}

// Blocks finds exactly the blocks that fail, and a block without a sum
// fails.
func TestBlocks(t *testing.T) {
	p := bytes.Repeat([]byte("block of bytes."), 10) // 150 bytes: blocks of 64, 64, 22
	want := []uint32{Sum(p[:64]), Sum(p[64:128]), Sum(p[128:])}
	if bad, first, n := Blocks(p, 64, want); bad != nil || first != -1 || n != 0 {
		t.Fatalf("intact blocks: bad %v first %d n %d", bad, first, n)
	}
	p[70] ^= 1
	bad, first, n := Blocks(p, 64, want)
	if first != 1 || n != 1 || len(bad) != 3 || bad[0] || !bad[1] || bad[2] {
		t.Fatalf("block 1 flipped: bad %v first %d n %d", bad, first, n)
	}
	p[70] ^= 1
	bad, first, n = Blocks(p, 64, want[:2])
	if first != 2 || n != 1 || !bad[2] {
		t.Fatalf("block 2 without a sum: bad %v first %d n %d, want it failed", bad, first, n)
	}
	if _, first, n := Blocks(p, 64, nil); first != 0 || n != 3 {
		t.Fatalf("no sums: first %d n %d, want every block failed", first, n)
	}
}
