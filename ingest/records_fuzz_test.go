package ingest

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/parquet-go/parquet-go"
)

// Decoders of records never panic and never accept what they cannot read
// back: any bytes as a WebDataset shard, a JSONL line or a Parquet file
// either scan or give an error.

func FuzzWebDatasetShard(f *testing.F) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range [][2]string{{"000001.jpg", "jpeg"}, {"000001.json", `{"source": "web"}`}, {"000002.jpg", "x"}, {"000002.json", `{"source": "books"}`}} {
		tw.WriteHeader(&tar.Header{Name: m[0], Mode: 0o644, Size: int64(len(m[1])), Typeflag: tar.TypeReg})
		tw.Write([]byte(m[1]))
	}
	tw.Close()
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:700])
	// GNU sparse members, PAX 0.0, 0.1, 1.0 and old GNU (issue 55).
	for _, name := range []string{"sparse-pax-0.0.tar", "sparse-pax-0.1.tar", "sparse-pax-1.0.tar", "sparse-oldgnu.tar"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "a.tar")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := scanWebDataset([]string{p}, ScanOptions{Strata: []string{"source"}})
		if err != nil {
			return
		}
		// Every member scanned lies inside the file, names one of the
		// source's member names, and the item's size is its members'.
		for _, it := range s.Items {
			var size int64
			for _, m := range it.Members {
				if m.Off < 0 || m.Off+int64(m.Size) > int64(len(b)) || int(m.Name) >= len(s.Members) {
					t.Fatalf("member %+v outside a %d-byte shard, or not among %q", m, len(b), s.Members)
				}
				size += int64(m.Size)
			}
			if size != it.Size {
				t.Fatalf("record %q: members of %d bytes, item of %d", it.Key, size, it.Size)
			}
		}
		// And each member's bytes in the shard are its content as
		// archive/tar reads it (a sparse member's are not: refused).
		checkMembersAreContent(t, s, b)
		// The same shard gzip-compressed (.tar.gz) scans to the same
		// records, at the same offsets of its decompressed bytes.
		// (Huffman-only: the cheapest gzip stream, and still one the
		// reader must decode; a fresh writer per input cost the suite a
		// minute of fuzzing.)
		z := bytes.NewBuffer(make([]byte, 0, len(b)+len(b)/8+64))
		zw := fuzzGzip
		zw.Reset(z)
		zw.Write(b)
		zw.Close()
		pz := filepath.Join(filepath.Dir(p), "a.tar.gz")
		if err := os.WriteFile(pz, z.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		sz, err := scanWebDataset([]string{pz}, ScanOptions{Strata: []string{"source"}})
		if err != nil || len(sz.Items) != len(s.Items) {
			t.Fatalf("the shard, gzip-compressed: %v (%d records of the plain shard's %d)", err, len(sz.Items), len(s.Items))
		}
		for i := range s.Items {
			if sz.Items[i].Key != s.Items[i].Key || !slices.Equal(sz.Items[i].Members, s.Items[i].Members) {
				t.Fatalf("record %d: %q %v compressed, %q %v plain", i, sz.Items[i].Key, sz.Items[i].Members, s.Items[i].Key, s.Items[i].Members)
			}
		}
	})
}

// fuzzGzip compresses FuzzWebDatasetShard's inputs; the fuzzer calls the
// target from one goroutine per worker process.
var fuzzGzip, _ = gzip.NewWriterLevel(nil, gzip.HuffmanOnly)

func FuzzJSONLRecord(f *testing.F) {
	f.Add([]byte(`{"text": "a \"doc\"", "source": "web", "n": 1}`))
	f.Add([]byte(`[1, 2]`))
	f.Add([]byte(`{"text": 5}`))
	o := ScanOptions{Members: []MemberField{{"text", "txt"}}}
	f.Add([]byte(`{"text": "caf\u00e9 \ud800", "n": 12345678901234567890, "x": [1, {"b": null}]}`))
	f.Add([]byte("{\"text\": \"\xff\xfe\", \"source\": \"s\"}"))
	f.Add([]byte(`{"text": "a"} {"text": "b"}`))
	f.Add([]byte(`{"text": "a", "text": "b"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, line []byte) {
		key, names, bodies, fields, err := jsonlRecord(line, o, 1)
		// The record is what decoding the whole line makes, as ingest
		// did before a member's text was taken from the line itself.
		wkey, wnames, wbodies, wfields, werr := jsonlRecordDecoded(line, o, 1)
		if (err == nil) != (werr == nil) || err != nil && err.Error() != werr.Error() {
			t.Fatalf("error %v, decoding the whole line: %v", err, werr)
		}
		if err != nil {
			return
		}
		if key != wkey || !slices.Equal(names, wnames) || !reflect.DeepEqual(fields, wfields) || len(bodies) != len(wbodies) {
			t.Fatalf("record %q %q %v, decoding the whole line: %q %q %v", key, names, fields, wkey, wnames, wfields)
		}
		for i := range bodies {
			if !bytes.Equal(bodies[i], wbodies[i]) {
				t.Fatalf("member %s: %q, decoding the whole line: %q", names[i], bodies[i], wbodies[i])
			}
		}
		// No text was replaced: encoding/json writes U+FFFD for bytes that
		// are not UTF-8 and for a lone surrogate, so a record that holds
		// more of it than the line spells (as itself or \ufffd) holds
		// text that is not the line's.
		spelled := bytes.Count(line, []byte("\uFFFD")) + bytes.Count(bytes.ToLower(line), []byte(`\ufffd`))
		held := 0
		for _, b := range bodies {
			held += bytes.Count(b, []byte("\uFFFD"))
		}
		if held > spelled {
			t.Fatalf("the record holds U+FFFD %d times, the line spells it %d times: text was replaced", held, spelled)
		}
		if key == "" || len(names) == 0 || len(names) != len(bodies) {
			t.Fatalf("key %q, %d names, %d bodies", key, len(names), len(bodies))
		}
		// The same line makes the same bytes again (what upload relies on).
		_, _, again, _, err := jsonlRecord(line, o, 1)
		if err != nil || len(again) != len(bodies) {
			t.Fatal("a second read of the line differs")
		}
		for i := range bodies {
			if !bytes.Equal(again[i], bodies[i]) {
				t.Fatalf("member %s differs on a second read", names[i])
			}
		}
	})
}

func FuzzParquet(f *testing.F) {
	type row struct {
		ID    int64  `parquet:"id"`
		Image []byte `parquet:"image"`
		Src   string `parquet:"source"`
	}
	var buf bytes.Buffer
	if err := parquet.Write(&buf, []row{{1, []byte("a"), "web"}, {2, []byte("bb"), "books"}}); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:buf.Len()/2])
	for _, name := range []string{"bomb-footer.parquet", "bomb-page.parquet", "bomb-list.parquet", "bomb-stats.parquet", "bomb-index.parquet"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "t.parquet")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		scanParquet(p, ScanOptions{Strata: []string{"source"}}) // an error is fine; a panic is not
	})
}

// Parquet files whose footer, a list in it, or a page header states a size
// far past the file (the first two found by FuzzParquet) are refused, naming what is wrong,
// before the reader allocates it: it allocated 3.5 GB and 831 MB for these
// 698-byte files.
func TestParquetBombsRefused(t *testing.T) {
	for file, want := range map[string]string{
		"testdata/bomb-footer.parquet": "its footer says it is 3758096467 bytes, more than the file's 698",
		"testdata/bomb-page.parquet":   "row group 0 column 2: a page at byte 214 says it holds 810913875 bytes, past its column chunk's end at 244",
		// Issue 55 item 6: a 48-byte file whose footer's schema list claims
		// 2³¹−1 structs: "fatal error: runtime: out of memory".
		"testdata/bomb-list.parquet": "a list of 2147483647 elements, in the 27 bytes left",
		// A page header whose statistics' max value claims 8 GiB: the
		// decoder allocated it before reading, in checkPages itself.
		"testdata/bomb-stats.parquet": "row group 0 column 0: page header at byte 4: at its byte 54: a string of 8589934592 bytes, in the 41 bytes left",
	} {
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		_, err := scanParquet(file, ScanOptions{Strata: []string{"source"}})
		runtime.ReadMemStats(&m1)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), file) {
			t.Errorf("%s: %v; want an error naming the file and %q", file, err, want)
		}
		if d := m1.TotalAlloc - m0.TotalAlloc; d > 16<<20 {
			t.Errorf("%s: the scan allocated %d MB", file, d>>20)
		}
	}
}

// A Parquet file whose footer gives each column and offset index 2³¹−1
// bytes (3 columns, 2 row groups: the reader summed them, 12 GB, and
// allocated that before it read a byte; FuzzParquet's worker died of it in
// CI, exit status 2) reads its rows as the file holds them: a scan reads
// every row in order and reads neither index, nor the bloom filters.
func TestParquetIndexesNotRead(t *testing.T) {
	const file = "testdata/bomb-index.parquet"
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	s, err := scanParquet(file, ScanOptions{Strata: []string{"source"}})
	runtime.ReadMemStats(&m1)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if d := m1.TotalAlloc - m0.TotalAlloc; d > 16<<20 {
		t.Errorf("%s: the scan allocated %d MB", file, d>>20)
	}
	var keys []string
	for _, it := range s.Items {
		keys = append(keys, it.Key)
	}
	if want := []string{"000000000000", "000000000001"}; !slices.Equal(keys, want) {
		t.Fatalf("%s: records %q, want %q", file, keys, want)
	}
}

// jsonlRecordDecoded is jsonlRecord as it was before issue 55 item 5: the
// whole line decoded into one object, every member's text copied out of
// it. The fuzzer holds jsonlRecord to it.
func jsonlRecordDecoded(line []byte, o ScanOptions, lineNo int) (key string, names []string, bodies [][]byte, fields map[string]any, err error) {
	if err := checkJSONText(line); err != nil {
		return "", nil, nil, nil, err // issue 59: a line that is not text is refused first
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil || obj == nil {
		if err == nil {
			err = errors.New("null")
		}
		return "", nil, nil, nil, fmt.Errorf("not a JSON object (%v): each line of a corpus is one record, an object", err)
	}
	if err := endOfJSON(dec); err != nil {
		return "", nil, nil, nil, err
	}
	for _, mf := range o.Members {
		v, ok := obj[mf.Field]
		if !ok {
			return "", nil, nil, nil, fmt.Errorf("no field %q (--member %s=%s)", mf.Field, mf.Field, mf.Name)
		}
		str, ok := v.(string)
		if !ok {
			return "", nil, nil, nil, fmt.Errorf("field %q is a %T, not a string: --member takes text fields", mf.Field, v)
		}
		names, bodies = append(names, mf.Name), append(bodies, []byte(str))
		delete(obj, mf.Field)
	}
	key = fmt.Sprintf("%09d", lineNo)
	if o.KeyField != "" {
		v, ok := obj[o.KeyField]
		if !ok {
			return "", nil, nil, nil, fmt.Errorf("no key field %q (--key)", o.KeyField)
		}
		if key, err = jsonLabel(v); err != nil {
			return "", nil, nil, nil, fmt.Errorf("key field %q %v", o.KeyField, err)
		}
	}
	if names, bodies, err = appendFieldsMember(names, bodies, obj); err != nil {
		return "", nil, nil, nil, err
	}
	if len(names) == 0 {
		return "", nil, nil, nil, errors.New("an empty object: a record needs a member")
	}
	return key, names, bodies, obj, nil
}

// FuzzJSONShortcutsAsEncodingJSON holds the records' JSON shortcuts to
// encoding/json, each input against all three (one target, so that the
// suite's fuzz step pays one build and start for them):
//   - decodeJSONValue decodes a value as json's decoder does with
//     UseNumber, for any value a line may hold;
//   - decodeFieldsObject (and its flatObject) takes what a json.Decoder
//     with UseNumber takes as one object followed by nothing but space,
//     decodes it as the decoder does, and refuses everything else;
//   - flatFields takes only what json.Unmarshal takes as one object, and
//     hands each key the raw value json.Unmarshal hands a
//     json.Unmarshaler for it.
func FuzzJSONShortcutsAsEncodingJSON(f *testing.F) {
	for _, s := range []string{`0`, `-1.5e10`, `12345678901234567890123`, `true`, `false`, `null`, `"abc"`, `""`, `"é"`, `"a\"b"`, `"\u00e9"`, `"<&>"`, `{"a":1}`, `[1,"x",null]`, `"\ud83d\ude00"`,
		`{}`, `{"a":1,"b":"x"}`, `{"a":{"b":[1,2]},"c":null,"d":true}`, `null`, `[1]`, `{"a":1} {}`, `{"a":1}  `, `{"a":"\u00e9\ud83d\ude00"}`, `{"a":1,"a":2}`, "{\"a\":\"\xff\"}", `{"a":-0.5e-3}`,
		` { "a" : "b" , "c":true,"d":false,"e":null } `, `{"a":-0}`, `{"a":1E+2}`, `{"a":01}`, `{"a":tru}`, `{"a":1.}`, `{"a":"b",}`, "{\"a\":\"\x01\"}", `{"a":"x"}x`,
		`{}`, ` {"a" : "x\ny\"z\u00e9", "b":-1.5E+3 ,"c":null,"a":true} `, `{"a":"\x"}`, `{"a":"\u12"}`, `{"a":[1]}`, `{"a\n":1}`, `{"a":"b"`, `{"a":1}}`,
		`{"z":1,"a":"x y","m":null,"b":false,"c":-0.5e+7}`, `{"a":"x<y"}`, `{"a":"\u007f"}`, `{"é":1}`, `{"a":1e5,"b":0.0}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if raw := bytes.TrimSpace(b); json.Valid(raw) { // as a line's value comes
			got, err := decodeJSONValue(raw)
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.UseNumber()
			var want any
			werr := dec.Decode(&want)
			if (err == nil) != (werr == nil) || !reflect.DeepEqual(got, want) {
				t.Fatalf("decodeJSONValue(%q) = %#v, %v; the decoder: %#v, %v", raw, got, err, want, werr)
			}
		}

		got, err := decodeFieldsObject(b, nil)
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		var want map[string]any
		werr := dec.Decode(&want)
		if werr == nil && want == nil {
			werr = errors.New("null")
		}
		if werr == nil {
			werr = endOfJSON(dec)
		}
		if (err == nil) != (werr == nil) || err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("decodeFieldsObject(%q) = %#v, %v; the decoder: %#v, %v", b, got, err, want, werr)
		}
		// Decoded into a map a record before used (the scan reuses one),
		// the fields are the same: nothing of the last record stays.
		reused, rerr := decodeFieldsObject(b, map[string]any{"stale": "x", "n": json.Number("1")})
		if (rerr == nil) != (err == nil) || err == nil && !reflect.DeepEqual(reused, got) {
			t.Fatalf("decodeFieldsObject(%q) into a used map = %#v, %v; into a new one: %#v, %v", b, reused, rerr, got, err)
		}
		if err == nil {
			wantJSON, merr := json.Marshal(got)
			if plain, ok := plainFieldsJSON(got); ok && (merr != nil || !bytes.Equal(plain, wantJSON)) {
				t.Fatalf("plainFieldsJSON(%#v) = %s; json.Marshal: %s, %v", got, plain, wantJSON, merr)
			}
		}

		fields := map[string][]byte{}
		if !flatFields(b, func(key string, raw []byte) bool { fields[key] = raw; return true }) {
			return
		}
		var raws map[string]rawJSON
		if err := json.Unmarshal(b, &raws); err != nil || raws == nil {
			t.Fatalf("flatFields took %q, json.Unmarshal refused it: %v", b, err)
		}
		if len(fields) != len(raws) {
			t.Fatalf("%q: flatFields gave %d keys, json.Unmarshal %d", b, len(fields), len(raws))
		}
		for k, v := range raws {
			if !bytes.Equal(fields[k], v) {
				t.Fatalf("%q: key %q: flatFields gave %q, json.Unmarshal %q", b, k, fields[k], v)
			}
		}
	})
}
