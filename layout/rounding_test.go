package layout

import (
	"math/big"
	"math/rand/v2"
	"slices"
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

// TestDealReusedRangesAgree: a batch's extras come from the deepest range
// the last batch's walk left (extrasDeal.batch), not from a walk of its
// own. In any order of batches asked (ascending as ranks read them, with
// strides, and at random), they equal a fresh walk's, item for item,
// with the extras before the batch.
func TestDealReusedRangesAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for trial := range 30 {
		strata := 2 + rng.IntN(80)
		m := 1 + rng.IntN(2000)
		values := make([][]uint32, strata)
		r := make([]int, strata)
		for c := range values {
			values[c] = []uint32{uint32(rng.IntN(5)), uint32(rng.IntN(4)), uint32(c)}
			r[c] = rng.IntN(m)
		}
		// Every batch the same number of extras, as the cycle deals them.
		sum := 0
		for _, x := range r {
			sum += x
		}
		for sum%m != 0 {
			if c := rng.IntN(strata); r[c] > 0 {
				r[c]--
				sum--
			}
		}
		in := &Input{NumStrata: strata, fields: values}
		seed := uint64(trial)
		d := newExtrasDeal(in, r, m, rand.New(rand.NewPCG(seed, 1)), seed)
		fresh := newExtrasDeal(in, r, m, rand.New(rand.NewPCG(seed, 1)), seed)
		fresh.memoDepth = 0 // no kept ranges either: every split computed anew
		// Small trees are kept whole; keep a few levels only, so that
		// most of each walk is below them.
		d.memoDepth = rng.IntN(4)
		var asks []int
		stride := 1 + rng.IntN(70)
		for b := rng.IntN(stride); b < m; b += stride {
			asks = append(asks, b)
		}
		for range 50 {
			asks = append(asks, rng.IntN(m))
		}
		for _, b := range asks {
			has, before := d.at(b)
			prev := make([]int64, len(fresh.items))
			_, idx, x := fresh.walk(prev, func(_, mid int, _ []int32, _, _ []int64) bool { return b >= mid })
			want := make([]int64, len(fresh.items))
			for i, j := range idx {
				want[j] = x[i]
			}
			if !slices.Equal(has, want) || !slices.Equal(before, prev) {
				t.Fatalf("trial %d (%d strata, %d batches, stride %d), batch %d: extras %v before %v, a fresh walk gives %v before %v", trial, strata, m, stride, b, has, before, want, prev)
			}
		}
	}
}

// onePathAtATime is the max flow push found before it sent many paths in
// one walk: one augmenting path per walk from the source. It is the
// reference TestBlockingFlowAsOnePathAtATime holds push to.
func (g *flowNet) onePathAtATime(s, t int) int64 {
	total := int64(0)
	for {
		for i := range g.level {
			g.level[i] = -1
		}
		g.level[s] = 0
		queue := []int32{int32(s)}
		for q := 0; q < len(queue); q++ {
			u := queue[q]
			for e := g.head[u]; e >= 0; e = g.next[e] {
				if v := g.to[e]; g.capa[e] > 0 && g.level[v] < 0 {
					g.level[v] = g.level[u] + 1
					queue = append(queue, v)
				}
			}
		}
		if g.level[t] < 0 {
			return total
		}
		copy(g.cur, g.head)
		var path func(u int32, limit int64) int64
		path = func(u int32, limit int64) int64 {
			if u == int32(t) {
				return limit
			}
			for ; g.cur[u] >= 0; g.cur[u] = g.next[g.cur[u]] {
				e := g.cur[u]
				v := g.to[e]
				if g.capa[e] <= 0 || g.level[v] != g.level[u]+1 {
					continue
				}
				if f := path(v, min(limit, g.capa[e])); f > 0 {
					g.capa[e] -= f
					g.capa[e^1] += f
					return f
				}
			}
			return 0
		}
		for {
			f := path(int32(s), 1<<62)
			if f == 0 {
				break
			}
			total += f
		}
	}
}

// TestBlockingFlowAsOnePathAtATime: order version 5's roundings are the
// max flows this network finds, so the flow on every arc is part of the
// order's contract. maxFlow (BFS stopped at the sink's level, many paths
// a walk) must find, arc for arc, the flow that one path a walk from the
// source, with every node levelled, finds. Random layered and unlayered
// networks, unit and larger capacities.
func TestBlockingFlowAsOnePathAtATime(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for trial := range 3000 {
		nodes := 2 + rng.IntN(40)
		arcs := rng.IntN(nodes * 4)
		type arc struct {
			u, v int
			c    int64
		}
		var list []arc
		for range arcs {
			u, v := rng.IntN(nodes), rng.IntN(nodes)
			if u == v {
				continue
			}
			c := int64(1)
			if rng.IntN(3) == 0 {
				c = 1 + rng.Int64N(5)
			}
			list = append(list, arc{u, v, c})
		}
		var a, b flowNet
		a.reset(nodes)
		b.reset(nodes)
		for _, x := range list {
			a.arc(x.u, x.v, x.c)
			b.arc(x.u, x.v, x.c)
		}
		s, sink := 0, nodes-1
		fa, fb := a.maxFlow(s, sink), b.onePathAtATime(s, sink)
		if fa != fb || !slices.Equal(a.capa, b.capa) {
			t.Fatalf("trial %d (%d nodes, %d arcs): flow %d, arcs %v; one path at a time: %d, arcs %v", trial, nodes, len(list), fa, a.capa, fb, b.capa)
		}
	}
}
