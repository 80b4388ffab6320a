package erasure

import (
	"context"
	"fmt"
)

// checkChunk bounds the memory of CheckFragment: it reads this much at a time.
const checkChunk = 8 << 20

// CheckFragment reads all of fragment frag and checks its size and every
// block checksum. It returns nil when the fragment is intact.
func (r *Reader) CheckFragment(ctx context.Context, sh *Shard, frag int) *FragmentError {
	store := r.codec.Placement(sh.ID, frag)
	fail := func(err error) *FragmentError {
		return &FragmentError{Shard: sh.ID, Frag: frag, Store: store, StoreName: r.stores[store].String(), Err: err}
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
	for a := int64(0); a < sh.FragSize; a += chunk {
		if _, ferr := r.fetch(ctx, sh, frag, a, min(sh.FragSize, a+chunk)); ferr != nil {
			return ferr
		}
	}
	return nil
}

// Rebuild decodes the whole of the given fragments from the others. It reads
// every other fragment in full and verifies each rebuilt fragment against
// its checksums before returning it. bad lists the fragments known to be
// damaged, which it does not read.
func (r *Reader) Rebuild(ctx context.Context, sh *Shard, bad []int) (map[int][]byte, error) {
	failed := map[int]*FragmentError{}
	for _, f := range bad {
		failed[f] = &FragmentError{Shard: sh.ID, Frag: f, Store: r.codec.Placement(sh.ID, f),
			StoreName: r.stores[r.codec.Placement(sh.ID, f)].String(), Err: fmt.Errorf("damaged")}
	}
	frags, err := r.decodeRange(ctx, sh, 0, sh.FragSize, failed, true)
	if err != nil {
		return nil, err
	}
	out := map[int][]byte{}
	for _, f := range bad {
		if blk, ok := r.codec.verify(sh, f, 0, frags[f]); !ok {
			return nil, fmt.Errorf("shard %d fragment %d: rebuilt bytes fail checksum in block %d: the survivors disagree with the manifest", sh.ID, f, blk)
		}
		out[f] = frags[f]
	}
	return out, nil
}
