package prefetch

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/shardfs/shardfs/layout"
)

type flatCatalog struct{}

func (flatCatalog) Key(i int) string         { return "k" }
func (flatCatalog) Size(i int) int64         { return 1 }
func (flatCatalog) Stratum(i int) int        { return 0 }
func (flatCatalog) StratumName(c int) string { return "c" }
func (flatCatalog) Class(c int) int          { return c }

// memberIndex answers alike whether it keeps a dense table or sorted ids,
// and agrees with a walk over the members: first use, and every use of a
// sample read more than once.
func TestMemberIndexDenseAndSparseAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 50 {
		n := 1 + rng.IntN(300)
		distinct := 1 + rng.IntN(n)
		for _, stride := range []int64{1, 1 << 33} { // dense, and ids past 2^32
			o := &layout.RankOrder{Params: layout.Params{Batch: 7}, Batches: (n + 6) / 7, Samples: layout.MakePositions(n)}
			var ids []int64
			for range n {
				id := int64(rng.IntN(distinct)) * stride
				ids = append(ids, id)
				o.Samples.Append(id)
			}
			x := newMemberIndex(layout.NewMembers(o, flatCatalog{}))
			if dense, want := x.dense != nil, slices.Max(ids) < max(2*int64(n), denseIds); dense != want {
				t.Fatalf("trial %d stride %d: dense %v", trial, stride, dense)
			}
			for _, id := range append(slices.Clone(ids), int64(distinct)*stride+stride, -1) {
				var want []int32
				for i, s := range ids {
					if s == id {
						want = append(want, int32(i))
					}
				}
				first := int32(-1)
				if len(want) > 0 {
					first = want[0]
				}
				if got := x.first(id); got != first {
					t.Fatalf("trial %d stride %d id %d: first %d, want %d", trial, stride, id, got, first)
				}
				if len(want) < 2 {
					want = nil
				}
				if got := x.all(id); !slices.Equal(got, want) {
					t.Fatalf("trial %d stride %d id %d: all %v, want %v", trial, stride, id, got, want)
				}
			}
		}
	}
}

// The ranker's lookup, as a rank of W=8 over 4.8 million samples sees it
// (600,000 members): a dense table against sorted ids.
func BenchmarkMemberIndexFirst_600k(b *testing.B) {
	for _, c := range []struct {
		name   string
		stride int64
	}{{"dense", 1}, {"sparse", 8}} {
		b.Run(c.name, func(b *testing.B) {
			const n = 600_000
			rng := rand.New(rand.NewPCG(3, 4))
			o := &layout.RankOrder{Params: layout.Params{Batch: 100}, Batches: n / 100, Samples: layout.MakePositions(n)}
			for _, v := range rng.Perm(n) {
				o.Samples.Append(int64(v) * c.stride)
			}
			x := newMemberIndex(layout.NewMembers(o, flatCatalog{}))
			if (x.dense != nil) != (c.stride == 1) {
				b.Fatalf("dense %v", x.dense != nil)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if x.first(int64(i%n)*c.stride) < 0 {
					b.Fatal("member not found")
				}
			}
		})
	}
}
