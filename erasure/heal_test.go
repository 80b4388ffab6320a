package erasure

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/shardfs/shardfs/internal/faultstore"
)

// TestReadsReturnHealNeeded (issue 58): a read that serves every byte but
// met a fragment missing or corrupt says so as its result, a *HealNeeded
// naming the shard and exactly the stores to rebuild, through each of the
// four reads; a store that is down, or fragments the read did not touch,
// need no heal; a read that fails is a failure, not a heal.
func TestReadsReturnHealNeeded(t *testing.T) {
	p := Params{4, 2, 256}
	data := make([]byte, 4*1024)
	for i := range data {
		data[i] = byte(i*31 + 7)
	}
	ctx := context.Background()
	// Each read of [off, off+n) into fresh buffers; the bytes and the result.
	reads := map[string]func(r *Reader, sh *Shard, off, n int64) ([]byte, error){
		"ReadRange": func(r *Reader, sh *Shard, off, n int64) ([]byte, error) { return r.ReadRange(ctx, sh, off, n) },
		"ReadRangeInto": func(r *Reader, sh *Shard, off, n int64) ([]byte, error) {
			b := make([]byte, n)
			return b, r.ReadRangeInto(ctx, sh, b, off)
		},
		"ReadRangeV": func(r *Reader, sh *Shard, off, n int64) ([]byte, error) {
			a, b := make([]byte, n/3), make([]byte, n-n/3)
			err := r.ReadRangeV(ctx, sh, off, [][]byte{a, b})
			return append(a, b...), err
		},
		"ReadExactV": func(r *Reader, sh *Shard, off, n int64) ([]byte, error) {
			a, b := make([]byte, n/2), make([]byte, n-n/2)
			err := r.ReadExactV(ctx, sh, off, [][]byte{a, b}, func(v [][]byte) bool {
				return bytes.Equal(bytes.Join(v, nil), data[off:off+n])
			})
			return append(a, b...), err
		},
	}
	F := int64(1024) // each data fragment's bytes: the range below spans fragments 0 and 1
	off, n := F-100, int64(300)
	for _, tc := range []struct {
		name   string
		damage func(r *Reader, f []*faultyStore)
		want   []int // fragments whose stores the heal names; nil: no heal
		fails  bool
	}{
		{"healthy", func(*Reader, []*faultyStore) {}, nil, false},
		{"data fragment missing", func(r *Reader, f []*faultyStore) { f[0].delete(t, r, 0) }, []int{0}, false},
		{"two data fragments missing", func(r *Reader, f []*faultyStore) { f[0].delete(t, r, 0); f[1].delete(t, r, 1) }, []int{0, 1}, false},
		{"data fragment corrupt", func(r *Reader, f []*faultyStore) { f[1].flip() }, []int{1}, false},
		{"a fragment the range does not touch is missing", func(r *Reader, f []*faultyStore) { f[3].delete(t, r, 3) }, nil, false},
		{"store down: late, not lost", func(r *Reader, f []*faultyStore) { f[0].down() }, nil, false},
		{"store down, and the parity its decode needs missing", func(r *Reader, f []*faultyStore) { f[0].down(); f[4].delete(t, r, 4) }, []int{4}, false},
		{"three missing of RS(4,2): a failure", func(r *Reader, f []*faultyStore) {
			f[0].delete(t, r, 0)
			f[4].delete(t, r, 4)
			f[5].delete(t, r, 5)
		}, nil, true},
	} {
		for name, read := range reads {
			r, sh, faulty, _ := faultyShard(t, p, data, HealthOptions{})
			if sh.FragSize != F {
				t.Fatalf("fragment size %d, the test expects %d", sh.FragSize, F)
			}
			fs := make([]*faultyStore, p.Total())
			for f := range fs {
				fs[f] = &faultyStore{faulty[p.Placement(sh.ID, f)], p.Placement(sh.ID, f)}
			}
			tc.damage(r, fs)
			got, err := read(r, sh, off, n)
			h := Heal(err)
			switch {
			case tc.fails:
				if err == nil || h != nil {
					t.Fatalf("%s, %s: %v (heal %v), want a failure", tc.name, name, err, h)
				}
				continue
			case tc.want == nil && err != nil:
				t.Fatalf("%s, %s: %v, want nil", tc.name, name, err)
			case tc.want != nil:
				want := stores(p, sh.ID, tc.want)
				slices.Sort(want)
				if h == nil || h.Shard != sh.ID || !slices.Equal(h.Stores, want) {
					t.Fatalf("%s, %s: %v, want a HealNeeded for shard %d, stores %v", tc.name, name, err, sh.ID, want)
				}
			}
			if !bytes.Equal(got, data[off:off+n]) {
				t.Fatalf("%s, %s: wrong bytes with %v", tc.name, name, err)
			}
		}
	}
}

// TestHealIsOnlyWhatTheReadSays: Heal finds a HealNeeded wrapped one by
// one, and never one joined with a failure (the read did not serve).
func TestHealIsOnlyWhatTheReadSays(t *testing.T) {
	h := &HealNeeded{Shard: 3, Stores: []int{1}}
	if Heal(h) != h || Heal(fmt.Errorf("warm shard 3: %w", h)) != h {
		t.Fatal("a HealNeeded, bare or wrapped, was not found")
	}
	if Heal(errors.Join(h, ErrChecksum)) != nil || Heal(ErrChecksum) != nil || Heal(nil) != nil {
		t.Fatal("a failure, or none, was taken for a heal")
	}
	if got := h.Error(); got != "shard 3: its fragment on store 1 was missing or corrupt; the bytes were decoded from the other fragments, and the shard needs healing" {
		t.Fatalf("message: %q", got)
	}
}

// faultyStore is the store of one fragment of shard 0, to damage.
type faultyStore struct {
	*faultstore.Faulty
	store int
}

func (s *faultyStore) delete(t *testing.T, r *Reader, frag int) {
	t.Helper()
	if err := r.stores[s.store].Delete(context.Background(), fragKey(0, frag)); err != nil {
		t.Fatal(err)
	}
}
func (s *faultyStore) flip() { s.SetFlipBits(true) }
func (s *faultyStore) down() { s.SetDown(true) }
