package ingest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// lineBound passes lines of up to max bytes through whole, in reads of
// any size, and fails at the first longer one, naming it.
func TestLineBound(t *testing.T) {
	text := "ab\n" + strings.Repeat("x", 10) + "\n\n" + strings.Repeat("y", 11) + "\nz\n"
	for _, chunk := range []int{1, 2, 3, 7, 64} {
		r := newLineBound(&chunkReader{s: text, n: chunk}, 10)
		got, err := io.ReadAll(r)
		var long *LineTooLongError
		if !errors.As(err, &long) || long.Line != 4 || long.Max != 10 {
			t.Fatalf("reads of %d: %v, want line 4 longer than 10", chunk, err)
		}
		if before := len("ab\n" + strings.Repeat("x", 10) + "\n\n"); len(got) > before+10 {
			t.Fatalf("reads of %d: %d bytes given, more than the %d before the long line and 10 of it", chunk, len(got), before)
		}
		r = newLineBound(&chunkReader{s: text, n: chunk}, 11)
		if got, err := io.ReadAll(r); err != nil || string(got) != text {
			t.Fatalf("reads of %d, max 11: %q %v", chunk, got, err)
		}
	}
}

type chunkReader struct {
	s string
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if c.s == "" {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.n)], c.s)
	c.s = c.s[n:]
	return n, nil
}

// Issue 55 item 5: a JSONL line far longer than --max-record-size is
// refused as it is read: the scan allocates a bounded amount, not the
// line (a 1 GiB line took 5.2 GB of RSS before its refusal). Here a 64
// MiB line with --max-record-size 1MiB: the scan allocates less than 16
// MiB in all, and the error names the file, the line and the flag. A CSV
// listing's long line is refused the same way.
func TestLongLinesAreRefusedAsTheyAreRead(t *testing.T) {
	dir := t.TempDir()
	corpus := filepath.Join(dir, "corpus.jsonl")
	f, err := os.Create(corpus)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	fmt.Fprintln(w, `{"id": "a", "text": "short", "source": "s"}`)
	fmt.Fprint(w, `{"id": "b", "source": "s", "text": "`)
	chunk := strings.Repeat("z", 1<<20)
	for range 64 {
		w.WriteString(chunk)
	}
	fmt.Fprintln(w, `"}`)
	w.Flush()
	f.Close()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = ScanWith(corpus, ScanOptions{Strata: []string{"source"}, Members: []MemberField{{"text", "txt"}}, MaxRecordSize: 1 << 20})
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), corpus+" line 2: longer than") || !strings.Contains(err.Error(), "--max-record-size") {
		t.Fatalf("a 64 MiB line under --max-record-size 1MiB: %v; want it refused, naming the file, line 2 and the flag", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Fatalf("the scan allocated %d bytes to refuse a 64 MiB line under a 1 MiB bound; want under 16 MiB", alloc)
	}

	if err := os.WriteFile(filepath.Join(dir, "a.bin"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	listing := filepath.Join(dir, "list.csv")
	if err := os.WriteFile(listing, []byte("a.bin,cat\n"+strings.Repeat("q", 20<<20)+",dog\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ScanWith(listing, ScanOptions{}); err == nil || !strings.Contains(err.Error(), listing+" line 2: longer than") {
		t.Fatalf("a CSV listing with a 20 MiB line: %v; want it refused, naming line 2", err)
	}
}
