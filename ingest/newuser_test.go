package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/parquet-go/parquet-go"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/repository"
)

// Issue 59 item 4, the new user's defects found in the scan.
//
// Text that is not UTF-8: a JSONL line holding \xff\xfe in its .txt field,
// or the escape \ud800, was committed with U+FFFD in its place, exit 0.
// Every such line is refused, naming the line and the byte, whichever field
// holds it (a member's, the label's, another field's: encoding/json would
// replace it in .json too), and so is a Parquet string column's.
func TestTextThatIsNotUTF8IsRefused(t *testing.T) {
	opts := ScanOptions{Strata: []string{"source"}, Members: []MemberField{{"text", "txt"}}}
	good := `{"text": "fine", "source": "web"}`
	refused := []struct {
		line string
		at   int // the byte the error names
	}{
		{"{\"text\": \"ab\xff\xfe\", \"source\": \"web\"}", 12},
		{"{\"text\": \"ok\", \"source\": \"w\xc3\"}", 27},                           // a cut two-byte sequence, in a stratum field
		{"{\"text\": \"ok\", \"note\": \"\xed\xa0\x80\", \"source\": \"web\"}", 24}, // a surrogate encoded as UTF-8 (CESU), in .json
		{`{"text": "a\ud800", "source": "web"}`, 11},                                // high half alone
		{`{"text": "a\ud800\u0041", "source": "web"}`, 11},                          // high half, then no low half
		{`{"text": "a\udc00b", "source": "web"}`, 11},                               // low half alone
		{`{"text": "\\\ud83d", "source": "web"}`, 12},                               // an escaped backslash, then a lone half
		{`{"text": "ok", "source": "\uDBFF"}`, 26},                                  // upper-case hex, in the stratum
	}
	for _, c := range refused {
		p := filepath.Join(t.TempDir(), "c.jsonl")
		os.WriteFile(p, []byte(good+"\n"+c.line+"\n"), 0o644)
		_, err := ScanWith(p, opts)
		want := fmt.Sprintf("line 2: byte %d", c.at)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), p) {
			t.Errorf("line %q: %v\nwant it refused, naming the file and %q", c.line, err, want)
		}
	}
	// Text that is UTF-8 goes in as it is: a surrogate pair, an escaped
	// backslash before "ud800" (text, not an escape), other escapes.
	for _, c := range []struct{ line, text string }{
		{`{"text": "a\ud83d\ude00b", "source": "web"}`, "a\U0001F600b"},
		{`{"text": "\\ud800", "source": "web"}`, `\ud800`},
		{`{"text": "x\u00e9\n\"", "source": "web"}`, "x\u00e9\n\""},
		{"{\"text\": \"caf\u00e9 \u65e5\u672c\", \"source\": \"web\"}", "caf\u00e9 \u65e5\u672c"},
	} {
		p := filepath.Join(t.TempDir(), "c.jsonl")
		os.WriteFile(p, []byte(c.line+"\n"), 0o644)
		s, err := ScanWith(p, opts)
		if err != nil {
			t.Errorf("line %q: %v", c.line, err)
			continue
		}
		body := make([]byte, s.Items[0].Size)
		if err := readRecordOf(s, &s.Items[0], body); err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(body, []byte(c.text)) || !json.Valid(body[len(c.text):]) {
			t.Errorf("line %q: the record's bytes are %q, want the .txt %q then the .json", c.line, body, c.text)
		}
	}

	type row struct {
		ID   string `parquet:"id"`
		Text string `parquet:"text"`
		Blob []byte `parquet:"blob"`
		Src  string `parquet:"source"`
	}
	write := func(rows ...row) string {
		var buf bytes.Buffer
		if err := parquet.Write(&buf, rows); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), "t.parquet")
		os.WriteFile(p, buf.Bytes(), 0o644)
		return p
	}
	popts := ScanOptions{Strata: []string{"source"}, KeyField: "id", Members: []MemberField{{"text", "txt"}, {"blob", "bin"}}}
	for _, bad := range []row{{"r1", "ab\xff", nil, "web"}, {"r1", "ok", nil, "w\xfe"}} {
		p := write(row{"r0", "fine", []byte{0xff}, "web"}, bad)
		if _, err := ScanWith(p, popts); err == nil || !strings.Contains(err.Error(), "row 1: column") || !strings.Contains(err.Error(), "is not UTF-8") {
			t.Errorf("parquet row %q: %v; want it refused, naming the row and the column", bad, err)
		}
	}
	// A binary column keeps any bytes: the way to store bytes that are not text.
	p := write(row{"r0", "fine", []byte{0xff, 0xfe, 0}, "web"})
	s, err := ScanWith(p, popts)
	if err != nil {
		t.Fatalf("a binary column of bytes that are not UTF-8: %v", err)
	}
	body := make([]byte, s.Items[0].Size)
	if err := readRecordOf(s, &s.Items[0], body); err != nil || !bytes.HasPrefix(body, []byte("fine\xff\xfe\x00")) {
		t.Fatalf("record %q, %v", body, err)
	}
}

// Keys came back renamed: laion.v1.2/r001746 as laion_v1_2/r001746, and
// a.b/x, a_b/x and "a b/x" as one key. A key of records is now its members'
// stem as the source spells it; one a member name cannot hold is refused at
// ingest, naming it and why.
func TestRecordKeysAreHeldOrRefused(t *testing.T) {
	// WebDataset: the key is the member name up to the first '.' of its
	// base name, so a '.' in a directory stays in the key.
	p := filepath.Join(t.TempDir(), "s.tar")
	os.WriteFile(p, goTar(t, 0,
		[2]string{"laion.v1.2/r001746.jpg", "x"}, [2]string{"laion.v1.2/r001746.json", `{"source": "a"}`},
		[2]string{"a b/x.jpg", "y"}, [2]string{"a b/x.json", `{"source": "a"}`},
		[2]string{"a_b/x.jpg", "z"}, [2]string{"a_b/x.json", `{"source": "b"}`},
	), 0o644)
	s, err := ScanWith(p, ScanOptions{Strata: []string{"source"}})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, it := range s.Items {
		keys = append(keys, it.Key)
	}
	if strings.Join(keys, "|") != "laion.v1.2/r001746|a b/x|a_b/x" {
		t.Fatalf("keys %q", keys)
	}

	jsonl := func(keys ...string) string {
		var b strings.Builder
		for _, k := range keys {
			kj, _ := json.Marshal(k)
			fmt.Fprintf(&b, `{"id": %s, "text": "t", "source": "a"}`+"\n", kj)
		}
		p := filepath.Join(t.TempDir(), "c.jsonl")
		os.WriteFile(p, []byte(b.String()), 0o644)
		return p
	}
	opts := ScanOptions{Strata: []string{"source"}, KeyField: "id", Members: []MemberField{{"text", "txt"}}}
	if _, err := ScanWith(jsonl("a.b/x", "a_b/x", "a b/x", "caf\u00e9/\u65e5", strings.Repeat("k", 72)), opts); err != nil {
		t.Fatalf("keys a member name holds: %v", err)
	}
	for key, why := range map[string]string{
		"doc.1":                        "has a '.' after its last '/'",
		"a.b/x.y":                      "has a '.' after its last '/'",
		"x~1":                          "holds '~'",
		"dir~/x":                       "holds '~'",
		strings.Repeat("k", 73):        "is 73 bytes",
		"d/" + strings.Repeat("k", 71): "is 73 bytes",
	} {
		_, err := ScanWith(jsonl("ok", key), opts)
		if err == nil || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), "--key") {
			t.Errorf("key %q: %v\nwant it refused: %q, naming the line and the fix", key, err, why)
		}
	}
	// A listing of files is not records: its keys keep their mapping.
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "cat"), 0o755)
	os.WriteFile(filepath.Join(dir, "cat", "img.1.jpg"), []byte("x"), 0o644)
	if _, err := ScanWith(dir, ScanOptions{}); err != nil {
		t.Fatalf("a file per sample named img.1.jpg: %v", err)
	}
}

// readRecordOf makes a JSONL or Parquet record's bytes again, as the
// upload does.
func readRecordOf(s *Source, it *Item, p []byte) error {
	if it.row {
		var rows parquetRows
		defer rows.close()
		return readParquetRecord(it, s.Members, p, s.table, &rows)
	}
	return readJSONLRecord(it, s.Members, p, *s.corpus, func(name string) (io.ReaderAt, error) { return os.Open(name) })
}

// .tar.gz and .tgz shards were refused, with a message about labels and
// class directories. They are read as WebDataset reads them: each record
// the same members, bytes and checksums as from the plain tar, whether the
// shards are a directory, one file, or a store's objects; and a damaged
// gzip stream is refused, naming the shard.
func TestCompressedShardsAreRead(t *testing.T) {
	var members [][2]string
	for i := range 300 {
		key := fmt.Sprintf("d%d/%04d", i%3, i)
		members = append(members, [2]string{key + ".bin", strings.Repeat(fmt.Sprint(i), 50+i*7)},
			[2]string{key + ".json", fmt.Sprintf(`{"source": "s%d"}`, i%4)})
	}
	plain := goTar(t, 0, members...)
	gz := func(parts int) []byte { // parts > 1: a multistream gzip, as cat a.gz b.gz makes
		var out bytes.Buffer
		for p := range parts {
			zw := gzip.NewWriter(&out)
			zw.Write(plain[p*len(plain)/parts : (p+1)*len(plain)/parts])
			zw.Close()
		}
		return out.Bytes()
	}
	opts := ScanOptions{Strata: []string{"source"}}
	scanOf := func(t *testing.T, files map[string][]byte, store bool) *Source {
		t.Helper()
		dir := filepath.Join(t.TempDir(), "src")
		os.MkdirAll(dir, 0o755)
		for name, b := range files {
			os.WriteFile(filepath.Join(dir, name), b, 0o644)
		}
		if store {
			st, err := backend.Open("file://"+dir, backend.OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			o := opts
			o.Store = st
			s, err := ScanStore(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		s, err := ScanWith(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// The checksums of a committed dataset's samples, by key.
	sums := func(t *testing.T, s *Source) map[string]uint32 {
		t.Helper()
		stores := localStores(t, t.TempDir(), 3)
		res, err := Run(context.Background(), s, Options{Name: "ds", Stores: stores, Data: 2, Parity: 1, ShardSize: 64 << 10, BlockSize: 4096})
		if err != nil {
			t.Fatal(err)
		}
		ds, err := repository.Open(context.Background(), stores, "ds", repository.Options{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]uint32{}
		smp := &ds.Manifest.Samples
		for i := range smp.Len() {
			out[smp.Key(i)] = smp.Sum[i]
		}
		if len(out) != 300 || res == nil {
			t.Fatalf("%d samples committed", len(out))
		}
		return out
	}
	want := sums(t, scanOf(t, map[string][]byte{"a.tar": plain}, false))
	for _, c := range []struct {
		name  string
		files map[string][]byte
		store bool
	}{
		{"tar.gz", map[string][]byte{"a.tar.gz": gz(1)}, false},
		{"tgz, multistream", map[string][]byte{"a.tgz": gz(3)}, false},
		{"tar.gz from a store", map[string][]byte{"a.tar.gz": gz(2)}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := sums(t, scanOf(t, c.files, c.store)); !maps.Equal(got, want) {
				t.Fatalf("the records' checksums differ from the plain tar's")
			}
		})
	}
	// A mix of plain and compressed shards; records split over them.
	half := len(members) / 2
	a, b := goTar(t, 0, members[:half]...), goTar(t, 0, members[half:]...)
	var bz bytes.Buffer
	zw := gzip.NewWriter(&bz)
	zw.Write(b)
	zw.Close()
	if got := sums(t, scanOf(t, map[string][]byte{"a.tar": a, "b.tgz": bz.Bytes()}, false)); !maps.Equal(got, want) {
		t.Fatal("a plain and a compressed shard: the records' checksums differ")
	}

	// Damaged: cut short, a flipped byte (the CRC at the end), not gzip.
	whole := gz(1)
	flipped := slices.Clone(whole)
	flipped[len(flipped)/2] ^= 0x40
	for name, b := range map[string][]byte{"cut": whole[:len(whole)/2], "flipped": flipped, "not gzip": plain} {
		p := filepath.Join(t.TempDir(), "a.tar.gz")
		os.WriteFile(p, b, 0o644)
		if _, err := ScanWith(p, opts); err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "gzip") {
			t.Errorf("%s: %v; want it refused, naming the shard and gzip", name, err)
		}
	}
}
