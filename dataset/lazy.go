package dataset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
)

// LazyCatalog serves the per-sample rows of a format-2 dataset shard by
// shard: a shard's index is fetched and verified when the shard is first
// needed, not when the dataset is opened, so a node holds the rows of the
// shards it reads and nothing per sample of the others.
//
// Whoever needs rows pins them (Pin): the pinned catalog holds its shards'
// rows, and so does anything that keeps it (a rank-epoch's member table, a
// samples/ directory). The catalog itself keeps only weak references and a
// few recently used shards, so rows nobody pins are collected, and memory
// follows the rank-epochs and directories in use. The read path and the
// prefetcher look rows up by sample (layout.Geometry, prefetch.DiskIndex);
// they only ever ask for samples of pinned shards (TestLazyMountPinsEveryRead
// counts), and should one not be, its index is fetched again on the spot.
type LazyCatalog struct {
	top        *manifest.Top
	m          *manifest.Manifest // the header, with per-shard sizes and sample ranges
	shardFirst []int64            // [S+1]: first sample of each shard
	stores     []backend.Store
	log        *slog.Logger
	timeout    time.Duration

	mu     sync.Mutex
	rows   []weak.Pointer[shardRows]
	recent *lru.Cache[int, *shardRows] // strong references to the last shards used
	flight singleflight.Group

	// IndexLoads counts shard indexes fetched; Unpinned counts lookups of a
	// sample whose shard nobody pinned (each may fetch its index again).
	IndexLoads atomic.Int64
	Unpinned   atomic.Int64
}

// shardRows is one shard's index in the form lookups use: 16 bytes a
// sample plus its key.
type shardRows struct {
	shard   int
	first   int      // the shard's first sample
	sums    []uint32 // block checksums (erasure.Shard.Sums)
	off     []uint32 // [n+1]: offsets in the shard; sample j's size is off[j+1]-off[j]
	sum     []uint32 // sample checksums
	stratum []uint32
	keyEnd  []uint32 // [n]: end of key j in keys
	keys    []byte
}

func newShardRows(x *manifest.ShardIndex, first int) *shardRows {
	n := len(x.Keys)
	r := &shardRows{shard: x.Shard, first: first, sums: x.Sums, off: make([]uint32, n+1), sum: x.Sum, stratum: x.Stratum, keyEnd: make([]uint32, n)}
	total := 0
	for _, k := range x.Keys {
		total += len(k)
	}
	r.keys = make([]byte, 0, total)
	for j, k := range x.Keys {
		r.off[j+1] = r.off[j] + x.Size[j]
		r.keys = append(r.keys, k...)
		r.keyEnd[j] = uint32(len(r.keys))
	}
	return r
}

func (r *shardRows) key(j int) []byte {
	start := uint32(0)
	if j > 0 {
		start = r.keyEnd[j-1]
	}
	return r.keys[start:r.keyEnd[j]]
}

// bytes is what the rows hold in memory.
func (r *shardRows) bytes() int64 {
	return int64(4*(len(r.sums)+len(r.off)+len(r.sum)+len(r.stratum)+len(r.keyEnd)) + len(r.keys))
}

// recentShards is how many shards the catalog keeps without a pin, so that
// a read of an unpinned shard's samples one after another fetches its
// index once.
const recentShards = 64

func newLazyCatalog(top *manifest.Top, stores []backend.Store, log *slog.Logger) (*LazyCatalog, error) {
	m := top.Header()
	l := &LazyCatalog{top: top, m: m, stores: stores, log: log, timeout: 2 * time.Minute,
		shardFirst: make([]int64, len(top.Shards)+1), rows: make([]weak.Pointer[shardRows], len(top.Shards))}
	var err error
	if l.recent, err = lru.New[int, *shardRows](recentShards); err != nil {
		return nil, err
	}
	for s, sh := range top.Shards {
		m.Shards[s] = manifest.Shard{Size: sh.Size, FirstSample: int(l.shardFirst[s]), NumSamples: sh.NumSamples}
		l.shardFirst[s+1] = l.shardFirst[s] + int64(sh.NumSamples)
	}
	return l, nil
}

// Manifest is the dataset's header: erasure parameters, strata with their
// counts, and per shard its size and sample range, but no samples.
func (l *LazyCatalog) Manifest() *manifest.Manifest { return l.m }

// Samples is the dataset's number of samples.
func (l *LazyCatalog) Samples() int { return int(l.shardFirst[len(l.top.Shards)]) }

// shardOf is the shard holding sample i.
func (l *LazyCatalog) shardOf(i int) int {
	return sort.Search(len(l.top.Shards), func(s int) bool { return l.shardFirst[s+1] > int64(i) })
}

// load returns shard s's rows, fetching its index if no one holds them.
func (l *LazyCatalog) load(ctx context.Context, s int) (*shardRows, error) {
	if r := l.cached(s); r != nil {
		return r, nil
	}
	v, err, _ := l.flight.Do(fmt.Sprint(s), func() (any, error) {
		if r := l.cached(s); r != nil {
			return r, nil
		}
		x, err := l.fetch(ctx, s)
		if err != nil {
			return nil, err
		}
		r := newShardRows(x, int(l.shardFirst[s]))
		l.IndexLoads.Add(1)
		l.mu.Lock()
		l.rows[s] = weak.Make(r)
		l.mu.Unlock()
		l.recent.Add(s, r)
		return r, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*shardRows), nil
}

func (l *LazyCatalog) cached(s int) *shardRows {
	l.mu.Lock()
	r := l.rows[s].Value()
	l.mu.Unlock()
	if r != nil {
		l.recent.Add(s, r)
	}
	return r
}

// fetch reads shard s's index from the first store whose copy is intact,
// starting with a different store for each shard to spread the reads.
func (l *LazyCatalog) fetch(ctx context.Context, s int) (*manifest.ShardIndex, error) {
	var errs []error
	for k := range l.stores {
		st := l.stores[(s+k)%len(l.stores)]
		x, err := readIndex(ctx, st, l.top, s)
		if err == nil {
			return x, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("dataset %s: shard %d's index: no intact copy on any store (%w)", l.top.Name, s, errors.Join(errs...))
}

// rowOf is sample i's shard rows and its position in them. A sample of a
// shard nobody pinned has its index fetched here; should that fail, ok is
// false and the caller must not serve the sample.
func (l *LazyCatalog) rowOf(i int) (r *shardRows, j int, ok bool) {
	s := l.shardOf(i)
	if r = l.cached(s); r == nil {
		l.Unpinned.Add(1)
		ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
		defer cancel()
		var err error
		if r, err = l.load(ctx, s); err != nil {
			l.log.Error("sample rows unavailable", "sample", i, "shard", s, "err", err)
			return nil, 0, false
		}
	}
	return r, i - r.first, true
}

// Pin fetches the rows of every shard that holds one of samples (in
// parallel, each index once) and returns a catalog that holds them for as
// long as it is referenced.
func (l *LazyCatalog) Pin(ctx context.Context, samples []int32) (*Pinned, error) {
	seen := make(map[int]bool)
	var shards []int
	for _, smp := range samples {
		if s := l.shardOf(int(smp)); !seen[s] {
			seen[s] = true
			shards = append(shards, s)
		}
	}
	slices.Sort(shards)
	return l.pinShards(ctx, shards)
}

// PinStratum is Pin of every sample of stratum c, and those samples in
// order: the shards without any are not fetched.
func (l *LazyCatalog) PinStratum(ctx context.Context, c int) (*Pinned, []int32, error) {
	row := make([]int, len(l.top.Strata))
	var shards []int
	var samples []int32
	for s := range l.top.Shards {
		l.top.Counts(s, row)
		if row[c] == 0 {
			continue
		}
		shards = append(shards, s)
		// Within a shard, samples are stored stratum by stratum.
		at := int(l.shardFirst[s])
		for _, n := range row[:c] {
			at += n
		}
		for k := range row[c] {
			samples = append(samples, int32(at+k))
		}
	}
	p, err := l.pinShards(ctx, shards)
	return p, samples, err
}

func (l *LazyCatalog) pinShards(ctx context.Context, shards []int) (*Pinned, error) {
	p := &Pinned{l: l, rows: make(map[int]*shardRows, len(shards))}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, s := range shards {
		g.Go(func() error {
			r, err := l.load(gctx, s)
			if err != nil {
				return err
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
	return p, nil
}

// Pinned is a catalog of the samples of some shards, whose rows it holds.
// Asking it about a sample of another shard is a bug: it panics.
type Pinned struct {
	l    *LazyCatalog
	rows map[int]*shardRows
}

func (p *Pinned) row(i int) (*shardRows, int) {
	s := p.l.shardOf(i)
	r := p.rows[s]
	if r == nil {
		panic(fmt.Sprintf("dataset: sample %d of shard %d is not pinned", i, s))
	}
	return r, i - r.first
}

// Bytes is what the pinned rows hold in memory.
func (p *Pinned) Bytes() int64 {
	var n int64
	for _, r := range p.rows {
		n += r.bytes()
	}
	return n
}

func (p *Pinned) Key(i int) string      { return string(p.KeyBytes(i)) }
func (p *Pinned) KeyBytes(i int) []byte { r, j := p.row(i); return r.key(j) }
func (p *Pinned) Size(i int) int64      { r, j := p.row(i); return int64(r.off[j+1] - r.off[j]) }
func (p *Pinned) Stratum(i int) int     { r, j := p.row(i); return int(r.stratum[j]) }
func (p *Pinned) StratumName(c int) string {
	return p.l.top.Strata[c].Name
}
func (p *Pinned) NumStrata() int { return len(p.l.top.Strata) }

// The LazyCatalog answers by sample for the read path, the prefetcher and
// the tree: see rowOf for a sample whose shard nobody pinned.
var (
	_ layout.Catalog  = (*LazyCatalog)(nil)
	_ layout.Geometry = (*LazyCatalog)(nil)
	_ layout.Catalog  = (*Pinned)(nil)
)

func (l *LazyCatalog) KeyBytes(i int) []byte {
	if r, j, ok := l.rowOf(i); ok {
		return r.key(j)
	}
	return []byte(fmt.Sprintf("unavailable-sample-%d", i))
}
func (l *LazyCatalog) Key(i int) string { return string(l.KeyBytes(i)) }

// Size is sample i's size, or -1 when its rows cannot be fetched.
func (l *LazyCatalog) Size(i int) int64 {
	if r, j, ok := l.rowOf(i); ok {
		return int64(r.off[j+1] - r.off[j])
	}
	return -1
}

func (l *LazyCatalog) Stratum(i int) int {
	if r, j, ok := l.rowOf(i); ok {
		return int(r.stratum[j])
	}
	return 0
}
func (l *LazyCatalog) StratumName(c int) string { return l.top.Strata[c].Name }
func (l *LazyCatalog) NumStrata() int           { return len(l.top.Strata) }
func (l *LazyCatalog) FragSize(shard int) int64 { return l.m.FragSize(shard) }
func (l *LazyCatalog) ShardSamples(shard int) (first, n int) {
	return int(l.shardFirst[shard]), l.top.Shards[shard].NumSamples
}

// Locate is where sample i lies. When its rows cannot be fetched, the
// size is -1 and the offset the shard's end: every read of it fails.
func (l *LazyCatalog) Locate(i int) (shard int, off, size int64) {
	if r, j, ok := l.rowOf(i); ok {
		return r.shard, int64(r.off[j]), int64(r.off[j+1] - r.off[j])
	}
	s := l.shardOf(i)
	return s, l.top.Shards[s].Size, -1
}

// SampleSum is sample i's checksum; when its rows cannot be fetched, a
// value no empty read matches.
func (l *LazyCatalog) SampleSum(i int) uint32 {
	if r, j, ok := l.rowOf(i); ok {
		return r.sum[j]
	}
	return ^uint32(0)
}

// shard is the erasure view of shard s and its rows, for the read path.
func (l *LazyCatalog) shard(ctx context.Context, s int) (*erasure.Shard, *shardRows, error) {
	r, err := l.load(ctx, s)
	if err != nil {
		return nil, nil, err
	}
	return &erasure.Shard{ID: s, FragSize: l.m.FragSize(s), Sums: r.sums}, r, nil
}

// wholeSamples reports whether [off, off+n) of r's shard is exactly its
// samples [first, last) (positions in the shard).
func (r *shardRows) wholeSamples(off, n int64) (first, last int, ok bool) {
	count := len(r.off) - 1
	first = sort.Search(count+1, func(j int) bool { return int64(r.off[j]) >= off })
	if first == count || int64(r.off[first]) != off {
		return 0, 0, false
	}
	end := off + n
	last = first + sort.Search(count+1-first, func(j int) bool { return int64(r.off[first+j]) >= end })
	return first, last, last <= count && int64(r.off[last]) == end
}
