package erasure

import (
	"context"
	"errors"
	"fmt"
)

// checkChunk bounds the memory of CheckFragment: it reads this much at a time.
const checkChunk = 8 << 20

// CheckFragment reads all of fragment frag, also from a store marked down,
// and checks its size and every block checksum. It returns nil when the
// fragment is intact. When only some blocks are bad, BadBlocks lists them:
// the rest still count for recovery, stripe by stripe.
func (r *Reader) CheckFragment(ctx context.Context, sh *Shard, frag int) *FragmentError {
	store := r.Placement(sh.ID, frag)
	fail := func(err error) *FragmentError {
		return &FragmentError{Shard: sh.ID, Frag: frag, Store: store, StoreName: r.stores[store].String(), Err: err}
	}
	if r.excluded[store] {
		return fail(ErrExcluded)
	}
	size, err := r.stores[store].Stat(ctx, r.key(sh.ID, frag))
	if err != nil {
		return fail(err)
	}
	if size != sh.FragSize {
		return fail(fmt.Errorf("%w: size %d, want %d", ErrChecksum, size, sh.FragSize))
	}
	chunk := int64(checkChunk / r.codec.BlockSize * r.codec.BlockSize)
	if chunk == 0 {
		chunk = int64(r.codec.BlockSize)
	}
	var bad []int
	var first *FragmentError
	for a := int64(0); a < sh.FragSize; a += chunk {
		fr := r.readFrag(ctx, sh, frag, a, min(sh.FragSize, a+chunk), true, nil)
		if fr.err == nil {
			continue
		}
		if fr.data == nil && !errors.Is(fr.err, ErrChecksum) {
			return fr.err // unreadable: the whole fragment counts as lost
		}
		if first == nil {
			first = fr.err
		}
		base := int(a / int64(r.codec.BlockSize))
		for i := 0; i*r.codec.BlockSize < int(min(sh.FragSize, a+chunk)-a); i++ {
			if fr.data == nil || fr.bad[i] {
				bad = append(bad, base+i)
			}
		}
	}
	if first != nil {
		first.BadBlocks = bad
		return first
	}
	return nil
}

// Rebuild decodes the whole of the given fragments from all the others,
// stripe by stripe: the good blocks of damaged fragments count too. It
// verifies each rebuilt fragment against its checksums before returning it.
func (r *Reader) Rebuild(ctx context.Context, sh *Shard, bad []int) (map[int][]byte, error) {
	frags, err := r.decode(ctx, sh, 0, sh.FragSize, nil, true, true)
	if err != nil {
		return nil, err
	}
	out := map[int][]byte{}
	for _, f := range bad {
		if blk, ok := r.codec.firstBadBlock(sh, f, 0, frags[f]); !ok {
			return nil, fmt.Errorf("shard %d fragment %d: rebuilt bytes fail checksum in block %d: the survivors disagree with the manifest", sh.ID, f, blk)
		}
		out[f] = frags[f]
	}
	return out, nil
}
