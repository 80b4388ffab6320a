package repository

import (
	"context"
	"math"
	"testing"

	"github.com/shardfs/shardfs/manifest"
)

// A group table keeps a group's shards' first samples in 4 bytes each from
// the group's first, and in 8 once the group holds 2^32 samples or more:
// both find every shard's first sample and the shard of a sample past
// 2^32, in both kinds of group.
func TestGroupTableFirstSamples(t *testing.T) {
	const big = manifest.MaxShardSize // samples of one byte, the most a shard holds
	r := &manifest.Root{Header: manifest.Header{Name: "ds", Data: 1, Parity: 0, BlockSize: 4096, Stores: []string{"a"}}}
	r.Strata = []manifest.Stratum{{Name: "a"}}
	groups := [][]int{{big, big, big}, {5, big, 7}} // a wide group, then a narrow one
	for _, shards := range groups {
		var n int64
		for _, k := range shards {
			n += int64(k)
		}
		r.AddGroup(manifest.RootGroup{Shards: len(shards), Size: n}, []int64{n})
	}
	gt := &groupTable{root: r, first: []int64{0}, groups: make([]*groupShards, len(groups))}
	for g := range r.Groups {
		gt.first = append(gt.first, gt.first[g]+r.Groups[g].Samples)
	}
	var want, sizes []int64 // each shard's first sample and size
	at := int64(0)
	for g, shards := range groups {
		x := manifest.NewGroup(r, g)
		for _, k := range shards {
			x.AddShard(manifest.TopShard{Size: int64(k)}, []int{k})
			want, sizes = append(want, at), append(sizes, int64(k))
			at += int64(k)
		}
		kept := gt.keep(x)
		if wide := kept.wide != nil; wide != (r.Groups[g].Samples > math.MaxUint32) {
			t.Fatalf("group %d of %d samples: wide %v", g, r.Groups[g].Samples, wide)
		}
	}
	for s, first := range want {
		got, sh, err := gt.shard(context.Background(), s, nil)
		if err != nil || got != first || sh.Size != sizes[s] || int64(sh.NumSamples) != sizes[s] {
			t.Fatalf("shard %d: first sample %d, %+v (%v); want %d, %d samples of one byte", s, got, sh, err, first, sizes[s])
		}
		for _, i := range []int64{first, first + int64(sh.NumSamples) - 1} {
			if sOf, f, err := gt.shardOf(context.Background(), i); err != nil || sOf != s || f != first {
				t.Fatalf("sample %d: shard %d from %d (%v), want shard %d from %d", i, sOf, f, err, s, first)
			}
		}
	}
	if at <= 1<<32 {
		t.Fatalf("%d samples: the test needs some past 2^32", at)
	}
}
