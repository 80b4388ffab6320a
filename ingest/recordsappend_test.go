package ingest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardfs/shardfs/manifest"
	"github.com/shardfs/shardfs/repository"
)

// Issue 59 item 3: records datasets grow. An append of records adds new
// shards only (every object of the old version is untouched), and every
// version serves each of its records' members byte for byte, under the
// names the source gave them: new records may bring a member the dataset
// did not have, and lack a .json field it has; a field the dataset lacks,
// other strata, or a file per sample are refused, writing nothing.
func TestAppendRecords(t *testing.T) {
	for _, format := range []int{1, 2, 3} {
		t.Run(fmt.Sprint("format ", format), func(t *testing.T) { appendRecords(t, format) })
	}
}

func appendRecords(t *testing.T, format int) {
	ctx := context.Background()
	dir := t.TempDir()
	corpus := func(name string, from, n int, alt bool, lang bool) string {
		var b strings.Builder
		for i := from; i < from+n; i++ {
			extra := ""
			if alt {
				extra = fmt.Sprintf(`, "alt": "alt text %d"`, i)
			}
			if lang {
				extra += fmt.Sprintf(`, "lang": "%s"`, []string{"en", "de"}[i%2])
			}
			fmt.Fprintf(&b, `{"id": "doc%05d", "text": "%s", "source": "%s"%s}`+"\n", i, strings.Repeat(fmt.Sprint(i%10), 40+i%300), []string{"web", "books", "news"}[i%3], extra)
		}
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(b.String()), 0o644)
		return p
	}
	scan := func(p string, members ...MemberField) *Source {
		t.Helper()
		s, err := ScanWith(p, ScanOptions{Strata: []string{"source"}, KeyField: "id", Members: members})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	text := MemberField{"text", "txt"}
	stores := localStores(t, filepath.Join(dir, "stores"), 3)
	opts := Options{Name: "ds", Stores: stores, Data: 2, Parity: 1, ShardSize: 16 << 10, BlockSize: 4096, Format: format, GroupShards: 2}
	v1 := corpus("v1.jsonl", 0, 300, false, true)
	if _, err := Run(ctx, scan(v1, text), opts); err != nil {
		t.Fatal(err)
	}
	before := objectSums(t, stores, "ds")
	// v2: a member new to the dataset (.alt), and no "lang" field.
	v2 := corpus("v2.jsonl", 300, 200, true, false)
	aopts := Options{Name: "ds", Stores: stores, ShardSize: 16 << 10}
	res, err := Append(ctx, scan(v2, text, MemberField{"alt", "alt"}), aopts, AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Version != 2 || res.Samples != 200 {
		t.Fatalf("append: version %d, %d samples", res.Version, res.Samples)
	}
	after := objectSums(t, stores, "ds")
	for k, sum := range before {
		if strings.HasSuffix(k, "ds/manifest") || strings.HasSuffix(k, "ds/identity") {
			continue
		}
		if after[k] != sum {
			t.Fatalf("%s changed or went away with the append", k)
		}
	}
	// Every record of each version, byte for byte: its members as the
	// source line makes them, under their names.
	want := map[string][]byte{}
	wantNames := map[string]string{}
	for _, src := range []*Source{scan(v1, text), scan(v2, text, MemberField{"alt", "alt"})} {
		for i := range src.Items {
			it := &src.Items[i]
			b := make([]byte, it.Size)
			if err := readRecordOf(src, it, b); err != nil {
				t.Fatal(err)
			}
			want[it.Key] = b
			var names []string
			for _, mb := range it.Members {
				names = append(names, src.Members[mb.Name])
			}
			wantNames[it.Key] = strings.Join(names, ",")
		}
	}
	for v, n := range map[int]int{1: 300, 2: 500} {
		ds, err := repository.Open(ctx, stores, "ds", repository.Options{Version: v})
		if err != nil {
			t.Fatal(err)
		}
		m := ds.Manifest
		if s := &m.Samples; s.Len() != n {
			t.Fatalf("version %d holds %d records, want %d", v, s.Len(), n)
		}
		if v == 2 && strings.Join(m.Members, ",") != "txt,json,alt" {
			t.Fatalf("version 2's members %q", m.Members)
		}
		for i := range m.Samples.Len() {
			key := m.Samples.Key(i)
			got, err := ds.ReadSample(ctx, i)
			if err != nil || !bytes.Equal(got, want[key]) {
				t.Fatalf("version %d: record %s: %v, or wrong bytes", v, key, err)
			}
			var names []string
			manifest.RecordMembers(m.Samples.Record(i), func(member int, size int64) { names = append(names, m.Members[member]) })
			if strings.Join(names, ",") != wantNames[key] {
				t.Fatalf("version %d: record %s has members %q, want %s", v, key, names, wantNames[key])
			}
		}
	}

	// Refused, writing nothing: a field the dataset lacks, other strata,
	// a file per sample.
	now := objectSums(t, stores, "ds")
	extra := filepath.Join(dir, "extra.jsonl")
	os.WriteFile(extra, []byte(`{"id": "new1", "text": "t", "source": "web", "mood": "x"}`+"\n"), 0o644)
	tree := filepath.Join(dir, "tree", "cat")
	os.MkdirAll(tree, 0o755)
	os.WriteFile(filepath.Join(tree, "a.bin"), []byte("x"), 0o644)
	treeSrc, err := ScanWith(filepath.Dir(tree), ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	otherStrata, err := ScanWith(extra, ScanOptions{Strata: []string{"source", "mood"}, KeyField: "id", Members: []MemberField{text}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		src *Source
		why string
	}{
		{scan(extra, text), `the .json fields ["mood"], which the dataset's records do not have`},
		{otherStrata, `--strata ["source" "mood"], the dataset's ["source"]`},
		{treeSrc, "it is a dataset of records (members txt, json, alt), and the source holds a file per sample"},
	} {
		if _, err := Append(ctx, c.src, aopts, AppendOptions{}); err == nil || !strings.Contains(err.Error(), c.why) || !strings.Contains(err.Error(), "nothing was written") {
			t.Errorf("append: %v\nwant it refused: %q", err, c.why)
		}
	}
	if got := objectSums(t, stores, "ds"); len(got) != len(now) {
		t.Fatalf("a refused append changed the stores: %d objects, %d before", len(got), len(now))
	}
}
