package layout_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/shardfs/shardfs/layout"
)

type keyCatalog []string

func (c keyCatalog) Key(i int) string         { return c[i] }
func (c keyCatalog) Size(i int) int64         { return int64(10 + i%7) }
func (c keyCatalog) Stratum(i int) int        { return i % 3 }
func (c keyCatalog) StratumName(s int) string { return fmt.Sprint("c", s) }
func (c keyCatalog) Class(s int) int          { return s }

// memberNames checks that no two members share a name and that every stem
// has exactly one payload and one .cls label, and returns the member count.
func memberNames(t *testing.T, m *layout.Members) int {
	t.Helper()
	seen := map[string]bool{}
	payloads := map[string]int{}
	for i := 0; i < m.Len(); i++ {
		stem, ext := m.Name(i)
		if ext == "cls" {
			t.Fatalf("member %d: payload extension %q collides with the label member", i, ext)
		}
		for _, name := range []string{stem + "." + ext, stem + ".cls"} {
			if seen[name] {
				t.Fatalf("member %d: name %q used twice", i, name)
			}
			seen[name] = true
		}
		payloads[stem]++
	}
	for stem, n := range payloads {
		if n != 1 {
			t.Fatalf("stem %q has %d payloads", stem, n)
		}
	}
	return len(seen)
}

func orderOf(samples []int32) *layout.RankOrder {
	o := &layout.RankOrder{Params: layout.Params{Batch: len(samples), World: 1}, Batches: 1}
	for _, s := range samples {
		o.Samples.Append(int64(s))
	}
	return o
}

// Issue 9 item 12: a sample named y.cls must not produce a second y.cls member.
func TestTarNamesClsKey(t *testing.T) {
	cat := keyCatalog{"c0/y.cls", "c0/y.jpg", "c0/y", "c0/y.CLS", "c0/z.cls.cls"}
	m := layout.NewMembers(orderOf([]int32{0, 1, 2, 3, 4, 0}), cat)
	if n := memberNames(t, m); n != 12 {
		t.Fatalf("%d distinct names, want 12", n)
	}
}

// Issue 9 item 13: the repeat counter of a recycled sample must not wrap.
func TestTarNamesManyRepeats(t *testing.T) {
	const n = 70_000
	samples := make([]int32, n)
	samples[n-1] = 1
	m := layout.NewMembers(orderOf(samples), keyCatalog{"c0/" + strings.Repeat("k", 90) + ".jpg", "c1/b.jpg"})
	if got := memberNames(t, m); got != 2*n {
		t.Fatalf("%d distinct names, want %d", got, 2*n)
	}
	for i := 0; i < n; i++ {
		stem, ext := m.Name(i)
		if len(stem)+1+len(ext) > 100 || len(stem)+4 > 100 {
			t.Fatalf("member %d: name %q.%s does not fit a ustar name", i, stem, ext)
		}
	}
}
