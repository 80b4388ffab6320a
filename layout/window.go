package layout

import "fmt"

// windowCycle is one cycle of G in window mode, built whole: windows of S
// shards in a seeded shard order, each pool arranged into batches.
type windowCycle struct {
	batchSize int
	samples   []int32
}

func newWindowCycle(in *Input, p Params, cyc, m int) *windowCycle {
	seed := seedOf(p.Seed, uint64(p.Epoch), uint64(cyc), tagWindow)
	shards := make([]int, in.NumShards)
	for i := range shards {
		shards[i] = i
	}
	rngOf(seed, tagShardOrder).Shuffle(len(shards), func(i, j int) { shards[i], shards[j] = shards[j], shards[i] })

	wc := &windowCycle{batchSize: p.Batch, samples: make([]int32, 0, m*p.Batch)}
	carry := make([][]int32, in.NumStrata)
	for w := 0; w*p.Window < len(shards); w++ {
		pool := carry
		carry = make([][]int32, in.NumStrata)
		fresh := make([][]int32, in.NumStrata)
		for _, sh := range shards[w*p.Window : min(len(shards), (w+1)*p.Window)] {
			for _, s := range in.shardMembers[sh] {
				c := in.Stratum[s]
				fresh[c] = append(fresh[c], s)
			}
		}
		avail := make([]int, in.NumStrata)
		size := 0
		rng := rngOf(seed, uint64(w))
		for c := range pool {
			// Draws stay in (shard, offset) order, so consecutive batches
			// read consecutive stretches of the window's shards.
			pool[c] = append(pool[c], fresh[c]...)
			avail[c] = len(pool[c])
			size += avail[c]
		}
		last := (w+1)*p.Window >= len(shards)
		mw := size / p.Batch
		if last && p.Tail == Pad {
			mw = (size + p.Batch - 1) / p.Batch
		}
		if mw == 0 {
			carry = pool
			continue
		}
		var counts []int
		if last && p.Tail == Pad {
			counts = apportionInt(mw*p.Batch-size, avail)
			for c := range counts {
				counts[c] += avail[c]
			}
		} else {
			counts = apportionInt(mw*p.Batch, avail)
		}
		arr := newArrangement(counts, mw, rng, seedOf(seed, uint64(w), tagShuffle), true, func(c, k int) int64 {
			return int64(pool[c][k%len(pool[c])])
		})
		batch := make([]int64, 0, p.Batch)
		for j := 0; j < mw; j++ {
			// Window mode needs per-sample input, so positions fit 31 bits.
			for _, s := range arr.batch(j, batch[:0]) {
				wc.samples = append(wc.samples, int32(s))
			}
		}
		for c := range pool {
			if counts[c] < len(pool[c]) {
				carry[c] = pool[c][counts[c]:]
			}
		}
	}
	if len(wc.samples) != m*p.Batch {
		panic(fmt.Sprintf("layout: window mode built %d slots, want %d", len(wc.samples), m*p.Batch))
	}
	return wc
}

func (wc *windowCycle) batch(j int, dst []int64) []int64 {
	for _, s := range wc.samples[j*wc.batchSize : (j+1)*wc.batchSize] {
		dst = append(dst, int64(s))
	}
	return dst
}
