package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// synthetic builds a finished manifest of n samples in nStrata strata.
func synthetic(n, nStrata, perShard int, seed uint64) *Manifest {
	rng := rand.New(rand.NewPCG(seed, 7))
	m := &Manifest{Header: Header{Name: "synthetic", IngestID: "ing1", CreatedUnix: 1700000000, Seed: seed,
		Data: 4, Parity: 2, BlockSize: 64 << 10, ShardSize: 64 << 20,
		Stores: []string{"s0", "s1", "s2", "s3", "s4", "s5"}, LabelFields: []string{"label"}}}
	for i := 0; i < nStrata; i++ {
		name := fmt.Sprintf("class%04d", i)
		m.Strata = append(m.Strata, Stratum{Name: name, Labels: []string{name}})
	}
	nShards := (n + perShard - 1) / perShard
	m.Shards = make([]Shard, nShards)
	for i := 0; i < n; i++ {
		st := uint32(rng.IntN(nStrata))
		m.Samples.Append(fmt.Sprintf("class%04d/img_%09d.jpg", st, i), st, uint32(i/perShard),
			uint32(50_000+rng.IntN(100_000)), rng.Uint32())
	}
	if err := m.Finish(); err != nil {
		panic(err)
	}
	for i := range m.Shards {
		m.Shards[i].Sums = make([]uint32, (m.Data+m.Parity)*m.Blocks(i))
		for j := range m.Shards[i].Sums {
			m.Shards[i].Sums[j] = rng.Uint32()
		}
	}
	return m
}

func equal(t *testing.T, a, b *Manifest) {
	t.Helper()
	if fmt.Sprint(a.Name, a.IngestID, a.CreatedUnix, a.Seed, a.Data, a.Parity, a.BlockSize, a.ShardSize, a.Stores, a.LabelFields, a.Strata) !=
		fmt.Sprint(b.Name, b.IngestID, b.CreatedUnix, b.Seed, b.Data, b.Parity, b.BlockSize, b.ShardSize, b.Stores, b.LabelFields, b.Strata) {
		t.Fatalf("headers differ")
	}
	if fmt.Sprint(a.Shards) != fmt.Sprint(b.Shards) {
		t.Fatalf("shards differ")
	}
	if a.Samples.Len() != b.Samples.Len() {
		t.Fatalf("%d samples vs %d", a.Samples.Len(), b.Samples.Len())
	}
	for i := 0; i < a.Samples.Len(); i++ {
		x, y := &a.Samples, &b.Samples
		if x.Key(i) != y.Key(i) || x.Stratum[i] != y.Stratum[i] || x.Shard[i] != y.Shard[i] ||
			x.Offset[i] != y.Offset[i] || x.Size[i] != y.Size[i] || x.Sum[i] != y.Sum[i] {
			t.Fatalf("sample %d differs", i)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 7, 1000} {
		m := synthetic(n, 5, 100, uint64(n))
		b, err := Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		equal(t, m, got)
		if n > 0 && got.Samples.Offset[n-1]+got.Samples.Size[n-1] != uint32(got.Shards[got.Samples.Shard[n-1]].Size) {
			t.Fatalf("last sample does not end its shard")
		}
	}
}

func TestTruncatedAndCorrupt(t *testing.T) {
	b, err := Encode(synthetic(200, 3, 50, 1))
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(b); n++ {
		if _, err := Decode(b[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d bytes: %v, want ErrCorrupt", n, err)
		}
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for i := 0; i < 2000; i++ {
		c := bytes.Clone(b)
		c[rng.IntN(len(c))] ^= 1 << rng.IntN(8)
		if _, err := Decode(c); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("bit flip %d: %v, want ErrCorrupt", i, err)
		}
	}
}

func TestValidateRejects(t *testing.T) {
	for name, mutate := range map[string]func(m *Manifest){
		"dotdot":   func(m *Manifest) { m.Samples = Samples{}; m.Samples.Append("a/../b", 0, 0, 1, 0) },
		"absolute": func(m *Manifest) { m.Samples = Samples{}; m.Samples.Append("/etc/passwd", 0, 0, 1, 0) },
		"nul":      func(m *Manifest) { m.Samples = Samples{}; m.Samples.Append("a\x00b", 0, 0, 1, 0) },
		"duplicate": func(m *Manifest) {
			m.Samples = Samples{}
			m.Samples.Append("a", 0, 0, 1, 0)
			m.Samples.Append("a", 0, 0, 1, 0)
		},
		"stratum slash": func(m *Manifest) { m.Strata[0].Name = "a/b" },
		"stores":        func(m *Manifest) { m.Stores = m.Stores[:5] },
		"sums":          func(m *Manifest) { m.Shards[0].Sums = m.Shards[0].Sums[1:] },
	} {
		m := synthetic(10, 2, 10, 3)
		mutate(m)
		if err := m.Finish(); err != nil {
			continue
		}
		b, err := Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Decode(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: decoded without error", name)
		}
	}
}

func FuzzDecode(f *testing.F) {
	b, _ := Encode(synthetic(20, 3, 5, 1))
	f.Add(b)
	b, _ = Encode(withFields(synthetic(20, 3, 5, 1)))
	f.Add(b)
	b, _ = Encode(withLineage(withFields(synthetic(20, 3, 5, 1))))
	f.Add(b)
	f.Add([]byte(magic))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode(data)
		if err == nil && m.Validate() != nil {
			t.Fatal("decoded an invalid manifest")
		}
	})
}

// FuzzDecodeBody fuzzes the body parser behind the checksums, which random
// bytes would rarely get past. Allocation is bounded by the input size.
func FuzzDecodeBody(f *testing.F) {
	m := synthetic(20, 3, 5, 1)
	b, _ := Encode(m)
	// Recover the raw body to seed the corpus.
	body, err := rawBody(b)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(body)
	b, _ = Encode(withFields(m))
	if body, err = rawBody(b); err != nil {
		f.Fatal(err)
	}
	f.Add(body)
	b, _ = Encode(withLineage(m))
	if body, err = rawBody(b); err != nil {
		f.Fatal(err)
	}
	f.Add(body)
	f.Fuzz(func(t *testing.T, data []byte) {
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		decodeBody(bytes.NewReader(data), int64(len(data)), uint32(1+len(data)%3))
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		if grew := after.TotalAlloc - before.TotalAlloc; grew > uint64(64*len(data))+8<<20 {
			t.Fatalf("decoding %d bytes allocated %d bytes", len(data), grew)
		}
	})
}

// BenchmarkManifest_10M encodes and decodes a 10,000,000-sample manifest in
// 1,000 strata (~15,600 shards of 64 MiB with 64 KiB checksum blocks). The
// decode also runs in a child process, whose peak RSS is the decode's alone.
func BenchmarkManifest_10M(b *testing.B) {
	n := 10_000_000
	if testing.Short() {
		n = 1_000_000
	}
	m := synthetic(n, 1000, 640, 1)
	var enc []byte
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var err error
			if enc, err = Encode(m); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(enc)), "bytes")
		b.ReportMetric(float64(len(enc))/float64(n), "bytes/sample")
	})
	m = nil
	runtime.GC()
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Decode(enc); err != nil {
				b.Fatal(err)
			}
		}
		name := filepath.Join(b.TempDir(), "manifest")
		if err := os.WriteFile(name, enc, 0o644); err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestDecodeChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "SHARDFS_DECODE_CHILD="+name)
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("child decode: %v\n%s", err, out)
		}
		// The child reports its own VmHWM: a forked child's rusage would count the parent.
		var kb float64
		if i := bytes.Index(out, []byte("VmHWM:")); i < 0 {
			b.Fatalf("child printed no VmHWM:\n%s", out)
		} else {
			fmt.Sscan(string(out[i+len("VmHWM:"):]), &kb)
		}
		b.ReportMetric(kb/1024, "decode-peak-RSS-MiB")
	})
}

// TestDecodeChild decodes the manifest file named by SHARDFS_DECODE_CHILD; it
// is the child process of BenchmarkManifest_10M and does nothing otherwise.
func TestDecodeChild(t *testing.T) {
	name := os.Getenv("SHARDFS_DECODE_CHILD")
	if name == "" {
		return
	}
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(b); err != nil {
		t.Fatal(err)
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range bytes.Split(status, []byte("\n")) {
		if bytes.HasPrefix(line, []byte("VmHWM:")) {
			fmt.Printf("%s\n", line)
		}
	}
}

// FuzzCheckKey: accepted keys are clean relative paths; nothing panics.
func FuzzCheckKey(f *testing.F) {
	for _, k := range []string{"a/b.jpg", "../x", "/abs", "a//b", "a/./b", "nul\x00", "\xff"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if CheckKey(key) != nil {
			return
		}
		if key == "" || strings.HasPrefix(key, "/") || strings.ContainsRune(key, 0) || !utf8.ValidString(key) {
			t.Fatalf("accepted %q", key)
		}
		for _, el := range strings.Split(key, "/") {
			if el == "" || el == "." || el == ".." {
				t.Fatalf("accepted %q with element %q", key, el)
			}
		}
	})
}

// TestRadixSortSortsEverySize: the radix sort and the comparison sort it
// uses below 65,536 values order values as slices.Sort does, on both sides
// of that size and with equal values among them.
func TestRadixSortSortsEverySize(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	for _, n := range []int{0, 1, 2, 4096, 1<<16 - 1, 1 << 16, 200_000} {
		a := make([]uint64, n)
		for i := range a {
			a[i] = rng.Uint64()
			if i%7 == 3 {
				a[i] = a[i/2] // some equal values
			}
			if i%11 == 5 {
				a[i] &= 0xffff // some with high digits zero
			}
		}
		want := slices.Clone(a)
		slices.Sort(want)
		radixSort(a)
		if !slices.Equal(a, want) {
			t.Fatalf("radixSort of %d values: not in order", n)
		}
	}
}

// TestDuplicateKeyFindsTheRepeatedKey: a key given twice is named, among
// few keys and among more than the radix sort's threshold.
func TestDuplicateKeyFindsTheRepeatedKey(t *testing.T) {
	for _, n := range []int{3, 70_000} {
		var s Samples
		for i := range n {
			s.Append(fmt.Sprintf("k%07d", i), 0, 0, 1, 0)
		}
		if got := s.DuplicateKey(); got != "" {
			t.Errorf("%d unique keys: DuplicateKey = %q, want none", n, got)
		}
		s.Append(fmt.Sprintf("k%07d", n/2), 0, 0, 1, 0)
		if got, want := s.DuplicateKey(), fmt.Sprintf("k%07d", n/2); got != want {
			t.Errorf("%d keys and one again: DuplicateKey = %q, want %q", n, got, want)
		}
	}
}
