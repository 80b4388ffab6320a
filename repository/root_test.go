package repository

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/manifest"
)

// TestRootOrderIsTopOrder: the order computed from a format-3 root, each
// sample located through its group's object read from the stores, serves
// the same shards and positions, in the same order, as the order computed
// from the same dataset's format-2 top. One store holds damaged copies of
// some group objects; they are read from another.
func TestRootOrderIsTopOrder(t *testing.T) {
	ctx := context.Background()
	for trial, tc := range []struct{ shards, strata, group int }{{1, 3, 1}, {37, 9, 4}, {120, 25, 16}, {300, 60, 1024}} {
		top := synth.SkewedTop(uint64(trial), tc.shards, tc.strata)
		root, objs, err := manifest.RootOf(top, tc.group)
		if err != nil {
			t.Fatal(err)
		}
		var stores []backend.Store
		for i := range 3 {
			s, err := backend.NewLocal(filepath.Join(t.TempDir(), fmt.Sprint("s", i)))
			if err != nil {
				t.Fatal(err)
			}
			stores = append(stores, s)
		}
		for g, b := range objs {
			for i, s := range stores {
				put := b
				if i == g%3 && g%2 == 0 {
					// The first store this group is read from holds a damaged copy.
					put = append([]byte(nil), b...)
					put[len(put)-1] ^= 1
				}
				if err := s.Put(ctx, GroupKey(root.Name, root.IngestID, g), put); err != nil {
					t.Fatal(err)
				}
			}
		}
		topIn, err := TopInput(top)
		if err != nil {
			t.Fatal(err)
		}
		rootIn, err := RootInput(root)
		if err != nil {
			t.Fatal(err)
		}
		shardFirst := make([]int64, len(top.Shards)+1)
		for s, sh := range top.Shards {
			shardFirst[s+1] = shardFirst[s] + int64(sh.NumSamples)
		}
		gr, err := NewGroupReader(root, rootIn, stores, 4)
		if err != nil {
			t.Fatal(err)
		}
		checked := 0
		for _, p := range []layout.Params{
			{Seed: 5, World: 3, Rank: 1, Batch: 8, Alpha: 1},
			{Seed: 6, World: 2, Rank: 0, Batch: 5, Alpha: 0.5, Tail: layout.Pad, Epoch: 1},
			{Seed: 7, World: 1, Batch: 3, Alpha: 0, Skip: 2},
		} {
			a, errA := layout.Order(topIn, p)
			b, errB := layout.Order(rootIn, p)
			if (errA == nil) != (errB == nil) {
				t.Fatalf("trial %d %+v: errors %v and %v", trial, p, errA, errB)
			}
			if errA != nil {
				continue
			}
			if a.Batches != b.Batches || a.Samples.Len() != b.Samples.Len() {
				t.Fatalf("trial %d %+v: %d and %d batches", trial, p, a.Batches, b.Batches)
			}
			for i := range a.Samples.Len() {
				x := a.Samples.At(i)
				wantShard := 0
				for shardFirst[wantShard+1] <= x {
					wantShard++
				}
				wantPos := int(x - shardFirst[wantShard])
				shard, pos, err := gr.Locate(ctx, b.Samples.At(i))
				if err != nil || shard != wantShard || pos != wantPos {
					t.Fatalf("trial %d %+v: slot %d is shard %d position %d from the top, %d %d from the root (%v)", trial, p, i, wantShard, wantPos, shard, pos, err)
				}
				checked++
			}
		}
		if checked == 0 {
			t.Fatalf("trial %d: no order to compare", trial)
		}
		if n := gr.Fetches.Load(); n < int64(len(root.Groups)) && len(root.Groups) <= 4 {
			t.Fatalf("trial %d: %d group fetches for %d groups", trial, n, len(root.Groups))
		}
	}
}
