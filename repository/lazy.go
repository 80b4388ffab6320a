package repository

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/singleflight"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/erasure"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/manifest"
	"github.com/shardfs/shardfs/verify"
)

// LazyCatalog serves the per-sample rows of a format-2 or format-3 dataset
// shard by shard: a shard's index is fetched and verified when the shard is
// first needed, not when the dataset is opened. In format 3 the shards
// themselves are known group by group: a group object is read when one of
// its samples is first needed (see shardTable).
//
// Whoever needs rows pins them (Pin): the pinned catalog holds them, and so
// does anything that keeps it (a rank-epoch's member table, a samples/
// directory). A pin of a few of a shard's samples — one rank's share in a
// global shuffle — keeps a copy of just those rows, so a node holds about
// what its ranks read, not the dataset. The catalog itself keeps only weak
// references to the pinned rows and the whole rows of the last shards it
// fetched. The read path and the prefetcher look rows up by sample
// (layout.Geometry, prefetch.DiskIndex); they only ever ask for pinned
// samples (TestLazyIndexMount counts), and should one not be, its shard's
// index is fetched again on the spot.
type LazyCatalog struct {
	h       *manifest.Header
	m       *manifest.Manifest // the header; in format 2, with per-shard sizes and sample ranges
	table   shardTable
	top     *topTable   // format 2 (table, for lookups on the read path without an interface call); nil in format 3
	groups  *groupTable // format 3; nil in format 2
	stores  []backend.Store
	log     *slog.Logger
	timeout time.Duration
	dense   bool // pins keep whole shards

	mu         sync.Mutex
	views      map[int][]weak.Pointer[shardRows] // per shard, the rows someone holds (format 3)
	shardViews [][]weak.Pointer[shardRows]       // the same in format 2, by shard: a read looks it up for every sample
	recent     *lru.Cache[int, *shardRows]       // whole rows of the last shards fetched
	flight     singleflight.Group
	lostLogged sync.Map // shard -> true: its lost metadata was logged

	tier IndexTier // nil without a disk tier

	// IndexLoads counts shard indexes fetched from the stores, TierHits
	// those read from the disk tier; Unpinned counts lookups of a sample
	// whose rows nobody held (each may fetch its index again).
	IndexLoads, TierHits, Unpinned atomic.Int64
}

// IndexTier keeps shard index objects across mounts: the disk tier.
type IndexTier interface {
	GetMeta(shard int) ([]byte, bool)
	PutMeta(shard int, b []byte) bool
}

// SetTier makes the catalog look for index objects in t before the stores,
// and keep there what it fetches. Every object read from it is checked
// against the top-level manifest like one from a store.
func (l *LazyCatalog) SetTier(t IndexTier) { l.tier = t }

// shardRows is one shard's index, or some of its rows, in the form lookups
// use: 24 bytes a sample plus its key. The block checksums are shared by
// every view of a shard.
type shardRows struct {
	shard int
	first int     // the shard's first sample
	n     int     // the shard's samples
	pos   []int32 // positions in the shard held, ascending; nil: every one
	sums  []uint32
	// Per held row.
	off, size, sum, stratum []uint32
	keyEnd                  []uint32 // end of each key in keys
	keys                    []byte
	fields                  []string // per held row, its field values joined; nil: no fields
	records                 [][]byte // per held row, its record table; nil: not records
	// lost: the shard's index has no intact copy on any store; the rows
	// know only each sample's stratum (from the top-level manifest's
	// counts), and a rank-epoch serves them as lost (layout.LostCatalog).
	lost bool
}

// newShardRows holds the rows of index x of the dataset's shard, whose
// first sample is first. x.Shard is the number its objects go by, which
// is not the shard's in a segment that numbers its shards on its own
// (manifest.Segment.Local).
func newShardRows(x *manifest.ShardIndex, shard, first int) *shardRows {
	n := len(x.Keys)
	r := &shardRows{shard: shard, first: first, n: n, sums: x.Sums, off: make([]uint32, n), size: x.Size, sum: x.Sum, stratum: x.Stratum, keyEnd: make([]uint32, n), fields: x.Fields, records: x.Records}
	total := 0
	for _, k := range x.Keys {
		total += len(k)
	}
	r.keys = make([]byte, 0, total)
	var at uint32
	for j, k := range x.Keys {
		r.off[j] = at
		at += x.Size[j]
		r.keys = append(r.keys, k...)
		r.keyEnd[j] = uint32(len(r.keys))
	}
	return r
}

// subset is a view of the rows at positions pos (ascending) of full rows r.
func (r *shardRows) subset(pos []int32) *shardRows {
	v := &shardRows{shard: r.shard, first: r.first, n: r.n, pos: pos, sums: r.sums}
	n := len(pos)
	v.off, v.size, v.sum, v.stratum, v.keyEnd = make([]uint32, n), make([]uint32, n), make([]uint32, n), make([]uint32, n), make([]uint32, n)
	for k, j := range pos {
		v.off[k], v.size[k], v.sum[k], v.stratum[k] = r.off[j], r.size[j], r.sum[j], r.stratum[j]
		v.keys = append(v.keys, r.key(int(j))...)
		v.keyEnd[k] = uint32(len(v.keys))
		if r.fields != nil {
			v.fields = append(v.fields, r.fields[j])
		}
		if r.records != nil {
			v.records = append(v.records, r.records[j])
		}
	}
	return v
}

// find is the row holding position j of the shard, if held.
func (r *shardRows) find(j int) (int, bool) {
	if r.pos == nil {
		return j, j >= 0 && j < len(r.off)
	}
	k := sort.Search(len(r.pos), func(k int) bool { return r.pos[k] >= int32(j) })
	return k, k < len(r.pos) && r.pos[k] == int32(j)
}

func (r *shardRows) key(k int) []byte {
	start := uint32(0)
	if k > 0 {
		start = r.keyEnd[k-1]
	}
	return r.keys[start:r.keyEnd[k]]
}

// bytes is what the rows hold in memory, the shared block checksums aside.
func (r *shardRows) bytes() int64 {
	n := int64(4*(len(r.pos)+len(r.off)+len(r.size)+len(r.sum)+len(r.stratum)+len(r.keyEnd)) + len(r.keys))
	for _, f := range r.fields {
		n += 16 + int64(len(f))
	}
	for _, t := range r.records {
		n += 24 + int64(len(t))
	}
	return n
}

// recentShards and recentBytes bound the whole rows the catalog keeps
// unpinned, so that pins of one shard's samples in turn fetch its index
// once: 64 shards, fewer when they would take more than 64 MiB (at about
// 48 bytes a sample).
const (
	recentShards = 64
	recentBytes  = 64 << 20
)

// newLazyCatalog is the catalog of a format-2 dataset, from its top-level
// manifest.
func newLazyCatalog(top *manifest.Top, stores []backend.Store, log *slog.Logger) (*LazyCatalog, error) {
	tt := newTopTable(top)
	l, err := newCatalogOf(&top.Header, top.Manifest(), tt, stores, log) // Manifest gives each shard's size and samples
	if err == nil {
		l.top, l.shardViews = tt, make([][]weak.Pointer[shardRows], len(top.Shards))
	}
	return l, err
}

// shardOf is the shard holding sample i and its first sample: a lookup of
// the read path, for every sample read.
func (l *LazyCatalog) shardOf(i int64) (int, int64, error) {
	if tt := l.top; tt != nil {
		return tt.shardOf(lookup, i)
	}
	return l.table.shardOf(lookup, i)
}

// NewRootCatalog is the catalog of a format-3 dataset, from its root: no
// group object is read until one of its samples is needed. Open gives one
// to a dataset opened with LazyIndexes.
func NewRootCatalog(r *manifest.Root, stores []backend.Store, log *slog.Logger) (*LazyCatalog, error) {
	gt, err := newGroupTable(r, stores)
	if err != nil {
		return nil, err
	}
	l, err := newCatalogOf(&r.Header, r.Manifest(), gt, stores, log)
	if err == nil {
		l.groups = gt
	}
	return l, err
}

func newCatalogOf(h *manifest.Header, m *manifest.Manifest, table shardTable, stores []backend.Store, log *slog.Logger) (*LazyCatalog, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &LazyCatalog{h: h, m: m, table: table, stores: stores, log: log, timeout: 2 * time.Minute, views: map[int][]weak.Pointer[shardRows]{}}
	perShard := 48 * (table.samples()/int64(max(1, table.numShards())) + 1)
	var err error
	if l.recent, err = lru.New[int, *shardRows](int(max(4, min(recentShards, recentBytes/perShard)))); err != nil {
		return nil, err
	}
	return l, nil
}

// Root reports whether the catalog is of a format-3 dataset, whose orders
// of RootInput number samples group by group (see PinRoot).
func (l *LazyCatalog) Root() bool { return l.groups != nil }

// GroupLoads is the number of format-3 group objects read (0 in format 2).
func (l *LazyCatalog) GroupLoads() int64 {
	if l.groups == nil {
		return 0
	}
	return l.groups.gr.Fetches.Load()
}

// GroupsHeld is the number of format-3 groups whose shards the catalog
// holds, of Groups.
func (l *LazyCatalog) GroupsHeld() (held, groups int) {
	if l.groups == nil {
		return 0, 0
	}
	return l.groups.loaded(), len(l.groups.root.Groups)
}

// PinWholeShards makes every pin keep its shards' whole rows: what a disk
// tier needs, which stores and serves shards sample by sample.
func (l *LazyCatalog) PinWholeShards() { l.dense = true }

// Manifest is the dataset's header: erasure parameters, strata with their
// counts and, in format 2, per shard its size and sample range, but no
// samples.
func (l *LazyCatalog) Manifest() *manifest.Manifest { return l.m }

// Samples is the dataset's number of samples.
func (l *LazyCatalog) Samples() int { return int(l.table.samples()) }

// lookup is the context of a lookup by sample or shard, which has none of
// its own: it reads nothing but a format-3 group object no pin has read,
// which the stores' request timeouts bound. (A context with a deadline per
// lookup would cost the read path a timer per sample.)
var lookup = context.Background()

// held calls f on the live views of shard s, newest first, until it
// returns true; dead references are dropped. f runs under the catalog's
// lock and must not call back into it.
func (l *LazyCatalog) held(s int, f func(*shardRows) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	vs := l.viewsOf(s)
	if len(vs) == 0 {
		return
	}
	dead := false
	for k := len(vs) - 1; k >= 0; k-- {
		r := vs[k].Value()
		if r == nil {
			dead = true
			continue
		}
		if f(r) {
			break
		}
	}
	if dead {
		l.setViews(s, slices.DeleteFunc(vs, func(w weak.Pointer[shardRows]) bool { return w.Value() == nil }))
	}
}

// viewsOf is the views of shard s; l.mu must be held.
func (l *LazyCatalog) viewsOf(s int) []weak.Pointer[shardRows] {
	if l.shardViews != nil {
		return l.shardViews[s]
	}
	return l.views[s]
}

// setViews sets the views of shard s; l.mu must be held.
func (l *LazyCatalog) setViews(s int, vs []weak.Pointer[shardRows]) {
	switch {
	case l.shardViews != nil:
		l.shardViews[s] = vs
	case len(vs) == 0:
		delete(l.views, s)
	default:
		l.views[s] = vs
	}
}

func (l *LazyCatalog) register(r *shardRows) {
	l.mu.Lock()
	l.setViews(r.shard, append(l.viewsOf(r.shard), weak.Make(r)))
	l.mu.Unlock()
}

// full returns shard s's whole rows, fetching its index if no one holds them.
func (l *LazyCatalog) full(ctx context.Context, s int) (*shardRows, error) {
	if r, ok := l.recent.Get(s); ok {
		return r, nil
	}
	var found *shardRows
	l.held(s, func(r *shardRows) bool {
		if r.pos == nil {
			found = r
		}
		return found != nil
	})
	if found != nil {
		l.recent.Add(s, found)
		return found, nil
	}
	v, err, _ := l.flight.Do(fmt.Sprint(s), func() (any, error) {
		if r, ok := l.recent.Get(s); ok {
			return r, nil
		}
		first, x, err := l.fetch(ctx, s)
		if err != nil {
			return nil, err
		}
		r := newShardRows(x, s, int(first))
		l.register(r)
		l.recent.Add(s, r)
		return r, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*shardRows), nil
}

// fetch reads shard s's index from the disk tier if it holds an intact
// copy, else from the first store whose copy is intact, starting with a
// different store for each shard to spread the reads. It returns the
// shard's first sample too.
func (l *LazyCatalog) fetch(ctx context.Context, s int) (int64, *manifest.ShardIndex, error) {
	row := make([]int, len(l.h.Strata))
	first, ref, err := l.table.shard(ctx, s, row)
	if err != nil {
		return 0, nil, fmt.Errorf("dataset %s: shard %d: %w", l.h.Name, s, err)
	}
	decode := func(b []byte) (*manifest.ShardIndex, error) {
		return manifest.DecodeShardIndex(b, l.h, s, ref, slices.Clone(row))
	}
	if l.tier != nil {
		if b, ok := l.tier.GetMeta(s); ok && int64(len(b)) == ref.IndexSize && manifest.IndexSum(b) == ref.IndexSum {
			if x, err := decode(b); err == nil {
				l.TierHits.Add(1)
				return first, x, nil
			}
		}
	}
	key := ShardIndexKey(l.h.Name, l.h, s)
	var errs []error
	for k := range l.stores {
		st := l.stores[(s+k)%len(l.stores)]
		b, err := readChecked(ctx, st, key, ref.IndexSize, ref.IndexSum)
		var x *manifest.ShardIndex
		if err == nil {
			if x, err = decode(b); err != nil {
				err = fmt.Errorf("store %s: %s: %w", st, key, err)
			}
		}
		if err == nil {
			l.IndexLoads.Add(1)
			if l.tier != nil {
				l.tier.PutMeta(s, b)
			}
			return first, x, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if ctx.Err() == nil && !slices.ContainsFunc(errs, unavailable) {
		return 0, nil, fmt.Errorf("%w: dataset %s: shard %d's index: no intact copy on any store (%w)", ErrMetadataLost, l.h.Name, s, errors.Join(errs...))
	}
	return 0, nil, fmt.Errorf("dataset %s: shard %d's index: no intact copy on any store (%w)", l.h.Name, s, errors.Join(errs...))
}

// ErrMetadataLost: every store answered, and none holds an intact copy of
// a shard's index (format 2) or of its group's object (format 3): the
// shard's samples can be neither checked nor served.
var ErrMetadataLost = errors.New("metadata lost on every store")

// lostShard reports whether err says the metadata of shard s (s >= 0) or
// of group -1-s (s < 0, format 3) is lost on every store (as opposed to
// stores not answering), logging it once.
func (l *LazyCatalog) lostShard(ctx context.Context, s int, err error) bool {
	lost := errors.Is(err, ErrMetadataLost)
	if lost {
		if _, seen := l.lostLogged.LoadOrStore(s, true); !seen {
			what, n := "shard", s
			if s < 0 {
				what, n = "group", -1-s
			}
			l.log.Error("a "+what+"'s metadata is lost on every store: its samples are left out of samples/, and the batches, epoch.tar bytes and index.csv rows that hold them fail to read (EIO); run shardfs verify", what, n, "err", err)
		}
	}
	return lost
}

// rowOf is the rows holding sample i and its row in them. A sample nobody
// holds has its shard's index fetched here; should that fail, ok is false
// and the caller must not serve the sample.
func (l *LazyCatalog) rowOf(i int) (r *shardRows, k int, ok bool) {
	s, first, err := l.shardOf(int64(i))
	if err != nil {
		l.log.Error("sample rows unavailable", "sample", i, "err", err)
		return nil, 0, false
	}
	j := i - int(first)
	l.held(s, func(v *shardRows) bool {
		if kk, has := v.find(j); has {
			r, k = v, kk
			return true
		}
		return false
	})
	if r != nil {
		return r, k, true
	}
	l.Unpinned.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	r, err = l.full(ctx, s)
	if err != nil {
		l.log.Error("sample rows unavailable", "sample", i, "shard", s, "err", err)
		return nil, 0, false
	}
	return r, j, true
}

// Complete reports whether every sample of shard s has its rows held: the
// prefetcher bridges a shard's samples, and the disk tier stores them,
// only then.
func (l *LazyCatalog) Complete(s int) bool {
	complete := false
	l.held(s, func(r *shardRows) bool {
		complete = r.pos == nil
		return complete
	})
	return complete
}

// Pin fetches the rows of samples (each shard's index once, many shards in
// parallel) and returns a catalog that holds them for as long as it is
// referenced.
func (l *LazyCatalog) Pin(ctx context.Context, samples layout.Positions) (*Pinned, error) {
	byShard := map[int][]int32{}
	for _, smp := range samples.All() {
		s, first, err := l.table.shardOf(ctx, smp)
		if err != nil {
			return nil, err
		}
		byShard[s] = append(byShard[s], int32(smp-first))
	}
	return l.pin(ctx, byShard)
}

// PinRoot is Pin of samples given as root positions (an order of a
// format-3 dataset computed from RootInput). It reads the group objects
// that hold them, once each, and returns the samples as the catalog
// numbers them, shard by shard, in the same order: what its other methods
// take.
func (l *LazyCatalog) PinRoot(ctx context.Context, rootSamples layout.Positions) (*Pinned, layout.Positions, error) {
	if l.groups == nil {
		return nil, layout.Positions{}, fmt.Errorf("dataset %s: root positions given for a dataset in format 2", l.h.Name)
	}
	ids, byShard, err := l.groups.translate(ctx, rootSamples, func(g int, err error) bool { return l.lostShard(ctx, -1-g, err) })
	if err != nil {
		return nil, layout.Positions{}, err
	}
	p, err := l.pin(ctx, byShard)
	if err != nil {
		return nil, layout.Positions{}, err
	}
	return p, ids, nil
}

// Number is PinRoot without the pin: the samples as the catalog numbers
// them, read from the group objects that hold them, and no shard index.
func (l *LazyCatalog) Number(ctx context.Context, rootSamples layout.Positions) (layout.Positions, error) {
	if l.groups == nil {
		return layout.Positions{}, fmt.Errorf("dataset %s: root positions given for a dataset in format 2", l.h.Name)
	}
	ids, _, err := l.groups.translate(ctx, rootSamples, nil)
	return ids, err
}

// PinStratum is Pin of every sample of stratum c, and those samples in
// order: the shards without any are not fetched.
func (l *LazyCatalog) PinStratum(ctx context.Context, c int) (*Pinned, layout.Positions, error) {
	row := make([]int, len(l.h.Strata))
	byShard := map[int][]int32{}
	firsts := map[int]int64{}
	var samples layout.Positions
	for s := range l.table.numShards() {
		first, _, err := l.table.shard(ctx, s, row)
		if err != nil && l.lostShard(ctx, s, err) {
			continue // its group object is lost: the directory shows the rest
		}
		if err != nil {
			return nil, layout.Positions{}, err
		}
		if row[c] == 0 {
			continue
		}
		// Within a shard, samples are stored stratum by stratum.
		at := 0
		for _, n := range row[:c] {
			at += n
		}
		for k := range row[c] {
			byShard[s] = append(byShard[s], int32(at+k))
		}
		firsts[s] = first
	}
	// Shards whose index is lost are left out: the directory shows the rest.
	p, err := l.pinWith(ctx, byShard, lostLeftOut)
	if err != nil {
		return nil, layout.Positions{}, err
	}
	for _, s := range slices.Sorted(maps.Keys(byShard)) {
		if p.rows[s] == nil {
			continue
		}
		for _, k := range byShard[s] {
			samples.Append(firsts[s] + int64(k))
		}
	}
	return p, samples, nil
}

// pin holds, per shard, the rows at the given positions: the whole rows
// when they are most of the shard (or PinWholeShards), else a copy of them.
// A shard whose index is lost on every store is pinned as lost (format 2:
// a rank-epoch serves every other sample; see layout.LostCatalog).
func (l *LazyCatalog) pin(ctx context.Context, byShard map[int][]int32) (*Pinned, error) {
	return l.pinWith(ctx, byShard, lostKept)
}

// lostPolicy says what a pin does with a shard whose metadata is lost on
// every store (ErrMetadataLost).
type lostPolicy int

const (
	lostLeftOut lostPolicy = iota // its samples are left out (a samples/ directory)
	lostKept                      // its samples are pinned as lost, where the counts say their strata
)

// pinWith is pin, with lost shards handled as policy says.
func (l *LazyCatalog) pinWith(ctx context.Context, byShard map[int][]int32, policy lostPolicy) (*Pinned, error) {
	p := &Pinned{l: l, rows: make(map[int]*shardRows, len(byShard))}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	// In shard order, so that a format-3 group's counts are read once.
	for _, s := range slices.Sorted(maps.Keys(byShard)) {
		pos := byShard[s]
		g.Go(func() error {
			slices.Sort(pos)
			pos = slices.Compact(pos)
			if s < 0 { // the samples of group -1-s, lost (see groupTable.translate)
				r, err := l.lostRows(gctx, s, pos)
				if err == nil {
					mu.Lock()
					p.rows[s] = r
					mu.Unlock()
				}
				return err
			}
			r, err := l.full(gctx, s)
			if err != nil && l.lostShard(gctx, s, err) {
				if policy == lostLeftOut {
					return nil
				}
				r, err = l.lostRows(gctx, s, pos)
				if err != nil {
					return err
				}
				mu.Lock()
				p.rows[s] = r
				mu.Unlock()
				return nil
			}
			if err != nil {
				return err
			}
			if !l.dense && 2*len(pos) < len(r.off) {
				r = r.subset(pos)
				l.register(r)
			}
			mu.Lock()
			p.rows[s] = r
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	p.byFirst = slices.SortedFunc(maps.Values(p.rows), func(a, b *shardRows) int { return a.first - b.first })
	return p, nil
}

// lostRows are the rows at positions pos (ascending) of shard s, whose
// index is lost, or with s < 0 of format 3's group -1-s, whose object is:
// only their strata are known, from the counts per stratum of the shard
// (top-level manifest) or the group (root), which store their samples
// stratum by stratum.
func (l *LazyCatalog) lostRows(ctx context.Context, s int, pos []int32) (*shardRows, error) {
	row := make([]int, len(l.h.Strata))
	var first int64
	var samples int
	if s < 0 {
		// Format 3's lost group -1-s: the root has its counts, and its
		// samples are numbered in its range stratum by stratum.
		g := -1 - s
		l.groups.root.GroupCounts(g, row)
		first, samples = l.groups.first[g], int(l.groups.first[g+1]-l.groups.first[g])
	} else {
		f, sh, err := l.table.shard(ctx, s, row)
		if err != nil {
			return nil, fmt.Errorf("dataset %s: shard %d: %w", l.h.Name, s, err)
		}
		first, samples = f, sh.NumSamples
	}
	n := len(pos)
	r := &shardRows{shard: s, first: int(first), n: samples, pos: pos, lost: true,
		off: make([]uint32, n), size: make([]uint32, n), sum: make([]uint32, n), stratum: make([]uint32, n), keyEnd: make([]uint32, n)}
	c, end := 0, 0 // stratum c holds the positions before end
	for k, j := range pos {
		for c < len(row) && int(j) >= end+row[c] {
			end += row[c]
			c++
		}
		if c == len(row) {
			return nil, fmt.Errorf("dataset %s: shard %d: position %d past its %d samples", l.h.Name, s, j, samples)
		}
		r.stratum[k] = uint32(c)
	}
	return r, nil
}

// Pinned is a catalog of some samples, whose rows it holds. Asking it
// about another sample is a bug: it panics.
type Pinned struct {
	l       *LazyCatalog
	rows    map[int]*shardRows
	byFirst []*shardRows // rows by their shard's first sample: what finds a sample's shard
}

func (p *Pinned) row(i int) (*shardRows, int) {
	at := sort.Search(len(p.byFirst), func(k int) bool { return p.byFirst[k].first > i }) - 1
	if at >= 0 {
		if r := p.byFirst[at]; i < r.first+r.n {
			if k, ok := r.find(i - r.first); ok {
				return r, k
			}
		}
	}
	panic(fmt.Sprintf("dataset: sample %d is not pinned", i))
}

// Bytes is what the pinned rows hold in memory, block checksums aside.
func (p *Pinned) Bytes() int64 {
	var n int64
	for _, r := range p.rows {
		n += r.bytes()
	}
	return n
}

func (p *Pinned) Key(i int) string      { return string(p.KeyBytes(i)) }
func (p *Pinned) KeyBytes(i int) []byte { r, k := p.row(i); return r.key(k) }
func (p *Pinned) Size(i int) int64      { r, k := p.row(i); return int64(r.size[k]) }
func (p *Pinned) Stratum(i int) int     { r, k := p.row(i); return int(r.stratum[k]) }
func (p *Pinned) StratumName(c int) string {
	return p.l.h.Strata[c].Name
}
func (p *Pinned) NumStrata() int  { return len(p.l.h.Strata) }
func (p *Pinned) Class(c int) int { return p.l.h.ClassOf(c) }

// Lost reports whether sample i's shard index is lost on every store
// (layout.LostCatalog): it has neither key nor size, and must not be read.
func (p *Pinned) Lost(i int) bool { r, _ := p.row(i); return r.lost }

// FieldNames are the listing's fields each sample carries (none: nil).
func (p *Pinned) FieldNames() []string { return p.l.h.Fields }

// Fields are sample i's field values, one per FieldNames.
func (p *Pinned) Fields(i int) []string {
	joined := ""
	if r, k := p.row(i); r.fields != nil {
		joined = r.fields[k]
	}
	return splitFields(joined, len(p.l.h.Fields))
}

// The LazyCatalog answers by sample for the read path, the prefetcher and
// the tree: see rowOf for a sample nobody holds.
var (
	_ layout.SampleCatalog = (*LazyCatalog)(nil)
	_ layout.Geometry      = (*LazyCatalog)(nil)
	_ layout.SampleCatalog = (*Pinned)(nil)
	_ layout.FieldCatalog  = (*Pinned)(nil)
	_ layout.LostCatalog   = (*Pinned)(nil)
)

func (l *LazyCatalog) KeyBytes(i int) []byte {
	if r, k, ok := l.rowOf(i); ok {
		return r.key(k)
	}
	return []byte(fmt.Sprintf("unavailable-sample-%d", i))
}
func (l *LazyCatalog) Key(i int) string { return string(l.KeyBytes(i)) }

// Size is sample i's size, or -1 when its rows cannot be fetched.
func (l *LazyCatalog) Size(i int) int64 {
	if r, k, ok := l.rowOf(i); ok {
		return int64(r.size[k])
	}
	return -1
}

func (l *LazyCatalog) Stratum(i int) int {
	if r, k, ok := l.rowOf(i); ok {
		return int(r.stratum[k])
	}
	return 0
}
func (l *LazyCatalog) StratumName(c int) string { return l.h.Strata[c].Name }
func (l *LazyCatalog) Class(c int) int          { return l.h.ClassOf(c) }
func (l *LazyCatalog) NumStrata() int           { return len(l.h.Strata) }

// FragSize is the size of each of shard's fragments; 0 when a format-3
// shard's group cannot be read (every read of it then fails).
func (l *LazyCatalog) FragSize(shard int) int64 {
	if l.top != nil {
		return l.m.FragSize(shard)
	}
	_, sh, err := l.table.shard(lookup, shard, nil)
	if err != nil {
		l.log.Error("shard unavailable", "shard", shard, "err", err)
		return 0
	}
	return l.fragSize(sh)
}

func (l *LazyCatalog) fragSize(sh manifest.TopShard) int64 {
	return (sh.Size + int64(l.h.Data) - 1) / int64(l.h.Data)
}

// ShardSamples is shard's range of samples; none when a format-3 shard's
// group cannot be read.
func (l *LazyCatalog) ShardSamples(shard int) (first, n int) {
	f, sh, err := l.table.shard(lookup, shard, nil)
	if err != nil {
		l.log.Error("shard unavailable", "shard", shard, "err", err)
		return 0, 0
	}
	return int(f), sh.NumSamples
}

// Locate is where sample i lies. When its rows cannot be fetched, the
// size is -1 and the offset the shard's end: every read of it fails.
func (l *LazyCatalog) Locate(i int) (shard int, off, size int64) {
	if r, k, ok := l.rowOf(i); ok {
		return r.shard, int64(r.off[k]), int64(r.size[k])
	}
	s, _, err := l.shardOf(int64(i))
	if err != nil {
		return 0, 0, -1
	}
	_, sh, err := l.table.shard(lookup, s, nil)
	if err != nil {
		return s, 0, -1
	}
	return s, sh.Size, -1
}

// SampleSum is sample i's checksum; when its rows cannot be fetched, a
// value no empty read matches.
func (l *LazyCatalog) SampleSum(i int) uint32 {
	if r, k, ok := l.rowOf(i); ok {
		return r.sum[k]
	}
	return ^uint32(0)
}

// readView is the erasure view of shard s and rows that hold every sample
// of [off, off+n) when someone holds such rows, for the read path; with no
// rows of the shard held, its index is fetched.
func (l *LazyCatalog) readView(ctx context.Context, s int, off, n int64) (*erasure.Shard, *shardRows, error) {
	var r *shardRows
	l.held(s, func(v *shardRows) bool {
		if r == nil {
			r = v // any view's block checksums will do
		}
		if _, _, ok := v.rows().wholeSamples(off, n); ok {
			r = v
			return true
		}
		return false
	})
	if r == nil {
		var err error
		if r, err = l.full(ctx, s); err != nil {
			return nil, nil, err
		}
	}
	frag := int64(0)
	if l.top != nil {
		frag = l.m.FragSize(s)
	} else {
		_, sh, err := l.table.shard(ctx, s, nil)
		if err != nil {
			return nil, nil, err
		}
		frag = l.fragSize(sh)
	}
	return &erasure.Shard{ID: s, FragSize: frag, Sums: r.sums}, r, nil
}

// rows is what a range read needs of the rows held.
func (r *shardRows) rows() rows { return rows{verify.Samples{Off: r.off, Size: r.size, Sum: r.sum}} }
