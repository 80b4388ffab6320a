package ingest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sync/errgroup"
)

// countingCorpus records the byte ranges read through it.
type countingCorpus struct {
	corpusFile
	mu    sync.Mutex
	reads [][2]int64
}

func (c *countingCorpus) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.corpusFile.ReadAt(p, off)
	c.mu.Lock()
	c.reads = append(c.reads, [2]int64{off, off + int64(n)})
	c.mu.Unlock()
	return n, err
}

// bytesRead returns the bytes read, and whether any byte was read twice.
func (c *countingCorpus) bytesRead() (read int64, twice bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rs := slices.Clone(c.reads)
	slices.SortFunc(rs, func(a, b [2]int64) int { return int(a[0] - b[0]) })
	end := int64(-1)
	for _, r := range rs {
		read += r[1] - r[0]
		if r[0] < end {
			twice = true
		}
		end = max(end, r[1])
	}
	return read, twice
}

// countCorpusReads makes every corpus opened from now on count its reads,
// handing each to opened, in the order opened.
func countCorpusReads(t *testing.T, opened func(*countingCorpus)) {
	wrapCorpora(t, func(f corpusFile) corpusFile {
		c := &countingCorpus{corpusFile: f}
		opened(c)
		return c
	})
}

// wrapCorpora makes every corpus opened from now on, until the test ends,
// read through wrap's file.
func wrapCorpora(t *testing.T, wrap func(corpusFile) corpusFile) {
	was := openCorpus
	t.Cleanup(func() { openCorpus = was })
	openCorpus = func(name string) (corpusFile, error) {
		f, err := was(name)
		if err != nil {
			return nil, err
		}
		return wrap(f), nil
	}
}

// sliceKeys reads the records of the lines that start in [from, to) of
// corpus, and returns their keys and the bytes read of the file.
func sliceKeys(t *testing.T, corpus string, o ScanOptions, from, to int64) ([]string, *countingCorpus) {
	t.Helper()
	var c *countingCorpus
	countCorpusReads(t, func(cc *countingCorpus) { c = cc })
	r, err := openJSONL(corpus, o)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	c.reads = nil // the byte order mark's check, 3 bytes at 0
	if _, err := r.slice(from, to); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for done := false; !done; {
		var b recordBatch
		if done, err = r.read(&b, func(n int, _ int64) bool { return n >= 7 }); err != nil {
			t.Fatalf("[%d, %d): %v", from, to, err)
		}
		for _, rec := range b.records {
			if rec.off < from-1 || rec.off >= to && to > from || rec.line != 0 {
				t.Fatalf("[%d, %d): record %s of the line at %d (number %d)", from, to, rec.key, rec.off, rec.line)
			}
			keys = append(keys, rec.key)
		}
	}
	return keys, c
}

// However a corpus's bytes are cut into slices, each line is read by
// exactly one slice, that which holds its start, and a slice reads its
// bytes, the byte before, and past its end only the rest of its last line:
// cuts at every byte of corpora with a byte order mark, blank lines,
// CRLF ends, a last line with no newline, and lines longer than a read.
func TestCorpusSlicesReadEveryLineOnce(t *testing.T) {
	long := strings.Repeat("x", 70<<10) // longer than sliceReader's 64 KiB pieces
	cases := map[string][]string{
		"plain":      {`{"id":"a","text":"1"}`, `{"id":"b","text":"22"}`, `{"id":"c","text":"333"}`, `{"id":"d","text":"4"}`, ""},
		"bom, blank": {"\ufeff" + `{"id":"a","text":"1"}`, ``, `  `, `{"id":"b","text":"x"}`, ``, `{"id":"c","text":"y"}`, ""},
		"crlf":       {`{"id":"a","text":"1"}` + "\r", `{"id":"b","text":"2"}` + "\r", `{"id":"c","text":"3"}` + "\r", ""},
		"no newline": {`{"id":"a","text":"1"}`, `{"id":"b","text":"2"}`, `{"id":"c","text":"3"}`},
		"long lines": {`{"id":"a","text":"` + long + `"}`, `{"id":"b","text":"2"}`, `{"id":"c","text":"` + long + `"}`, `{"id":"d","text":"4"}`, ""},
	}
	o := ScanOptions{Members: []MemberField{{"text", "txt"}}, KeyField: "id"}
	for name, lines := range cases {
		t.Run(name, func(t *testing.T) {
			corpus := filepath.Join(t.TempDir(), "c.jsonl")
			body := strings.Join(lines, "\n")
			if err := os.WriteFile(corpus, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			size := int64(len(body))
			all, _ := sliceKeys(t, corpus, o, 0, size)
			if len(all) < 3 {
				t.Fatalf("read %v of the whole", all)
			}
			step := int64(1)
			if size > 4096 {
				step = 997 // every byte of the long corpus takes minutes
			}
			cuts := []int64{}
			for k := int64(0); k <= size; k += step {
				cuts = append(cuts, k)
			}
			// ... and every line's start, its newline and the byte after.
			for i, at := 0, int64(0); i < len(lines); i++ {
				cuts = append(cuts, at, max(at-1, 0), min(at+1, size))
				at += int64(len(lines[i])) + 1
			}
			for _, k := range cuts {
				first, c0 := sliceKeys(t, corpus, o, 0, k)
				second, c1 := sliceKeys(t, corpus, o, k, size)
				if got := append(slices.Clone(first), second...); !slices.Equal(got, all) {
					t.Fatalf("cut at %d: %v then %v, want %v", k, first, second, all)
				}
				// The first slice reads [0, k) and the rest of its last
				// line, with less than a piece more; the second, the
				// byte before k and [k, size).
				rest := int64(0)
				if k > 0 && k < size && body[k-1] != '\n' {
					nl := strings.IndexByte(body[k:], '\n')
					if nl < 0 {
						nl = len(body) - int(k) - 1
					}
					rest = int64(nl) + 1
				}
				for i, c := range []*countingCorpus{c0, c1} {
					read, twice := c.bytesRead()
					bound := k + rest
					if rest > 0 {
						bound += tailPiece - 1
					}
					if i == 1 {
						bound = size - k + min(k, 1)
					}
					if twice || read > bound {
						t.Fatalf("cut at %d, slice %d: read %d bytes (twice: %v), want at most %d: %v", k, i, read, twice, bound, c.reads)
					}
				}
			}
		})
	}
}

// jsonlCorpus writes n records keyed by an id field, of three sources,
// with texts of many lengths, and returns the file and what each record
// must serve.
func jsonlCorpus(t *testing.T, dir string, n int) (string, map[string]map[string][]byte) {
	t.Helper()
	var lines strings.Builder
	want := map[string]map[string][]byte{}
	rng := rand.New(rand.NewPCG(59, 3))
	for i := range n {
		text := strings.Repeat(fmt.Sprintf("doc %d é ", i), 1+rng.IntN(60))
		src := []string{"web", "books", "code"}[rng.IntN(3)]
		fmt.Fprintf(&lines, "{\"id\": \"d%05d\", \"text\": %q, \"source\": %q}\n", i, text, src)
		want[fmt.Sprintf("d%05d", i)] = map[string][]byte{"txt": []byte(text), "json": []byte(fmt.Sprintf(`{"id":"d%05d","source":%q}`, i, src))}
	}
	corpus := filepath.Join(dir, "docs.jsonl")
	if err := os.WriteFile(corpus, []byte(lines.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return corpus, want
}

// Four parts of an ingest of a JSONL corpus keyed by --key, run at once:
// each reads the lines that start in its quarter of the file's bytes, and
// of the file only that quarter, the byte before it and the rest of its
// last line, each byte once. The commit serves every record byte for byte
// and verifies; a part run again writes what it wrote, and after the
// commit has nothing to do.
func TestCorpusSlicePartsReadOnlyTheirSlice(t *testing.T) {
	ctx := context.Background()
	corpus, want := jsonlCorpus(t, t.TempDir(), 3000)
	body, err := os.ReadFile(corpus)
	if err != nil {
		t.Fatal(err)
	}
	size := int64(len(body))
	stores := localStores(t, t.TempDir(), 3)
	o := ScanOptions{Strata: []string{"source"}, Members: []MemberField{{"text", "txt"}}, KeyField: "id"}
	opts := Options{Name: "ds", Stores: stores, Data: 2, Parity: 1, ShardSize: 32 << 10, BlockSize: 4096, Seed: 5}
	var mu sync.Mutex // parts open the corpus at once
	var counted []*countingCorpus
	countCorpusReads(t, func(c *countingCorpus) { mu.Lock(); counted = append(counted, c); mu.Unlock() })
	part := func(p Part) error {
		st, err := OpenStream(corpus, o)
		if err != nil {
			return err
		}
		defer st.Close()
		_, err = RunSlicePart(ctx, st, opts, p, "job-9")
		return err
	}
	var g errgroup.Group
	for i := range 4 {
		g.Go(func() error { return part(Part{i, 4}) })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if len(counted) != 4 {
		t.Fatalf("%d corpus files opened, want one a part", len(counted))
	}
	// Each part reads at most its quarter, the byte before it, the rest
	// of its last line (under 1 KiB here) and less than a piece more;
	// and, on opening the corpus, the 3 bytes at 0 that would be a byte
	// order mark. No part reads a byte twice.
	var total int64
	for _, c := range counted {
		c.reads = slices.DeleteFunc(c.reads, func(r [2]int64) bool { return r == [2]int64{0, 3} })
		read, twice := c.bytesRead()
		total += read
		if twice {
			t.Errorf("a part read bytes twice: %v", c.reads)
		}
		if read > size/4+1+1024+tailPiece {
			t.Errorf("a part read %d bytes of a %d-byte corpus: more than its quarter", read, size)
		}
	}
	if total < size || total > size+4*(1+1024+tailPiece) {
		t.Errorf("the parts read %d bytes of a %d-byte corpus", total, size)
	}
	// A part run again writes what it wrote.
	if err := part(Part{2, 4}); err != nil {
		t.Fatalf("part 2/4 run again: %v", err)
	}
	res, err := Commit(ctx, CommitOptions{Name: "ds", Stores: stores})
	if err != nil {
		t.Fatal(err)
	}
	if err := part(Part{1, 4}); !errors.Is(err, ErrAlreadyCommitted) {
		t.Fatalf("part 1/4 run after the commit: %v", err)
	}
	if res.Samples != len(want) {
		t.Fatalf("%d samples committed, want %d", res.Samples, len(want))
	}
	ds := recordsBack(t, stores, "ds", want)
	if len(ds.Manifest.Segments) != 4 {
		t.Fatalf("%d segments, want one a part", len(ds.Manifest.Segments))
	}
	if rep, err := ds.Verify(ctx, nil); err != nil || !rep.Intact() {
		t.Fatalf("the committed dataset does not verify: %v %+v", err, rep)
	}
}

// A part's messages name a line of its slice by its byte offset, whose
// number it does not know: a line that is not an object, a key given
// twice (both lines), and a line too long for --max-record-size, which
// bufio meets reading ahead, past the line last returned. A part of a
// corpus keyed by line number is refused, asking for --key.
func TestCorpusSliceNamesLinesByTheirOffset(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	head := `{"id":"a","text":"1","source":"web"}` + "\n" + `{"id":"b","text":"2","source":"web"}` + "\n" // 74 bytes, part 0's
	for _, tc := range []struct {
		name, tail, want string
		max              int64
	}{
		{"not an object", `{"id":"c","text":"3","source":"web"}` + "\n[1, 2]\n", "corpus %s, the line at byte 111: not a JSON object", 0},
		{"key again", `{"id":"c","text":"3","source":"web"}` + "\n" + `{"id":"c","text":"4","source":"web"}` + "\n", `corpus %s, the line at byte 111: key "c" again, after the line at byte 74`, 0},
		{"too long", `{"id":"c","text":"3","source":"web"}` + "\n" + `{"id":"d","text":"` + strings.Repeat("x", 200<<10) + `","source":"web"}` + "\n", "corpus %s, the line at byte 111: longer than", 64 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			corpus := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".jsonl")
			if err := os.WriteFile(corpus, []byte(head+tc.tail), 0o644); err != nil {
				t.Fatal(err)
			}
			// Part 1 of 2 starts after the head, mid-way into the file or
			// before it: cut at the head's last byte.
			st, err := OpenStream(corpus, ScanOptions{Strata: []string{"source"}, Members: []MemberField{{"text", "txt"}}, KeyField: "id", MaxRecordSize: tc.max})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			lines, err := st.corpus.slice(73, st.corpus.size)
			if err != nil || !lines {
				t.Fatalf("slice: %v %v", lines, err)
			}
			_, _, err = st.firstChunk(ctx, Options{ShardSize: 1 << 20, Format: 2})
			if want := fmt.Sprintf(tc.want, corpus); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("got %v, want %q", err, want)
			}
		})
	}
	corpus, _ := jsonlCorpus(t, dir, 50)
	st, err := OpenStream(corpus, ScanOptions{Strata: []string{"source"}, Members: []MemberField{{"text", "txt"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if st.Sliceable() {
		t.Fatal("a corpus keyed by line number is sliceable")
	}
	_, err = RunSlicePart(ctx, st, Options{Name: "ds", Stores: localStores(t, t.TempDir(), 3), Data: 2, Parity: 1}, Part{1, 2}, "job-1")
	if err == nil || !strings.Contains(err.Error(), "give --key FIELD") {
		t.Fatalf("a part of a corpus keyed by line number: %v", err)
	}
}

// A slice that holds only blank lines is a part with no records, not a
// refusal: a corpus that ends in a run of blank lines, in 4 parts, commits
// and serves every record. A corpus of blank lines alone commits nothing.
func TestCorpusSliceOfBlankLinesIsAnEmptyPart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var lines strings.Builder
	want := map[string]map[string][]byte{}
	for i := range 30 {
		fmt.Fprintf(&lines, "{\"id\": \"d%02d\", \"text\": \"t%d\", \"source\": \"web\"}\n", i, i)
		want[fmt.Sprintf("d%02d", i)] = map[string][]byte{"txt": []byte(fmt.Sprint("t", i)), "json": []byte(fmt.Sprintf(`{"id":"d%02d","source":"web"}`, i))}
	}
	lines.WriteString(strings.Repeat("\n", 2000) + strings.Repeat(" \t\r\n", 1000))
	o := ScanOptions{Strata: []string{"source"}, Members: []MemberField{{"text", "txt"}}, KeyField: "id"}
	for _, tc := range []struct {
		name, body string
		records    int
	}{{"trailing blank lines", lines.String(), 30}, {"blank lines only", strings.Repeat("\n", 4000), 0}} {
		t.Run(tc.name, func(t *testing.T) {
			corpus := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".jsonl")
			if err := os.WriteFile(corpus, []byte(tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			stores := localStores(t, t.TempDir(), 3)
			for i := range 4 {
				st, err := OpenStream(corpus, o)
				if err != nil {
					t.Fatal(err)
				}
				_, err = RunSlicePart(ctx, st, Options{Name: "ds", Stores: stores, Data: 2, Parity: 1, ShardSize: 32 << 10, BlockSize: 4096}, Part{i, 4}, "job-3")
				st.Close()
				if err != nil {
					t.Fatalf("part %d/4: %v", i, err)
				}
			}
			res, err := Commit(ctx, CommitOptions{Name: "ds", Stores: stores})
			if tc.records == 0 {
				if !errors.Is(err, ErrEmpty) {
					t.Fatalf("a corpus of blank lines: %v %+v, want it refused as empty", err, res)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			recordsBack(t, stores, "ds", want)
		})
	}
}
