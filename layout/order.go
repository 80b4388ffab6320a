package layout

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sort"
)

// OrderVersion is the version of the order construction that Params.Version
// 0 selects (see the package documentation). Bump it with every change to
// the order, and keep computing the old versions: a running job pins its
// version so that an upgrade never changes its order.
const OrderVersion = 6

// MinOrderVersion is the oldest order version this build computes.
const MinOrderVersion = 1

// Tail says what happens to the samples that do not fill a last step.
type Tail int

const (
	// Drop leaves out the tail: every sample at most once per epoch.
	Drop Tail = iota
	// Pad fills the tail by recycling: every sample at least once per epoch.
	Pad
)

func (t Tail) String() string {
	if t == Pad {
		return "pad"
	}
	return "drop"
}

// ParseTail parses "drop" or "pad".
func ParseTail(s string) (Tail, error) {
	switch s {
	case "drop":
		return Drop, nil
	case "pad":
		return Pad, nil
	}
	return Drop, fmt.Errorf("tail policy %q: use drop or pad", s)
}

// Params are the order parameters of one rank-epoch.
type Params struct {
	Seed      uint64
	Epoch     int
	World     int // W
	Rank      int // r, 0 <= r < W
	Batch     int // B
	Alpha     float64
	Tail      Tail
	EpochSize int // samples per epoch before the tail policy; 0 means N
	Window    int // shards per window; 0 means a global shuffle
	// Affinity gives each rank a fixed set of shards, the same in every
	// epoch (see affinity.go); the order within them changes every epoch.
	Affinity bool
	// Skip is how many batches of this epoch's global stream G were already
	// consumed (an elastic resume): the ranks deal G from batch Skip on.
	Skip int
	// Mix weights the datasets (Input.SetGroups) whose samples the order
	// mixes; nil for one dataset (see mix.go).
	Mix []float64
	// Weights, per stratum, multiply n_c^α in the targets: π_c ∝ n_c^α·w_c
	// (recency.go). A stratum of weight 0 is left out of the epoch, and the
	// epoch size defaults to the samples of the others. nil: every weight 1.
	Weights []float64
	// MinShare, when above 0, is the least share of every epoch's samples
	// each stratum with samples gets: the targets below it are raised to
	// it and the others scaled down in proportion (WithMinShare). At most
	// 1/(strata with samples); the global order only.
	MinShare float64
	// Version is the order construction; 0 means OrderVersion.
	Version int
}

// OrderVersion is the construction p selects.
func (p Params) OrderVersion() int {
	if p.Version == 0 {
		return OrderVersion
	}
	return p.Version
}

// Validate explains what is wrong with p.
func (p Params) Validate() error {
	switch {
	case p.Version != 0 && (p.Version < MinOrderVersion || p.Version > OrderVersion):
		return specErr(OptOrderVersion, "{%s} %d: this shardfs computes versions %d to %d: use a shardfs release that computes it", OptOrderVersion, p.Version, MinOrderVersion, OrderVersion)
	case p.World < 1:
		return specErr(OptWorld, "{%s} %d: must be at least 1", OptWorld, p.World)
	case p.Rank < 0 || p.Rank >= p.World:
		return fmt.Errorf("rank %d: must be in 0..%d for world size %d", p.Rank, p.World-1, p.World)
	case p.Batch < 1:
		return specErr(OptBatch, "{%s} %d: must be at least 1", OptBatch, p.Batch)
	case p.Alpha < 0 || math.IsNaN(p.Alpha) || math.IsInf(p.Alpha, 0):
		return specErr(OptAlpha, "{%s} %v: must be a finite number >= 0 (1 = proportional, 0 = balanced)", OptAlpha, p.Alpha)
	case p.EpochSize < 0 || p.EpochSize > maxSamples:
		return specErr(OptEpochSize, "epoch size %d: must be in 0..%d", p.EpochSize, int64(maxSamples))
	case p.Window < 0:
		return specErr(OptWindow, "{%s} %d: must be >= 0 (0 = global shuffle)", OptWindow, p.Window)
	case p.MinShare < 0 || p.MinShare >= 1 || math.IsNaN(p.MinShare):
		return specErr(OptMinShare, "{%s} %v: must be in [0, 1): the least share of an epoch every stratum gets", OptMinShare, p.MinShare)
	case p.Epoch < 0:
		return fmt.Errorf("epoch %d: must be >= 0", p.Epoch)
	case p.Skip < 0:
		return fmt.Errorf("resume at global batch %d: must be >= 0", p.Skip)
	case slices.ContainsFunc(p.Weights, func(w float64) bool { return !(w >= 0) || math.IsInf(w, 0) }):
		return errors.New("stratum weights must be finite numbers >= 0")
	}
	return broken(paramsRules, p.features(), nil)
}

// Input is the part of a manifest the order depends on. Build it once with
// NewInput and share it: it is read-only.
type Input struct {
	Stratum   []uint32 // per sample
	NumStrata int
	Shard     []uint32 // per sample (window mode)
	NumShards int
	Group     []int // per stratum: its dataset, when several are mixed (SetGroups)
	NumGroups int

	members      [][]int32                              // sample indexes per stratum, ascending
	shardMembers [][]int32                              // sample indexes per shard, ascending
	counted      counts                                 // instead of the per-sample columns: see NewCountInput
	shardRuns    func(lo, hi int64) ([]ShardRun, error) // a counts-only input's shards, for affinity (SetShardRuns)
	segments     []int64                                // first samples of segments after the first (SetSegments)
	fields       [][]uint32                             // per stratum: its field values (SetFields)
}

// NewInput indexes the samples' strata and shards.
func NewInput(stratum []uint32, numStrata int, shard []uint32, numShards int) (*Input, error) {
	if shard != nil && len(shard) != len(stratum) {
		return nil, fmt.Errorf("%d shard entries for %d samples", len(shard), len(stratum))
	}
	if len(stratum) > math.MaxInt32 {
		// 8 bytes a sample held per sample: past this, build the input from counts.
		return nil, fmt.Errorf("%d samples: at most %d with per-sample columns; larger datasets are described by counts (format 2 or 3)", len(stratum), math.MaxInt32)
	}
	in := &Input{Stratum: stratum, NumStrata: numStrata, Shard: shard, NumShards: numShards}
	var err error
	if in.members, err = group(stratum, numStrata, "stratum"); err != nil {
		return nil, err
	}
	if shard != nil {
		if in.shardMembers, err = group(shard, numShards, "shard"); err != nil {
			return nil, err
		}
	}
	return in, nil
}

// group lists the indexes with each value, by counting sort.
func group(of []uint32, n int, what string) ([][]int32, error) {
	counts := make([]int, n)
	for i, v := range of {
		if int(v) >= n {
			return nil, fmt.Errorf("sample %d: %s %d of %d", i, what, v, n)
		}
		counts[v]++
	}
	flat := make([]int32, len(of))
	out := make([][]int32, n)
	pos := 0
	for c, k := range counts {
		out[c] = flat[pos : pos : pos+k]
		pos += k
	}
	for i, v := range of {
		out[v] = append(out[v], int32(i))
	}
	return out, nil
}

// N is the number of samples.
func (in *Input) N() int {
	if in.counted != nil {
		return in.counted.samples()
	}
	return len(in.Stratum)
}

// Count is the number of samples in stratum c.
func (in *Input) Count(c int) int {
	if in.counted != nil {
		return in.counted.count(c)
	}
	return len(in.members[c])
}

// member is stratum c's k-th sample, members in ascending sample order.
func (in *Input) member(c, k int) int64 {
	if in.counted != nil {
		return in.counted.member(c, k)
	}
	return int64(in.members[c][k])
}

// StratumOf is sample s's stratum.
func (in *Input) StratumOf(s int64) uint32 {
	if in.counted != nil {
		return in.counted.stratumOf(s)
	}
	return in.Stratum[s]
}

// RankOrder is one rank's sequence of batches for one epoch.
type RankOrder struct {
	Params
	Batches int       // T, equal on every rank
	Samples Positions // T·B sample positions, batch after batch
}

// BatchSamples returns the sample positions of batch b.
func (o *RankOrder) BatchSamples(b int) Positions {
	return o.Samples.Slice(b*o.Params.Batch, (b+1)*o.Params.Batch)
}

// Order computes rank p.Rank's batches for epoch p.Epoch.
func Order(in *Input, p Params) (*RankOrder, error) {
	if p.Affinity {
		return affinityOrder(in, p)
	}
	e, err := newEpoch(in, p)
	if err != nil {
		return nil, err
	}
	o := &RankOrder{Params: p, Batches: e.steps}
	batch := make([]int64, 0, p.Batch)
	if steps := e.dealtOrder(); steps != nil {
		// Version 5 deals a batch's extras by a walk down halvings of the
		// cycle's batches (extrasDeal.batch), and the arrangement sends a
		// rank's steps all over the cycle. In their dealt order, each walk
		// starts where the last one left: the splits a rank's batches
		// share are computed once. Each batch goes to its step's place.
		o.Samples = SizedPositions(e.steps * p.Batch)
		for _, t := range steps {
			batch = e.batch(p.Skip+t*p.World+p.Rank, batch[:0])
			if len(batch) != p.Batch {
				return nil, fmt.Errorf("layout: batch %d of rank %d holds %d samples, not %d", t, p.Rank, len(batch), p.Batch)
			}
			for i, x := range batch {
				o.Samples.Set(t*p.Batch+i, x)
			}
		}
		return o, nil
	}
	o.Samples = MakePositions(e.steps * p.Batch)
	for t := 0; t < e.steps; t++ {
		batch = e.batch(p.Skip+t*p.World+p.Rank, batch[:0])
		o.Samples.AppendAll(batch)
	}
	return o, nil
}

// GlobalBatches returns the first n batches of G, flattened, for tests and
// tools. n may exceed M: batches past M come from the next cycle.
func GlobalBatches(in *Input, p Params, n int) ([]int64, error) {
	if p.Affinity {
		return nil, errors.New("affinity has no world-size-independent global order")
	}
	p.World, p.Rank = 1, 0
	e, err := newEpoch(in, p)
	if err != nil {
		return nil, err
	}
	var out []int64
	for g := 0; g < n; g++ {
		out = e.batch(g, out)
	}
	return out, nil
}

// Steps returns the number of batches per rank, T, without computing the order.
func Steps(in *Input, p Params) (int, error) {
	switch {
	case p.Needs() == NeedsRanges:
		return rangeSteps(in, p)
	case p.Affinity: // version-2 affinity: shards dealt whole
		a, err := newAffinity(in, p)
		if err != nil {
			return 0, err
		}
		return a.steps, nil
	}
	e, err := newEpoch(in, p)
	if err != nil {
		return 0, err
	}
	return e.steps, nil
}

// epoch builds batches of G on demand; cycles of G are built lazily.
type epoch struct {
	in     *Input
	p      Params
	m      int // batches per cycle of G
	steps  int // T
	cycles []cycle
}

// cycle is one arrangement of M batches.
type cycle interface {
	batch(j int, dst []int64) []int64
}

func newEpoch(in *Input, p Params) (*epoch, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if in.N() == 0 {
		return nil, errors.New("the dataset has no samples")
	}
	if p.Window > 0 && in.shardMembers == nil {
		return nil, errors.New("window mode needs the samples' shards")
	}
	if in.counted != nil && p.OrderVersion() < 2 {
		return nil, errors.New("order version 1 materialises every class's members: use order version 2 with counts-only input")
	}
	if err := validateMix(in, p); err != nil {
		return nil, err
	}
	if limit := max(in.N(), math.MaxInt32); p.EpochSize > limit {
		// Past the dataset's size an epoch recycles samples: an epoch size
		// of a flag's choosing must not size a rank's order without bound.
		return nil, fmt.Errorf("epoch size %d: at most %d, the dataset's samples or 2^31-1, whichever is more", p.EpochSize, limit)
	}
	l := p.EpochSize
	if p.Weights != nil {
		if len(p.Weights) != in.NumStrata {
			return nil, fmt.Errorf("%d stratum weights for %d strata", len(p.Weights), in.NumStrata)
		}
		n := weightedSamples(in, p.Weights)
		if n == 0 {
			return nil, errors.New("every stratum with samples has weight 0: the epoch holds no sample")
		}
		if l == 0 {
			l = n
		}
	}
	if l == 0 {
		l = in.N()
	}
	e := &epoch{in: in, p: p}
	if p.Tail == Drop {
		e.m = l / p.Batch
	} else {
		e.m = (l + p.Batch - 1) / p.Batch
	}
	if p.Skip > e.m {
		return nil, fmt.Errorf("resume at global batch %d: the epoch has only %d batches", p.Skip, e.m)
	}
	if p.Tail == Drop {
		e.steps = (e.m - p.Skip) / p.World
	} else {
		e.steps = (e.m - p.Skip + p.World - 1) / p.World
	}
	// In window mode each window's leftovers carry over to the next, so the
	// windows together also yield ⌊N/B⌋ (drop) or ⌈N/B⌉ (pad) batches.
	return e, nil
}

func (e *epoch) batch(g int, dst []int64) []int64 {
	if e.m == 0 {
		return dst
	}
	return e.cycle(g/e.m).batch(g%e.m, dst)
}

// cycle is cycle c of G, made when first asked for.
func (e *epoch) cycle(c int) cycle {
	for len(e.cycles) <= c {
		if e.p.Window > 0 {
			e.cycles = append(e.cycles, newWindowCycle(e.in, e.p, len(e.cycles), e.m))
		} else {
			e.cycles = append(e.cycles, newGlobalCycle(e.in, e.p, len(e.cycles), e.m))
		}
	}
	return e.cycles[c]
}

// dealtOrder is the rank's steps sorted by the batch each is in its
// cycle's deal of extras (order version 5), or nil when a cycle of the
// rank's has no such deal.
func (e *epoch) dealtOrder() []int {
	if e.m == 0 || e.steps == 0 {
		return nil
	}
	keys := make([]int, e.steps)
	for t := range keys {
		g := e.p.Skip + t*e.p.World + e.p.Rank
		gc, ok := e.cycle(g / e.m).(*globalCycle)
		if !ok || gc.deal == nil {
			return nil
		}
		keys[t] = g/e.m*e.m + gc.arranged(g%e.m)
	}
	steps := make([]int, e.steps)
	for t := range steps {
		steps[t] = t
	}
	slices.SortFunc(steps, func(a, b int) int { return keys[a] - keys[b] })
	return steps
}

// seedOf mixes a tuple into one 64-bit seed (splitmix64 steps).
func seedOf(parts ...uint64) uint64 {
	h := uint64(0x9E3779B97F4A7C15)
	for _, p := range parts {
		h ^= p
		h += 0x9E3779B97F4A7C15
		h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9
		h = (h ^ (h >> 27)) * 0x94D049BB133111EB
		h ^= h >> 31
	}
	return h
}

func rngOf(parts ...uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seedOf(parts...), 0x73686172646673))
}

// Domain tags keep the seeds of different decisions independent.
const (
	tagStrataOrder = iota + 1
	tagOffset
	tagBatchOrder
	tagDraws
	tagShuffle
	tagShardOrder
	tagWindow
	tagAffinity
	tagSplit
)

// arrangement deals n'_c samples of each stratum over M batches: q_c each,
// plus the r_c extras round-robin. draw(c, k) is stratum c's k-th sample.
type arrangement struct {
	m      int
	active []int // strata with n'_c > 0, in index order
	q, r   []int
	start  []int    // first batch of stratum c's extras
	sigma  []int32  // G position j -> arranged batch (version 1)
	order  *feistel // G position j -> arranged batch (version 2)
	draw   func(c, k int) int64
	seed   uint64 // shuffles within batches
	// deal, in order version 5's global order, deals the extras instead
	// of start (marginal.go).
	deal *extrasDeal
}

// newArrangement deals counts over m batches. With inOrder the batches stay
// in dealing order (window mode: batch j covers the j-th stretch of every
// stratum's draws, so it reads a narrow region of the shards).
func newArrangement(counts []int, m int, rng *rand.Rand, seed uint64, inOrder bool, draw func(c, k int) int64) *arrangement {
	return newArrangementChained(counts, m, rng, seed, inOrder, 1, draw, shuffledChain)
}

// newArrangementChained is newArrangement with the order of the chain of
// extras given by chain (see mix.go), for order version v: version 1 keeps
// the batch order as a shuffled slice (4 bytes a batch), version 2 as a
// keyed Feistel permutation (O(1)).
func newArrangementChained(counts []int, m int, rng *rand.Rand, seed uint64, inOrder bool, v int, draw func(c, k int) int64, chain func(active []int, rng *rand.Rand) []int) *arrangement {
	a := &arrangement{m: m, q: make([]int, len(counts)), r: make([]int, len(counts)), start: make([]int, len(counts)), draw: draw, seed: seed}
	for c, n := range counts {
		if n > 0 {
			a.active = append(a.active, c)
			a.q[c], a.r[c] = n/m, n%m
		}
	}
	order := chain(a.active, rng)
	pos := rng.IntN(m)
	for _, c := range order {
		a.start[c] = pos
		pos = (pos + a.r[c]) % m
	}
	switch {
	case inOrder:
	case v >= 2:
		f := newFeistel(uint64(m), seedOf(seed, tagBatchOrder))
		a.order = &f
	default:
		a.sigma = make([]int32, m)
		for i := range a.sigma {
			a.sigma[i] = int32(i)
		}
		rng.Shuffle(m, func(i, j int) { a.sigma[i], a.sigma[j] = a.sigma[j], a.sigma[i] })
	}
	return a
}

// arranged is the arranged batch at G position j.
func (a *arrangement) arranged(j int) int {
	switch {
	case a.order != nil:
		return int(a.order.at(uint64(j)))
	case a.sigma != nil:
		return int(a.sigma[j])
	}
	return j
}

// hasExtra reports whether arranged batch b holds an extra of stratum c.
func (a *arrangement) hasExtra(b, c int) bool {
	if a.deal != nil {
		return a.deal.hasExtra(b, c)
	}
	return (b-a.start[c]+a.m)%a.m < a.r[c]
}

// extrasBefore counts stratum c's extras in arranged batches 0..b-1.
func (a *arrangement) extrasBefore(b, c int) int {
	if a.deal != nil {
		return a.deal.extrasBefore(b, c)
	}
	s, r := a.start[c], a.r[c]
	n := overlap(s, min(s+r, a.m), b)
	if s+r > a.m {
		n += overlap(0, s+r-a.m, b)
	}
	return n
}

// overlap is the size of [lo,hi) ∩ [0,b).
func overlap(lo, hi, b int) int { return max(0, min(hi, b)-lo) }

// firstDraw is the first of stratum c's draws that arranged batch b takes.
func (a *arrangement) firstDraw(b, c int) int { return b*a.q[c] + a.extrasBefore(b, c) }

// quota is how many draws of stratum c arranged batch b takes.
func (a *arrangement) quota(b, c int) int {
	if a.hasExtra(b, c) {
		return a.q[c] + 1
	}
	return a.q[c]
}

func (a *arrangement) batch(j int, dst []int64) []int64 {
	b := a.arranged(j)
	start := len(dst)
	for _, c := range a.active {
		k0, x := a.firstDraw(b, c), a.quota(b, c)
		for k := k0; k < k0+x; k++ {
			dst = append(dst, a.draw(c, k))
		}
	}
	out := dst[start:]
	rng := rngOf(a.seed, tagShuffle, uint64(j))
	rng.Shuffle(len(out), func(i, k int) { out[i], out[k] = out[k], out[i] })
	return dst
}

// globalCycle draws from seeded permutations of each whole stratum: in
// order version 1 materialised (4 bytes a sample), in version 2 keyed
// Feistel permutations (O(1) a stratum and draw cycle).
type globalCycle struct {
	*arrangement
	in      *Input
	seed    uint64
	version int
	perms   [][][]int32     // version 1: [stratum][draw cycle] permutation, built on demand
	keyed   [][]*feistel    // version 2: the same, as permutations of member positions
	seams   [][]map[int]int // version 4: [stratum][draw cycle] position swaps at the cycle's start (seam)
}

func newGlobalCycle(in *Input, p Params, cyc, m int) *globalCycle {
	seed := seedOf(p.Seed, uint64(p.Epoch), uint64(cyc))
	g := &globalCycle{in: in, seed: seed, version: p.OrderVersion(), perms: make([][][]int32, in.NumStrata), keyed: make([][]*feistel, in.NumStrata), seams: make([][]map[int]int, in.NumStrata)}
	if p.Mix != nil {
		counts := apportionMix(in, p.Mix, p.Alpha, m*p.Batch)
		g.arrangement = newArrangementChained(counts, m, rngOf(seed, tagStrataOrder), seed, false, g.version, g.draw,
			func(active []int, rng *rand.Rand) []int { return groupedChain(active, in.Group, in.NumGroups, rng) })
		return g
	}
	if g.version >= 5 && in.manyFields() {
		// Every field balanced (marginal.go): the chain's rng numbers the
		// strata for the deal instead.
		counts := apportionMarginal(in, p, m*p.Batch)
		g.arrangement = newArrangementChained(counts, m, rngOf(seed, tagStrataOrder), seed, false, g.version, g.draw,
			func(active []int, rng *rand.Rand) []int { return nil })
		r := make([]int, len(counts))
		for _, c := range g.arrangement.active {
			r[c] = g.arrangement.r[c]
		}
		g.arrangement.deal = newExtrasDeal(in, r, m, rngOf(seed, tagSplit), seed)
		return g
	}
	counts := apportionTargets(in, p.Alpha, p.Weights, m*p.Batch)
	if p.MinShare > 0 {
		counts = apportionFloat(m*p.Batch, TargetsOf(in, p))
	}
	chain := shuffledChain
	if in.Group != nil {
		// Time groups: each group's extras dealt together (see mix.go).
		chain = func(active []int, rng *rand.Rand) []int { return groupedChain(active, in.Group, in.NumGroups, rng) }
	}
	g.arrangement = newArrangementChained(counts, m, rngOf(seed, tagStrataOrder), seed, false, g.version, g.draw, chain)
	return g
}

// shuffledChain deals the strata's extras in a seeded order.
func shuffledChain(active []int, rng *rand.Rand) []int {
	order := slices.Clone(active)
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	return order
}

func (g *globalCycle) draw(c, k int) int64 {
	n := g.in.Count(c)
	dc, pos := k/n, k%n
	if g.version >= 4 && dc > 0 {
		if to, ok := g.seam(c, dc)[pos]; ok {
			pos = to
		}
	}
	if g.version >= 2 {
		return g.keyedDraw(c, dc, pos)
	}
	mem := g.in.members[c]
	for len(g.perms[c]) <= dc {
		perm := slices.Clone(mem)
		rng := rngOf(g.seed, tagDraws, uint64(c), uint64(len(g.perms[c])))
		rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
		g.perms[c] = append(g.perms[c], perm)
	}
	return int64(g.perms[c][dc][pos])
}

// keyedDraw is position pos of stratum c's draw cycle dc, as versions 2
// and 3 draw it.
func (g *globalCycle) keyedDraw(c, dc, pos int) int64 {
	n := g.in.Count(c)
	for len(g.keyed[c]) <= dc {
		f := newFeistel(uint64(n), seedOf(g.seed, tagDraws, uint64(c), uint64(len(g.keyed[c]))))
		g.keyed[c] = append(g.keyed[c], &f)
	}
	return g.in.member(c, int(g.keyed[c][dc].at(uint64(pos))))
}

// seam is order version 4's mend of the seam between stratum c's draw
// cycles dc-1 and dc (dc ≥ 1). Each cycle is a permutation of the
// stratum's members, and a batch takes consecutive draws; so the only
// batch that can hold a member twice is the one whose draws straddle the
// seam: t draws from the end of cycle dc-1 and h from the start of cycle
// dc. When that batch's quota t+h is at most the stratum's n members, the
// head's positions whose member is in the tail are swapped with the first
// later positions of cycle dc whose member is not. There are enough such
// positions: of the n-h positions from h on, at most t-(conflicts) hold
// tail members, and n-h-t ≥ 0. A swap keeps cycle dc a permutation (every
// member once per cycle), changes no other batch's stratum counts, and
// moves members only within cycle dc, past the straddling batch; so the
// straddling batch holds h+t distinct members, and no other batch takes
// draws from two cycles. A quota larger than n must repeat members, and
// gets no swaps. Versions 1-3 draw without the mend: at α = 0 a study
// found 15% of batches holding a member twice. The result is cached per
// cycle; it needs cycle dc-1's seam, for the tail's members.
func (g *globalCycle) seam(c, dc int) map[int]int {
	for len(g.seams[c]) <= dc {
		g.seams[c] = append(g.seams[c], nil)
	}
	if g.seams[c][dc] != nil {
		return g.seams[c][dc]
	}
	swaps := map[int]int{}
	defer func() { g.seams[c][dc] = swaps }()
	n := g.in.Count(c)
	first := dc * n // cycle dc's first draw
	// The arranged batch holding draw first-1: the last one whose first
	// draw is at most first-1 (a batch's first draw grows with b).
	a := g.arrangement
	var b int
	if a.deal != nil {
		b = a.deal.lastBatchFrom(c, int64(a.q[c]), int64(first-1))
	} else {
		b = sort.Search(a.m, func(b int) bool { return a.firstDraw(b, c) > first-1 }) - 1
	}
	if b < 0 {
		return swaps
	}
	k0, x := a.firstDraw(b, c), a.quota(b, c)
	t, h := first-k0, k0+x-first
	if h <= 0 || x > n {
		return swaps
	}
	tail := make(map[int64]bool, t)
	for k := first - t; k < first; k++ {
		tail[g.draw(c, k)] = true
	}
	next := h // the next later position to try
	for pos := 0; pos < h; pos++ {
		if !tail[g.keyedDraw(c, dc, pos)] {
			continue
		}
		for tail[g.keyedDraw(c, dc, next)] {
			next++
		}
		swaps[pos], swaps[next] = next, pos
		next++
	}
	return swaps
}

// ApportionShares splits total into integer parts proportional to pi by
// largest remainder: each part is ⌊total·π_c⌋ or ⌈total·π_c⌉.
func ApportionShares(total int, pi []float64) []int { return apportionFloat(total, pi) }

// Targets returns π_c ∝ n_c^α.
func Targets(in *Input, alpha float64) []float64 {
	w := make([]float64, in.NumStrata)
	sum := 0.0
	for c := range w {
		if n := in.Count(c); n > 0 {
			w[c] = float64(math.Pow(float64(n), alpha))
			sum += w[c]
		}
	}
	for c := range w {
		w[c] = float64(w[c] / sum)
	}
	return w
}

// TargetsOf returns the π an order with p aims at: π_c ∝ n_c^α·w_c, each
// then at least p.MinShare (WithMinShare).
func TargetsOf(in *Input, p Params) []float64 {
	pi := Targets(in, p.Alpha)
	if p.Weights != nil {
		sum := 0.0
		for c := range pi {
			pi[c] *= p.Weights[c]
			sum += pi[c]
		}
		for c := range pi {
			pi[c] /= sum
		}
	}
	if p.MinShare > 0 {
		pi = WithMinShare(pi, p.MinShare)
	}
	return pi
}

// WithMinShare raises every positive share of pi (summing to 1) below q to
// q, and scales the others down in proportion so that the shares still sum
// to 1. The strata raised are found smallest first: a stratum is raised
// when its scaled share would fall below q, which scaling the rest down
// further can only make truer, so one pass in ascending order finds them
// all. Zero shares stay 0. It needs q·(positive shares) ≤ 1 (else every
// positive share is 1/k).
func WithMinShare(pi []float64, q float64) []float64 {
	var pos []int
	for c, x := range pi {
		if x > 0 {
			pos = append(pos, c)
		}
	}
	out := make([]float64, len(pi))
	if len(pos) == 0 {
		return out
	}
	if q*float64(len(pos)) >= 1 {
		for _, c := range pos {
			out[c] = 1 / float64(len(pos))
		}
		return out
	}
	slices.SortStableFunc(pos, func(a, b int) int { return cmp.Compare(pi[a], pi[b]) })
	free := 0.0 // the sum of the shares not raised
	for _, c := range pos {
		free += pi[c]
	}
	raised := 0
	for _, c := range pos {
		rest := 1 - q*float64(raised)
		if pi[c]*rest/free >= q {
			break
		}
		out[c] = q
		free -= pi[c]
		raised++
	}
	rest := 1 - q*float64(raised)
	for _, c := range pos[raised:] {
		out[c] = pi[c] * rest / free
	}
	return out
}

// weightedSamples counts the samples of strata of weight > 0.
func weightedSamples(in *Input, w []float64) int {
	n := 0
	for c, x := range w {
		if x > 0 {
			n += in.Count(c)
		}
	}
	return n
}

// apportionTargets splits total slots over strata by π_c ∝ n_c^α·w_c,
// largest remainder first (ties to the lower stratum). Without weights,
// α=1 and α=0 use exact integer arithmetic.
func apportionTargets(in *Input, alpha float64, weights []float64, total int) []int {
	if weights != nil {
		return apportionFloat(total, TargetsOf(in, Params{Alpha: alpha, Weights: weights}))
	}
	counts := make([]int, in.NumStrata)
	for c := range counts {
		counts[c] = in.Count(c)
	}
	switch alpha {
	case 1:
		return apportionInt(total, counts)
	case 0:
		for c := range counts {
			counts[c] = min(counts[c], 1)
		}
		return apportionInt(total, counts)
	}
	return apportionFloat(total, Targets(in, alpha))
}

// apportionInt splits total over integer weights w (sum > 0) exactly:
// share_c = ⌊total·w_c/W⌋ plus one for the largest remainders.
func apportionInt(total int, w []int) []int {
	sum := 0
	for _, x := range w {
		sum += x
	}
	out := make([]int, len(w))
	rem := make([]uint64, len(w))
	given := 0
	for c, x := range w {
		hi, lo := bits.Mul64(uint64(total), uint64(x))
		q, r := bits.Div64(hi, lo, uint64(sum))
		out[c], rem[c] = int(q), r
		given += int(q)
	}
	giveLargest(out, total-given, largestRemainderFirst(rem), func(c int) bool { return w[c] > 0 })
	return out
}

func apportionFloat(total int, pi []float64) []int {
	out := make([]int, len(pi))
	rem := make([]float64, len(pi))
	given := 0
	for c, p := range pi {
		q := float64(float64(total) * p)
		out[c] = int(math.Floor(q))
		rem[c] = q - math.Floor(q)
		given += out[c]
	}
	giveLargest(out, total-given, largestRemainderFirst(rem), func(c int) bool { return pi[c] > 0 })
	return out
}

// largestRemainderFirst orders strata by remainder, largest first, ties to the lower index.
func largestRemainderFirst[T cmp.Ordered](rem []T) func(a, b int) int {
	return func(a, b int) int { return cmp.Or(cmp.Compare(rem[b], rem[a]), cmp.Compare(a, b)) }
}

// giveLargest adds one to the first n eligible entries in cmp order.
func giveLargest(out []int, n int, cmp func(a, b int) int, eligible func(c int) bool) {
	var idx []int
	for c := range out {
		if eligible(c) {
			idx = append(idx, c)
		}
	}
	slices.SortFunc(idx, cmp)
	for i := 0; i < n; i++ {
		out[idx[i%len(idx)]]++
	}
}
