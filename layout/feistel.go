package layout

import "math/bits"

// feistel is a keyed bijection of [0, n) that needs O(1) state: a balanced
// Feistel network over the smallest domain of 2^(2h) ≥ n values, walked
// back into [0, n) (cycle-walking: a value that lands outside is permuted
// again until it lands inside, which keeps the map a bijection). The domain
// is under 4n, so a lookup takes fewer than 4 network passes on average.
//
// It replaces a materialised permutation (4 bytes per element) wherever the
// order needs "the k-th element of a seeded shuffle" of a set too large to
// hold, at a few tens of nanoseconds a lookup.
type feistel struct {
	n     uint64
	small []uint16 // the permutation itself, when n ≤ smallPerm
	half  uint     // bits per half
	mask  uint64   // (1<<half)-1
	keys  [feistelRounds]uint64
}

// Four rounds of a good round function make a Feistel network a strong
// pseudorandom permutation (Luby–Rackoff); two more cost little.
const feistelRounds = 6

// smallPerm: below this size a Feistel network over a few bits reaches too
// few of the n! orders (its permutations of 2^(2h) values are all even), so
// a seeded Fisher–Yates shuffle is stored instead: at most this many
// entries, still O(1).
const smallPerm = 1024

func newFeistel(n uint64, key uint64) feistel {
	f := feistel{n: n}
	if n > 1 {
		b := uint(bits.Len64(n - 1)) // bits to hold n-1
		f.half = (b + 1) / 2
		f.mask = 1<<f.half - 1
	}
	for r := range f.keys {
		f.keys[r] = seedOf(key, uint64(r))
	}
	if n > 1 && n <= smallPerm {
		f.small = make([]uint16, n)
		for i := range f.small {
			f.small[i] = uint16(i)
		}
		rng := rngOf(key, 0x736d616c6c)
		rng.Shuffle(int(n), func(i, j int) { f.small[i], f.small[j] = f.small[j], f.small[i] })
	}
	return f
}

// at returns the image of i, for i in [0, n).
func (f *feistel) at(i uint64) uint64 {
	if f.n <= 1 {
		return i
	}
	if f.small != nil {
		return uint64(f.small[i])
	}
	x := i
	for {
		x = f.round(x)
		if x < f.n {
			return x
		}
	}
}

// round is one pass of the network over the 2·half-bit domain.
func (f *feistel) round(x uint64) uint64 {
	l, r := x>>f.half, x&f.mask
	for _, k := range f.keys {
		l, r = r, l^(mix64(r^k)&f.mask)
	}
	return l<<f.half | r
}

// mix64 is the splitmix64 finaliser: every input bit moves every output bit.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}
