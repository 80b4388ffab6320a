package manifest

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"testing"
)

// withLineage gives m the lineage of its third version: two appends, the
// last one m's own ingest.
func withLineage(m *Manifest) *Manifest {
	n := len(m.Shards)
	m.Segments = []Segment{{IngestID: "ing0", Shards: n - n/2 - n/4}, {IngestID: "ingA", Shards: n / 4}, {IngestID: m.IngestID, Shards: n / 2}}
	if n/4 == 0 {
		m.Segments = []Segment{{IngestID: "ing0", Shards: n - n/2}, {IngestID: m.IngestID, Shards: n / 2}}
	}
	m.Versions = []VersionInfo{
		{Number: 1, IngestID: "ing0", CreatedUnix: 1700000000, Samples: 10, Bytes: 1000, Change: "ingest"},
		{Number: 2, IngestID: "ingA", Parent: 1, CreatedUnix: 1700000100, Samples: 15, Bytes: 1500, Change: "append 5 samples"},
		{Number: 3, IngestID: m.IngestID, Parent: 2, CreatedUnix: 1700000200, Samples: int64(m.Samples.Len()), Bytes: m.TotalBytes(), Change: "append"},
	}
	return m
}

func TestLineageRoundTripsInEveryFormat(t *testing.T) {
	for _, fields := range []bool{false, true} {
		m := stratumByStratum(synthetic(40, 3, 5, 1))
		if fields {
			m = withFields(m)
		}
		plain, err := Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		m = withLineage(m)
		b, err := Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(b, plain) {
			t.Fatal("the lineage was not written")
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("fields %v: %v", fields, err)
		}
		equal(t, m, got)
		if got.FormatVersion != VersionLineage || got.Samples.HasFields() != fields {
			t.Fatalf("fields %v: format %d, field column %v", fields, got.FormatVersion, got.Samples.HasFields())
		}
		checkLineage(t, &m.Header, &got.Header)
		for s := range m.Shards {
			gotID, gotN := got.ShardObject(s)
			wantID, wantN := m.ShardObject(s)
			if gotID != wantID || gotN != wantN || gotN != s {
				t.Fatalf("shard %d: object %s/%d, want %s/%d numbered %d", s, gotID, gotN, wantID, wantN, s)
			}
		}
		first, _ := m.ShardObject(0)
		last, _ := m.ShardObject(len(m.Shards) - 1)
		if first != "ing0" || last != m.IngestID || got.VersionNumber() != 3 {
			t.Fatalf("shard 0 in %s, the last in %s, version %d", first, last, got.VersionNumber())
		}

		// Format 2: the top-level manifest carries the lineage; the
		// indexes stay in the format an earlier version wrote them in.
		// Format 3: the root carries it.
		enc := encodeFormats(t, m)
		checkLineage(t, &m.Header, &enc.top.Header)
		checkLineage(t, &m.Header, &enc.root.Header)
	}
}

// encoded is a manifest in formats 2 and 3, each object encoded and the
// top-level manifest and the root decoded back.
type encoded struct {
	indexes        [][]byte
	top            *Top // decoded
	topBytes       []byte
	root           *Root // decoded
	rootBytes      []byte
	indexesDecoded []*ShardIndex
}

// encodeFormats encodes m's shard indexes, its top-level manifest and its
// format-3 root, decodes the top-level manifest and the root, and decodes
// every index under the decoded top-level manifest.
func encodeFormats(t *testing.T, m *Manifest) encoded {
	t.Helper()
	var e encoded
	sizes, sums := make([]int64, len(m.Shards)), make([]uint32, len(m.Shards))
	for s := range m.Shards {
		b, err := EncodeIndex(ShardIndexOf(m, s))
		if err != nil {
			t.Fatal(err)
		}
		e.indexes = append(e.indexes, b)
		sizes[s], sums[s] = int64(len(b)), IndexSum(b)
	}
	top, err := NewTop(m, sizes, sums)
	if err != nil {
		t.Fatal(err)
	}
	if e.topBytes, err = EncodeTop(top); err != nil {
		t.Fatal(err)
	}
	if e.top, err = DecodeTop(e.topBytes); err != nil {
		t.Fatal(err)
	}
	for s, b := range e.indexes {
		x, err := DecodeIndex(b, e.top, s)
		if err != nil {
			t.Fatalf("shard %d's index: %v", s, err)
		}
		e.indexesDecoded = append(e.indexesDecoded, x)
	}
	root, _, err := RootOf(top, 3)
	if err != nil {
		t.Fatal(err)
	}
	if e.rootBytes, err = EncodeRoot(root); err != nil {
		t.Fatal(err)
	}
	if e.root, err = DecodeRoot(e.rootBytes); err != nil {
		t.Fatal(err)
	}
	return e
}

func checkLineage(t *testing.T, want, got *Header) {
	t.Helper()
	if fmt.Sprint(want.Segments) != fmt.Sprint(got.Segments) || fmt.Sprint(want.Versions) != fmt.Sprint(got.Versions) {
		t.Fatalf("lineage %v %v, want %v %v", got.Segments, got.Versions, want.Segments, want.Versions)
	}
}

func TestLineageIsChecked(t *testing.T) {
	for name, spoil := range map[string]func(m *Manifest){
		"segments short of the shards": func(m *Manifest) { m.Segments[0].Shards-- },
		"an empty segment": func(m *Manifest) {
			m.Segments[1].Shards, m.Segments[0].Shards = 0, m.Segments[0].Shards+m.Segments[1].Shards
		},
		"versions out of order":      func(m *Manifest) { m.Versions[1].Number = 5 },
		"a parent after its child":   func(m *Manifest) { m.Versions[1].Parent = 2 },
		"the last version another's": func(m *Manifest) { m.Versions[2].IngestID = "other" },
	} {
		m := withLineage(synthetic(40, 3, 5, 1))
		spoil(m)
		if err := m.Validate(); err == nil {
			t.Errorf("%s: validated", name)
		}
		if b, err := Encode(m); err == nil {
			if _, err := Decode(b); err == nil {
				t.Errorf("%s: decoded", name)
			}
		}
	}
}

// stratumByStratum is m with each shard's samples stored stratum by
// stratum, as format 2 stores them.
func stratumByStratum(m *Manifest) *Manifest {
	out := *m
	out.Samples = Samples{}
	out.Strata = slices.Clone(m.Strata)
	for _, sh := range m.Shards {
		rows := make([]int, 0, sh.NumSamples)
		for j := sh.FirstSample; j < sh.FirstSample+sh.NumSamples; j++ {
			rows = append(rows, j)
		}
		slices.SortStableFunc(rows, func(a, b int) int { return cmp.Compare(m.Samples.Stratum[a], m.Samples.Stratum[b]) })
		for _, j := range rows {
			s := &m.Samples
			out.Samples.Append(s.Key(j), s.Stratum[j], s.Shard[j], s.Size[j], s.Sum[j])
		}
	}
	out.Shards = slices.Clone(m.Shards)
	if err := out.Finish(); err != nil {
		panic(err)
	}
	return &out
}

// A Local segment numbers its shards from 0 in their objects' names and
// placement; the others keep the dataset's numbers. Only a lineage with
// one is written in the segments formats, and in every framing the flag
// and the numbers come back.
func TestLocalSegmentsRoundTripInEveryFormat(t *testing.T) {
	m := withLineage(stratumByStratum(synthetic(40, 3, 5, 1)))
	plain, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	if v := frameVersion(t, plain); v != VersionLineage {
		t.Fatalf("a lineage without a Local segment is written in format %d, want %d", v, VersionLineage)
	}
	m.Segments[1].Local, m.Segments[2].Local = true, true
	start1, start2 := m.Segments[0].Shards, m.Segments[0].Shards+m.Segments[1].Shards
	want := func(s int) (string, int) {
		switch {
		case s < start1:
			return "ing0", s
		case s < start2:
			return "ingA", s - start1
		}
		return m.IngestID, s - start2
	}
	check := func(what string, h *Header) {
		t.Helper()
		checkLineage(t, &m.Header, h)
		for s := range m.Shards {
			id, n := h.ShardObject(s)
			if wid, wn := want(s); id != wid || n != wn {
				t.Fatalf("%s: shard %d is object %s/%d, want %s/%d", what, s, id, n, wid, wn)
			}
		}
	}
	check("in memory", &m.Header)
	b, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	if v := frameVersion(t, b); v != VersionSegments {
		t.Fatalf("manifest format %d, want %d", v, VersionSegments)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	check("manifest", &got.Header)

	enc := encodeFormats(t, m)
	for s, x := range enc.indexesDecoded {
		if _, n := want(s); x.Shard != n {
			t.Fatalf("shard %d's index names shard %d, want its number %d", s, x.Shard, n)
		}
	}
	if v := frameVersion(t, enc.topBytes); v != TopVersionSegments {
		t.Fatalf("top-level manifest format %d, want %d", v, TopVersionSegments)
	}
	check("top-level manifest", &enc.top.Header)
	// An index that names the shard by the dataset's number, where its
	// segment numbers it on its own, is not this shard's.
	x := ShardIndexOf(m, start1+1)
	x.Shard = start1 + 1
	wrong, err := EncodeIndex(x)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeIndex(wrong, enc.top, start1+1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("an index numbered as the dataset numbers its shard: %v, want ErrCorrupt", err)
	}
	if v := frameVersion(t, enc.rootBytes); v != RootVersionSegments {
		t.Fatalf("root format %d, want %d", v, RootVersionSegments)
	}
	check("root", &enc.root.Header)
}

// frameVersion is the format version in an encoded object's frame.
func frameVersion(t *testing.T, b []byte) uint32 {
	t.Helper()
	if len(b) < headerSize {
		t.Fatalf("%d bytes: no frame", len(b))
	}
	return binary.LittleEndian.Uint32(b[8:])
}
