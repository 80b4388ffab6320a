package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// withFields gives m a derived time bucket over field "ts", a plain field
// "note", and per sample its values.
func withFields(m *Manifest) *Manifest {
	m.LabelFields = []string{"label", "ts"}
	for i := range m.Strata {
		m.Strata[i].Labels = []string{m.Strata[i].Name, "2026-01-01"}
	}
	m.Fields = []string{"label", "ts", "note"}
	m.Derived = []Derived{{Field: "ts", Width: 30 * 86400}}
	m.Samples.fieldVals, m.Samples.fieldEnd = nil, nil
	for i := 0; i < m.Samples.Len(); i++ {
		m.Samples.AppendFields(strings.Join([]string{m.Strata[m.Samples.Stratum[i]].Name, fmt.Sprint(1767225600 + i), fmt.Sprintf("n%d", i%3)}, FieldSep))
	}
	return m
}

// A dataset with fields round-trips them in format 1; one without is
// written in the labels-only format, byte for byte as older releases
// wrote it (so they still read it).
func TestFieldsRoundTrip(t *testing.T) {
	plain := synthetic(300, 4, 50, 9)
	b, err := Encode(plain)
	if err != nil {
		t.Fatal(err)
	}
	if v := b[8]; v != VersionLabels {
		t.Fatalf("a dataset without fields is written as version %d, want %d", v, VersionLabels)
	}
	m := withFields(synthetic(300, 4, 50, 9))
	b, err = Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	if v := b[8]; v != Version {
		t.Fatalf("a dataset with fields is written as version %d, want %d", v, Version)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, m, got)
	if !slices.Equal(got.Fields, m.Fields) || fmt.Sprint(got.Derived) != fmt.Sprint(m.Derived) {
		t.Fatalf("fields %v %v, want %v %v", got.Fields, got.Derived, m.Fields, m.Derived)
	}
	for i := 0; i < m.Samples.Len(); i++ {
		if got.Samples.FieldsJoined(i) != m.Samples.FieldsJoined(i) {
			t.Fatalf("sample %d fields %q, want %q", i, got.Samples.FieldsJoined(i), m.Samples.FieldsJoined(i))
		}
	}
	for n := 0; n < len(b); n += 7 {
		if _, err := Decode(b[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d bytes: %v", n, err)
		}
	}
}

// Format 2 carries fields in the top-level manifest (names, derivations)
// and in each shard index (values); an index of the other format is refused.
func TestFieldsTopRoundTrip(t *testing.T) {
	top, idx := testTop(t)
	top.LabelFields = []string{"label", "len"}
	for i := range top.Strata {
		top.Strata[i].Labels = append(top.Strata[i].Labels, "0..10")
	}
	top.Fields = []string{"label", "len"}
	top.Derived = []Derived{{Field: "len", Edges: []float64{0, 10, 1e9}}}
	enc, err := EncodeTop(top)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeTop(enc)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got.Derived, got.Fields) != fmt.Sprint(top.Derived, top.Fields) {
		t.Fatalf("decoded %v %v", got.Derived, got.Fields)
	}
	for s, x := range idx {
		plain, _ := EncodeIndex(x)
		if _, err := DecodeIndex(plain, got, s); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("shard %d: an index without fields in a dataset with fields: %v", s, err)
		}
		for i := range x.Keys {
			x.Fields = append(x.Fields, fmt.Sprintf("%d%s%d", x.Stratum[i], FieldSep, i))
		}
		b, err := EncodeIndex(x)
		if err != nil {
			t.Fatal(err)
		}
		y, err := DecodeIndex(b, got, s)
		if err != nil {
			t.Fatalf("shard %d: %v", s, err)
		}
		if !slices.Equal(y.Fields, x.Fields) {
			t.Fatalf("shard %d fields %q, want %q", s, y.Fields, x.Fields)
		}
	}
	m, err := Expand(got, idx)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Samples.HasFields() || m.Samples.FieldsJoined(1) != idx[0].Fields[1] {
		t.Fatalf("expanded fields %q", m.Samples.FieldsJoined(1))
	}
}

// Derivations that cannot cut anything are refused on decode and validate.
func TestDerivedValidate(t *testing.T) {
	for name, d := range map[string]Derived{
		"not a label field": {Field: "other", Width: 60},
		"both":              {Field: "ts", Width: 60, Edges: []float64{0, 1}},
		"neither":           {Field: "ts"},
		"one edge":          {Field: "ts", Edges: []float64{1}},
		"descending":        {Field: "ts", Edges: []float64{2, 1}},
	} {
		m := withFields(synthetic(20, 2, 10, 1))
		m.Derived = []Derived{d}
		if err := m.Validate(); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: Validate %v", name, err)
		}
		b, err := Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Decode(b); !errors.Is(err, ErrCorrupt) || !bytes.Contains([]byte(err.Error()), []byte("derived field")) {
			t.Errorf("%s: Decode %v", name, err)
		}
	}
}
