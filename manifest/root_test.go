package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
)

// randomTop is a format-2 description of shards shards in strata strata,
// counts skewed and often zero, as counts only (no indexes).
func randomTop(rng *rand.Rand, shards, strata int) *Top {
	t := &Top{Header: Header{Name: "ds", IngestID: "i1", Data: 2, Parity: 1, BlockSize: 64, Stores: []string{"a", "b", "c"}}}
	for c := range strata {
		t.Strata = append(t.Strata, Stratum{Name: fmt.Sprintf("s%d", c)})
	}
	row := make([]int, strata)
	for s := range shards {
		n := 0
		for c := range row {
			row[c] = 0
			if rng.IntN(3) > 0 {
				row[c] = rng.IntN(1 + 40/(c+1))
			}
			n += row[c]
			t.Strata[c].Count += row[c]
		}
		t.Shards = append(t.Shards, TopShard{Size: int64(n*50 + rng.IntN(10)), NumSamples: n, IndexSize: int64(100 + s), IndexSum: rng.Uint32()})
		t.SetCounts(s, row)
	}
	return t
}

// TestRootRoundTrip: a format-2 description re-cut into a root and group
// objects reads back the same shards, counts and checksums, and every
// group member is located at the shard and position format 2 numbers it.
func TestRootRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 60 {
		top := randomTop(rng, 1+rng.IntN(40), 1+rng.IntN(12))
		gs := 1 + rng.IntN(9)
		root, objs, err := RootOf(top, gs)
		if err != nil {
			t.Fatal(err)
		}
		enc, err := EncodeRoot(root)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeRoot(enc)
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		if got.NumShards() != len(top.Shards) || got.Samples() != int64(top.Samples()) || len(got.Groups) != (len(top.Shards)+gs-1)/gs {
			t.Fatalf("trial %d: %d shards, %d samples, %d groups; want %d, %d, groups of %d", trial, got.NumShards(), got.Samples(), len(got.Groups), len(top.Shards), top.Samples(), gs)
		}
		for c, st := range got.Strata {
			if st.Count != top.Strata[c].Count {
				t.Fatalf("trial %d: stratum %d counts %d, want %d", trial, c, st.Count, top.Strata[c].Count)
			}
		}
		want, row := make([]int, len(top.Strata)), make([]int, len(top.Strata))
		for g := range got.Groups {
			x, err := DecodeGroup(objs[g], got, g)
			if err != nil {
				t.Fatalf("trial %d group %d: %v", trial, g, err)
			}
			seen := make([]int64, len(top.Strata)) // members of each stratum in the group so far
			for j, sh := range x.Shards {
				s := x.First + j
				top.Counts(s, want)
				x.Counts(j, row)
				if sh != top.Shards[s] || !slices.Equal(row, want) {
					t.Fatalf("trial %d shard %d: %+v %v, want %+v %v", trial, s, sh, row, top.Shards[s], want)
				}
				pos := 0
				for c, n := range want {
					for k := range n {
						ls, lp, err := x.Locate(c, seen[c]+int64(k))
						if err != nil || ls != s || lp != pos+k {
							t.Fatalf("trial %d: group %d stratum %d member %d at shard %d position %d (%v), want %d %d", trial, g, c, seen[c]+int64(k), ls, lp, err, s, pos+k)
						}
					}
					seen[c] += int64(n)
					pos += n
				}
			}
			for c, n := range seen {
				if _, _, err := x.Locate(c, n); err == nil {
					t.Fatalf("trial %d group %d: member %d of stratum %d, which has %d there, located", trial, g, n, c, n)
				}
			}
		}
	}
}

// TestRootRefusesDamage: a group object read against the wrong group, a
// root whose counts disagree with the objects, and any flipped byte are
// refused as corrupt, never decoded into other counts.
func TestRootRefusesDamage(t *testing.T) {
	top := randomTop(rand.New(rand.NewPCG(3, 4)), 10, 5)
	root, objs, err := RootOf(top, 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeGroup(objs[0], root, 1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("group 0's object read as group 1: %v", err)
	}
	// A root that moved one sample of stratum 0 from group 0 to group 1,
	// its object references kept: the objects no longer sum to it.
	moved := &Root{Header: root.Header}
	row := make([]int, len(root.Strata))
	for g, gr := range root.Groups {
		root.GroupCounts(g, row)
		tot := make([]int64, len(row))
		for c, n := range row {
			tot[c] = int64(n)
		}
		switch {
		case g == 0 && tot[0] > 0:
			tot[0]--
		case g == 1 && row[0] > 0:
			tot[0]++
		}
		moved.AddGroup(gr, tot)
	}
	if _, err := DecodeGroup(objs[1], moved, 1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("group 1 against a root with one more sample of stratum 0: %v", err)
	}
	enc, err := EncodeRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]byte{enc, objs[1]} {
		for i := 0; i < len(b); i += 1 + len(b)/50 {
			bad := slices.Clone(b)
			bad[i] ^= 0x10
			var err error
			if bytes.Equal(b, enc) {
				_, err = DecodeRoot(bad)
			} else {
				_, err = DecodeGroup(bad, root, 1)
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("byte %d of %d flipped: %v", i, len(b), err)
			}
		}
	}
}

// FuzzDecodeRootBody fuzzes the root's and a group object's parsers behind
// the checksums. Nothing panics, and allocation is bounded by the input.
func FuzzDecodeRootBody(f *testing.F) {
	top := randomTop(rand.New(rand.NewPCG(5, 6)), 12, 4)
	root, objs, err := RootOf(top, 5)
	if err != nil {
		f.Fatal(err)
	}
	enc, _ := EncodeRoot(root)
	for _, b := range [][]byte{enc, objs[0], objs[2]} {
		body, err := rawBody(b)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(body)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		for _, v := range []uint32{RootVersion, RootVersionLineage} {
			r, err := decodeRootBody(bytes.NewReader(data), int64(len(data)), v)
			if err == nil && len(r.Groups) > 0 && r.Groups[0].Samples < 0 {
				t.Fatal("a group of negative samples")
			}
		}
		for g := range 3 {
			if x, err := decodeGroupBody(bytes.NewReader(data), int64(len(data)), root, g); err == nil {
				row := make([]int, len(root.Strata))
				for j := range x.Shards {
					x.Counts(j, row)
					if slices.ContainsFunc(row, func(n int) bool { return n < 0 }) {
						t.Fatalf("group %d shard %d: counts %v", g, j, row)
					}
				}
			}
		}
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		if grew := after.TotalAlloc - before.TotalAlloc; grew > uint64(64*len(data))+8<<20 {
			t.Fatalf("decoding %d bytes allocated %d bytes", len(data), grew)
		}
	})
}

// The even split a group object's counts are stored against is part of the
// format: shard j of n gets ⌊(j+1)·t/n⌋ − ⌊j·t/n⌋ of a total t.
func TestEvenSplitFormula(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 200 {
		n := 1 + rng.IntN(2000)
		total := make([]int, 1+rng.IntN(20))
		for c := range total {
			total[c] = rng.IntN(5 * n)
		}
		s := newEvenSplitter(total, n)
		row := make([]int, len(total))
		for j := range n {
			s.next(row)
			for c, tot := range total {
				if want := (j+1)*tot/n - j*tot/n; row[c] != want {
					t.Fatalf("shard %d of %d, total %d: %d, want %d", j, n, tot, row[c], want)
				}
			}
		}
	}
}
