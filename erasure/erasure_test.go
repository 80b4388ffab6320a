package erasure

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/shardfs/shardfs/backend"
)

// fragKey is ds/s%06d.f%02d, spelled without fmt: the decode matrix asks
// for a key per fragment read, and Sprintf was 7% of its CPU.
func fragKey(shard, frag int) string {
	b := make([]byte, 0, 16)
	b = append(b, "ds/s"...)
	b = appendPadded(b, shard, 6)
	b = append(b, ".f"...)
	b = appendPadded(b, frag, 2)
	return string(b)
}

func appendPadded(b []byte, v, width int) []byte {
	digits := strconv.Itoa(v)
	for range width - len(digits) {
		b = append(b, '0')
	}
	return append(b, digits...)
}

// testShard encodes data as shard id into k+m local stores under dir.
func testShard(t testing.TB, p Params, id int, data []byte) (*Reader, *Shard, []string) {
	t.Helper()
	c, err := NewCodec(p)
	if err != nil {
		t.Fatal(err)
	}
	frags, sums, err := c.Encode(data)
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	stores := make([]backend.Store, p.Total())
	dirs := make([]string, p.Total())
	for i := range stores {
		dirs[i] = filepath.Join(base, fmt.Sprint("store", i))
		s, err := backend.NewLocal(dirs[i])
		if err != nil {
			t.Fatal(err)
		}
		stores[i] = s
	}
	for f, fr := range frags {
		if err := stores[p.Placement(id, f)].Put(context.Background(), fragKey(id, f), fr); err != nil {
			t.Fatal(err)
		}
	}
	r, err := NewReader(c, stores, fragKey, ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sh := &Shard{ID: id, FragSize: c.FragSize(int64(len(data))), Sums: sums}
	return r, sh, dirs
}

type damage int

const (
	erase damage = iota
	bitFlip
	truncate
	zeroFill
	swap
)

func (d damage) String() string {
	return [...]string{"erase", "bitflip", "truncate", "zerofill", "swap"}[d]
}

// apply damages fragment frag of shard id in place on its local store.
func apply(t testing.TB, d damage, p Params, dirs []string, id, frag int, rng *rand.Rand) {
	t.Helper()
	name := filepath.Join(dirs[p.Placement(id, frag)], filepath.FromSlash(fragKey(id, frag)))
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	switch d {
	case erase:
		err = os.Remove(name)
	case bitFlip:
		if len(b) > 0 {
			b[rng.IntN(len(b))] ^= 1 << rng.IntN(8)
		}
		err = os.WriteFile(name, b, 0o644)
	case truncate:
		err = os.WriteFile(name, b[:len(b)/2], 0o644)
	case zeroFill:
		clear(b)
		err = os.WriteFile(name, b, 0o644)
	case swap:
		other := (frag + 1) % p.Total()
		ob, rerr := os.ReadFile(filepath.Join(dirs[p.Placement(id, other)], filepath.FromSlash(fragKey(id, other))))
		if rerr != nil {
			t.Fatal(rerr)
		}
		err = os.WriteFile(name, ob, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// subsets returns every subset of {0..n-1} with exactly size elements.
func subsets(n, size int) [][]int {
	var out [][]int
	var rec func(start int, cur []int)
	rec = func(start int, cur []int) {
		if len(cur) == size {
			out = append(out, append([]int(nil), cur...))
			return
		}
		for i := start; i < n; i++ {
			rec(i+1, append(cur, i))
		}
	}
	rec(0, nil)
	return out
}

// TestDecodeMatrix reads random ranges from shards with every subset of up
// to m damaged fragments, for every kind of damage, and requires the exact
// bytes; with m+1 damaged fragments it requires an error and never bytes.
//
// Every (code, size, damage, subset) case is read in every mode, at least 4
// ranges each; the modes differ in how many random ranges a (code, size,
// damage, number lost) case spreads over its subsets: 1,000 with
// SHARDFS_SOAK=long (474,750 reads over the three codes), 300 in the
// suite (261,570 reads, the same 51,018 damaged sets: issue 56, the
// matrix was 486 s of a CI run, half of it file opens and reads), and 100
// of the (4,2) code alone under -short or -race.
func TestDecodeMatrix(t *testing.T) {
	const block = 64
	codes := []Params{{4, 2, block}, {6, 3, block}, {10, 4, block}}
	rangesPerCase := 300
	switch {
	case testing.Short() || raceEnabled:
		codes, rangesPerCase = codes[:1], 100
	case os.Getenv("SHARDFS_SOAK") == "long":
		rangesPerCase = 1000
	}
	ctx := context.Background()
	for _, p := range codes {
		shardSize := p.Data*block*6 + 17
		for _, size := range []int{0, 1, block - 1, block, block + 1, shardSize - 1} {
			t.Run(fmt.Sprintf("%dx%d/size%d", p.Data, p.Parity, size), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(size), uint64(p.Data)))
				data := make([]byte, size)
				for i := range data {
					data[i] = byte(rng.Uint32())
				}
				r, sh, dirs := testShard(t, p, size%p.Total(), data)
				paths := make([]string, p.Total())
				orig := make([][]byte, p.Total())
				for f := range paths {
					paths[f] = filepath.Join(dirs[p.Placement(sh.ID, f)], filepath.FromSlash(fragKey(sh.ID, f)))
					orig[f], _ = os.ReadFile(paths[f])
				}
				needed := int((int64(size) + sh.FragSize - 1) / max(sh.FragSize, 1)) // data fragments holding bytes
				for lost := 0; lost <= p.Parity+1; lost++ {
					sets := subsets(p.Total(), lost)
					if lost == p.Parity+1 && len(sets) > 30 {
						rng.Shuffle(len(sets), func(i, j int) { sets[i], sets[j] = sets[j], sets[i] })
						sets = sets[:30]
					}
					for _, d := range []damage{erase, bitFlip, truncate, zeroFill, swap} {
						if lost == 0 && d != erase {
							continue
						}
						// rangesPerCase random ranges per (code, size, damage, number lost),
						// spread over the subsets, at least 4 per subset.
						per := max(4, rangesPerCase/len(sets))
						for _, set := range sets {
							var damagedStores []int
							for _, f := range set {
								apply(t, d, p, dirs, sh.ID, f, rng)
								damagedStores = append(damagedStores, p.Placement(sh.ID, f))
							}
							// Effective damage, per block stripe: zero-filling an
							// all-zero padding fragment, or swapping two equal ones,
							// changes nothing; and a stripe is lost only when more than
							// m of its blocks are.
							F := int(sh.FragSize)
							nblk := max(1, (F+block-1)/block)
							stripe := make([]int, nblk)      // damaged blocks per stripe
							stripeData := make([]bool, nblk) // a data fragment holding bytes is among them
							for _, f := range set {          // apply changes the fragments of set, no other
								now, err := os.ReadFile(paths[f])
								for b := 0; b < nblk; b++ {
									lo, hi := b*block, min(F, (b+1)*block)
									if err != nil || len(now) != len(orig[f]) || !bytes.Equal(now[lo:hi], orig[f][lo:hi]) {
										stripe[b]++
										stripeData[b] = stripeData[b] || f < needed
									}
								}
							}
							// worst is the most damaged stripe any block of [off, off+n) lies in.
							worst := func(off, n int) int {
								w := 0
								for pos := off; pos < off+n; {
									local := pos % F
									w = max(w, stripe[local/block])
									pos += min(block-local%block, F-local) // to the next block or fragment start
								}
								return w
							}
							check := func(off, n int) {
								got, err := r.ReadRange(ctx, sh, int64(off), int64(n))
								if worst(off, n) > p.Parity {
									if (err == nil || Heal(err) != nil) && !bytes.Equal(got, data[off:off+n]) {
										t.Fatalf("%v of %v: wrong bytes returned with %d lost in a stripe", d, set, worst(off, n))
									}
									return
								}
								// Undamaged where the range lies: no heal. Else
								// served, naming only damaged fragments' stores.
								if worst(off, n) == 0 && err != nil || !served(err, sh.ID, damagedStores...) {
									t.Fatalf("%v of %v: ReadRange(%d,%d): %v", d, set, off, n, err)
								}
								if !bytes.Equal(got, data[off:off+n]) {
									t.Fatalf("%v of %v: ReadRange(%d,%d): wrong bytes", d, set, off, n)
								}
							}
							check(0, size)
							for i := 0; i < per && size > 0; i++ {
								off := rng.IntN(size)
								n := rng.IntN(min(size-off, 3*block)) + 1
								if rng.IntN(8) == 0 {
									n = size - off
								}
								check(off, n)
							}
							for b := range stripe {
								if stripe[b] > p.Parity && stripeData[b] {
									// A stripe lost more than m blocks, one of them
									// holding bytes: the whole-shard read must fail, and say why.
									_, err := r.ReadRange(ctx, sh, 0, int64(size))
									var tf *TooFewError
									if !errors.As(err, &tf) {
										t.Fatalf("%v of %v: whole-shard read with %d lost in stripe %d: %v, want TooFewError", d, set, stripe[b], b, err)
									}
									break
								}
							}
							for _, f := range set {
								if err := os.WriteFile(paths[f], orig[f], 0o644); err != nil {
									t.Fatal(err)
								}
							}
						}
					}
				}
			})
		}
	}
}

func TestTooFewNamesStores(t *testing.T) {
	p := Params{4, 2, 64}
	data := bytes.Repeat([]byte("shardfs"), 300)
	r, sh, dirs := testShard(t, p, 3, data)
	for _, f := range []int{0, 1, 2} {
		apply(t, erase, p, dirs, 3, f, nil)
	}
	_, err := r.ReadRange(context.Background(), sh, 0, int64(len(data)))
	var tf *TooFewError
	if !errors.As(err, &tf) || !errors.Is(err, ErrTooFewShards) {
		t.Fatalf("got %v, want TooFewError", err)
	}
	if len(tf.Failed) != 3 {
		t.Fatalf("failed = %d fragments, want 3", len(tf.Failed))
	}
	for _, f := range []int{0, 1, 2} {
		if want := dirs[p.Placement(3, f)]; !bytes.Contains([]byte(err.Error()), []byte(want)) {
			t.Errorf("error does not name store %s: %v", want, err)
		}
	}
}

func TestHealthyReadTouchesOnlyNeededFragments(t *testing.T) {
	p := Params{4, 2, 64}
	data := make([]byte, 4*640)
	for i := range data {
		data[i] = byte(i * 7)
	}
	r, sh, dirs := testShard(t, p, 0, data)
	// Damage every fragment except data fragment 1: a range inside it must still read.
	for _, f := range []int{0, 2, 3, 4, 5} {
		apply(t, erase, p, dirs, 0, f, nil)
	}
	got, err := r.ReadRange(context.Background(), sh, 640+100, 300)
	if err != nil || !bytes.Equal(got, data[740:1040]) {
		t.Fatalf("healthy single-fragment read: %v", err)
	}
}

func TestRebuild(t *testing.T) {
	p := Params{6, 3, 100}
	data := make([]byte, 10007)
	for i := range data {
		data[i] = byte(i ^ i>>8)
	}
	r, sh, dirs := testShard(t, p, 2, data)
	ctx := context.Background()
	bad := []int{0, 4, 7}
	for i, f := range bad {
		apply(t, []damage{erase, bitFlip, swap}[i], p, dirs, 2, f, rand.New(rand.NewPCG(1, 1)))
	}
	for f := 0; f < p.Total(); f++ {
		ferr := r.CheckFragment(ctx, sh, f)
		isBad := f == 0 || f == 4 || f == 7
		if (ferr != nil) != isBad {
			t.Fatalf("CheckFragment(%d) = %v, damaged=%v", f, ferr, isBad)
		}
	}
	rebuilt, err := r.Rebuild(ctx, sh, bad)
	if err != nil {
		t.Fatal(err)
	}
	for f, b := range rebuilt {
		if err := r.stores[p.Placement(2, f)].Put(ctx, fragKey(2, f), b); err != nil {
			t.Fatal(err)
		}
	}
	for f := 0; f < p.Total(); f++ {
		if ferr := r.CheckFragment(ctx, sh, f); ferr != nil {
			t.Fatalf("after rebuild, fragment %d: %v", f, ferr)
		}
	}
}

func TestParamsValidate(t *testing.T) {
	for _, p := range []Params{{0, 2, 64}, {4, -1, 64}, {200, 100, 64}, {4, 2, 0}, {4, 2, MaxBlockSize + 1}} {
		if p.Validate() == nil {
			t.Errorf("%+v accepted", p)
		}
	}
}

func TestReadExact(t *testing.T) {
	p := Params{4, 2, 64}
	data := make([]byte, 4*640+3)
	for i := range data {
		data[i] = byte(i*13 + 1)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		damage  []int
		verdict bool // what the caller's verify says about healthy bytes
	}{
		{"healthy", nil, true},
		{"verify rejects", nil, false},
		{"corrupt fragment", []int{0}, true},
		{"two lost", []int{0, 1}, true},
	} {
		r, sh, dirs := testShard(t, p, 1, data)
		for _, f := range tc.damage {
			apply(t, bitFlip, p, dirs, 1, f, rand.New(rand.NewPCG(3, 3)))
		}
		for _, rg := range [][2]int64{{0, 100}, {600, 100}, {0, int64(len(data))}, {1000, 1}} {
			want := data[rg[0] : rg[0]+rg[1]]
			got, err := readExact(ctx, r, sh, rg[0], rg[1], func(b []byte) bool { return tc.verdict && bytes.Equal(b, want) })
			if !served(err, 1, stores(p, 1, tc.damage)...) || !bytes.Equal(got, want) {
				t.Fatalf("%s %v: err %v, equal %v", tc.name, rg, err, bytes.Equal(got, want))
			}
		}
	}
}

// TestReadExactV: a range read into several buffers (crossing fragment
// boundaries, with empty and one-byte buffers) fills them with the right
// bytes, healthy or not: a corrupt or lost fragment is decoded around and
// the decoded bytes are scattered into the same buffers.
func TestReadExactV(t *testing.T) {
	p := Params{4, 2, 64}
	data := make([]byte, 4*640+3)
	for i := range data {
		data[i] = byte(i*7 + 5)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		damage  []int
		verdict bool
	}{
		{"healthy", nil, true},
		{"verify rejects", nil, false},
		{"corrupt fragment", []int{1}, true},
		{"two lost", []int{0, 2}, true},
	} {
		r, sh, dirs := testShard(t, p, 1, data)
		for _, f := range tc.damage {
			apply(t, bitFlip, p, dirs, 1, f, rand.New(rand.NewPCG(5, 5)))
		}
		for _, lens := range [][]int{{100}, {1, 0, 639, 700, 3}, {1500, 500, 1}} {
			const off = 5
			var bufs [][]byte
			total := 0
			for _, n := range lens {
				bufs = append(bufs, bytes.Repeat([]byte{0xEE}, n))
				total += n
			}
			want := data[off : off+total]
			verifies := 0
			err := r.ReadExactV(ctx, sh, off, bufs, func(v [][]byte) bool {
				verifies++
				return tc.verdict && bytes.Equal(bytes.Join(v, nil), want)
			})
			if !served(err, 1, stores(p, 1, tc.damage)...) || !bytes.Equal(bytes.Join(bufs, nil), want) {
				t.Fatalf("%s %v: err %v, equal %v", tc.name, lens, err, bytes.Equal(bytes.Join(bufs, nil), want))
			}
			if verifies != 1 {
				t.Fatalf("%s %v: verify called %d times, want once", tc.name, lens, verifies)
			}
		}
	}
}

// readExact reads exactly [off, off+n) of the shard's data fragments — no
// widening to checksum blocks — and accepts the bytes only if verify does
// (the caller checks checksums it knows, such as per-sample CRCs). On any
// error or a failed verify it falls back to ReadRange, which finds the bad
// fragment by its block checksums and decodes around it. It is
// ReadExactV into one buffer, for the tests.
func readExact(ctx context.Context, r *Reader, sh *Shard, off, n int64, verify func([]byte) bool) ([]byte, error) {
	if n < 0 {
		return nil, fmt.Errorf("shard %d: negative length %d", sh.ID, n)
	}
	out := make([]byte, n)
	err := r.ReadExactV(ctx, sh, off, [][]byte{out}, func(v [][]byte) bool { return verify(v[0]) })
	if err != nil && Heal(err) == nil {
		return nil, err
	}
	return out, err // with a HealNeeded, every byte
}

// served reports whether err says a read of shard served every byte: no
// error, or a HealNeeded for that shard naming only stores in damaged.
func served(err error, shard int, damaged ...int) bool {
	if err == nil {
		return true
	}
	h := Heal(err)
	if h == nil || h.Shard != shard || len(h.Stores) == 0 {
		return false
	}
	for _, s := range h.Stores {
		if !slices.Contains(damaged, s) {
			return false
		}
	}
	return true
}

// stores are the stores of shard's fragments frags.
func stores(p Params, shard int, frags []int) []int {
	var s []int
	for _, f := range frags {
		s = append(s, p.Placement(shard, f))
	}
	return s
}
