package manifest

import (
	"bytes"
	"cmp"
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
			if got.ShardIngest(s) != m.ShardIngest(s) {
				t.Fatalf("shard %d: ingest %s, want %s", s, got.ShardIngest(s), m.ShardIngest(s))
			}
		}
		if m.ShardIngest(0) != "ing0" || m.ShardIngest(len(m.Shards)-1) != m.IngestID || got.VersionNumber() != 3 {
			t.Fatalf("shard 0 in %s, the last in %s, version %d", m.ShardIngest(0), m.ShardIngest(len(m.Shards)-1), got.VersionNumber())
		}

		// Format 2: the top-level manifest carries the lineage; the
		// indexes stay in the format an earlier version wrote them in.
		sizes, sums := make([]int64, len(m.Shards)), make([]uint32, len(m.Shards))
		var idx [][]byte
		for s := range m.Shards {
			x, err := EncodeIndex(ShardIndexOf(m, s))
			if err != nil {
				t.Fatal(err)
			}
			idx = append(idx, x)
			sizes[s], sums[s] = int64(len(x)), IndexSum(x)
		}
		top, err := NewTop(m, sizes, sums)
		if err != nil {
			t.Fatal(err)
		}
		tb, err := EncodeTop(top)
		if err != nil {
			t.Fatal(err)
		}
		gotTop, err := DecodeTop(tb)
		if err != nil {
			t.Fatal(err)
		}
		checkLineage(t, &m.Header, &gotTop.Header)
		for s, x := range idx {
			if _, err := DecodeIndex(x, gotTop, s); err != nil {
				t.Fatalf("shard %d's index under a top with a lineage: %v", s, err)
			}
		}

		// Format 3.
		root, _, err := RootOf(top, 3)
		if err != nil {
			t.Fatal(err)
		}
		rb, err := EncodeRoot(root)
		if err != nil {
			t.Fatal(err)
		}
		gotRoot, err := DecodeRoot(rb)
		if err != nil {
			t.Fatal(err)
		}
		checkLineage(t, &m.Header, &gotRoot.Header)
	}
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
