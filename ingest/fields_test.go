package ingest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// jsonlListing writes one file per line and a .jsonl listing of them.
func jsonlListing(t *testing.T, lines ...string) string {
	t.Helper()
	dir := t.TempDir()
	var b strings.Builder
	for i, l := range lines {
		name := fmt.Sprintf("s%03d.bin", i)
		writeFiles(t, dir, name)
		fmt.Fprintf(&b, `{"path": %q, %s}`+"\n", name, l)
	}
	p := filepath.Join(dir, "list.jsonl")
	os.WriteFile(p, []byte(b.String()), 0o644)
	return p
}

// A listing's fields are kept per sample; time buckets and bins add label
// fields whose labels are the bucket's date and the bin's range.
func TestTimeBucketsAndBins(t *testing.T) {
	var lines []string
	for i := range 40 {
		// Two months of 2026, and len 0..39; sample 7 has a note.
		ts := time.Date(2026, 1, 1+i*59/40, 12, 0, 0, 0, time.UTC)
		note := ""
		if i == 7 {
			note = `, "note": "checked"`
		}
		when := fmt.Sprintf("%q", ts.Format(time.RFC3339))
		if i%2 == 1 {
			when = fmt.Sprint(ts.Unix()) // Unix seconds work too
		}
		lines = append(lines, fmt.Sprintf(`"label": "c%d", "time": %s, "len": %d%s`, i%2, when, i, note))
	}
	s, err := ScanWith(jsonlListing(t, lines...), ScanOptions{TimeBuckets: []TimeBucket{{"time", 30 * 24 * time.Hour}}, Bins: []Bins{{Field: "len", Count: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"label", "time", "len"}; !slices.Equal(s.LabelFields, want) {
		t.Fatalf("label fields %v, want %v", s.LabelFields, want)
	}
	if want := []string{"label", "len", "time", "note"}; !slices.Equal(s.Fields, want) {
		t.Fatalf("fields %v, want %v", s.Fields, want)
	}
	if len(s.Derived) != 2 || s.Derived[0].Width != 30*86400 || !slices.Equal(s.Derived[1].Edges, []float64{0, 10, 20, 30, 39}) {
		t.Fatalf("derived %+v", s.Derived)
	}
	// 30-day buckets from Unix 0: 2025-12-08, 2026-01-07, 2026-02-06.
	it := s.Items[7]
	if want := []string{"c1", "2026-01-07", "0..10"}; !slices.Equal(it.Labels, want) {
		t.Fatalf("sample 7 labels %v, want %v", it.Labels, want)
	}
	if it.Fields[3] != "checked" || s.Items[8].Fields[3] != "" || s.Items[0].Fields[3] != "" || it.Fields[1] != "7" {
		t.Fatalf("fields of samples 7 and 8: %q %q", it.Fields, s.Items[8].Fields)
	}
	if last := s.Items[39].Labels; !slices.Equal(last[1:], []string{"2026-02-06", "30..39"}) {
		t.Fatalf("sample 39 labels %v", last)
	}
	total := 0
	for name, n := range strataOf(s) {
		if strings.Count(name, "+") != 2 {
			t.Fatalf("stratum %q is not a triple", name)
		}
		total += n
	}
	if total != 40 {
		t.Fatalf("strata hold %d samples", total)
	}
}

// Bad fields are refused with the line, the field and the fix; nothing is
// ingested (the scan fails before any upload).
func TestBadFieldsNameTheLine(t *testing.T) {
	good := `"label": "a", "time": "2026-01-01T00:00:00Z", "len": 5`
	for _, tc := range []struct {
		name, bad string
		o         ScanOptions
		want      []string
	}{
		{"timestamp", `"label": "a", "time": "last tuesday", "len": 5`, ScanOptions{TimeBuckets: []TimeBucket{{"time", time.Hour}}}, []string{"line 3", `time="last tuesday"`, "RFC 3339"}},
		{"number", `"label": "a", "time": 1, "len": "long"`, ScanOptions{Bins: []Bins{{Field: "len", Count: 2}}}, []string{"line 3", `len="long"`, "not a number"}},
		{"missing", `"label": "a", "time": 1`, ScanOptions{Bins: []Bins{{Field: "len", Count: 2}}}, []string{"line 3", `no value for field "len"`, "every line"}},
		{"outside", `"label": "a", "time": 1, "len": 99`, ScanOptions{Bins: []Bins{{Field: "len", Edges: []float64{0, 10}}}}, []string{"line 3", "outside", "widen"}},
		{"unknown", good, ScanOptions{Bins: []Bins{{Field: "size", Count: 2}}}, []string{`no field "size"`, "label, len, time"}},
		{"twice", good, ScanOptions{Bins: []Bins{{Field: "label", Count: 2}}}, []string{`"label" is already a label field`}},
	} {
		_, err := ScanWith(jsonlListing(t, good, `"label": "b", "time": 2, "len": 6`, tc.bad), tc.o)
		if err == nil {
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v does not say %q", tc.name, err, w)
			}
		}
	}
}

// A listing of only a path and its labels is written as before fields
// existed (no Fields), so its metadata bytes do not change.
func TestLabelsOnlyKeepNoFields(t *testing.T) {
	s, err := Scan(jsonlListing(t, `"label": "a"`, `"label": "b"`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Fields != nil || s.Items[0].Fields != nil {
		t.Fatalf("fields %v %v", s.Fields, s.Items[0].Fields)
	}
	s, err = Scan(csvListing(t, "path,label,bytes"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Fields, []string{"label", "bytes"}) || s.Items[5].Fields[1] != "1005" {
		t.Fatalf("csv fields %v %v", s.Fields, s.Items[5].Fields)
	}
}

// Singleton strata get a warning that names the fields and the fix.
func TestStrataWarnings(t *testing.T) {
	s, err := ScanWith(jsonlListing(t, `"label": "a", "len": 1`, `"label": "a", "len": 2`, `"label": "b", "len": 100`),
		ScanOptions{Bins: []Bins{{Field: "len", Edges: []float64{0, 50, 100}}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Warnings) != 1 || !strings.Contains(s.Warnings[0], "1 of 2 strata of the fields label,len hold a single sample (e.g. b+50..100)") {
		t.Fatalf("warnings %q", s.Warnings)
	}
}

func TestParseFlags(t *testing.T) {
	for in, want := range map[string]time.Duration{"30d": 30 * 24 * time.Hour, "12h": 12 * time.Hour, "1.5d": 36 * time.Hour, "2w": 14 * 24 * time.Hour, "90s": 90 * time.Second} {
		if got, err := ParseSpan(in); err != nil || got != want {
			t.Errorf("ParseSpan(%q) = %v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "30", "d", "xd", "1e300d", "NaNd"} {
		if _, err := ParseSpan(bad); err == nil {
			t.Errorf("ParseSpan(%q) accepted", bad)
		}
	}
	if b, err := ParseBins("len=0,128,512"); err != nil || !slices.Equal(b.Edges, []float64{0, 128, 512}) {
		t.Errorf("ParseBins edges: %+v %v", b, err)
	}
	for _, bad := range []string{"len", "len=1", "len=0,0", "len=5,1", "len=a,b", "=4", "len=100000"} {
		if _, err := ParseBins(bad); err == nil {
			t.Errorf("ParseBins(%q) accepted", bad)
		}
	}
	if _, err := ParseTimeBucket("time=0.5s"); err == nil {
		t.Error("a half-second bucket accepted")
	}
	for _, v := range []string{"2026-03-01T12:00:00Z", "2026-03-01", "1772366400", "1772366400.5"} {
		if _, err := ParseTime(v); err != nil {
			t.Errorf("ParseTime(%q): %v", v, err)
		}
	}
}

// Issue 40 item 3: time=999999999999 committed the bucket "33658-09-13",
// which no mount could read back. Times whose bucket is outside the years
// 0000-9999 are refused at ingest, naming the line.
func TestTimeBucketOutsideYearsRefused(t *testing.T) {
	for _, tc := range []struct{ value, year string }{
		{"999999999999", "33658"},
		{"-99999999999", "-1199"},
		{"-62167219201", "-1"}, // a second before 0000-01-01
	} {
		listing := jsonlListing(t, `"label": "a", "time": 1700000000`, `"label": "b", "time": `+tc.value)
		_, err := ScanWith(listing, ScanOptions{TimeBuckets: []TimeBucket{{"time", 24 * time.Hour}}})
		if err == nil || !strings.Contains(err.Error(), "line 2 (") || !strings.Contains(err.Error(), "year "+tc.year+":") || !strings.Contains(err.Error(), "0000-9999") {
			t.Fatalf("time=%s: want line 2 refused, in the year %s, got %v", tc.value, tc.year, err)
		}
	}
	// The edges of the range are accepted, and read back.
	listing := jsonlListing(t, `"label": "a", "time": -62167219200`, `"label": "b", "time": 253402300799`)
	s, err := ScanWith(listing, ScanOptions{TimeBuckets: []TimeBucket{{"time", 24 * time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Items[0].Labels[1] != "0000-01-01" || s.Items[1].Labels[1] != "9999-12-31" {
		t.Fatalf("edge labels %v %v", s.Items[0].Labels, s.Items[1].Labels)
	}
}

// Issue 40 item 4: with --label-fields a,b, (a="x+y", b="z") and (a="x",
// b="y+z") became one stratum and one class. A "+" in a label of a tuple
// is refused, naming the line and the field; with one label field it is
// kept, as it is unambiguous.
func TestLabelTupleSeparatorRefused(t *testing.T) {
	listing := jsonlListing(t, `"a": "x+y", "b": "z"`, `"a": "x", "b": "y+z"`)
	_, err := ScanWith(listing, ScanOptions{LabelFields: []string{"a", "b"}})
	if err == nil || !strings.Contains(err.Error(), `line 1 (s000.bin): label a="x+y" contains "+"`) {
		t.Fatalf("want line 1's a=x+y refused: %v", err)
	}
	s, err := ScanWith(listing, ScanOptions{LabelFields: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(strataOf(s)); got != 2 {
		t.Fatalf("one label field: %d strata, want 2", got)
	}
}

// Issue 40 item 17: a CSV listing saved with a UTF-8 byte order mark failed
// with "lstat \ufeffpath", and a header naming label twice silently took
// the last one.
func TestListingBOMAndDuplicateHeader(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, "a.bin", "b.bin")
	bom := filepath.Join(dir, "bom.csv")
	os.WriteFile(bom, []byte("\ufeffpath,label\na.bin,x\nb.bin,y\n"), 0o644)
	s, err := ScanWith(bom, ScanOptions{})
	if err != nil || len(s.Items) != 2 || s.Items[0].Labels[0] != "x" {
		t.Fatalf("a listing with a byte order mark: %v, %+v", err, s)
	}
	noHeader := filepath.Join(dir, "bom2.csv")
	os.WriteFile(noHeader, []byte("\ufeffa.bin,x\nb.bin,y\n"), 0o644)
	if s, err := ScanWith(noHeader, ScanOptions{}); err != nil || len(s.Items) != 2 {
		t.Fatalf("a headerless listing with a byte order mark: %v", err)
	}
	jl := filepath.Join(dir, "bom.jsonl")
	os.WriteFile(jl, []byte("\ufeff{\"path\": \"a.bin\", \"label\": \"x\"}\n"), 0o644)
	if s, err := ScanWith(jl, ScanOptions{}); err != nil || len(s.Items) != 1 {
		t.Fatalf("a JSONL listing with a byte order mark: %v", err)
	}
	dup := filepath.Join(dir, "dup.csv")
	os.WriteFile(dup, []byte("path,label,size,label\na.bin,x,1,y\n"), 0o644)
	if _, err := ScanWith(dup, ScanOptions{}); err == nil || !strings.Contains(err.Error(), `the header names "label" twice (columns 2 and 4)`) {
		t.Fatalf("a header naming label twice: want refused, got %v", err)
	}
}

// Issue 40 item 17: --time-window 106752d was refused as "use a number and
// a unit"; it is one, past the longest span a duration holds.
func TestParseSpanTooLong(t *testing.T) {
	if _, err := ParseSpan("106752d"); err == nil || !strings.Contains(err.Error(), "at most 106751d") {
		t.Fatalf("106752d: %v", err)
	}
	if d, err := ParseSpan("106751d"); err != nil || d != 106751*24*time.Hour {
		t.Fatalf("106751d: %v, %v", d, err)
	}
	if _, err := ParseSpan("30x"); err == nil || !strings.Contains(err.Error(), "use a number and a unit") {
		t.Fatalf("30x: %v", err)
	}
}
