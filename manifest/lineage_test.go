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
	return encodeFormatsWith(t, m, func(s int) *ShardIndex { return ShardIndexOf(m, s) })
}

// encodeFormatsWith is encodeFormats of the shard indexes index writes.
func encodeFormatsWith(t *testing.T, m *Manifest, index func(s int) *ShardIndex) encoded {
	t.Helper()
	var e encoded
	sizes, sums := make([]int64, len(m.Shards)), make([]uint32, len(m.Shards))
	for s := range m.Shards {
		b, err := EncodeIndex(index(s))
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

// A segment's own stratum and member ids (a part that saw only its slice
// numbered what it met) are its shard indexes' ids; Segment.Strata and
// Segment.Members map them to the dataset's as the indexes are decoded,
// and every framing keeps the maps. A map that would put a shard's
// samples out of the dataset's stratum order, or name an id the segment
// does not map, is refused.
func TestSegmentIDMapsDecodeIndexesInTheDatasetsIDs(t *testing.T) {
	m := withLineage(withRecords(stratumByStratum(synthetic(40, 3, 5, 1))))
	seg := &m.Segments[2]
	first := len(m.Shards) - seg.Shards
	// The segment's writer met the strata in the opposite order, and the
	// members as json, jpg, txt.
	nStrata := len(m.Strata)
	seg.Local = true
	seg.Strata = make([]uint32, nStrata)
	for local := range nStrata {
		seg.Strata[local] = uint32(nStrata - 1 - local)
	}
	seg.Members = []uint32{2, 0, 1} // its json, jpg, txt
	localMember := map[int]int{2: 0, 0: 1, 1: 2}
	enc := encodeFormatsWith(t, m, func(s int) *ShardIndex {
		x := ShardIndexOf(m, s)
		if s < first {
			return x
		}
		x = cloneIndex(x)
		for i, c := range x.Stratum {
			x.Stratum[i] = uint32(nStrata - 1 - int(c))
		}
		for i, table := range x.Records {
			var local []byte
			RecordMembers(table, func(member int, size int64) { local = AppendRecord(local, localMember[member], size) })
			x.Records[i] = local
		}
		return x
	})
	got, indexes := enc.top, enc.indexes
	checkLineage(t, &m.Header, &enc.root.Header)
	checkLineage(t, &m.Header, &got.Header)
	if !slices.Equal(got.Segments[2].Strata, seg.Strata) || !slices.Equal(got.Segments[2].Members, seg.Members) || got.Segments[1].Strata != nil {
		t.Fatalf("segment maps %v %v, want %v %v", got.Segments[2].Strata, got.Segments[2].Members, seg.Strata, seg.Members)
	}
	for s, x := range enc.indexesDecoded {
		want := ShardIndexOf(m, s)
		if !slices.Equal(x.Stratum, want.Stratum) || !slices.EqualFunc(x.Records, want.Records, bytes.Equal) {
			t.Fatalf("shard %d: strata %v records %q, want %v %q", s, x.Stratum, x.Records, want.Stratum, want.Records)
		}
	}

	// The identity map keeps the samples of a shard of the segment in
	// the reverse of the dataset's order; a member map too short leaves
	// member 2 unmapped.
	for name, spoil := range map[string]func(h *Header){
		"strata out of order":   func(h *Header) { h.Segments[2].Strata = []uint32{0, 1, 2} },
		"a member it maps not":  func(h *Header) { h.Segments[2].Members = []uint32{2, 0} },
		"a stratum it maps not": func(h *Header) { h.Segments[2].Strata = []uint32{2} },
	} {
		spoilt, err := DecodeTop(enc.topBytes)
		if err != nil {
			t.Fatal(err)
		}
		spoil(&spoilt.Header)
		bad := 0
		for s := first; s < len(m.Shards); s++ {
			if _, err := DecodeIndex(indexes[s], spoilt, s); errors.Is(err, ErrCorrupt) {
				bad++
			}
		}
		if bad == 0 {
			t.Errorf("%s: every index of the segment decoded", name)
		}
	}
}

// cloneIndex is a copy of x whose columns can be changed.
func cloneIndex(x *ShardIndex) *ShardIndex {
	c := *x
	c.Stratum = slices.Clone(x.Stratum)
	c.Records = make([][]byte, len(x.Records))
	for i, r := range x.Records {
		c.Records[i] = slices.Clone(r)
	}
	return &c
}
