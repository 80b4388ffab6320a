package layout

import (
	"fmt"
	"math/bits"
	"slices"
)

// Controlled rounding over two laminar families (order version 5).
//
// The order must split integer counts into parts (slots into strata, a
// range of batches' extras into its two halves) so that every part is
// within one of its share, not only each stratum's but each field's: the
// samples of label "cat", of source "web", of label "cat" from "web". A
// stratum is a tuple of field values (f1, ..., fk), and the sets whose
// sums must round well come in two laminar families:
//
//	A: (f1), (f1,f2), ..., (f1..fk-1)   prefixes of the tuple
//	B: (f2), (f2,f3), ..., (f2..fk)     prefixes of the tuple without f1
//
// Each family is a tree over the strata, so the incidence matrix of A ∪ B
// (with the strata themselves and the whole) is totally unimodular: it is
// the arc-path matrix of the network
//
//	root_A → A-sets, down their tree → stratum arcs (f1..fk-1) → (f2..fk)
//	→ B-sets, up their tree → root_B → root_A (the whole)
//
// where every set is one arc and carries the sum of its strata. Given real
// shares x (here x_c = t_c·num/den), the flow with x on every arc is
// feasible with arc bounds [⌊x_e⌋, ⌈x_e⌉]; integer bounds with a feasible
// real flow have an integer feasible flow (Hoffman's circulation theorem,
// integrality of network flows). So there is an integer y with every
// stratum, every set of A and B, and the whole within [⌊x⌋, ⌈x⌉] of its
// share, and a max flow finds one: that is the rounding below. Three
// families (f3's marginal besides f1's and f2's) have no such guarantee in
// general (Cox 1987: three-way tables need not have a controlled rounding),
// which is why two fields are exact and the rest bounded (marginal.go).
//
// The whole's share must be an integer (the caller's total), so the whole
// is kept exactly.

// families are the two laminar families of a set of strata, as two trees
// of nodes: node 0 of each is its root (every stratum), and every other
// node has a parent with a smaller number.
type families struct {
	aParent, bParent []int // per node: its parent (root: -1)
	leafA, leafB     []int // per item: its deepest node in A and in B
}

// newFamilies builds the families of items whose field values are
// values[i] (k fields each, the same k for all).
func newFamilies(values [][]uint32) *families {
	a, b := &tree{parent: []int{-1}, nodes: map[treeKey]int{}}, &tree{parent: []int{-1}, nodes: map[treeKey]int{}}
	f := &families{leafA: make([]int, len(values)), leafB: make([]int, len(values))}
	// Node numbers follow the items' order, so the network (and so the
	// rounding) is the same on every machine.
	for i, v := range values {
		if len(v) > 0 {
			f.leafA[i] = a.path(v[:len(v)-1]) // A: prefixes of f1..fk-1
			f.leafB[i] = b.path(v[1:])        // B: prefixes of f2..fk
		}
	}
	f.aParent, f.bParent = a.parent, b.parent
	return f
}

// tree is one family being built: a node per distinct prefix.
type tree struct {
	parent []int
	nodes  map[treeKey]int
}

type treeKey struct {
	parent int
	value  uint32
}

// path adds the prefixes of values and returns the node of the longest.
func (t *tree) path(values []uint32) int {
	node := 0
	for _, v := range values {
		k := treeKey{node, v}
		n, ok := t.nodes[k]
		if !ok {
			n = len(t.parent)
			t.parent = append(t.parent, node)
			t.nodes[k] = n
		}
		node = n
	}
	return node
}

// share is ⌊t·num/den⌋ and whether t·num/den is an integer (den > 0,
// t·num/den < 2^63).
func share(t, num, den int64) (floor int64, whole bool) {
	hi, lo := bits.Mul64(uint64(t), uint64(num))
	q, r := bits.Div64(hi, lo, uint64(den))
	return int64(q), r == 0
}

// round returns y with y_i within [⌊x_i⌋, ⌈x_i⌉] for x_i = t_i·num/den,
// every set of both families within the same bounds of its share, and
// Σy = Σx, which must be an integer. t_i ≥ 0, num ≥ 0, den > 0, and
// every share below 2^63.
func (f *families) round(t []int64, num, den int64) []int64 {
	idx := make([]int32, len(t))
	for i := range idx {
		idx[i] = int32(i)
	}
	return f.roundSome(idx, t, num, den, newRoundScratch(f))
}

// roundScratch is what roundSome reuses from call to call: per node of
// each family its sum and its number in the network (-1: none yet).
type roundScratch struct {
	sumA, sumB     []int64
	netA, netB     []int32
	touchA, touchB []int32
	net            flowNet
	excess         []int64
	items          []int
}

func newRoundScratch(f *families) *roundScratch {
	s := &roundScratch{sumA: make([]int64, len(f.aParent)), sumB: make([]int64, len(f.bParent)),
		netA: make([]int32, len(f.aParent)), netB: make([]int32, len(f.bParent))}
	for i := range s.netA {
		s.netA[i] = -1
	}
	for i := range s.netB {
		s.netB[i] = -1
	}
	return s
}

// roundSome is round over the items idx only (t[i] is item idx[i]'s),
// the others taken as 0: its work grows with the items given and their
// sets, not with the families.
func (f *families) roundSome(idx []int32, t []int64, num, den int64, s *roundScratch) []int64 {
	if len(t) == 0 {
		return nil
	}
	// The sets the items reach, and their sums: each item adds itself to
	// its chain of ancestors in both trees.
	s.touchA, s.touchB = s.touchA[:0], s.touchB[:0]
	var total0 int64
	for i, x := range t {
		total0 += x
		for n := f.leafA[idx[i]]; n >= 0; n = f.aParent[n] {
			if s.netA[n] < 0 {
				s.netA[n] = 0
				s.touchA = append(s.touchA, int32(n))
			}
			s.sumA[n] += x
		}
		for n := f.leafB[idx[i]]; n >= 0; n = f.bParent[n] {
			if s.netB[n] < 0 {
				s.netB[n] = 0
				s.touchB = append(s.touchB, int32(n))
			}
			s.sumB[n] += x
		}
	}
	defer func() {
		for _, n := range s.touchA {
			s.sumA[n], s.netA[n] = 0, -1
		}
		for _, n := range s.touchB {
			s.sumB[n], s.netB[n] = 0, -1
		}
	}()
	total, whole := share(total0, num, den)
	if !whole {
		panic(fmt.Sprintf("layout: rounding a total of %d·%d/%d, not an integer", total0, num, den))
	}
	// Network nodes: the touched A nodes, then the touched B nodes, in
	// the order first touched (the items' order: the same everywhere),
	// then the super source and sink of the lower-bound reduction.
	nodes := 0
	for _, n := range s.touchA {
		s.netA[n] = int32(nodes)
		nodes++
	}
	for _, n := range s.touchB {
		s.netB[n] = int32(nodes)
		nodes++
	}
	g := &s.net
	g.reset(nodes + 2)
	s.excess = slices.Grow(s.excess[:0], nodes)[:nodes]
	clear(s.excess)
	excess := s.excess
	bounded := func(from, to int32, x int64) int {
		lo, whole := share(x, num, den)
		excess[to] += lo
		excess[from] -= lo
		if whole {
			return -1
		}
		return g.arc(int(from), int(to), 1)
	}
	for _, n := range s.touchA {
		if n != 0 {
			bounded(s.netA[f.aParent[n]], s.netA[n], s.sumA[n])
		}
	}
	s.items = s.items[:0]
	for i, x := range t {
		s.items = append(s.items, bounded(s.netA[f.leafA[idx[i]]], s.netB[f.leafB[idx[i]]], x))
	}
	for _, n := range s.touchB {
		if n != 0 {
			bounded(s.netB[n], s.netB[f.bParent[n]], s.sumB[n])
		}
	}
	// The whole, exactly: root_B → root_A carries total.
	excess[s.netA[0]] += total
	excess[s.netB[0]] -= total
	src, sink := nodes, nodes+1
	need := int64(0)
	for n, e := range excess {
		switch {
		case e > 0:
			g.arc(src, n, e)
			need += e
		case e < 0:
			g.arc(n, sink, -e)
		}
	}
	if got := g.maxFlow(src, sink); got != need {
		// Unreachable (the theorem above); a bug if it happens.
		panic(fmt.Sprintf("layout: controlled rounding found %d of %d units", got, need))
	}
	y := make([]int64, len(t))
	for i, x := range t {
		y[i], _ = share(x, num, den)
		if e := s.items[i]; e >= 0 {
			y[i] += g.flow(e)
		}
	}
	return y
}

// flowNet is a max-flow network (Dinic's algorithm), deterministic: arcs
// are tried in the order they were added.
type flowNet struct {
	head       []int32 // per node: first arc, -1 none
	next, to   []int32
	capa       []int64
	level, cur []int32
}

// reset empties g to nodes nodes and no arcs, keeping its memory.
func (g *flowNet) reset(nodes int) {
	g.head = slices.Grow(g.head[:0], nodes)[:nodes]
	g.level = slices.Grow(g.level[:0], nodes)[:nodes]
	g.cur = slices.Grow(g.cur[:0], nodes)[:nodes]
	for i := range g.head {
		g.head[i] = -1
	}
	g.next, g.to, g.capa = g.next[:0], g.to[:0], g.capa[:0]
}

// arc adds u→v of capacity c and returns its number.
func (g *flowNet) arc(u, v int, c int64) int {
	e := len(g.to)
	g.to = append(g.to, int32(v), int32(u))
	g.capa = append(g.capa, c, 0)
	g.next = append(g.next, g.head[u], g.head[v])
	g.head[u], g.head[v] = int32(e), int32(e+1)
	return e
}

// flow is the flow on arc e (its reverse arc's residual capacity).
func (g *flowNet) flow(e int) int64 { return g.capa[e^1] }

func (g *flowNet) maxFlow(s, t int) int64 {
	total := int64(0)
	queue := make([]int32, 0, len(g.head))
	for {
		for i := range g.level {
			g.level[i] = -1
		}
		g.level[s] = 0
		queue = append(queue[:0], int32(s))
		for q := 0; q < len(queue); q++ {
			u := queue[q]
			if g.level[t] >= 0 && g.level[u] >= g.level[t] {
				// Past t's level: nothing further is on a shortest path to
				// t, and push never reaches it (same augmenting paths,
				// found sooner).
				break
			}
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
		for {
			f := g.push(int32(s), int32(t), 1<<62)
			if f == 0 {
				break
			}
			total += f
		}
	}
}

// push sends up to limit units from u to t along level-increasing arcs,
// as many as it can: a blocking flow's augmenting paths, in the order
// that asking for one path at a time from the source would find them
// (an arc that carried some is asked again before the next: it may
// carry more, or be full, or lead nowhere now), with their flows, so the
// max flow it finds is that one's, without walking each path's start
// again for every unit.
// Its recursion is as deep as the level graph, at most the nodes.
func (g *flowNet) push(u, t int32, limit int64) int64 {
	if u == t {
		return limit
	}
	pushed := int64(0)
	for g.cur[u] >= 0 {
		e := g.cur[u]
		if v := g.to[e]; g.capa[e] > 0 && g.level[v] == g.level[u]+1 {
			if f := g.push(v, t, min(limit-pushed, g.capa[e])); f > 0 {
				g.capa[e] -= f
				g.capa[e^1] += f
				if pushed += f; pushed == limit {
					return pushed
				}
				continue
			}
		}
		g.cur[u] = g.next[e]
	}
	return pushed
}
