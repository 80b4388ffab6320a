package ingest

import (
	"archive/tar"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/shardfs/shardfs/manifest"
)

func writeFiles(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, n := range names {
		p := filepath.Join(dir, filepath.FromSlash(n))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("bytes of "+n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// csvListing writes 60 files and a listing with the given header whose
// rows give each file one of three labels and its own size column.
func csvListing(t *testing.T, header string) string {
	t.Helper()
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString(header + "\n")
	for i := range 60 {
		name := fmt.Sprintf("f%02d.bin", i)
		writeFiles(t, dir, name)
		fmt.Fprintf(&b, "%s,c%d,%d\n", name, i%3, 1000+i)
	}
	p := filepath.Join(dir, "list.csv")
	os.WriteFile(p, []byte(b.String()), 0o644)
	return p
}

func strataOf(s *Source) map[string]int {
	st, _ := s.strata()
	out := map[string]int{}
	for _, x := range st {
		out[x.Name] = x.Count
	}
	return out
}

// Issue 23 item 8: a header path,label,bytes made every column part of the
// stratum (60 samples in 59 strata). The label is the column named label.
func TestCSVExtraColumnsAreNotStrata(t *testing.T) {
	s, err := Scan(csvListing(t, "path,label,bytes"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strataOf(s); len(got) != 3 || got["c0"] != 20 || got["c1"] != 20 || got["c2"] != 20 {
		t.Fatalf("strata %v, want c0, c1, c2 with 20 samples each", got)
	}
	if len(s.LabelFields) != 1 || s.LabelFields[0] != "label" {
		t.Fatalf("label fields %v, want [label]", s.LabelFields)
	}
	// Asked for, an extra column is part of the stratum.
	s, err = Scan(csvListing(t, "path,label,bytes"), []string{"label", "bytes"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strataOf(s); len(got) != 60 {
		t.Fatalf("--label-fields label,bytes: %d strata, want 60", len(got))
	}
	// No column named label among several: refused, naming the flag.
	if _, err := Scan(csvListing(t, "path,class,bytes"), nil); err == nil || !strings.Contains(err.Error(), "--label-fields") {
		t.Fatalf("header path,class,bytes: %v, want an error naming --label-fields", err)
	}
	// Two columns: the one besides path is the label, whatever its name.
	dir := t.TempDir()
	writeFiles(t, dir, "a.bin", "b.bin")
	os.WriteFile(filepath.Join(dir, "l.csv"), []byte("path,class\na.bin,x\nb.bin,y\n"), 0o644)
	s, err = Scan(filepath.Join(dir, "l.csv"), nil)
	if err != nil || len(strataOf(s)) != 2 || s.LabelFields[0] != "class" {
		t.Fatalf("header path,class: %v, %v", err, s)
	}
}

// Issue 23 item 12: a 5 MB label was accepted, and samples/ was then empty.
func TestLabelLengthBounded(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, "a.bin", "b.bin")
	long := strings.Repeat("x", 5<<20)
	os.WriteFile(filepath.Join(dir, "l.csv"), []byte("a.bin,"+long+"\nb.bin,y\n"), 0o644)
	_, err := Scan(filepath.Join(dir, "l.csv"), nil)
	if err == nil || !strings.Contains(err.Error(), "at most 200 bytes") || len(err.Error()) > 1000 {
		t.Fatalf("a 5 MB label: %.300v, want a short error naming the 200-byte bound", err)
	}
	ok := strings.Repeat("y", MaxLabelBytes)
	os.WriteFile(filepath.Join(dir, "ok.csv"), []byte("a.bin,"+ok+"\nb.bin,y\n"), 0o644)
	if _, err := Scan(filepath.Join(dir, "ok.csv"), nil); err != nil {
		t.Fatalf("a label of exactly %d bytes: %v", MaxLabelBytes, err)
	}
	// Labels within the bound whose tuple would name too long a directory.
	os.WriteFile(filepath.Join(dir, "two.jsonl"), []byte(fmt.Sprintf(`{"path":"a.bin","p":"%s","q":"%s"}`+"\n", ok, ok)), 0o644)
	if _, err := Scan(filepath.Join(dir, "two.jsonl"), []string{"p", "q"}); err == nil || !strings.Contains(err.Error(), "stratum name of 401 bytes") {
		t.Fatalf("two 200-byte labels: %v", err)
	}
}

// Issue 23 item 13: symbolic links leading out of the source were followed
// silently. They are refused unless asked for, and every link followed is
// counted.
func TestSymlinksOutOfTheSource(t *testing.T) {
	outside := t.TempDir()
	writeFiles(t, outside, "x.bin", "cls/z.bin")
	tree := t.TempDir()
	writeFiles(t, tree, "plain/y.bin", "other/w.bin")
	os.Symlink(outside, filepath.Join(tree, "linked"))                                        // a class directory outside
	os.Symlink(filepath.Join(tree, "other"), filepath.Join(tree, "inside"))                   // a class directory inside
	os.Symlink(filepath.Join(tree, "plain", "y.bin"), filepath.Join(tree, "plain", "y2.bin")) // a file inside

	_, err := Scan(tree, nil)
	if err == nil || !strings.Contains(err.Error(), "linked") || !strings.Contains(err.Error(), "--follow-symlinks") {
		t.Fatalf("a link out of the tree: %v, want it refused, naming it and --follow-symlinks", err)
	}
	s, err := ScanWith(tree, ScanOptions{FollowSymlinks: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Items) != 6 || s.Symlinks != 3 || s.Outside != 1 {
		t.Fatalf("followed: %d items, %d links, %d outside; want 6 items, 3 links, 1 outside", len(s.Items), s.Symlinks, s.Outside)
	}
	os.Remove(filepath.Join(tree, "linked"))
	if s, err = Scan(tree, nil); err != nil || len(s.Items) != 4 || s.Symlinks != 2 || s.Outside != 0 {
		t.Fatalf("links inside only: %v, %+v", err, s)
	}

	// A listing's path through a link out of its directory.
	dir := t.TempDir()
	writeFiles(t, dir, "a.bin")
	os.Symlink(filepath.Join(outside, "x.bin"), filepath.Join(dir, "b.bin"))
	os.WriteFile(filepath.Join(dir, "l.csv"), []byte("a.bin,p\nb.bin,q\n"), 0o644)
	if _, err := Scan(filepath.Join(dir, "l.csv"), nil); err == nil || !strings.Contains(err.Error(), "b.bin is a symbolic link") {
		t.Fatalf("a listed link out of the listing's directory: %v", err)
	}
	if s, err := ScanWith(filepath.Join(dir, "l.csv"), ScanOptions{FollowSymlinks: true}); err != nil || s.Outside != 1 || len(s.Items) != 2 {
		t.Fatalf("followed when asked: %v, %+v", err, s)
	}
}

// Member names are counted per shard while it is scanned, and over the
// whole source after: a shard, or a source, with more than
// manifest.MaxMemberNames distinct names is refused, naming the shard and
// the offset, or the source (names that carry the key are the usual cause).
func TestTooManyMemberNamesAreRefused(t *testing.T) {
	write := func(dir, name string, first, n int) {
		var members [][2]string
		for i := first; i < first+n; i++ {
			for _, m := range []string{"json", fmt.Sprintf("m%05d", i)} {
				members = append(members, [2]string{fmt.Sprintf("%06d.%s", i, m), `{"source": "web"}`})
			}
		}
		if err := os.WriteFile(filepath.Join(dir, name), goTar(t, tar.FormatUnknown, members...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	one := t.TempDir()
	write(one, "a.tar", 0, manifest.MaxMemberNames)
	_, err := ScanWith(one, ScanOptions{Strata: []string{"source"}})
	if err == nil || !strings.Contains(err.Error(), "a.tar at offset ") || !strings.Contains(err.Error(), "more than 4096 distinct member names") {
		t.Fatalf("a shard of %d distinct member names: %v", manifest.MaxMemberNames+1, err)
	}
	two := t.TempDir()
	write(two, "a.tar", 0, 3000)
	write(two, "b.tar", 3000, 3000)
	_, err = ScanWith(two, ScanOptions{Strata: []string{"source"}})
	if err == nil || !strings.Contains(err.Error(), "6001 distinct member names, at most 4096") {
		t.Fatalf("two shards of 3001 distinct member names each: %v", err)
	}
}

// A record's fields are kept as one string with its shard's set of field
// names: records with different sets, in one shard or two, come out with
// every field of the source in its place ("" where a record has none), a
// list as its JSON text and null as ""; a value holding the unit separator,
// which joins them, is refused naming the shard, the offset and the field.
func TestRecordFieldsAcrossSchemas(t *testing.T) {
	write := func(dir, name string, jsons ...string) {
		var members [][2]string
		for i, j := range jsons {
			key := fmt.Sprintf("%s-%d", strings.TrimSuffix(name, ".tar"), i)
			members = append(members, [2]string{key + ".txt", "caption"}, [2]string{key + ".json", j})
		}
		if err := os.WriteFile(filepath.Join(dir, name), goTar(t, tar.FormatUnknown, members...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	write(dir, "a.tar", `{"source": "web", "score": 1}`, `{"source": "books"}`, `{"score": 2.5, "source": "web"}`)
	write(dir, "b.tar", `{"source": "code", "extra": [1, 2], "n": null}`, `{"source": "web", "score": 3}`)
	s, err := ScanWith(dir, ScanOptions{Strata: []string{"source"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"extra", "n", "score", "source"}; !slices.Equal(s.Fields, want) {
		t.Fatalf("fields %q, want %q", s.Fields, want)
	}
	want := map[string][]string{
		"a-0": {"", "", "1", "web"},
		"a-1": {"", "", "", "books"},
		"a-2": {"", "", "2.5", "web"},
		"b-0": {"[1,2]", "", "", "code"},
		"b-1": {"", "", "3", "web"},
	}
	if len(s.Items) != len(want) {
		t.Fatalf("%d items, want %d", len(s.Items), len(want))
	}
	for _, it := range s.Items {
		if !slices.Equal(it.Fields, want[it.Key]) || !slices.Equal(it.Labels, want[it.Key][3:]) {
			t.Errorf("%s: fields %q labels %q, want %q", it.Key, it.Fields, it.Labels, want[it.Key])
		}
	}

	bad := t.TempDir()
	write(bad, "a.tar", `{"source": "web"}`, `{"source": "web", "note": "a\u001fb"}`)
	_, err = ScanWith(bad, ScanOptions{Strata: []string{"source"}})
	if err == nil || !strings.Contains(err.Error(), "a.tar at offset 2048") || !strings.Contains(err.Error(), `field "note" holds a NUL or unit-separator`) {
		t.Fatalf("a value holding the unit separator: %v", err)
	}
}
