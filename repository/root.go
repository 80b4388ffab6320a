package repository

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/singleflight"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/manifest"
)

// GroupKey names group g's object in ingest ingestID of dataset name
// (format 3): a copy on every store. The root is the dataset's manifest
// (ManifestKey).
func GroupKey(name, ingestID string, g int) string {
	return fmt.Sprintf("%s/group/%s/%08d", name, ingestID, g)
}

// GroupPrefix is the prefix of all group objects of a dataset.
func GroupPrefix(name string) string { return name + "/group/" }

// maxExpandedCounts bounds a format-3 dataset read as format 2 reads it:
// its shards times its strata, the counts held per node (2 bytes each at
// most in Top's dense rows, so 512 MiB).
const maxExpandedCounts = 1 << 28

// ExpandRoot gives a format-3 manifest its shards, from its group objects
// (each checked against the root, from whichever store has an intact copy),
// so that it is read, verified and repaired as format 2 is; any other
// manifest is returned as it is. It holds every shard's counts: a mount
// reads the groups as it needs them instead (LazyCatalog).
func ExpandRoot(ctx context.Context, stores []backend.Store, m *manifest.Manifest) (*manifest.Manifest, error) {
	m, _, err := expandRoot(ctx, stores, m, false)
	return m, err
}

// expandRoot is ExpandRoot; with lostOK, a group whose object has no
// intact copy on any store (every store answered) is listed in lost and
// stands in as placeholder shards, which loadIndexes then reports lost:
// verify and repair check and mend everything else.
func expandRoot(ctx context.Context, stores []backend.Store, m *manifest.Manifest, lostOK bool) (*manifest.Manifest, []int, error) {
	r := m.Root
	if r == nil || m.Top != nil {
		return m, nil, nil
	}
	if n := int64(r.NumShards()) * int64(len(r.Strata)); n > maxExpandedCounts {
		return nil, nil, fmt.Errorf("dataset %s: %d shards in %d strata: this reads every group object and would hold every shard's counts (%d, more than %d); a mount reads only the groups its ranks read, with the global order (no --window, no --affinity)",
			m.Name, r.NumShards(), len(r.Strata), n, maxExpandedCounts)
	}
	gr, err := NewGroupReader(r, nil, stores, 1)
	if err != nil {
		return nil, nil, err
	}
	var lostMu sync.Mutex // guards lost
	var lost []int
	// 16 groups fetched at a time, added in order and dropped: the decoded
	// groups never outgrow a batch of them.
	const batch = 16
	t := manifest.NewTopOf(r)
	for first := 0; first < len(r.Groups); first += batch {
		groups := make([]*manifest.Group, min(batch, len(r.Groups)-first))
		eg, ectx := errgroup.WithContext(ctx)
		for i := range groups {
			eg.Go(func() error {
				var err error
				groups[i], err = gr.fetch(ectx, first+i)
				if err != nil && lostOK && ectx.Err() == nil && !unavailable(err) {
					lostMu.Lock()
					lost = append(lost, first+i)
					lostMu.Unlock()
					groups[i], err = lostGroupPlaceholder(r, first+i), nil
				}
				return err
			})
		}
		if err := eg.Wait(); err != nil {
			return nil, nil, err
		}
		for _, x := range groups {
			if err := t.AddGroup(x); err != nil {
				return nil, nil, err
			}
		}
	}
	out := t.Manifest()
	out.Root = r
	slices.Sort(lost)
	return out, lost, nil
}

// lostGroupPlaceholder stands in for group g's lost object: its shards, of
// one placeholder sample each and no size, which nothing is checked
// against (their indexes are then lost too: see loadIndexes).
func lostGroupPlaceholder(r *manifest.Root, g int) *manifest.Group {
	x := manifest.NewGroup(r, g)
	counts := make([]int, len(r.Strata))
	counts[0] = 1
	for range r.Groups[g].Shards {
		x.AddShard(manifest.TopShard{}, counts)
	}
	return x
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
	flight singleflight.Group // one read of a group at a time: a rank-epoch and the next one's pin ask together

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
	v, err, _ := gr.flight.Do(fmt.Sprint(g), func() (any, error) {
		if x, ok := gr.groups.Get(g); ok {
			return x, nil
		}
		x, err := gr.fetch(ctx, g)
		if err != nil {
			return nil, err
		}
		gr.groups.Add(g, x)
		return x, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*manifest.Group), nil
}

// fetch reads and checks group g's object, keeping nothing.
func (gr *GroupReader) fetch(ctx context.Context, g int) (*manifest.Group, error) {
	if g < 0 || g >= len(gr.root.Groups) {
		return nil, fmt.Errorf("group %d of %d", g, len(gr.root.Groups))
	}
	x, err := firstIntact(ctx, gr.stores, g, func(st backend.Store) (*manifest.Group, error) {
		b, err := ReadGroupBytes(ctx, st, gr.root, g)
		if err != nil {
			return nil, err
		}
		x, err := manifest.DecodeGroup(b, gr.root, g)
		if err != nil {
			return nil, fmt.Errorf("store %s: %s: %w", st, GroupKey(gr.root.Name, gr.root.IngestID, g), err)
		}
		return x, nil
	})
	if err != nil && ctx.Err() == nil && !unavailable(err) {
		return nil, fmt.Errorf("%w: dataset %s: group %d's object: no intact copy on any store (%w)", ErrMetadataLost, gr.root.Name, g, err)
	}
	if err != nil {
		return nil, fmt.Errorf("dataset %s: group %d's object: no intact copy on any store (%w)", gr.root.Name, g, err)
	}
	gr.Fetches.Add(1)
	return x, nil
}

// Location is where a sample lies: its shard and its position in it. A
// sample of a lost group (see LocateAll) has Shard -1-g and Pos its place
// in group g, whose samples are numbered stratum by stratum.
type Location struct{ Shard, Pos int32 }

// LocateAll locates every sample of samples, fetching each group object
// they touch once, up to fetchers at a time: samples are visited group by
// group, whatever their order, so that a rank-epoch drawn from every group
// of the dataset holds only the groups being read. Each group object used
// is passed to seen, if set. With keepLost, the samples of a group whose
// object is lost on every store (ErrMetadataLost) are located in the group
// alone (see Location), and lost is called once per such group.
func (gr *GroupReader) LocateAll(ctx context.Context, samples layout.Positions, fetchers int, seen func(*manifest.Group), lost func(g int, err error) bool) ([]Location, error) {
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
			if err != nil && lost != nil && errors.Is(err, ErrMetadataLost) && lost(g, err) {
				row := make([]int, len(gr.root.Strata))
				gr.root.GroupCounts(g, row)
				start := make([]int64, len(row)) // the group's samples of stratum c start at start[c]
				for c := 1; c < len(row); c++ {
					start[c] = start[c-1] + int64(row[c-1])
				}
				for _, m := range byGroup[g] {
					out[m.slot] = Location{int32(-1 - g), int32(start[m.stratum] + m.k)}
				}
				return nil
			}
			if err != nil {
				return err
			}
			if seen != nil {
				seen(x)
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

// ReadGroupBytes reads store s's copy of group g's object and checks its
// size and checksum against the root.
func ReadGroupBytes(ctx context.Context, s backend.Store, r *manifest.Root, g int) ([]byte, error) {
	ref := r.Groups[g]
	return readChecked(ctx, s, GroupKey(r.Name, r.IngestID, g), ref.ObjectSize, ref.ObjectSum)
}
