package dataset

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/errgroup"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/manifest"
)

// RootKey is the object key of a format-3 dataset's root in ingest
// ingestID: a copy on every store.
func RootKey(name, ingestID string) string { return fmt.Sprintf("%s/root/%s", name, ingestID) }

// GroupKey names group g's object in ingest ingestID of dataset name
// (format 3): a copy on every store.
func GroupKey(name, ingestID string, g int) string {
	return fmt.Sprintf("%s/group/%s/%08d", name, ingestID, g)
}

// RootInput is the order's input from a format-3 root: its per-group
// counts, nothing per shard or sample (see manifest.Root). Global orders of
// order version 2 are computed from it, the same samples in the same
// places as from the format-2 top of the same dataset.
func RootInput(r *manifest.Root) (*layout.Input, error) {
	in, err := layout.NewCountInputFunc(len(r.Groups), len(r.Strata), r.GroupCounts)
	if err != nil {
		return nil, err
	}
	return in, groupByTime(in, &r.Header)
}

// GroupReader finds where the samples of a format-3 order lie. It fetches
// each group object the first time one of its samples is asked for, checks
// it against the root, and keeps the last few it used: a rank asks about
// its batches in order, and the samples of a batch spread over as many
// groups as it has samples.
type GroupReader struct {
	root   *manifest.Root
	in     *layout.Input
	stores []backend.Store
	groups *lru.Cache[int, *manifest.Group]

	Fetches atomic.Int64 // group objects fetched and decoded
}

// NewGroupReader reads groups of r's dataset from stores, keeping up to
// keep decoded groups; in is RootInput(r).
func NewGroupReader(r *manifest.Root, in *layout.Input, stores []backend.Store, keep int) (*GroupReader, error) {
	c, err := lru.New[int, *manifest.Group](max(keep, 1))
	if err != nil {
		return nil, err
	}
	return &GroupReader{root: r, in: in, stores: stores, groups: c}, nil
}

// Locate is where sample x of the order lies: its shard, and its position
// in that shard.
func (gr *GroupReader) Locate(ctx context.Context, x int64) (shard, pos int, err error) {
	g, c, k, err := gr.in.Split(x)
	if err != nil {
		return 0, 0, err
	}
	grp, err := gr.Group(ctx, g)
	if err != nil {
		return 0, 0, err
	}
	return grp.Locate(c, k)
}

// Group is group g's object, from the first store whose copy is intact,
// starting with a different store for each group to spread the reads.
func (gr *GroupReader) Group(ctx context.Context, g int) (*manifest.Group, error) {
	if x, ok := gr.groups.Get(g); ok {
		return x, nil
	}
	if g < 0 || g >= len(gr.root.Groups) {
		return nil, fmt.Errorf("group %d of %d", g, len(gr.root.Groups))
	}
	ref := gr.root.Groups[g]
	key := GroupKey(gr.root.Name, gr.root.IngestID, g)
	var errs []error
	for k := range gr.stores {
		st := gr.stores[(g+k)%len(gr.stores)]
		b := make([]byte, ref.ObjectSize)
		err := st.ReadAt(ctx, key, b, 0)
		var x *manifest.Group
		if err == nil {
			x, err = manifest.DecodeGroup(b, gr.root, g)
		}
		if err == nil {
			gr.Fetches.Add(1)
			gr.groups.Add(g, x)
			return x, nil
		}
		errs = append(errs, fmt.Errorf("store %s: %s: %w", st, key, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("dataset %s: group %d's object: no intact copy on any store (%w)", gr.root.Name, g, errors.Join(errs...))
}

// Location is where a sample lies: its shard and its position in it.
type Location struct{ Shard, Pos int32 }

// LocateAll locates every sample of samples, fetching each group object
// they touch once, up to fetchers at a time: samples are visited group by
// group, whatever their order, so that a rank-epoch drawn from every group
// of the dataset holds only the groups being read.
func (gr *GroupReader) LocateAll(ctx context.Context, samples layout.Positions, fetchers int) ([]Location, error) {
	type member struct {
		slot    int32
		stratum int32
		k       int64
	}
	byGroup := map[int][]member{}
	for i, x := range samples.All() {
		g, c, k, err := gr.in.Split(x)
		if err != nil {
			return nil, err
		}
		byGroup[g] = append(byGroup[g], member{int32(i), int32(c), k})
	}
	groups := slices.Sorted(maps.Keys(byGroup))
	out := make([]Location, samples.Len())
	eg, ctx := errgroup.WithContext(ctx)
	eg.SetLimit(max(fetchers, 1))
	for _, g := range groups {
		eg.Go(func() error {
			x, err := gr.Group(ctx, g)
			if err != nil {
				return err
			}
			for _, m := range byGroup[g] {
				shard, pos, err := x.Locate(int(m.stratum), m.k)
				if err != nil {
					return err
				}
				out[m.slot] = Location{int32(shard), int32(pos)}
			}
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}
