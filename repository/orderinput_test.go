package repository_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/repository"
)

// Issue 24: mount, warm and plan choose the order's input through one
// function, OrderInput. A mount opens a format-2 or format-3 dataset
// lazily (counts only); warm and plan hold it whole. For every order mode
// and every format, the input each gets computes the same order, sample
// for sample (a format-3 root's order once its pin has numbered it as the
// catalog does).
func TestOrderInputAgrees(t *testing.T) {
	src := synthSource(t, synth.Imbalanced(400, 5, 0.6, 200, 3000, 12))
	ctx := context.Background()
	modes := []struct {
		name string
		p    layout.Params
	}{
		{"global", layout.Params{Alpha: 1}},
		{"global alpha 0.3", layout.Params{Alpha: 0.3}},
		{"balanced, epoch size", layout.Params{Alpha: 0, EpochSize: 500}},
		{"global, pad", layout.Params{Alpha: 1, Tail: layout.Pad}},
		{"global, resumed", layout.Params{Alpha: 1, Skip: 7}},
		{"order version 1", layout.Params{Alpha: 1, Version: 1}},
		{"window 2", layout.Params{Alpha: 1, Window: 2}},
		{"affinity", layout.Params{Alpha: 1, Affinity: true}},
	}
	for _, format := range []int{1, 2, 3} {
		stores := ingestGroups(t, src, format, 2)
		whole, err := repository.Open(ctx, stores, "ds", repository.Options{})
		if err != nil {
			t.Fatal(err)
		}
		lazy, err := repository.Open(ctx, stores, "ds", repository.Options{LazyIndexes: true})
		if err != nil {
			t.Fatal(err)
		}
		if format >= 2 && lazy.Lazy == nil {
			t.Fatal("format 2 opened with LazyIndexes holds its indexes: the test compares nothing")
		}
		for _, mode := range modes {
			t.Run(fmt.Sprintf("format %d %s", format, mode.name), func(t *testing.T) {
				for epoch := range 2 {
					for rank := range 3 {
						p := mode.p
						p.Seed, p.Epoch, p.World, p.Rank, p.Batch = 17, epoch, 3, rank, 8
						var orders [2][]int64
						for i, ds := range []*repository.Dataset{whole, lazy} {
							o := orderOf(t, ds, p)
							orders[i] = o.Samples.Int64s()
							if repository.ByRoot(ds, p) {
								_, ids, err := ds.Lazy.PinRoot(ctx, o.Samples)
								if err != nil {
									t.Fatal(err)
								}
								orders[i] = ids.Int64s()
							}
						}
						if len(orders[0]) == 0 || !slices.Equal(orders[0], orders[1]) {
							t.Fatalf("epoch %d rank %d: %d samples held whole, %d from the lazy input, or they differ", epoch, rank, len(orders[0]), len(orders[1]))
						}
					}
				}
			})
		}
	}
}
