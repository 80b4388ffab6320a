package manifest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// testTop is a format-2 dataset of 4 shards in 3 strata with its indexes,
// samples stored stratum by stratum within each shard.
func testTop(t testing.TB) (*Top, []*ShardIndex) {
	t.Helper()
	top := &Top{Header: Header{Name: "ds", IngestID: "i1", CreatedUnix: 7, Seed: 3, Data: 2, Parity: 1, BlockSize: 64, ShardSize: 1 << 20,
		Stores: []string{"a", "b", "c"}, LabelFields: []string{"label"},
		Strata: []Stratum{{Name: "cat", Labels: []string{"cat"}}, {Name: "dog", Labels: []string{"dog"}}, {Name: "eel", Labels: []string{"eel"}}}}}
	counts := [][]int{{2, 1, 0}, {0, 0, 3}, {1, 1, 1}, {4, 0, 2}}
	var idx []*ShardIndex
	for s, row := range counts {
		x := &ShardIndex{Shard: s}
		var size int64
		for c, n := range row {
			for k := 0; k < n; k++ {
				x.Keys = append(x.Keys, fmt.Sprintf("%s/%d-%d.jpg", top.Strata[c].Name, s, k))
				x.Stratum = append(x.Stratum, uint32(c))
				sz := uint32(10 + 7*k + c)
				x.Size = append(x.Size, sz)
				x.Sum = append(x.Sum, uint32(1000*s+k))
				size += int64(sz)
			}
		}
		frag := (size + 1) / 2
		blocks := (frag + 63) / 64
		for i := int64(0); i < 3*blocks; i++ {
			x.Sums = append(x.Sums, uint32(i*31+int64(s)))
		}
		enc, err := EncodeIndex(x)
		if err != nil {
			t.Fatal(err)
		}
		top.Shards = append(top.Shards, TopShard{Size: size, NumSamples: len(x.Keys), IndexSize: int64(len(enc)), IndexSum: 99})
		top.SetCounts(s, row)
		idx = append(idx, x)
	}
	return top, idx
}

func TestTopRoundTrip(t *testing.T) {
	top, idx := testTop(t)
	enc, err := EncodeTop(top)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeTop(enc)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "ds" || got.IngestID != "i1" || got.Seed != 3 || got.Data != 2 || got.Parity != 1 || !slices.Equal(got.Stores, top.Stores) ||
		len(got.Shards) != 4 || got.Samples() != 15 {
		t.Fatalf("decoded %+v", got)
	}
	if want := []int{7, 2, 6}; got.Strata[0].Count != want[0] || got.Strata[1].Count != want[1] || got.Strata[2].Count != want[2] {
		t.Fatalf("stratum totals %+v, want %v", got.Strata, want)
	}
	row := make([]int, 3)
	for s, want := range [][]int{{2, 1, 0}, {0, 0, 3}, {1, 1, 1}, {4, 0, 2}} {
		got.Counts(s, row)
		if !slices.Equal(row, want) || got.Shards[s] != top.Shards[s] {
			t.Fatalf("shard %d: counts %v %+v, want %v %+v", s, row, got.Shards[s], want, top.Shards[s])
		}
	}
	for s, x := range idx {
		b, _ := EncodeIndex(x)
		y, err := DecodeIndex(b, got, s)
		if err != nil {
			t.Fatalf("shard %d: %v", s, err)
		}
		if !slices.Equal(y.Keys, x.Keys) || !slices.Equal(y.Sums, x.Sums) || !slices.Equal(y.Size, x.Size) || !slices.Equal(y.Sum, x.Sum) || !slices.Equal(y.Stratum, x.Stratum) {
			t.Fatalf("shard %d index differs", s)
		}
	}
}

// An index that does not match the top-level manifest is refused, naming
// what differs: it is never used to serve bytes.
func TestIndexMustMatchTop(t *testing.T) {
	top, idx := testTop(t)
	for _, tc := range []struct {
		name  string
		shard int
		edit  func(x *ShardIndex)
		want  string
	}{
		{"another shard's index", 1, func(x *ShardIndex) {}, "names shard"},
		{"a sample more", 0, func(x *ShardIndex) {
			x.Keys, x.Stratum, x.Size, x.Sum = append(x.Keys, "x"), append(x.Stratum, 0), append(x.Size, 1), append(x.Sum, 1)
		}, "samples, the manifest says"},
		{"strata out of order", 0, func(x *ShardIndex) { x.Stratum[0], x.Stratum[2] = x.Stratum[2], x.Stratum[0] }, "out of order"},
		{"another class mix", 0, func(x *ShardIndex) { x.Stratum[2] = 2 }, "do not match"},
		{"a size changed", 2, func(x *ShardIndex) { x.Size[1]++ }, "bytes, the manifest says"},
		{"a block checksum short", 3, func(x *ShardIndex) { x.Sums = x.Sums[1:] }, "block checksums"},
	} {
		src := idx[0]
		if tc.shard != 1 {
			src = idx[tc.shard]
		}
		x := &ShardIndex{Shard: src.Shard, Sums: slices.Clone(src.Sums), Keys: slices.Clone(src.Keys), Stratum: slices.Clone(src.Stratum), Size: slices.Clone(src.Size), Sum: slices.Clone(src.Sum)}
		tc.edit(x)
		b, err := EncodeIndex(x)
		if err != nil {
			t.Fatal(err)
		}
		_, err = DecodeIndex(b, top, tc.shard)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrCorrupt with %q", tc.name, err, tc.want)
		}
	}
}

// rawFrame frames body bytes as frame does, so fuzzers reach the decoders
// past the checksums.
func rawFrame(t testing.TB, magic string, body []byte) []byte {
	return rawFrameOf(t, magic, TopVersion, body)
}

func rawFrameOf(t testing.TB, magic string, v uint32, body []byte) []byte {
	b, err := frame(magic, v, func(e *encoder) { e.w.Write(body) })
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func FuzzDecodeTop(f *testing.F) {
	top, _ := testTop(f)
	enc, err := EncodeTop(top)
	if err != nil {
		f.Fatal(err)
	}
	body, _ := rawBody(enc)
	f.Add(body)
	top.Segments = []Segment{{IngestID: "i0", Shards: 1}, {IngestID: top.IngestID, Shards: len(top.Shards) - 1}}
	top.Versions = []VersionInfo{{Number: 1, IngestID: "i0", Change: "ingest"}, {Number: 2, IngestID: top.IngestID, Parent: 1, Change: "append"}}
	if enc, err = EncodeTop(top); err != nil {
		f.Fatal(err)
	}
	body, _ = rawBody(enc)
	f.Add(body)
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, v := range []uint32{TopVersion, TopVersionLineage} {
			got, err := DecodeTop(rawFrameOf(t, topMagic, v, body))
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("error without ErrCorrupt: %v", err)
				}
				continue
			}
			row := make([]int, len(got.Strata))
			for s := range got.Shards {
				got.Counts(s, row) // never out of range
			}
			if _, err := EncodeTop(got); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func FuzzDecodeIndex(f *testing.F) {
	top, idx := testTop(f)
	for _, x := range idx {
		enc, err := EncodeIndex(x)
		if err != nil {
			f.Fatal(err)
		}
		body, _ := rawBody(enc)
		f.Add(body, x.Shard)
	}
	f.Fuzz(func(t *testing.T, body []byte, shard int) {
		shard = ((shard % 4) + 4) % 4
		x, err := DecodeIndex(rawFrame(t, indexMagic, body), top, shard)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error without ErrCorrupt: %v", err)
			}
			return
		}
		if len(x.Keys) != top.Shards[shard].NumSamples {
			t.Fatalf("accepted an index of %d samples for a shard of %d", len(x.Keys), top.Shards[shard].NumSamples)
		}
	})
}
