package layout

import (
	"math"
	"testing"
)

// A keyed Feistel permutation is a bijection of [0, n) for every n, and
// differs between keys.
func TestFeistelIsABijection(t *testing.T) {
	sizes := []uint64{0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 64, 65, 100, 255, 256, 257, 1000, 1023, 1025, 4097, 65537, 100_003}
	for _, n := range sizes {
		for key := uint64(0); key < 3; key++ {
			f := newFeistel(n, key)
			seen := make([]bool, n)
			for i := uint64(0); i < n; i++ {
				j := f.at(i)
				if j >= n || seen[j] {
					t.Fatalf("n=%d key=%d: %d -> %d, out of range or taken twice", n, key, i, j)
				}
				seen[j] = true
			}
		}
		if n >= 8 {
			a, b := newFeistel(n, 1), newFeistel(n, 2)
			same := 0
			for i := uint64(0); i < n; i++ {
				if a.at(i) == b.at(i) {
					same++
				}
			}
			if same == int(n) {
				t.Fatalf("n=%d: keys 1 and 2 give the same permutation", n)
			}
		}
	}
}

// Over many keys, each element lands at each position about equally often,
// as in a uniform shuffle (a fixed set of keys, so the result is fixed).
func TestFeistelSpreadsEvenly(t *testing.T) {
	for _, n := range []uint64{5, 37, 1025} {
		keys := uint64(40_000)
		if n > 100 {
			keys = 8 * n
		}
		count := make([][]int, n)
		for i := range count {
			count[i] = make([]int, n)
		}
		for key := uint64(0); key < keys; key++ {
			f := newFeistel(n, key)
			for i := uint64(0); i < n; i++ {
				count[i][f.at(i)]++
			}
		}
		// Pearson's chi-square over the n×n table against a uniform
		// shuffle: (n-1)² degrees of freedom; fail beyond mean + 5 sd.
		want := float64(keys) / float64(n)
		chi := 0.0
		for i := range count {
			for _, c := range count[i] {
				chi += (float64(c) - want) * (float64(c) - want) / want
			}
		}
		df := float64((n - 1) * (n - 1))
		if limit := df + 5*math.Sqrt(2*df); chi > limit {
			t.Errorf("n=%d: chi-square %.0f over %d keys, a uniform shuffle stays under %.0f", n, chi, keys, limit)
		}
	}
}

func BenchmarkFeistel(b *testing.B) {
	f := newFeistel(1_000_000_007, 42)
	b.ReportAllocs()
	var s uint64
	for i := 0; i < b.N; i++ {
		s += f.at(uint64(i) % 1_000_000_007)
	}
	_ = s
}
