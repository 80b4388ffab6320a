package integration

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"image"
	"image/jpeg"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
)

// wdsSource is a WebDataset set read back from its shards: each record's
// members in order, with their bytes, and its .json's fields.
type wdsSource struct {
	order   map[string][]string       // key -> member names, in order
	bytes   map[string][]byte         // member path -> bytes
	fields  map[string]map[string]any // key -> the .json object
	records int
}

func readWDS(t *testing.T, dir string) *wdsSource {
	t.Helper()
	w := &wdsSource{order: map[string][]string{}, bytes: map[string][]byte{}, fields: map[string]map[string]any{}}
	shards, _ := filepath.Glob(filepath.Join(dir, "*.tar"))
	for _, p := range shards {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(f)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(tr)
			key, member, _ := strings.Cut(h.Name, ".")
			if _, ok := w.order[key]; !ok {
				w.records++
			}
			w.order[key] = append(w.order[key], member)
			w.bytes[h.Name] = b
			if member == "json" {
				var obj map[string]any
				if err := json.Unmarshal(b, &obj); err != nil {
					t.Fatal(err)
				}
				w.fields[key] = obj
			}
		}
		f.Close()
	}
	return w
}

// Issue 41: a WebDataset set made by Python's tarfile (20 shards, 10,000
// records of a real JPEG, a caption and a .json with a skewed source and
// an aesthetic score) is ingested into MinIO stratified by source and 4
// ranges of the score, with no label, and mounted with 2 ranks and 2
// epochs. Every batch tar holds complete records, member by member, byte
// for byte as in the source (so the .json carries the record's fields);
// no .cls; every batch holds each stratum within one record of its
// target; and the Python loader decodes every member through a DataLoader
// with workers.
func TestWebDatasetRecordsOnMinIO(t *testing.T) {
	requireVision(t)
	requireTorch(t)
	c := sharedCluster(t, 3)
	stores := "--stores=" + strings.Join(c.urls, ",")
	src := filepath.Join(t.TempDir(), "wds")
	if out, err := exec.Command("/usr/bin/python3", "../examples/make_webdataset.py", src, "20", "10000", "5").CombinedOutput(); err != nil {
		t.Fatalf("make_webdataset.py: %v\n%s", err, out)
	}
	w := readWDS(t, src)
	if w.records != 10000 {
		t.Fatalf("the set holds %d records", w.records)
	}
	// The source read whole (quantile bins of every record), and streamed
	// a chunk at a time (issue 59), its quantile bins cut from the first
	// chunk (bins of given edges stream as the ingest package's tests
	// show).
	for _, tc := range []struct{ name, bins, how string }{
		{"pairs", "--bins=aesthetic=4", ""},
		{"streamed", "--bins=aesthetic=4", "--bins aesthetic: edges "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"ingest", stores, "--data=2", "--parity=1", "--shard-size=1MiB", "--strata=source", tc.bins, src, tc.name}
			if tc.name == "pairs" {
				args = append(args[:1], append([]string{"--stream=false"}, args[1:]...)...)
			}
			r := run(t, 5*time.Minute, nil, args...)
			if r.code != 0 || !strings.Contains(r.stdout, "committed "+tc.name+": 10000 samples in 20 strata") {
				t.Fatalf("ingest: %v", r)
			}
			if streamed := strings.Contains(r.stdout, "read once, in "); streamed != (tc.how != "") || !strings.Contains(r.stdout, tc.how) || streamed && strings.Contains(r.stdout, "read once, in 1 chunks") {
				t.Fatalf("ingest %s: streamed %v, want %v in many chunks: %v", tc.name, streamed, tc.how != "", r)
			}
			checkRecordsMount(t, stores, tc.name, w)
		})
	}
}

// checkRecordsMount mounts dataset name of the records w read from their
// source, with 2 ranks and 2 epochs, and checks every member of every
// batch byte for byte, the strata of each batch, samples/ and the loader.
func checkRecordsMount(t *testing.T, stores, name string, w *wdsSource) {
	t.Helper()
	const B, W = 40, 2
	mnt := mountShardfs(t, stores, fmt.Sprintf("--batch-size=%d", B), fmt.Sprintf("--world-size=%d", W), "--rank=all", "--epochs=2", name)
	var info struct {
		Classes []string `json:"classes"`
		Dataset struct {
			Members  []string `json:"members"`
			Labelled bool     `json:"labelled"`
			Strata   []struct {
				Name  string `json:"name"`
				Count int    `json:"count"`
			} `json:"strata"`
		} `json:"dataset"`
	}
	if err := json.Unmarshal(mustRead(t, filepath.Join(mnt, ".shardfs", "info.json")), &info); err != nil {
		t.Fatal(err)
	}
	d := info.Dataset
	if strings.Join(d.Members, ",") != "jpg,txt,json" || d.Labelled || len(info.Classes) != 0 || len(d.Strata) != 20 {
		t.Fatalf("info.json: members %v, labelled %v, classes %v, %d strata", d.Members, d.Labelled, info.Classes, len(d.Strata))
	}
	target := map[string]float64{}
	for _, s := range d.Strata {
		target[s.Name] = float64(B) * float64(s.Count) / 10000
	}
	records := 0
	for e := range 2 {
		for rank := range W {
			rdir := filepath.Join(mnt, "epochs", fmt.Sprintf("%04d", e), fmt.Sprintf("rank-%03d", rank))
			rows, err := csv.NewReader(bytes.NewReader(mustRead(t, filepath.Join(rdir, "index.csv")))).ReadAll()
			if err != nil {
				t.Fatal(err)
			}
			rows = rows[1:]
			for b := 0; b*B < len(rows); b++ {
				data := mustRead(t, filepath.Join(rdir, fmt.Sprintf("batch-%06d.tar", b)))
				tr := tar.NewReader(bytes.NewReader(data))
				count := map[string]int{}
				for k := range B {
					row := rows[b*B+k]
					key, stratum := row[2], row[3]
					count[stratum]++
					for _, member := range w.order[key] {
						h, err := tr.Next()
						if err != nil {
							t.Fatalf("epoch %d rank %d batch %d: record %s: %v", e, rank, b, key, err)
						}
						got, _ := io.ReadAll(tr)
						stem, name, _ := strings.Cut(h.Name, ".")
						if strings.SplitN(stem, "~", 2)[0] != key || name != member || !bytes.Equal(got, w.bytes[key+"."+member]) {
							t.Fatalf("epoch %d rank %d batch %d: member %q (%d bytes), want %s.%s byte for byte", e, rank, b, h.Name, len(got), key, member)
						}
					}
					src := fmt.Sprint(w.fields[key]["source"])
					if !strings.HasPrefix(stratum, src+"+") {
						t.Fatalf("record %s of source %s in stratum %s", key, src, stratum)
					}
					records++
				}
				if h, err := tr.Next(); err != io.EOF {
					t.Fatalf("epoch %d rank %d batch %d: a member past its %d records (%v, %v): no .cls without a label", e, rank, b, B, h, err)
				}
				for s, pi := range target {
					if n := float64(count[s]); n < math.Floor(pi-1e-9) || n > math.Ceil(pi+1e-9) {
						t.Fatalf("epoch %d rank %d batch %d: stratum %s holds %v records, target %.2f", e, rank, b, s, n, pi)
					}
				}
			}
		}
	}
	if records != 2*(10000/B)*B {
		t.Fatalf("read %d records over 2 epochs", records)
	}
	// samples/<stratum>/ shows each record's members as <key>.<member>.
	rows, err := csv.NewReader(bytes.NewReader(mustRead(t, filepath.Join(mnt, "epochs", "0000", "rank-000", "index.csv")))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rows[1:60] {
		key, stratum := row[2], row[3]
		entries, err := os.ReadDir(filepath.Join(mnt, "samples", stratum))
		if err != nil {
			t.Fatal(err)
		}
		listed := 0
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), key+".") {
				listed++
			}
		}
		if listed != len(w.order[key]) {
			t.Fatalf("samples/%s lists %d members of %s, want %v", stratum, listed, key, w.order[key])
		}
		for _, member := range w.order[key] {
			if got := mustRead(t, filepath.Join(mnt, "samples", stratum, key+"."+member)); !bytes.Equal(got, w.bytes[key+"."+member]) {
				t.Fatalf("samples/%s/%s.%s: %d bytes differ from the source's", stratum, key, member, len(got))
			}
		}
	}
	lines := runPython(t, "testdata/records.py", mnt, "0", strconv.Itoa(W))
	if len(lines) != 1 || lines[0][0] != "records" || lines[0][1] != strconv.Itoa(10000/B/W*B) || lines[0][2] != "jpg,json,txt" {
		t.Fatalf("the loader: %v", lines)
	}
}

// writeTar writes a tar of the given members, in order.
func writeTar(t *testing.T, path string, members ...[2]string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range members {
		if err := tw.WriteHeader(&tar.Header{Name: m[0], Mode: 0o644, Size: int64(len(m[1])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(m[1]))
	}
	tw.Close()
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Bad WebDataset input is refused, naming the shard (and the offset), and
// commits nothing: list shows no dataset.
func TestWebDatasetRefusals(t *testing.T) {
	_, urls := localStores(t, 3)
	stores := "--stores=" + strings.Join(urls, ",")
	good := func(key, source string) [][2]string {
		return [][2]string{{key + ".jpg", strings.Repeat("j", 700)}, {key + ".txt", "a caption"}, {key + ".json", `{"source": "` + source + `"}`}}
	}
	for _, tc := range []struct {
		name  string
		make  func(dir string)
		flags []string
		want  string
	}{
		{"a tar cut mid-member", func(dir string) {
			p := filepath.Join(dir, "a.tar")
			writeTar(t, p, append(good("000001", "web"), good("000002", "books")...)...)
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:512+300], 0o644) // in the middle of 000001.jpg
		}, nil, `member "000001.jpg" is cut short (300 of its 700 bytes`},
		{"a tar cut in a header", func(dir string) {
			p := filepath.Join(dir, "a.tar")
			writeTar(t, p, append(good("000001", "web"), good("000002", "books")...)...)
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:512+1024+100], 0o644) // in 000001.txt's header
		}, nil, "the shard is damaged or cut short"},
		{"a member name with no key", func(dir string) {
			writeTar(t, filepath.Join(dir, "a.tar"), append(good("000001", "web"), [2]string{"README", "hello"})...)
		}, nil, `member "README" has no key`},
		{"two records with one key", func(dir string) {
			writeTar(t, filepath.Join(dir, "a.tar"), good("000001", "web")...)
			writeTar(t, filepath.Join(dir, "b.tar"), good("000001", "books")...)
		}, nil, `key "000001" again`},
		{"a .json that is not an object", func(dir string) {
			writeTar(t, filepath.Join(dir, "a.tar"), append(good("000001", "web"), [2]string{"000002.json", "[1, 2]"})...)
		}, nil, `member "000002.json" is not a JSON object`},
		{"a record over the size bound", func(dir string) {
			writeTar(t, filepath.Join(dir, "a.tar"), append(good("000001", "web"), good("000002", "books")...)...)
		}, []string{"--max-record-size=512B"}, "more than the 512 a record may have"},
	} {
		dir := filepath.Join(t.TempDir(), "wds")
		os.MkdirAll(dir, 0o755)
		tc.make(dir)
		r := run(t, time.Minute, nil, append(append([]string{"ingest", stores, "--data=2", "--parity=1", "--strata=source"}, tc.flags...), dir, "bad")...)
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, filepath.Join(dir, "a.tar")) {
			t.Fatalf("%s: want a refusal naming the shard and %q: %v", tc.name, tc.want, r)
		}
		if tc.name != "a record over the size bound" && !strings.Contains(r.stderr, "at offset ") {
			t.Fatalf("%s: the refusal does not name the offset: %v", tc.name, r)
		}
	}
	if r := run(t, time.Minute, nil, "list", stores); r.code != 0 || strings.Contains(r.stdout, "bad") {
		t.Fatalf("a refused ingest left a dataset: %v", r)
	}
}

// Issue 41: a JSONL corpus of 100,000 documents (text and source, the
// sources skewed), ingested in 4 parts (--part I/4) and one commit, in
// metadata format 2, with
// --member text=txt --strata source: every document's text comes back
// byte for byte as its record's .txt, its other fields as its .json, and
// every batch holds each source within one document of its target.
func TestJSONLCorpusInPartsOnMinIO(t *testing.T) {
	c := sharedCluster(t, 3)
	stores := "--stores=" + strings.Join(c.urls, ",")
	const N = 100_000
	dir := t.TempDir()
	corpus := filepath.Join(dir, "docs.jsonl")
	var buf bytes.Buffer
	texts := make([]string, N)
	sources := []string{"web", "books", "news", "code"}
	source := make([]string, N)
	count := map[string]int{}
	for i := range N {
		// Text that JSON escapes: quotes, backslashes, newlines, non-ASCII.
		texts[i] = fmt.Sprintf("doc %d: \"quoted\" \\ back\nslash, été, 日本 %s", i, strings.Repeat("w", i%97))
		source[i] = sources[min(3, int(math.Sqrt(float64(i*7919%N)/N)*4))]
		count[source[i]]++
		b, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("d%06d", i), "text": texts[i], "source": source[i], "n": i})
		buf.Write(append(b, '\n'))
	}
	if err := os.WriteFile(corpus, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"ingest", stores, "--data=2", "--parity=1", "--shard-size=2MiB", "--format=2", "--member=text=txt", "--key=id", "--strata=source", "--job=docs-1"}
	for i := range 4 {
		if r := run(t, 5*time.Minute, nil, append(args, fmt.Sprintf("--part=%d/4", i), corpus, "docs")...); r.code != 0 {
			t.Fatalf("part %d: %v", i, r)
		}
	}
	if r := run(t, 5*time.Minute, nil, "commit", stores, "docs"); r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("committed docs: %d samples in 4 strata", N)) {
		t.Fatalf("commit: %v", r)
	}
	const B = 100
	mnt := mountShardfs(t, stores, fmt.Sprintf("--batch-size=%d", B), "--epochs=1", "docs")
	rdir := filepath.Join(mnt, "epochs", "0000", "rank-000")
	rows, err := csv.NewReader(bytes.NewReader(mustRead(t, filepath.Join(rdir, "index.csv")))).ReadAll()
	if err != nil || len(rows) != N+1 {
		t.Fatalf("index.csv: %d rows, %v", len(rows), err)
	}
	seen := make([]bool, N)
	for b := range N / B {
		tr := tar.NewReader(bytes.NewReader(mustRead(t, filepath.Join(rdir, fmt.Sprintf("batch-%06d.tar", b)))))
		inBatch := map[string]int{}
		for k := range B {
			key := rows[1+b*B+k][2]
			i, err := strconv.Atoi(strings.TrimPrefix(key, "d"))
			if err != nil || seen[i] {
				t.Fatalf("batch %d: key %q (seen before: %v)", b, key, err == nil && seen[i])
			}
			seen[i] = true
			h, err := tr.Next()
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(tr)
			if h.Name != key+".txt" || string(got) != texts[i] {
				t.Fatalf("batch %d: %s holds %q, want document %d's text %q", b, h.Name, got, i, texts[i])
			}
			if h, err = tr.Next(); err != nil || h.Name != key+".json" {
				t.Fatalf("batch %d: after %s.txt: %v %v, want %s.json", b, key, h, err, key)
			}
			var fields map[string]any
			got, _ = io.ReadAll(tr)
			if err := json.Unmarshal(got, &fields); err != nil || fields["source"] != source[i] || fields["id"] != key || fields["n"] != float64(i) || fields["text"] != nil {
				t.Fatalf("batch %d: %s.json = %s", b, key, got)
			}
			inBatch[source[i]]++
		}
		if _, err := tr.Next(); err != io.EOF {
			t.Fatalf("batch %d: a member past its records: %v", b, err)
		}
		for s, n := range count {
			pi := float64(B) * float64(n) / N
			if got := float64(inBatch[s]); got < math.Floor(pi-1e-9) || got > math.Ceil(pi+1e-9) {
				t.Fatalf("batch %d: %v documents of %s, target %.2f", b, got, s, pi)
			}
		}
	}
	// Bad lines are refused, naming the line, and commit nothing.
	for _, tc := range []struct{ line, want string }{
		{`[1, 2, 3]`, "line 3: not a JSON object"},
		{`{"id": "x", "text": 7, "source": "web"}`, `line 3: field "text" is a json.Number, not a string`},
		{`{"id": "x", "source": "web"}`, `line 3: no field "text"`},
	} {
		p := filepath.Join(dir, "bad.jsonl")
		lines := strings.SplitN(buf.String(), "\n", 3)
		os.WriteFile(p, []byte(lines[0]+"\n"+lines[1]+"\n"+tc.line+"\n"), 0o644)
		r := run(t, time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--member=text=txt", "--key=id", "--strata=source", p, "bad")
		if r.code == 0 || !strings.Contains(r.stderr, p+" "+tc.want) {
			t.Fatalf("%s: want a refusal naming %q: %v", tc.line, tc.want, r)
		}
	}
	if r := run(t, time.Minute, nil, "list", stores); r.code != 0 || strings.Contains(r.stdout, "bad") {
		t.Fatalf("a refused ingest left a dataset: %v", r)
	}
}

// parquetRow is a row of the test's table: a binary image column and
// scalar and nested columns.
type parquetRow struct {
	ID     int64    `parquet:"id"`
	Image  []byte   `parquet:"image"`
	Source string   `parquet:"source"`
	Score  float64  `parquet:"score"`
	Tags   []string `parquet:"tags,list"`
}

// Issue 41: a Parquet file written by a real Parquet writer (parquet-go),
// with a binary column of real JPEGs and scalar and nested columns, in
// metadata format 3: its records come back byte for byte, each image as the record's .jpg and the
// other columns in its .json (the list as JSON). A column of a type
// shardfs cannot serve is refused, naming it, and nothing is committed.
func TestParquetRecordsOnMinIO(t *testing.T) {
	c := sharedCluster(t, 3)
	stores := "--stores=" + strings.Join(c.urls, ",")
	dir := t.TempDir()
	const N = 2000
	var rows []parquetRow
	for i := range N {
		img := image.NewRGBA(image.Rect(0, 0, 8+i%5, 8+i%3))
		for p := range img.Pix {
			img.Pix[p] = byte(i*31 + p)
		}
		var jb bytes.Buffer
		if err := jpeg.Encode(&jb, img, &jpeg.Options{Quality: 75}); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, parquetRow{ID: int64(1000 + i), Image: jb.Bytes(), Source: []string{"hf", "hf", "hf", "crawl", "synthetic"}[i%5],
			Score: float64(i%97) / 10, Tags: []string{fmt.Sprint("t", i%3), "x"}})
	}
	table := filepath.Join(dir, "table.parquet")
	f, err := os.Create(table)
	if err != nil {
		t.Fatal(err)
	}
	w := parquet.NewGenericWriter[parquetRow](f, parquet.MaxRowsPerRowGroup(300))
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	r := run(t, 5*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--format=3", "--group-shards=2", "--shard-size=64KiB", "--member=image=jpg", "--key=id", "--strata=source", table, "tbl")
	if r.code != 0 || !strings.Contains(r.stdout, "committed tbl: 2000 samples in 3 strata") {
		t.Fatalf("ingest: %v", r)
	}
	const B = 50
	mnt := mountShardfs(t, stores, fmt.Sprintf("--batch-size=%d", B), "--epochs=1", "tbl")
	rdir := filepath.Join(mnt, "epochs", "0000", "rank-000")
	seen := map[int]bool{}
	for b := range N / B {
		tr := tar.NewReader(bytes.NewReader(mustRead(t, filepath.Join(rdir, fmt.Sprintf("batch-%06d.tar", b)))))
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(tr)
			key, member, _ := strings.Cut(h.Name, ".")
			id, err := strconv.Atoi(key)
			if err != nil || id < 1000 || id >= 1000+N {
				t.Fatalf("batch %d: member %q", b, h.Name)
			}
			row := rows[id-1000]
			switch member {
			case "jpg":
				if !bytes.Equal(body, row.Image) {
					t.Fatalf("%s: %d bytes differ from row %d's image", h.Name, len(body), id-1000)
				}
				seen[id] = true
			case "json":
				var got map[string]any
				if err := json.Unmarshal(body, &got); err != nil || got["source"] != row.Source || got["score"] != row.Score || got["id"] != float64(row.ID) ||
					fmt.Sprint(got["tags"]) != fmt.Sprint([]any{row.Tags[0], row.Tags[1]}) || got["image"] != nil {
					t.Fatalf("%s = %s, want row %d's fields", h.Name, body, id-1000)
				}
			default:
				t.Fatalf("batch %d: member %q", b, h.Name)
			}
		}
	}
	if len(seen) != N {
		t.Fatalf("read %d of %d records", len(seen), N)
	}
	// samples/ (rows pinned from the group and index objects) shows each
	// record's members.
	for i := 0; i < N; i += 97 {
		p := filepath.Join(mnt, "samples", rows[i].Source, fmt.Sprintf("%d.jpg", rows[i].ID))
		if got := mustRead(t, p); !bytes.Equal(got, rows[i].Image) {
			t.Fatalf("%s: %d bytes differ from row %d's image", p, len(got), i)
		}
	}
	// A column of a physical type shardfs does not serve.
	type badRow struct {
		ID    int64   `parquet:"id"`
		Image []byte  `parquet:"image"`
		Hash  [4]byte `parquet:"hash"`
	}
	bad := filepath.Join(dir, "bad.parquet")
	if err := parquet.WriteFile(bad, []badRow{{1, []byte("x"), [4]byte{1, 2, 3, 4}}}); err != nil {
		t.Fatal(err)
	}
	r = run(t, time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--member=image=jpg", "--strata=id", bad, "bad")
	if r.code == 0 || !strings.Contains(r.stderr, `parquet `+bad+`: column "hash" has the physical type FIXED_LEN_BYTE_ARRAY, which shardfs cannot serve`) {
		t.Fatalf("a fixed-length column: want a refusal naming it: %v", r)
	}
	if r := run(t, time.Minute, nil, "list", stores); r.code != 0 || strings.Contains(r.stdout, "bad") {
		t.Fatalf("a refused ingest left a dataset: %v", r)
	}
}

// Records with a label: --label names what the model learns, --strata
// what else batches balance. A batch tar holds each record's members, then
// its .cls: the index of its label in info.json's classes (2), never its
// stratum's (6); the loader's classes() and to_tuple("bin", "cls") agree,
// and a resume from state_dict() continues with the next batch.
func TestRecordsWithALabel(t *testing.T) {
	requireTorch(t)
	_, urls := localStores(t, 3)
	stores := "--stores=" + strings.Join(urls, ",")
	dir := filepath.Join(t.TempDir(), "wds")
	os.MkdirAll(dir, 0o755)
	labels := map[string]string{}
	for s := range 3 {
		var members [][2]string
		for k := range 100 {
			key := fmt.Sprintf("%d%03d", s, k)
			label := []string{"dog", "cat", "cat"}[k%3]
			labels[key] = label
			members = append(members, [2]string{key + ".bin", strings.Repeat("j", 100+k)},
				[2]string{key + ".json", fmt.Sprintf(`{"label": %q, "source": %q}`, label, []string{"web", "books", "news"}[(k/3)%3])})
		}
		writeTar(t, filepath.Join(dir, fmt.Sprintf("s%d.tar", s)), members...)
	}
	if r := run(t, time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--label=label", "--strata=source", dir, "pets"); r.code != 0 || !strings.Contains(r.stdout, "300 samples in 6 strata") {
		t.Fatalf("ingest: %v", r)
	}
	mnt := mountShardfs(t, stores, "--batch-size=30", "--epochs=1", "pets")
	var info struct {
		Classes []string `json:"classes"`
	}
	if err := json.Unmarshal(mustRead(t, filepath.Join(mnt, ".shardfs", "info.json")), &info); err != nil || strings.Join(info.Classes, ",") != "cat,dog" {
		t.Fatalf("info.json classes %v (%v), want cat,dog", info.Classes, err)
	}
	rdir := filepath.Join(mnt, "epochs", "0000", "rank-000")
	for b := range 10 {
		tr := tar.NewReader(bytes.NewReader(mustRead(t, filepath.Join(rdir, fmt.Sprintf("batch-%06d.tar", b)))))
		for k := range 30 {
			var names []string
			var key string
			for _, want := range []string{"bin", "json", "cls"} {
				h, err := tr.Next()
				if err != nil {
					t.Fatalf("batch %d record %d: %v", b, k, err)
				}
				body, _ := io.ReadAll(tr)
				stem, member, _ := strings.Cut(h.Name, ".")
				key = strings.SplitN(stem, "~", 2)[0]
				names = append(names, member)
				if member != want {
					t.Fatalf("batch %d record %d: members %v, want bin, json, cls", b, k, names)
				}
				if member == "cls" && string(body) != map[string]string{"cat": "0", "dog": "1"}[labels[key]] {
					t.Fatalf("batch %d: %s.cls = %q, want the class of its label %s", b, key, body, labels[key])
				}
			}
		}
	}
	cmd := exec.Command("/usr/bin/python3", "-c", `
import sys
sys.path.insert(0, "../python")
import shardfs
l = shardfs.Loader(sys.argv[1], num_workers=2, to_tuple=("bin", "cls"))
n = 0
for body, cls in l:
    assert cls.dtype.is_floating_point is False and cls.shape == (30,), cls
    n += len(cls)
print(l.classes(), n, int(cls.max()))
# An exact resume: 3 batches, the state, a new loader: its next batch is
# the 4th of a run that did not stop.
whole = [[r["__key__"] for r in b] for b in shardfs.Loader(sys.argv[1], num_workers=0)]
a = shardfs.Loader(sys.argv[1], num_workers=2)
it = iter(a)
for _ in range(3):
    next(it)
state = a.state_dict()
b = shardfs.Loader(sys.argv[1], num_workers=2)
b.load_state_dict(state)
nxt = next(iter(b))
print("resumed", [r["__key__"] for r in nxt] == whole[3], len(whole))
`, mnt)
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "['cat', 'dog'] 300 1\nresumed True 10" {
		t.Fatalf("the loader: %v\n%s", err, out)
	}
}

// Issue 41 item 2: WebDataset shards on an S3 store are ingested from its
// URL, read with ranged GETs, never copied to local disk first: every
// member of every record comes back byte for byte. Two of the four shards
// are gzip-compressed (issue 59).
func TestWebDatasetFromS3OnMinIO(t *testing.T) {
	requireVision(t)
	c := sharedCluster(t, 3)
	stores := "--stores=" + strings.Join(c.urls, ",")
	local := filepath.Join(t.TempDir(), "wds")
	if out, err := exec.Command("/usr/bin/python3", "../examples/make_webdataset.py", local, "4", "400", "9").CombinedOutput(); err != nil {
		t.Fatalf("make_webdataset.py: %v\n%s", err, out)
	}
	w := readWDS(t, local)
	src := c.clients(t)[0]
	shards, _ := filepath.Glob(filepath.Join(local, "*.tar"))
	for i, p := range shards {
		// Issue 59: shards 1 and 3 gzip-compressed, as .tar.gz and .tgz,
		// as WebDataset writers make them: read as WebDataset reads them.
		key, body := "wds-src/"+filepath.Base(p), mustRead(t, p)
		if i%2 == 1 {
			var z bytes.Buffer
			zw := gzip.NewWriter(&z)
			zw.Write(body)
			zw.Close()
			key, body = strings.TrimSuffix(key, ".tar")+[]string{"", ".tar.gz", "", ".tgz"}[i], z.Bytes()
		}
		if err := src.Put(t.Context(), key, body); err != nil {
			t.Fatal(err)
		}
	}
	r := run(t, 5*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--strata=source", c.urls[0]+"/wds-src", "s3pairs")
	if r.code != 0 || !strings.Contains(r.stdout, "committed s3pairs: 400 samples") {
		t.Fatalf("ingest from %s/wds-src: %v", c.urls[0], r)
	}
	mnt := mountShardfs(t, stores, "--batch-size=20", "--epochs=1", "s3pairs")
	members := 0
	for b := range 20 {
		tr := tar.NewReader(bytes.NewReader(mustRead(t, filepath.Join(mnt, "epochs", "0000", "rank-000", fmt.Sprintf("batch-%06d.tar", b)))))
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(tr)
			stem, member, _ := strings.Cut(h.Name, ".")
			if want, ok := w.bytes[strings.SplitN(stem, "~", 2)[0]+"."+member]; !ok || !bytes.Equal(got, want) {
				t.Fatalf("batch %d: %s: %d bytes differ from the source's", b, h.Name, len(got))
			}
			members++
		}
	}
	if members != 3*400 {
		t.Fatalf("read %d members, want 1200", members)
	}
}

// TestIngestDryRun: --dry-run reads the source and says what the ingest
// would write, in the same numbers the ingest then commits, and writes
// nothing: no store directory is created, and list shows no dataset.
func TestIngestDryRun(t *testing.T) {
	dirs, urls := localStores(t, 3)
	stores := "--stores=" + strings.Join(urls, ",")
	src := filepath.Join(t.TempDir(), "shards")
	if out, err := exec.Command("/usr/bin/python3", "../examples/make_webdataset.py", src, "4", "400", "1").CombinedOutput(); err != nil {
		t.Fatalf("make_webdataset.py: %v\n%s", err, out)
	}
	args := []string{stores, "--data=2", "--parity=1", "--shard-size=64KiB", "--strata=source", "--bins=aesthetic=4", src, "pairs"}
	dry := run(t, time.Minute, nil, append([]string{"ingest", "--dry-run"}, args...)...)
	want := regexp.MustCompile(`^dry run of pairs: 400 samples \(.*\) in 20 strata would be (\d+) shards \((\d+) read windows\), .* stored RS\(2,1\); nothing was written`)
	m := want.FindStringSubmatch(dry.stdout)
	if dry.code != 0 || m == nil {
		t.Fatalf("ingest --dry-run: %v", dry)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Fatalf("ingest --dry-run touched store %s: %v", d, err)
		}
	}
	if r := run(t, time.Minute, nil, "list", stores); r.code != 0 || strings.Contains(r.stdout, "pairs") {
		t.Fatalf("list after a dry run: %v", r)
	}
	if m[2] == "1" {
		t.Fatalf("the dry run planned one read window: the test wants several (%s)", dry.stdout)
	}
	r := run(t, time.Minute, nil, append([]string{"ingest"}, args...)...)
	if r.code != 0 || !strings.Contains(r.stdout, "committed pairs: 400 samples in 20 strata, "+m[1]+" shards") {
		t.Fatalf("the ingest after the dry run does not commit the %s shards it said: %v", m[1], r)
	}
}
