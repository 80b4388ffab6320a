package layout

import (
	"math/big"
	"math/rand/v2"
	"sort"
	"testing"
)

// TestControlledRoundingBounds: for random strata of 1 to 4 fields and
// random counts, every stratum, every set of both families and every
// single field's value sum within [⌊x⌋, ⌈x⌉] of its share for the first
// two fields, and the whole exact.
func TestControlledRoundingBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 3000 {
		k := 1 + rng.IntN(4)
		n := 1 + rng.IntN(60)
		var values [][]uint32
		seen := map[string]bool{}
		for tries := 0; len(values) < n && tries < 500; tries++ {
			v := make([]uint32, k)
			for j := range v {
				v[j] = uint32(rng.IntN(2 + rng.IntN(5)))
			}
			if key := string(fmtValues(v)); !seen[key] {
				seen[key] = true
				values = append(values, v)
			}
		}
		n = len(values)
		f := newFamilies(values)
		w := make([]int64, n)
		var sum int64
		for i := range w {
			if rng.IntN(5) > 0 {
				w[i] = int64(rng.IntN(1 + rng.IntN(1000)))
			}
			sum += w[i]
		}
		if sum == 0 {
			w[0], sum = 1, 1
		}
		var num, den int64
		if trial%2 == 0 { // apportionment: total·w/Σw
			num, den = int64(1+rng.IntN(5000)), sum
		} else { // a split: w·mL/m, Σw a multiple of m
			m := int64(2 + rng.IntN(40))
			w[0] += (m - sum%m) % m
			sum += (m - sum%m) % m
			num, den = int64(1+rng.IntN(int(m-1))), m
		}
		y := f.round(w, num, den)
		check := func(what string, members func(i int) bool) {
			var tw, ty int64
			for i := range w {
				if members(i) {
					tw += w[i]
					ty += y[i]
				}
			}
			x := new(big.Rat).SetFrac64(tw*num, den)
			lo := new(big.Int).Quo(x.Num(), x.Denom()).Int64()
			hi := lo
			if !x.IsInt() {
				hi++
			}
			if ty < lo || ty > hi {
				t.Fatalf("trial %d (k %d, n %d, ×%d/%d): %s rounds to %d, share %s", trial, k, n, num, den, what, ty, x.FloatString(3))
			}
		}
		check("the whole", func(int) bool { return true })
		for i := range w {
			check("stratum", func(j int) bool { return j == i })
			for j := 1; j < k; j++ {
				check("an A prefix", func(o int) bool { return samePrefix(values[o], values[i], 0, j) })
				check("a B prefix", func(o int) bool { return samePrefix(values[o], values[i], 1, j+1) })
			}
			if k >= 2 {
				check("field 2", func(o int) bool { return values[o][1] == values[i][1] })
			}
		}
	}
}

func samePrefix(a, b []uint32, from, to int) bool {
	for j := from; j < to; j++ {
		if a[j] != b[j] {
			return false
		}
	}
	return true
}

func fmtValues(v []uint32) []byte {
	var out []byte
	for _, x := range v {
		out = append(out, byte(x), ',')
	}
	return out
}

// TestDealSearchAgrees: the deal's one-walk search for the batch holding
// a stratum's k-th draw (the seam's) finds what a search over the batches
// finds, and at's extras add up to each stratum's, one at most a batch.
func TestDealSearchAgrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := range 40 {
		strata := 2 + rng.IntN(60)
		m := 1 + rng.IntN(300)
		values := make([][]uint32, strata)
		r := make([]int, strata)
		q := make([]int, strata)
		for c := range values {
			values[c] = []uint32{uint32(rng.IntN(4)), uint32(rng.IntN(3)), uint32(c)}
			r[c] = rng.IntN(m)
			q[c] = rng.IntN(3)
		}
		// Every batch the same number of extras: top up the last stratum.
		sum := 0
		for _, x := range r {
			sum += x
		}
		for sum%m != 0 {
			c := rng.IntN(strata)
			if r[c] < m-1 {
				r[c]++
				sum++
			}
		}
		in := &Input{NumStrata: strata, fields: values}
		d := newExtrasDeal(in, r, m, rand.New(rand.NewPCG(uint64(trial), 1)), uint64(trial))
		got := make([]int, strata)
		for b := range m {
			for c := range strata {
				if d.hasExtra(b, c) {
					got[c]++
				}
				if x := d.extrasBefore(b, c); x != got[c]-btoi(d.hasExtra(b, c)) {
					t.Fatalf("trial %d: stratum %d has %d extras before batch %d, counted %d", trial, c, x, b, got[c]-btoi(d.hasExtra(b, c)))
				}
			}
		}
		for c := range strata {
			if got[c] != r[c] {
				t.Fatalf("trial %d: stratum %d dealt %d extras of %d", trial, c, got[c], r[c])
			}
			first := func(b int) int { return b*q[c] + d.extrasBefore(b, c) }
			for range 5 {
				k := rng.IntN(m*q[c] + r[c] + 1)
				want := sort.Search(m, func(b int) bool { return first(b) > k }) - 1
				if b := d.lastBatchFrom(c, int64(q[c]), int64(k)); b != want {
					t.Fatalf("trial %d (m %d, memo %d): stratum %d (q %d, r %d, item %d)'s draw %d: the walk finds batch %d, the search %d", trial, m, d.memoDepth, c, q[c], r[c], d.itemOf[c], k, b, want)
				}
			}
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
