package layout

import (
	"archive/tar"
	"bytes"
	"io"
	"math/rand/v2"
	"strconv"
	"testing"
)

// recordCatalog makes each of testCatalog's samples a record: its bytes
// cut into the members "jpg", "txt" and "seg.png" (some empty), or, for
// every seventh sample, the one member "json".
type recordCatalog struct {
	*testCatalog
	labelled bool
}

func (c recordCatalog) Record(dst []Member, i int) []Member {
	size := c.sizes[i]
	if i%7 == 0 {
		return append(dst, Member{"json", size})
	}
	a := min(size, int64(i*37%700))
	b := min(size-a, int64(i%3*100))
	return append(dst, Member{"jpg", a}, Member{"txt", b}, Member{"seg.png", size - a - b})
}

func (c recordCatalog) Labelled() bool { return c.labelled }

// A batch tar holds every member of each record, in the record's order,
// byte for byte, then its .cls when the dataset has a label; epoch.tar the
// same; any range reads as the same bytes as the whole.
func TestRecordTars(t *testing.T) {
	for _, labelled := range []bool{true, false} {
		rng := rand.New(rand.NewPCG(8, 1))
		tc := newTestCatalog(300, rng)
		for i := range tc.keys { // a record's key has no extension of its own
			tc.keys[i] = "rec/" + strconv.Itoa(i)
		}
		cat := recordCatalog{tc, labelled}
		st := make([]uint32, len(tc.strata))
		for i := range st {
			st[i] = uint32(tc.strata[i])
		}
		in, err := NewInput(st, 3, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		o, err := Order(in, Params{Seed: 4, World: 1, Batch: 16, Alpha: 0.5})
		if err != nil {
			t.Fatal(err)
		}
		m := NewMembers(o, cat)
		var epochNames []string
		for b := range o.Batches {
			f := m.Batch(b)
			data := render(f, 0, f.Size())
			tr := tar.NewReader(bytes.NewReader(data))
			for k, s := range o.BatchSamples(b).All() {
				stem, _ := m.Name(b*16 + k)
				whole := sampleBytes(int(s), tc.sizes[s])
				var at int64
				for _, mb := range cat.Record(nil, int(s)) {
					h, err := tr.Next()
					if err != nil {
						t.Fatal(err)
					}
					got, _ := io.ReadAll(tr)
					if h.Name != stem+"."+mb.Name || !bytes.Equal(got, whole[at:at+mb.Size]) {
						t.Fatalf("labelled %v batch %d record %d: member %q (%d bytes), want %q (%d bytes of the record at %d)", labelled, b, s, h.Name, len(got), stem+"."+mb.Name, mb.Size, at)
					}
					epochNames = append(epochNames, h.Name)
					at += mb.Size
				}
				if labelled {
					h, err := tr.Next()
					if err != nil {
						t.Fatal(err)
					}
					got, _ := io.ReadAll(tr)
					if h.Name != stem+".cls" || string(got) != strconv.Itoa(testClassOf[tc.strata[s]]) {
						t.Fatalf("record %d: %q = %q, want its class", s, h.Name, got)
					}
					epochNames = append(epochNames, h.Name)
				}
			}
			if _, err := tr.Next(); err != io.EOF {
				t.Fatalf("batch %d: a member past the records, or %v", b, err)
			}
			for range 20 {
				off := rng.Int64N(f.Size())
				n := 1 + rng.Int64N(f.Size()-off)
				if got := render(f, off, n); !bytes.Equal(got, data[off:off+n]) {
					t.Fatalf("batch %d: [%d, +%d) differs from the whole file's bytes", b, off, n)
				}
			}
		}
		tr := tar.NewReader(bytes.NewReader(render(m.Epoch(), 0, m.Epoch().Size())))
		for k, want := range epochNames {
			h, err := tr.Next()
			if err != nil || h.Name != want {
				t.Fatalf("epoch.tar member %d: %v %v, want %q", k, h, err, want)
			}
		}
		if _, err := tr.Next(); err != io.EOF {
			t.Fatalf("epoch.tar: a member past the records, or %v", err)
		}
	}
}
