package layout

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// randomInput draws a manifest: 1 to maxStrata strata, counts log-uniform
// from 1 up to maxCount (so 1 vs 100,000 happens), shards of perShard samples
// in stratified round-robin.
func randomInput(t testing.TB, rng *rand.Rand, maxStrata, maxCount, maxN int) *Input {
	t.Helper()
	nStrata := 1 + rng.IntN(maxStrata)
	counts := make([]int, nStrata)
	total := 0
	for c := range counts {
		counts[c] = int(math.Exp(rng.Float64() * math.Log(float64(maxCount))))
		total += counts[c]
	}
	if total > maxN { // scale down, keeping every stratum non-empty
		total = 0
		for c := range counts {
			counts[c] = max(1, counts[c]*maxN/(total+maxN+counts[c]*len(counts)))
			total += counts[c]
		}
	}
	var stratum []uint32
	for c, n := range counts {
		for i := 0; i < n; i++ {
			stratum = append(stratum, uint32(c))
		}
	}
	rng.Shuffle(len(stratum), func(i, j int) { stratum[i], stratum[j] = stratum[j], stratum[i] })
	perShard := 1 + rng.IntN(500)
	shard := make([]uint32, len(stratum))
	for i := range shard {
		shard[i] = uint32(i / perShard)
	}
	in, err := NewInput(stratum, nStrata, shard, (len(stratum)+perShard-1)/perShard)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func randomParams(rng *rand.Rand, n int) Params {
	p := Params{Seed: rng.Uint64(), Epoch: rng.IntN(5), World: 1 + rng.IntN(64), Alpha: 1}
	// B from 1 to 4096, log-uniform, but keep at least one step for most cases.
	p.Batch = int(math.Exp(rng.Float64() * math.Log(4096)))
	if rng.IntN(4) > 0 {
		p.Batch = max(1, min(p.Batch, n/p.World))
	}
	p.Rank = rng.IntN(p.World)
	return p
}

// allRanks returns every rank's order.
func allRanks(t testing.TB, in *Input, p Params) []*RankOrder {
	t.Helper()
	var out []*RankOrder
	for r := 0; r < p.World; r++ {
		p.Rank = r
		o, err := Order(in, p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, o)
	}
	return out
}

func cases(t *testing.T) int {
	if raceEnabled {
		return 4
	}
	if testing.Short() {
		return 25
	}
	return 150
}

// interleaved is the ranks' batches step by step: what the global order
// must be, whatever W.
func interleaved(orders []*RankOrder) []int64 {
	var out []int64
	for step := 0; step < orders[0].Batches; step++ {
		for _, o := range orders {
			out = append(out, o.BatchSamples(step).Int64s()...)
		}
	}
	return out
}

// globalOf is the first batches of G that orders cover.
func globalOf(t testing.TB, in *Input, p Params, orders []*RankOrder) []int64 {
	t.Helper()
	g, err := GlobalBatches(in, p, orders[0].Batches*p.World)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// bounds returns ⌊B·π_c⌋ and ⌈B·π_c⌉ for α=1 with exact integers.
func bounds(in *Input, b, c int) (lo, hi int) {
	num, den := b*in.Count(c), in.N()
	lo = num / den
	hi = lo
	if num%den != 0 {
		hi++
	}
	return lo, hi
}

func TestPropertyDisjointAndStratifiedDrop(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for i := 0; i < cases(t); i++ {
		in := randomInput(t, rng, 1000, 100_000, 200_000)
		p := randomParams(rng, in.N())
		t.Run(fmt.Sprintf("case%d/N%d_S%d_W%d_B%d", i, in.N(), in.NumStrata, p.World, p.Batch), func(t *testing.T) {
			orders := allRanks(t, in, p)
			seen := make([]bool, in.N())
			served := 0
			for r, o := range orders {
				if o.Batches != orders[0].Batches {
					t.Fatalf("rank %d has %d batches, rank 0 has %d", r, o.Batches, orders[0].Batches)
				}
				for b := 0; b < o.Batches; b++ {
					counts := make([]int, in.NumStrata)
					for _, s := range o.BatchSamples(b).All() {
						if seen[s] {
							t.Fatalf("sample %d served twice (rank %d batch %d)", s, r, b)
						}
						seen[s] = true
						counts[in.Stratum[s]]++
						served++
					}
					for c, x := range counts {
						if lo, hi := bounds(in, p.Batch, c); x < lo || x > hi {
							t.Fatalf("rank %d batch %d: stratum %d has %d, want %d..%d", r, b, c, x, lo, hi)
						}
					}
				}
			}
			if dropped := in.N() - served; dropped < 0 || dropped > p.World*p.Batch-1 {
				t.Fatalf("dropped %d samples, want 0..%d", dropped, p.World*p.Batch-1)
			}
		})
	}
}

func TestPropertyCoverageAndStratifiedPad(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	for i := 0; i < cases(t); i++ {
		in := randomInput(t, rng, 1000, 100_000, 100_000)
		p := randomParams(rng, in.N())
		p.Tail = Pad
		t.Run(fmt.Sprintf("case%d/N%d_S%d_W%d_B%d", i, in.N(), in.NumStrata, p.World, p.Batch), func(t *testing.T) {
			times := make([]int, in.N())
			for r, o := range allRanks(t, in, p) {
				if want := (in.N() + p.World*p.Batch - 1) / (p.World * p.Batch); o.Batches < want {
					t.Fatalf("rank %d: %d batches, want at least %d", r, o.Batches, want)
				}
				for b := 0; b < o.Batches; b++ {
					counts := make([]int, in.NumStrata)
					for _, s := range o.BatchSamples(b).All() {
						times[s]++
						counts[in.Stratum[s]]++
					}
					for c, x := range counts {
						if lo, hi := bounds(in, p.Batch, c); x < lo || x > hi {
							t.Fatalf("rank %d batch %d: stratum %d has %d, want %d..%d", r, b, c, x, lo, hi)
						}
					}
				}
			}
			for s, n := range times {
				if n == 0 {
					t.Fatalf("sample %d (stratum %d) never served with tail=pad", s, in.Stratum[s])
				}
			}
		})
	}
}

// TestPropertyExactTotals: over all M batches of G, each stratum's count is
// its exact apportionment, so α=1 per-epoch totals come out right.
func TestPropertyExactTotals(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	for i := 0; i < cases(t); i++ {
		in := randomInput(t, rng, 200, 50_000, 100_000)
		p := randomParams(rng, in.N())
		m := in.N() / p.Batch
		g, err := GlobalBatches(in, p, m)
		if err != nil {
			t.Fatal(err)
		}
		counts := make([]int, in.NumStrata)
		for _, s := range g {
			counts[in.Stratum[s]]++
		}
		for c, x := range counts {
			num := m * p.Batch * in.Count(c)
			lo, hi := num/in.N(), (num+in.N()-1)/in.N()
			if x < lo || x > hi || x > in.Count(c) {
				t.Fatalf("case %d: stratum %d (n=%d) has %d in the epoch, want %d..%d", i, c, in.Count(c), x, lo, hi)
			}
		}
	}
}

// TestPropertyWorldSizeIndependent: the step-interleaved concatenation of all
// ranks' batches is a prefix of G, whatever W.
func TestPropertyWorldSizeIndependent(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for i := 0; i < cases(t); i++ {
		in := randomInput(t, rng, 300, 20_000, 60_000)
		p := randomParams(rng, in.N())
		p.Tail = []Tail{Drop, Pad}[rng.IntN(2)]
		if rng.IntN(3) == 0 {
			p.Window = 1 + rng.IntN(in.NumShards)
		}
		ranks := allRanks(t, in, p)
		if !slices.Equal(interleaved(ranks), globalOf(t, in, p, ranks)) {
			t.Fatalf("case %d (W=%d B=%d %v window=%d): interleaved ranks differ from the global order", i, p.World, p.Batch, p.Tail, p.Window)
		}
	}
}

func TestPropertyFreshEachEpoch(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for i := 0; i < cases(t)/3; i++ {
		in := randomInput(t, rng, 50, 5_000, 50_000)
		if in.N() < 400 {
			continue
		}
		p := Params{Seed: rng.Uint64(), World: 1, Batch: 64, Alpha: 1}
		a, _ := Order(in, p)
		p.Epoch = 1
		b, _ := Order(in, p)
		if slices.Equal(a.Samples.Int64s(), b.Samples.Int64s()) {
			t.Fatalf("case %d: epochs 0 and 1 have the same order", i)
		}
		// Compositions: how many batch sample-sets of epoch 0 reappear in epoch 1?
		sets := map[string]bool{}
		key := func(s Positions) string {
			c := s.Int64s()
			slices.Sort(c)
			return fmt.Sprint(c)
		}
		for k := 0; k < a.Batches; k++ {
			sets[key(a.BatchSamples(k))] = true
		}
		same := 0
		for k := 0; k < b.Batches; k++ {
			if sets[key(b.BatchSamples(k))] {
				same++
			}
		}
		if same > 0 {
			t.Fatalf("case %d: %d of %d batch compositions repeat across epochs", i, same, a.Batches)
		}
		// Within a batch, samples are shuffled, not grouped by stratum.
		grouped, mixed := 0, 0
		for k := 0; k < a.Batches; k++ {
			st := make([]uint32, 0, 64)
			for _, s := range a.BatchSamples(k).All() {
				st = append(st, in.Stratum[s])
			}
			runs := 1
			for j := 1; j < len(st); j++ {
				if st[j] != st[j-1] {
					runs++
				}
			}
			distinct := len(slices.Compact(slices.Sorted(slices.Values(st))))
			if distinct > 1 {
				mixed++
				if runs == distinct {
					grouped++
				}
			}
		}
		if mixed > 0 && grouped == mixed {
			t.Fatalf("case %d: every batch is grouped by stratum", i)
		}
	}
}

// TestBalancedAndTemperature bounds the per-batch deviation for α<1 and
// checks that minority strata are recycled and the epoch length holds.
func TestBalancedAndTemperature(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	for i := 0; i < cases(t)/2; i++ {
		in := randomInput(t, rng, 100, 100_000, 100_000)
		alpha := []float64{0, 0.3, 0.5, 0.7}[i%4]
		p := randomParams(rng, in.N())
		p.Alpha, p.World, p.Rank = alpha, 1, 0
		p.Batch = max(1, min(p.Batch, in.N()))
		pi := Targets(in, alpha)
		o, err := Order(in, p)
		if err != nil {
			t.Fatal(err)
		}
		if o.Batches != in.N()/p.Batch {
			t.Fatalf("α=%v: %d batches, want %d", alpha, o.Batches, in.N()/p.Batch)
		}
		maxDev, sumTV := 0.0, 0.0
		for b := 0; b < o.Batches; b++ {
			counts := make([]int, in.NumStrata)
			for _, s := range o.BatchSamples(b).All() {
				counts[in.Stratum[s]]++
			}
			tv := 0.0
			for c, x := range counts {
				want := float64(p.Batch) * pi[c]
				// The same ⌊B·π⌋..⌈B·π⌉ bound as α=1, up to float rounding of π.
				if float64(x) < math.Floor(want-1e-9) || float64(x) > math.Ceil(want+1e-9) {
					t.Fatalf("α=%v batch %d: stratum %d has %d, target %.3f", alpha, b, c, x, want)
				}
				maxDev = max(maxDev, math.Abs(float64(x)-want))
				tv += math.Abs(float64(x)/float64(p.Batch) - pi[c])
			}
			sumTV += tv / 2
		}
		if o.Batches > 0 && maxDev >= 1 {
			t.Fatalf("α=%v: max per-batch deviation %.3f, want < 1", alpha, maxDev)
		}
	}
}

func TestWindowMode(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < cases(t)/2; i++ {
		in := randomInput(t, rng, 20, 20_000, 60_000)
		p := randomParams(rng, in.N())
		p.Window = 1 + rng.IntN(4)
		p.Tail = []Tail{Drop, Pad}[i%2]
		times := make([]int, in.N())
		for _, o := range allRanks(t, in, p) {
			for _, s := range o.Samples.All() {
				times[s]++
			}
		}
		for s, n := range times {
			if p.Tail == Drop && n > 1 {
				t.Fatalf("case %d: sample %d served %d times with drop", i, s, n)
			}
			if p.Tail == Pad && n == 0 {
				t.Fatalf("case %d: sample %d never served with pad", i, s)
			}
		}
	}
}

// TestWindowLocality: in window mode a batch reads from few shards.
func TestWindowLocality(t *testing.T) {
	n, perShard := 20_000, 100
	stratum := make([]uint32, n)
	shard := make([]uint32, n)
	for i := range stratum {
		stratum[i] = uint32(i % 10) // every shard mirrors the mix, as ingest makes it
		shard[i] = uint32(i / perShard)
	}
	in, _ := NewInput(stratum, 10, shard, n/perShard)
	p := Params{Seed: 9, World: 1, Batch: 50, Alpha: 1, Window: 2}
	o, err := Order(in, p)
	if err != nil {
		t.Fatal(err)
	}
	for b := 0; b < o.Batches; b++ {
		shards := map[uint32]bool{}
		counts := make([]int, 10)
		for _, s := range o.BatchSamples(b).All() {
			shards[shard[s]] = true
			counts[stratum[s]]++
		}
		if len(shards) > 2*p.Window {
			t.Fatalf("batch %d reads %d shards with window %d", b, len(shards), p.Window)
		}
		for c, x := range counts {
			if x != 5 {
				t.Fatalf("batch %d: stratum %d has %d, want 5", b, c, x)
			}
		}
	}
}

func orderHash(t testing.TB) string {
	rng := rand.New(rand.NewPCG(8, 8))
	h := fnv.New64a()
	for i := 0; i < 10; i++ {
		in := randomInput(t, rng, 100, 10_000, 30_000)
		p := randomParams(rng, in.N())
		p.Alpha = []float64{1, 0, 0.5}[i%3]
		p.Window = []int{0, 0, 0, 2}[i%4]
		if p.Window > 0 {
			p.Alpha = 1
		}
		o, err := Order(in, p)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(h, o.Samples)
	}
	return fmt.Sprintf("%x", h.Sum64())
}

// TestDeterministicAcrossProcesses compares orders computed in this process
// with those of a child process at another GOMAXPROCS.
func TestDeterministicAcrossProcesses(t *testing.T) {
	if os.Getenv("LAYOUT_HASH_CHILD") != "" {
		fmt.Println("HASH=" + orderHash(t))
		return
	}
	want := orderHash(t)
	if again := orderHash(t); again != want {
		t.Fatalf("same process, two runs: %s vs %s", want, again)
	}
	procs := 1
	if runtime.GOMAXPROCS(0) == 1 {
		procs = 2
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDeterministicAcrossProcesses$", "-test.count=1")
	cmd.Env = append(os.Environ(), "LAYOUT_HASH_CHILD=1", fmt.Sprintf("GOMAXPROCS=%d", procs))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "HASH="+want) {
		t.Fatalf("child process computed a different order: want HASH=%s, got\n%s", want, out)
	}
}

func TestParamsRejected(t *testing.T) {
	in, _ := NewInput([]uint32{0, 1}, 2, []uint32{0, 0}, 1)
	for _, p := range []Params{
		{World: 0, Batch: 1, Alpha: 1}, {World: 2, Rank: 2, Batch: 1, Alpha: 1}, {World: 1, Batch: 0, Alpha: 1},
		{World: 1, Batch: 1, Alpha: -1}, {World: 1, Batch: 1, Alpha: math.NaN()}, {World: 1, Batch: 1, Alpha: 0.5, Window: 1},
	} {
		if _, err := Order(in, p); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
	if _, err := NewInput([]uint32{0, 5}, 2, nil, 0); err == nil {
		t.Error("stratum out of range accepted")
	}
}
