package repository

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/manifest"
)

// shardTable is what a LazyCatalog knows of each shard before reading its
// index: its first sample (samples numbered shard by shard), its size, its
// sample count, its count per stratum and its index's size and checksum.
// Format 2 holds the table whole (topTable); format 3 fills it group by
// group, as the groups' samples are first needed (groupTable), so a node
// holds the groups its ranks read, not the dataset's millions of shards.
type shardTable interface {
	numShards() int
	samples() int64
	// shard is shard s's first sample and its TopShard. With row, it
	// writes the shard's count per stratum into row and gives its index's
	// size and checksum too; without, the TopShard's size and samples only
	// (format 3 keeps no more of a shard: the rest is read from its group
	// object again, when the shard's index is).
	shard(ctx context.Context, s int, row []int) (first int64, sh manifest.TopShard, err error)
	// shardOf is the shard holding sample i, and that shard's first sample.
	shardOf(ctx context.Context, i int64) (s int, first int64, err error)
}

// topTable is format 2's shard table: the top-level manifest, held whole.
type topTable struct {
	t     *manifest.Top
	first []int64 // [S+1]: first sample of each shard
}

func newTopTable(t *manifest.Top) *topTable {
	tt := &topTable{t: t, first: make([]int64, len(t.Shards)+1)}
	for s, sh := range t.Shards {
		tt.first[s+1] = tt.first[s] + int64(sh.NumSamples)
	}
	return tt
}

func (tt *topTable) numShards() int { return len(tt.t.Shards) }
func (tt *topTable) samples() int64 { return tt.first[len(tt.t.Shards)] }
func (tt *topTable) checkShard(s int) error {
	if s < 0 || s >= len(tt.t.Shards) {
		return fmt.Errorf("shard %d of %d", s, len(tt.t.Shards))
	}
	return nil
}

func (tt *topTable) shard(_ context.Context, s int, row []int) (int64, manifest.TopShard, error) {
	if err := tt.checkShard(s); err != nil {
		return 0, manifest.TopShard{}, err
	}
	if row != nil {
		tt.t.Counts(s, row)
	}
	return tt.first[s], tt.t.Shards[s], nil
}

func (tt *topTable) shardOf(_ context.Context, i int64) (int, int64, error) {
	if i < 0 || i >= tt.samples() {
		return 0, 0, fmt.Errorf("sample %d of %d", i, tt.samples())
	}
	s := sort.Search(len(tt.t.Shards), func(s int) bool { return tt.first[s+1] > i })
	return s, tt.first[s], nil
}

// groupTable is format 3's shard table. The root gives each group's first
// shard and first sample; a group's shards are read from its group object
// (checked against the root) when one of them is first asked about, and
// kept in compact form: 8 bytes a shard, its first sample and its size.
// Counts and index references are read from the decoded group objects, of
// which the GroupReader keeps the last few.
type groupTable struct {
	root  *manifest.Root
	gr    *GroupReader // its RootInput splits a root position into group, stratum and member
	first []int64      // [G+1]: first sample of each group

	mu     sync.Mutex
	groups []*groupShards // per group, nil until read
}

// groupShards is one group's shards, as a groupTable keeps them.
type groupShards struct {
	base int64    // the group's first sample
	rel  []uint32 // [n+1]: first sample of each shard, from base; nil when wide
	wide []int64  // [n+1]: the same, dataset-wide, for a group of 2^32 samples or more
	size []uint32 // shards are under 2^31 bytes (manifest.MaxShardSize)
}

// first is the first sample of the group's shard j; first(n) is the next
// group's first.
func (x *groupShards) first(j int) int64 {
	if x.rel != nil {
		return x.base + int64(x.rel[j])
	}
	return x.wide[j]
}

// find is the group's shard holding sample i, which the group holds.
func (x *groupShards) find(i int64) int {
	return sort.Search(len(x.size), func(j int) bool { return x.first(j+1) > i })
}

// groupKeep is the decoded group objects a groupTable keeps: counts are
// asked for shard after shard when indexes are fetched, group by group.
const groupKeep = 64

func newGroupTable(r *manifest.Root, stores []backend.Store) (*groupTable, error) {
	in, err := RootInput(r)
	if err != nil {
		return nil, err
	}
	gr, err := NewGroupReader(r, in, stores, groupKeep)
	if err != nil {
		return nil, err
	}
	gt := &groupTable{root: r, gr: gr, first: make([]int64, len(r.Groups)+1), groups: make([]*groupShards, len(r.Groups))}
	for g, x := range r.Groups {
		gt.first[g+1] = gt.first[g] + x.Samples
	}
	return gt, nil
}

func (gt *groupTable) numShards() int { return gt.root.NumShards() }
func (gt *groupTable) samples() int64 { return gt.first[len(gt.root.Groups)] }

// groupOf is the group holding shard s.
func (gt *groupTable) groupOf(s int) (int, error) {
	if s < 0 || s >= gt.numShards() {
		return 0, fmt.Errorf("shard %d of %d", s, gt.numShards())
	}
	return sort.Search(len(gt.root.Groups), func(g int) bool { return gt.root.FirstShard(g+1) > s }), nil
}

// shards is group g's shards, reading its object if no one has yet.
func (gt *groupTable) shards(ctx context.Context, g int) (*groupShards, error) {
	gt.mu.Lock()
	x := gt.groups[g]
	gt.mu.Unlock()
	if x != nil {
		return x, nil
	}
	obj, err := gt.gr.Group(ctx, g)
	if err != nil {
		return nil, err
	}
	return gt.keep(obj), nil
}

// keep records a decoded group object's shards in compact form.
func (gt *groupTable) keep(obj *manifest.Group) *groupShards {
	gt.mu.Lock()
	defer gt.mu.Unlock()
	if x := gt.groups[obj.Group]; x != nil {
		return x
	}
	n := len(obj.Shards)
	x := &groupShards{base: gt.first[obj.Group], size: make([]uint32, n)}
	if gt.root.Groups[obj.Group].Samples <= math.MaxUint32 {
		x.rel = make([]uint32, n+1)
		for j, sh := range obj.Shards {
			x.rel[j+1] = x.rel[j] + uint32(sh.NumSamples)
		}
	} else {
		x.wide = make([]int64, n+1)
		x.wide[0] = x.base
		for j, sh := range obj.Shards {
			x.wide[j+1] = x.wide[j] + int64(sh.NumSamples)
		}
	}
	for j, sh := range obj.Shards {
		x.size[j] = uint32(sh.Size)
	}
	gt.groups[obj.Group] = x
	return x
}

// loaded is the number of groups whose shards are held.
func (gt *groupTable) loaded() int {
	gt.mu.Lock()
	defer gt.mu.Unlock()
	n := 0
	for _, x := range gt.groups {
		if x != nil {
			n++
		}
	}
	return n
}

func (gt *groupTable) shard(ctx context.Context, s int, row []int) (int64, manifest.TopShard, error) {
	g, err := gt.groupOf(s)
	if err != nil {
		return 0, manifest.TopShard{}, err
	}
	x, err := gt.shards(ctx, g)
	if err != nil {
		return 0, manifest.TopShard{}, err
	}
	j := s - gt.root.FirstShard(g)
	if row != nil {
		obj, err := gt.gr.Group(ctx, g)
		if err != nil {
			return 0, manifest.TopShard{}, err
		}
		obj.Counts(j, row)
		return x.first(j), obj.Shards[j], nil
	}
	return x.first(j), manifest.TopShard{Size: int64(x.size[j]), NumSamples: int(x.first(j+1) - x.first(j))}, nil
}

func (gt *groupTable) shardOf(ctx context.Context, i int64) (int, int64, error) {
	if i < 0 || i >= gt.samples() {
		return 0, 0, fmt.Errorf("sample %d of %d", i, gt.samples())
	}
	g := sort.Search(len(gt.root.Groups), func(g int) bool { return gt.first[g+1] > i })
	x, err := gt.shards(ctx, g)
	if err != nil {
		return 0, 0, err
	}
	j := x.find(i)
	return gt.root.FirstShard(g) + j, x.first(j), nil
}

// translate turns root positions (the order computed from RootInput) into
// samples numbered shard by shard, as the catalog numbers them, reading
// each group object they touch once, up to 16 at a time. It also returns,
// per shard, the positions in it of the samples (what pin takes). lost, if
// set, may accept the samples of a group whose object is lost on every
// store: they are numbered in the group's range and returned under the
// key -1-g, as positions in the group.
func (gt *groupTable) translate(ctx context.Context, rootSamples layout.Positions, lost func(g int, err error) bool) (layout.Positions, map[int][]int32, error) {
	locs, err := gt.gr.LocateAll(ctx, rootSamples, 16, func(obj *manifest.Group) { gt.keep(obj) }, lost)
	if err != nil {
		return layout.Positions{}, nil, err
	}
	out := layout.MakePositions(len(locs))
	byShard := map[int][]int32{}
	for _, loc := range locs {
		s := int(loc.Shard)
		if s < 0 {
			// A lost group's sample: numbered within the group's range
			// (the catalog's numbering of it is in the lost object), and
			// pinned as lost under the key s = -1-g (see lostRows).
			out.Append(gt.first[-1-s] + int64(loc.Pos))
			byShard[s] = append(byShard[s], loc.Pos)
			continue
		}
		first, _, err := gt.shard(ctx, s, nil)
		if err != nil {
			return layout.Positions{}, nil, err
		}
		out.Append(first + int64(loc.Pos))
		byShard[s] = append(byShard[s], loc.Pos)
	}
	return out, byShard, nil
}
