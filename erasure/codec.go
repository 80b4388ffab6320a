package erasure

import (
	"errors"
	"fmt"

	"github.com/klauspost/reedsolomon"

	"github.com/shardfs/shardfs/verify"
)

// MaxBlockSize bounds the checksum block, so a verified read never widens by more than this.
const MaxBlockSize = 1 << 20

// DefaultBlockSize is small enough that a healthy read of one ~100 KB sample
// reads little beyond it, and large enough that checksums stay ~0.006% of the data.
const DefaultBlockSize = 64 << 10

// Params are a dataset's erasure parameters.
type Params struct {
	Data      int // k
	Parity    int // m
	BlockSize int
}

// Validate explains what is wrong with p, if anything.
func (p Params) Validate() error {
	switch {
	case p.Data < 1:
		return fmt.Errorf("--data %d: need at least 1 data fragment", p.Data)
	case p.Parity < 0:
		return fmt.Errorf("--parity %d: cannot be negative", p.Parity)
	case p.Data+p.Parity > 256:
		return fmt.Errorf("--data %d + --parity %d: at most 256 fragments", p.Data, p.Parity)
	case p.BlockSize < 1 || p.BlockSize > MaxBlockSize:
		return fmt.Errorf("block size %d: must be between 1 and %d", p.BlockSize, MaxBlockSize)
	}
	return nil
}

// Total is k+m.
func (p Params) Total() int { return p.Data + p.Parity }

// FragSize is the length of every fragment of a shard of size bytes.
func (p Params) FragSize(size int64) int64 { return (size + int64(p.Data) - 1) / int64(p.Data) }

// Blocks is the number of checksum blocks in a fragment of fragSize bytes.
func (p Params) Blocks(fragSize int64) int {
	return int((fragSize + int64(p.BlockSize) - 1) / int64(p.BlockSize))
}

// Placement is the store index of fragment frag of shard.
func (p Params) Placement(shard, frag int) int { return (frag + shard) % p.Total() }

// Shard describes one stored shard: what a reader needs besides the stores.
type Shard struct {
	ID       int
	FragSize int64
	// Sums holds Blocks(FragSize) CRC32C values per fragment, fragment-major:
	// Sums[f*Blocks(FragSize)+b] is block b of fragment f.
	Sums []uint32
}

// Codec encodes and decodes fragments for one Params.
type Codec struct {
	Params
	enc reedsolomon.Encoder
}

// NewCodec returns a codec for p.
func NewCodec(p Params) (*Codec, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	c := &Codec{Params: p}
	if p.Parity > 0 {
		enc, err := reedsolomon.New(p.Data, p.Parity)
		if err != nil {
			return nil, err
		}
		c.enc = enc
	}
	return c, nil
}

// Encode cuts data into k+m fragments and computes their block checksums.
// The fragments share one backing array.
func (c *Codec) Encode(data []byte) (frags [][]byte, sums []uint32, err error) {
	buf := make([]byte, c.EncodedSize(int64(len(data))))
	copy(buf, data)
	return c.EncodeIn(buf, int64(len(data)))
}

// EncodedSize is the bytes of the k+m fragments of a shard of size bytes:
// the buffer EncodeIn takes.
func (c *Codec) EncodedSize(size int64) int64 { return int64(c.Total()) * c.FragSize(size) }

// EncodeIn is Encode of the shard whose size bytes start buf, a buffer of
// EncodedSize(size) bytes zeroed past them, in place: the fragments are
// buf, cut. It saves the copy of a shard that was read into buf.
func (c *Codec) EncodeIn(buf []byte, size int64) (frags [][]byte, sums []uint32, err error) {
	f := c.FragSize(size)
	if int64(len(buf)) != int64(c.Total())*f {
		return nil, nil, fmt.Errorf("encode a shard of %d bytes in a buffer of %d, want %d", size, len(buf), int64(c.Total())*f)
	}
	frags = make([][]byte, c.Total())
	for i := range frags {
		frags[i] = buf[int64(i)*f : int64(i+1)*f : int64(i+1)*f]
	}
	if c.enc != nil && f > 0 {
		if err := c.enc.Encode(frags); err != nil {
			return nil, nil, fmt.Errorf("reed-solomon encode: %w", err)
		}
	}
	nb := c.Blocks(f)
	sums = make([]uint32, c.Total()*nb)
	for i, fr := range frags {
		for b := 0; b < nb; b++ {
			sums[i*nb+b] = verify.Sum(fr[b*c.BlockSize : min(len(fr), (b+1)*c.BlockSize)])
		}
	}
	return frags, sums, nil
}

// badBlocks checks p, which holds fragment frag's bytes [off, off+len(p))
// with off block-aligned, against the shard's checksums. It returns which
// blocks failed (nil when none did), the first bad block's index in the
// fragment, and how many failed.
func (c *Codec) badBlocks(sh *Shard, frag int, off int64, p []byte) (bad []bool, first, n int) {
	nb := c.Blocks(sh.FragSize)
	base := int(off / int64(c.BlockSize))
	var want []uint32 // the sums of the blocks p covers; none for a shard whose sums do not fit its codec
	if len(sh.Sums) == c.Total()*nb && base <= nb {
		want = sh.Sums[frag*nb+base : (frag+1)*nb]
	}
	bad, first, n = verify.Blocks(p, c.BlockSize, want)
	if first >= 0 {
		first += base
	}
	return bad, first, n
}

// firstBadBlock checks p like badBlocks and returns the first bad block.
func (c *Codec) firstBadBlock(sh *Shard, frag int, off int64, p []byte) (badBlock int, ok bool) {
	_, first, n := c.badBlocks(sh, frag, off, p)
	return first, n == 0
}

// reconstruct fills the nil data entries of frags (all non-nil have equal length).
func (c *Codec) reconstruct(frags [][]byte) error {
	if c.enc == nil {
		return errors.New("no parity to reconstruct from")
	}
	return c.enc.ReconstructData(frags)
}

// Reconstruct fills every nil entry of frags, data and parity, for repair.
func (c *Codec) Reconstruct(frags [][]byte) error {
	if c.enc == nil {
		return errors.New("no parity to reconstruct from")
	}
	return c.enc.Reconstruct(frags)
}
