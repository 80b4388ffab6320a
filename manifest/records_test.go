package manifest

import (
	"bytes"
	"strings"
	"testing"
)

// withRecords makes m's samples records of the members "jpg", "txt" and
// "json" (every third without "txt"), its strata cut by a strata-only
// field "source" as well as the label.
func withRecords(m *Manifest) *Manifest {
	out := *m
	out.Members = []string{"jpg", "txt", "json"}
	out.LabelFields = []string{"label", "source"}
	out.StrataOnly = []string{"source"}
	for i := range out.Strata {
		out.Strata[i].Labels = []string{out.Strata[i].Name, "web"}
	}
	out.Samples = Samples{}
	s := &m.Samples
	for i := range s.Len() {
		out.Samples.Append(s.Key(i), s.Stratum[i], s.Shard[i], s.Size[i], s.Sum[i])
		size := int64(s.Size[i])
		var table []byte
		if i%3 == 0 {
			table = AppendRecord(AppendRecord(table, 0, size-7), 2, 7)
		} else {
			table = AppendRecord(AppendRecord(AppendRecord(table, 0, size-12), 1, 5), 2, 7)
		}
		out.Samples.AppendRecord(table)
	}
	if err := out.Finish(); err != nil {
		panic(err)
	}
	return &out
}

func recordsOf(t *testing.T, s *Samples, members []string, i int) string {
	t.Helper()
	var b strings.Builder
	RecordMembers(s.Record(i), func(m int, size int64) { b.WriteString(members[m] + ":" + string(rune('0'+size%10)) + " ") })
	return b.String()
}

// A dataset of records keeps its members, its strata-only fields and
// every sample's record table in every metadata format, and has no label
// when its only label field is strata-only.
func TestRecordsRoundTripInEveryFormat(t *testing.T) {
	m := withRecords(stratumByStratum(synthetic(40, 3, 5, 1)))
	b, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, m, got)
	if got.FormatVersion != VersionRecords || strings.Join(got.Members, ",") != "jpg,txt,json" || strings.Join(got.StrataOnly, ",") != "source" || !got.Labelled() {
		t.Fatalf("format %d, members %v, strata-only %v, labelled %v", got.FormatVersion, got.Members, got.StrataOnly, got.Labelled())
	}
	for i := range m.Samples.Len() {
		if !bytes.Equal(got.Samples.Record(i), m.Samples.Record(i)) {
			t.Fatalf("sample %d: record %q, want %q", i, recordsOf(t, &got.Samples, got.Members, i), recordsOf(t, &m.Samples, m.Members, i))
		}
	}
	if names, _ := got.Classes(); strings.Join(names, ",") != "class0000,class0001,class0002" {
		t.Fatalf("classes %v: the strata-only source is not part of the label", names)
	}

	// Formats 2 and 3: the indexes carry the record tables.
	enc := encodeFormats(t, m)
	whole, err := Expand(enc.top, enc.indexesDecoded)
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.Samples.Len() {
		if !bytes.Equal(whole.Samples.Record(i), m.Samples.Record(i)) {
			t.Fatalf("format 2, sample %d: record differs", i)
		}
	}
	if got := strings.Join(enc.root.Members, ","); got != "jpg,txt,json" {
		t.Fatalf("format 3's root: members %s", got)
	}

	// Without a label: the strata-only field is every label field.
	nl := *m
	nl.LabelFields, nl.StrataOnly = []string{"source"}, []string{"source"}
	nl.Strata = nil
	for i := range m.Strata {
		nl.Strata = append(nl.Strata, Stratum{Name: m.Strata[i].Name, Labels: []string{"web" + m.Strata[i].Name}, Count: m.Strata[i].Count})
	}
	b, err = Encode(&nl)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Decode(b); err != nil || got.Labelled() {
		t.Fatalf("records without a label: %v, labelled %v", err, err == nil && got.Labelled())
	}
}

// A record table that does not add up, or names a member twice or one the
// dataset does not have, is refused at decode.
func TestRecordTablesAreChecked(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(size int64) []byte
		want string
	}{
		{"members short of the sample", func(size int64) []byte { return AppendRecord(nil, 0, size-1) }, "members hold"},
		{"a member twice", func(size int64) []byte { return AppendRecord(AppendRecord(nil, 0, size-1), 0, 1) }, "twice"},
		{"an unknown member", func(size int64) []byte { return AppendRecord(nil, 9, size) }, "member 9 of 3"},
		{"no member", func(size int64) []byte { return []byte{} }, "without members"},
		{"cut short", func(size int64) []byte { return []byte{0} }, "cut short"},
	} {
		m := withRecords(stratumByStratum(synthetic(10, 2, 5, 2)))
		bad := Samples{}
		s := &m.Samples
		for i := range s.Len() {
			bad.Append(s.Key(i), s.Stratum[i], s.Shard[i], s.Size[i], s.Sum[i])
			table := s.Record(i)
			if i == 4 {
				table = tc.edit(int64(s.Size[i]))
			}
			bad.AppendRecord(table)
		}
		m.Samples = bad
		if err := m.Finish(); err != nil {
			t.Fatal(err)
		}
		b, err := Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Decode(b); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "sample 4") {
			t.Fatalf("%s: %v, want an error naming sample 4 and %q", tc.name, err, tc.want)
		}
	}
}
