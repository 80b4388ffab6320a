// Package verify owns the one rule by which shardfs trusts bytes: bytes are
// verified when the CRC32C (Castagnoli) of exactly those bytes equals the
// sum written for them when they were written. Every check applies this rule
// to a span of its own:
//
//   - a sample: its bytes as the source means them (a sparse tar member's
//     holes are zeros), summed at ingest; the read path (dataset) and the
//     disk tier (cache) check every sample they serve by it;
//   - a block of a fragment: summed at encode; erasure checks every
//     fragment range it reads by it, and rebuilds what fails from parity;
//   - an object: a manifest body, a shard index, a part record.
//
// Nothing else in shardfs computes a CRC or decides that bytes are good.
// It imports the standard library only, and everything may import it.
package verify

import "hash/crc32"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Sum is the checksum written for p: CRC32C.
func Sum(p []byte) uint32 { return crc32.Checksum(p, castagnoli) }

// Update is Sum continued over p, for bytes that arrive in pieces: Sum of a
// then b is Update(Sum(a), b).
func Update(sum uint32, p []byte) uint32 { return crc32.Update(sum, castagnoli, p) }

// SumVec is Sum of bytes [from, to) of the concatenation of bufs.
func SumVec(bufs [][]byte, from, to int64) uint32 {
	if len(bufs) == 1 {
		return Sum(bufs[0][from:to])
	}
	var sum uint32
	var pos int64
	for _, b := range bufs {
		end := pos + int64(len(b))
		if end > from && pos < to {
			sum = Update(sum, b[max(from, pos)-pos:min(to, end)-pos])
		}
		if end >= to {
			break
		}
		pos = end
	}
	return sum
}

// Bytes reports whether p is verified against want, the sum written for it.
func Bytes(p []byte, want uint32) bool { return Sum(p) == want }

// Vec reports whether bytes [from, to) of the concatenation of bufs are
// verified against want.
func Vec(bufs [][]byte, from, to int64, want uint32) bool { return SumVec(bufs, from, to) == want }

// Samples are samples of one shard, ascending by offset: each one's offset
// in the shard, its size, and its sum written at ingest.
type Samples struct{ Off, Size, Sum []uint32 }

// Whole reports whether bufs, which hold the shard's bytes from off on,
// are samples [first, last), each verified against its own sum.
func (s Samples) Whole(bufs [][]byte, off int64, first, last int) bool {
	for k := first; k < last; k++ {
		o := int64(s.Off[k]) - off
		if !Vec(bufs, o, o+int64(s.Size[k]), s.Sum[k]) {
			return false
		}
	}
	return true
}

// Blocks checks p, cut into blocks of blockSize bytes (the last may be
// shorter), against want, the sums written for those blocks in turn. It
// returns which blocks failed (nil when none did), the first that failed
// (-1 when none did), and how many did. A block without a sum in want
// fails: what was not summed is not verified.
func Blocks(p []byte, blockSize int, want []uint32) (bad []bool, first, n int) {
	count := (len(p) + blockSize - 1) / blockSize
	first = -1
	for i := 0; i < count; i++ {
		blk := p[i*blockSize : min(len(p), (i+1)*blockSize)]
		if i >= len(want) || !Bytes(blk, want[i]) {
			if bad == nil {
				bad = make([]bool, count)
				first = i
			}
			bad[i] = true
			n++
		}
	}
	return bad, first, n
}
