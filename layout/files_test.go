package layout

import (
	"archive/tar"
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// testCatalog has keys with awkward characters and sizes around 512, and
// three strata over two classes: strata 0 and 2 share class 1, as a label
// cut by time shares its class among its time buckets.
type testCatalog struct {
	keys    []string
	sizes   []int64
	strata  []int
	stNames []string
}

var testClassOf = []int{1, 0, 1}

func (c *testCatalog) Class(s int) int { return testClassOf[s] }

func (c *testCatalog) Key(i int) string         { return c.keys[i] }
func (c *testCatalog) Size(i int) int64         { return c.sizes[i] }
func (c *testCatalog) Stratum(i int) int        { return c.strata[i] }
func (c *testCatalog) StratumName(s int) string { return c.stNames[s] }

// sampleBytes is the deterministic content of sample i.
func sampleBytes(i int, size int64) []byte {
	b := make([]byte, size)
	for j := range b {
		b[j] = byte(i*31 + j*7)
	}
	return b
}

func newTestCatalog(n int, rng *rand.Rand) *testCatalog {
	c := &testCatalog{stNames: []string{"cat", "dog, big", "bird \"x\""}}
	sizes := []int64{0, 1, 511, 512, 513, 1024, 3000}
	keyForms := []string{"%s/img%d.jpg", "%s/a.b.c%d.png", "%s/no_ext_%d", "%s/ünï cödé %d.JPEG", "%s/" + strings.Repeat("long", 40) + "%d.txt", "%s/x%d.tar.gz"}
	for i := 0; i < n; i++ {
		st := rng.IntN(3)
		c.strata = append(c.strata, st)
		c.keys = append(c.keys, fmt.Sprintf(keyForms[i%len(keyForms)], c.stNames[st], i))
		s := sizes[rng.IntN(len(sizes))]
		if rng.IntN(3) == 0 {
			s = rng.Int64N(5000)
		}
		c.sizes = append(c.sizes, s)
	}
	return c
}

// render reads [off, off+n) of f through Extents and Render.
func render(f *FileMap, off, n int64) []byte {
	var out []byte
	for _, e := range f.Extents(nil, off, n) {
		p := make([]byte, e.Len)
		if e.Piece == PieceSample {
			s := f.m.Sample(int(e.Member))
			copy(p, sampleBytes(s, f.m.cat.Size(s))[e.Off:])
		} else {
			f.Render(e, p)
		}
		out = append(out, p...)
	}
	return out
}

func testMembers(t testing.TB, n int, p Params) (*Members, *testCatalog) {
	rng := rand.New(rand.NewPCG(uint64(n), 1))
	cat := newTestCatalog(n, rng)
	st := make([]uint32, n)
	for i := range st {
		st[i] = uint32(cat.strata[i])
	}
	in, err := NewInput(st, 3, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	o, err := Order(in, p)
	if err != nil {
		t.Fatal(err)
	}
	return NewMembers(o, cat), cat
}

func TestTarFilesParse(t *testing.T) {
	for _, tail := range []Tail{Drop, Pad} {
		m, cat := testMembers(t, 300, Params{Seed: 3, World: 2, Rank: 1, Batch: 16, Alpha: 1, Tail: tail})
		var epochMembers []string
		for b := 0; b < m.order.Batches; b++ {
			f := m.Batch(b)
			data := render(f, 0, f.Size())
			if int64(len(data)) != f.Size() {
				t.Fatalf("batch %d: rendered %d bytes, size %d", b, len(data), f.Size())
			}
			tr := tar.NewReader(bytes.NewReader(data))
			for k, s := range m.order.BatchSamples(b).All() {
				i := b*16 + k
				stem, ext := m.Name(i)
				hdr, err := tr.Next()
				if err != nil {
					t.Fatalf("batch %d member %d: %v", b, k, err)
				}
				got, _ := io.ReadAll(tr)
				if hdr.Name != stem+"."+ext || !bytes.Equal(got, sampleBytes(int(s), cat.sizes[s])) {
					t.Fatalf("batch %d member %d: %q, %d bytes; want %q", b, k, hdr.Name, len(got), stem+"."+ext)
				}
				hdr, err = tr.Next()
				if err != nil {
					t.Fatal(err)
				}
				cls, _ := io.ReadAll(tr)
				// .cls carries the class, never the stratum.
				if hdr.Name != stem+".cls" || string(cls) != strconv.Itoa(testClassOf[cat.strata[s]]) {
					t.Fatalf("cls member %q = %q, want class %d of stratum %d", hdr.Name, cls, testClassOf[cat.strata[s]], cat.strata[s])
				}
				if strings.Count(hdr.Name, ".") != 1 || strings.Contains(stem[strings.LastIndex(stem, "/")+1:], ".") {
					t.Fatalf("name %q: WebDataset would split it wrongly", hdr.Name)
				}
				epochMembers = append(epochMembers, stem+"."+ext, stem+".cls")
			}
			if _, err := tr.Next(); err != io.EOF {
				t.Fatalf("batch %d: trailing member or error: %v", b, err)
			}
		}
		// epoch.tar: the same members in order, one end marker at the end.
		f := m.Epoch()
		data := render(f, 0, f.Size())
		tr := tar.NewReader(bytes.NewReader(data))
		for k, want := range epochMembers {
			hdr, err := tr.Next()
			if err != nil || hdr.Name != want {
				t.Fatalf("epoch.tar member %d: %v %v, want %q", k, hdr, err, want)
			}
		}
		if _, err := tr.Next(); err != io.EOF {
			t.Fatalf("epoch.tar has more: %v", err)
		}
		if !bytes.Equal(data[len(data)-1024:], make([]byte, 1024)) {
			t.Fatal("epoch.tar does not end with the end marker")
		}
		// Names are unique within the rank-epoch (pad recycles samples).
		seen := map[string]bool{}
		for _, n := range epochMembers {
			if seen[n] {
				t.Fatalf("duplicate member name %q", n)
			}
			seen[n] = true
		}
		// index.csv matches.
		idx := m.Index()
		rows, err := csv.NewReader(bytes.NewReader(render(idx, 0, idx.Size()))).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != m.Len()+1 || strings.Join(rows[0], ",") != "position,batch,key,stratum,size,alpha" {
			t.Fatalf("index.csv: %d rows, header %v", len(rows), rows[0])
		}
		for i, r := range rows[1:] {
			s := m.Sample(i)
			want := []string{strconv.Itoa(i), strconv.Itoa(i / 16), cat.keys[s], cat.stNames[cat.strata[s]], strconv.FormatInt(cat.sizes[s], 10),
				strconv.FormatFloat(m.Order().Params.Alpha, 'g', -1, 64)}
			if strings.Join(r, "|") != strings.Join(want, "|") {
				t.Fatalf("index.csv row %d = %q, want %q", i, r, want)
			}
		}
	}
}

func TestTarName(t *testing.T) {
	for key, want := range map[string]string{
		"cat/img1.jpg":      "cat/img1.jpg",
		"cat/a.b.c.png":     "cat/a_b_c.png",
		"dog/noext":         "dog/noext.bin",
		"dog/.hidden":       "dog/_hidden.bin",
		"a b/ü.JPEG":        "a_b/__.JPEG",
		"x/archive.tar.gz":  "x/archive_tar.gz",
		"x/weird.ext-with!": "x/weird.ext_with_",
	} {
		stem, ext := TarName(key)
		if got := stem + "." + ext; got != want {
			t.Errorf("TarName(%q) = %q, want %q", key, got, want)
		}
	}
	long := strings.Repeat("d/", 60) + "f.jpg"
	a, _ := TarName(long)
	b, _ := TarName(long + "x")
	if len(a) > maxStem || a == b {
		t.Errorf("long keys: %d bytes, distinct=%v", len(a), a != b)
	}
}

// FuzzExtents: any (off, len) of any file gives exactly those bytes of the whole file.
func FuzzExtents(f *testing.F) {
	m, _ := testMembers(f, 120, Params{Seed: 1, World: 1, Batch: 7, Alpha: 1, Tail: Pad})
	files := []*FileMap{m.Epoch(), m.Batch(0), m.Batch(3), m.Index()}
	full := make([][]byte, len(files))
	for i, fm := range files {
		full[i] = render(fm, 0, fm.Size())
	}
	f.Add(uint8(0), int64(0), int64(1<<20))
	f.Add(uint8(1), int64(511), int64(2))
	f.Add(uint8(3), int64(40), int64(100))
	f.Fuzz(func(t *testing.T, which uint8, off, n int64) {
		fm, whole := files[int(which)%len(files)], full[int(which)%len(files)]
		if off < 0 || n < 0 || off > fm.Size()+10 || n > 1<<22 {
			return
		}
		got := render(fm, off, n)
		lo, hi := min(off, int64(len(whole))), min(off+n, int64(len(whole)))
		if !bytes.Equal(got, whole[lo:hi]) {
			t.Fatalf("file %d [%d,+%d): %d bytes differ from the whole file's", which, off, n, len(got))
		}
		var pos int64 = off
		for _, e := range fm.Extents(nil, off, n) {
			if e.FileOff != pos || e.Len <= 0 {
				t.Fatalf("extent %+v at %d", e, pos)
			}
			pos += e.Len
		}
	})
}

// BenchmarkExtents_1MiB: samples of 50-150 kB, as in the loader benchmark.
func BenchmarkExtents_1MiB(b *testing.B) { benchExtentsOf(b, 20_000) }

// BenchmarkExtents_1MiB_100x: the same over a dataset 100 times larger
// (issue 13: a read's extents must not grow with the dataset). Random
// offsets touch cold cache lines of a 100× larger member table; reads in
// file order, as a reader's are, cost the same at both sizes.
func BenchmarkExtents_1MiB_100x(b *testing.B) { benchExtentsOf(b, 2_000_000) }

func BenchmarkExtents_1MiB_inOrder(b *testing.B)      { benchExtentsInOrder(b, 20_000) }
func BenchmarkExtents_1MiB_inOrder_100x(b *testing.B) { benchExtentsInOrder(b, 2_000_000) }

func benchExtentsInOrder(b *testing.B, n int) {
	f := loaderMembers(b, n).Epoch()
	dst := make([]Extent, 0, 4096)
	b.ReportAllocs()
	b.SetBytes(1 << 20)
	var off int64
	for b.Loop() {
		if off+1<<20 > f.Size() {
			off = 0
		}
		dst = f.Extents(dst[:0], off, 1<<20)
		off += 1 << 20
	}
}

func benchExtentsOf(b *testing.B, n int) { benchExtents(b, loaderMembers(b, n)) }

// loaderMembers is a rank-epoch of n samples of 50-150 kB.
func loaderMembers(b testing.TB, n int) *Members {
	m, cat := testMembers(b, n, Params{Seed: 1, World: 1, Batch: 256, Alpha: 1})
	rng := rand.New(rand.NewPCG(3, 3))
	for i := range cat.sizes {
		cat.sizes[i] = 50_000 + rng.Int64N(100_000)
	}
	return NewMembers(m.order, cat)
}

// BenchmarkExtents_1MiB_tinySamples: the worst case, ~2 kB samples (~2,400 extents per MiB).
func BenchmarkExtents_1MiB_tinySamples(b *testing.B) {
	m, _ := testMembers(b, 20_000, Params{Seed: 1, World: 1, Batch: 256, Alpha: 1})
	benchExtents(b, m)
}

func benchExtents(b *testing.B, m *Members) {
	f := m.Epoch()
	dst := make([]Extent, 0, 4096)
	rng := rand.New(rand.NewPCG(1, 2))
	b.ReportAllocs()
	b.SetBytes(1 << 20)
	for b.Loop() {
		off := rng.Int64N(f.Size() - 1<<20)
		dst = f.Extents(dst[:0], off, 1<<20)
	}
}

// FuzzTarName: any key maps to a short ASCII ustar name WebDataset splits
// at the extension, deterministically.
func FuzzTarName(f *testing.F) {
	for _, k := range []string{"cat/a.jpg", "a.b.c", "ü/..", strings.Repeat("x/", 100), "\x00", "~1"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		stem, ext := TarName(key)
		if s2, e2 := TarName(key); s2 != stem || e2 != ext {
			t.Fatal("not deterministic")
		}
		name := stem + "." + ext
		if len(stem) > maxStem || len(ext) > maxExt || len(name) > 100 || ext == "" {
			t.Fatalf("%q -> %q: too long or no extension", key, name)
		}
		for i := 0; i < len(name); i++ {
			c := name[i]
			if !(c == '_' || c == '-' || c == '/' || c == '.' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
				t.Fatalf("%q -> %q: byte %q", key, name, c)
			}
		}
		base := stem[strings.LastIndexByte(stem, '/')+1:]
		if strings.Contains(base, ".") || strings.Contains(ext, ".") || strings.Contains(stem, "~") {
			t.Fatalf("%q -> %q: WebDataset would split it differently", key, name)
		}
	})
}

// TestRenderHeadersOffTheHeap: rendering a read's tar headers allocates no
// 512-byte header per member. Under fio, a heap header per member was 91% of
// the daemon's allocations, and fresh heap costs page faults on the read path.
func TestRenderHeadersOffTheHeap(t *testing.T) {
	f := loaderMembers(t, 2_000).Epoch()
	exts := f.Extents(nil, 1<<20, 4<<20)
	p := make([]byte, 4<<20)
	headers := 0
	for _, e := range exts {
		if e.Piece == PieceHeader || e.Piece == PieceClsHeader {
			headers++
		}
	}
	if headers < 40 {
		t.Fatalf("%d headers in 4 MiB of 50-150 kB samples, want at least 40", headers)
	}
	render := func() {
		for _, e := range exts {
			if e.Piece != PieceSample {
				f.Render(e, p[e.FileOff-1<<20:][:e.Len])
			}
		}
	}
	render()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const rounds = 50
	for range rounds {
		render()
	}
	runtime.ReadMemStats(&after)
	perHeader := float64(after.TotalAlloc-before.TotalAlloc) / float64(rounds*headers)
	t.Logf("%d headers per round, %.1f bytes allocated per header", headers, perHeader)
	if perHeader >= 256 {
		t.Fatalf("%.1f bytes allocated per rendered header, want under 256 (no heap header block)", perHeader)
	}
}

// BenchmarkRenderHeaders_1MiB: the tar headers of one 1 MiB read of 50-150 kB samples.
func BenchmarkRenderHeaders_1MiB(b *testing.B) {
	f := loaderMembers(b, 20_000).Epoch()
	exts := f.Extents(nil, 1<<20, 1<<20)
	p := make([]byte, 1<<20)
	b.ReportAllocs()
	b.SetBytes(1 << 20)
	for b.Loop() {
		for _, e := range exts {
			if e.Piece != PieceSample {
				f.Render(e, p[e.FileOff-1<<20:][:e.Len])
			}
		}
	}
}
