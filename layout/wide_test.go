package layout_test

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/shardfs/shardfs/layout"
)

// wideCounts is a dataset of 4,100,000,007 samples in 5 strata, past what
// 31-bit positions hold, one stratum alone past 2^31, spread over 3,000 shards.
var wideCounts = []int{2_400_000_000, 900_000_003, 500_000_000, 199_999_997, 100_000_007}

const wideShards = 3000

// wideInputs are the counts as the even model and as explicit per-shard
// counts (8-byte prefix sums); both number samples shard by shard.
func wideInputs(t *testing.T) (even, counted *layout.Input) {
	t.Helper()
	even, err := layout.NewEvenCountInput(wideCounts, wideShards)
	if err != nil {
		t.Fatal(err)
	}
	counted, err = layout.NewCountInputFunc(wideShards, len(wideCounts), func(s int, row []int) {
		for c, n := range wideCounts {
			row[c] = (s+1)*n/wideShards - s*n/wideShards
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if even.N() != 4_100_000_007 || counted.N() != even.N() {
		t.Fatalf("%d and %d samples", even.N(), counted.N())
	}
	return even, counted
}

// TestOrderPastTwoBillion checks the order's guarantees where positions
// pass 2^31: ranks disjoint, every batch within one sample of B·π_c per
// stratum, positions in range and of the stratum the input says, resuming
// with another world size continuing G exactly, and both counts-only
// inputs giving the same order.
func TestOrderPastTwoBillion(t *testing.T) {
	even, counted := wideInputs(t)
	for _, alpha := range []float64{1, 0.5, 0} {
		const world, batch, steps = 5, 16, 60
		p := layout.Params{Seed: 7, World: world, Batch: batch, Alpha: alpha, EpochSize: world * batch * steps, Version: 2}
		pi := layout.TargetsOf(even, p)
		seen := map[int64]int{}
		wide := 0
		var orders []*layout.RankOrder
		for r := range world {
			p.Rank = r
			o, err := layout.Order(even, p)
			if err != nil {
				t.Fatal(err)
			}
			c, err := layout.Order(counted, p)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(o.Samples.Int64s(), c.Samples.Int64s()) {
				t.Fatalf("alpha %v rank %d: the even model and the per-shard counts give different orders", alpha, r)
			}
			if o.Batches != steps || o.Samples.Len() != steps*batch {
				t.Fatalf("alpha %v rank %d: %d batches, %d positions", alpha, r, o.Batches, o.Samples.Len())
			}
			for b := range o.Batches {
				per := make([]int, len(wideCounts))
				for _, x := range o.BatchSamples(b).All() {
					if x < 0 || x >= int64(even.N()) {
						t.Fatalf("position %d of %d", x, even.N())
					}
					if x > math.MaxInt32 {
						wide++
					}
					_, st, k, err := even.Split(x)
					if err != nil || st != int(even.StratumOf(x)) || k < 0 {
						t.Fatalf("position %d: split to stratum %d member %d (%v), its stratum is %d", x, st, k, err, even.StratumOf(x))
					}
					per[st]++
					if prev, ok := seen[x]; ok && alpha == 1 {
						t.Fatalf("alpha 1: sample %d on ranks %d and %d", x, prev, r)
					}
					seen[x] = r
				}
				for st, n := range per {
					if want := float64(batch) * pi[st]; float64(n) < math.Floor(want) || float64(n) > math.Ceil(want) {
						t.Fatalf("alpha %v rank %d batch %d: %d of stratum %d, want %.2f within one", alpha, r, b, n, st, want)
					}
				}
			}
			orders = append(orders, o)
		}
		// The order must reach past 2^31, or this test checks nothing wide.
		if wide < steps*batch {
			t.Fatalf("alpha %v: only %d of %d positions past 2^31", alpha, wide, world*steps*batch)
		}
		if orders[0].Samples.Bytes() < 8*int64(orders[0].Samples.Len()) {
			t.Fatalf("positions past 2^31 held in %d bytes for %d", orders[0].Samples.Bytes(), orders[0].Samples.Len())
		}
		// Resume: 20 steps at W=5, then W=3 from global batch 100.
		g, err := layout.GlobalBatches(even, p, steps*world)
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for step := range 20 {
			for _, o := range orders {
				got = append(got, o.BatchSamples(step).Int64s()...)
			}
		}
		q := p
		q.World, q.Skip = 3, 100
		var news []*layout.RankOrder
		for r := range 3 {
			q.Rank = r
			o, err := layout.Order(even, q)
			if err != nil {
				t.Fatal(err)
			}
			news = append(news, o)
		}
		for step := range news[0].Batches {
			for _, o := range news {
				got = append(got, o.BatchSamples(step).Int64s()...)
			}
		}
		if want := g[:len(got)]; len(got) != (100+news[0].Batches*3)*batch || !slices.Equal(got, want) {
			t.Fatalf("alpha %v: resuming at global batch 100 with W=3 is not G's continuation (%d positions)", alpha, len(got))
		}
	}
}

// An epoch may pass 2^31 samples where the dataset does; on a small
// dataset such an epoch size is refused, since it would size a rank's
// order by a flag alone.
func TestEpochSizePastTwoBillion(t *testing.T) {
	even, _ := wideInputs(t)
	p := layout.Params{World: 1000, Batch: 1000, Alpha: 1, EpochSize: 3_000_000_000, Version: 2}
	if steps, err := layout.Steps(even, p); err != nil || steps != 3000 {
		t.Fatalf("an epoch of 3e9 of 4.1e9 samples: %d steps (%v), want 3000", steps, err)
	}
	small, err := layout.NewEvenCountInput([]int{600, 400}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := layout.Steps(small, p); err == nil || !strings.Contains(err.Error(), "epoch size 3000000000") {
		t.Fatalf("an epoch of 3e9 of 1,000 samples: %v", err)
	}
}

// goldenWide pins the order past 2^31 (order version 2), positions hashed
// as 8-byte little-endian values.
const goldenWide = "86524a8ba3e14fcd328236f8c7458051f9466a016960668e1eba2abf15726044"

func TestGoldenOrderPastTwoBillion(t *testing.T) {
	even, _ := wideInputs(t)
	h := sha256.New()
	for e := range 2 {
		for r := range 4 {
			p := layout.Params{Seed: 11, Epoch: e, World: 4, Rank: r, Batch: 32, Alpha: 1, EpochSize: 4 * 32 * 25, Version: 2}
			o, err := layout.Order(even, p)
			if err != nil {
				t.Fatal(err)
			}
			binary.Write(h, binary.LittleEndian, int64(o.Batches))
			binary.Write(h, binary.LittleEndian, o.Samples.Int64s())
		}
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != goldenWide {
		t.Fatalf("the order past 2^31 hashes to %s, pinned %q: if on purpose, bump layout.OrderVersion; never change a pinned hash", got, goldenWide)
	}
}
