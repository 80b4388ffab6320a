package repository_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/repository"
)

// indexCounter counts the reads of shard index objects, per shard key; or,
// with part set, of the objects whose key holds part.
type indexCounter struct {
	backend.Store
	part  string
	mu    sync.Mutex
	reads map[string]int
}

func (c *indexCounter) ReadAt(ctx context.Context, key string, p []byte, off int64) error {
	part := c.part
	if part == "" {
		part = "/index/"
	}
	if strings.Contains(key, part) {
		c.mu.Lock()
		c.reads[key]++
		c.mu.Unlock()
	}
	return c.Store.ReadAt(ctx, key, p, off)
}

// countReads wraps stores so that the reads of objects whose key holds
// part are counted; reads gives the count over all of them.
func countReads(stores []backend.Store, part string) (counted []backend.Store, reads func() int) {
	counters := make([]*indexCounter, len(stores))
	for i, s := range stores {
		counters[i] = &indexCounter{Store: s, part: part, reads: map[string]int{}}
		counted = append(counted, counters[i])
	}
	return counted, func() int {
		n := 0
		for _, c := range counters {
			n += c.total()
		}
		return n
	}
}

func (c *indexCounter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.reads {
		n += v
	}
	return n
}

// Issue 13: a format-2 dataset opened with LazyIndexes reads no shard index
// at open; pinning a rank-epoch's samples fetches each of their shards'
// indexes once, and nothing else; the pinned rows, the lookups by sample
// and the bytes read agree with the dataset opened whole.
func TestLazyIndexesFetchOnlyWhatIsPinned(t *testing.T) {
	src := synthSource(t, synth.Imbalanced(400, 4, 0.6, 200, 3000, 9))
	ctx := context.Background()
	stores := ingestFormat(t, src, 2)
	whole, err := repository.Open(ctx, stores, "ds", repository.Options{})
	if err != nil {
		t.Fatal(err)
	}
	counted, reads := countReads(stores, "/index/")
	lazy, err := repository.Open(ctx, counted, "ds", repository.Options{LazyIndexes: true})
	if err != nil {
		t.Fatal(err)
	}
	l := lazy.Lazy
	if l == nil || lazy.Manifest.Samples.Len() != 0 || reads() != 0 {
		t.Fatalf("lazy open: catalog %v, %d samples loaded, %d index reads; want a catalog, 0 and 0", l != nil, lazy.Manifest.Samples.Len(), reads())
	}
	m := whole.Manifest
	if l.Samples() != m.Samples.Len() || len(lazy.Manifest.Shards) != len(m.Shards) {
		t.Fatalf("lazy: %d samples in %d shards, whole: %d in %d", l.Samples(), len(lazy.Manifest.Shards), m.Samples.Len(), len(m.Shards))
	}
	for s, sh := range lazy.Manifest.Shards {
		w := m.Shards[s]
		if sh.Size != w.Size || sh.FirstSample != w.FirstSample || sh.NumSamples != w.NumSamples {
			t.Fatalf("shard %d: lazy %+v, whole %+v", s, sh, w)
		}
	}
	if len(m.Shards) < 8 {
		t.Fatalf("%d shards: the test needs several", len(m.Shards))
	}

	// Rank 1 of 4, order from the counts alone.
	in, err := repository.TopInput(lazy.Manifest.Top)
	if err != nil {
		t.Fatal(err)
	}
	o, err := layout.Order(in, layout.Params{Seed: 3, World: 4, Rank: 1, Batch: 8, Alpha: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	shardsOf := func(samples layout.Positions) int {
		in := map[uint32]bool{}
		for _, smp := range samples.All() {
			in[m.Samples.Shard[smp]] = true
		}
		return len(in)
	}
	// One batch first: a few shards, not all.
	batch := o.BatchSamples(0)
	if _, err := l.Pin(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if got, want := reads(), shardsOf(batch); got != want || want >= len(m.Shards) {
		t.Fatalf("pinning one batch of %d samples: %d index reads; its samples lie in %d of %d shards", batch.Len(), got, want, len(m.Shards))
	}
	// Then the whole rank-epoch: each shard's index once in all.
	shards := shardsOf(o.Samples)
	p, err := l.Pin(ctx, o.Samples)
	if err != nil {
		t.Fatal(err)
	}
	if got := reads(); got != shards || l.IndexLoads.Load() != int64(shards) {
		t.Fatalf("pinning rank 1's epoch: %d index reads, %d loads; its samples lie in %d shards", got, l.IndexLoads.Load(), shards)
	}
	// A quarter of each shard is pinned as a copy of those rows only.
	keyBytes := 0
	for s := range m.Shards {
		for i := m.Shards[s].FirstSample; i < m.Shards[s].FirstSample+m.Shards[s].NumSamples; i++ {
			keyBytes += len(m.Samples.Key(i))
		}
	}
	wholeRows := int64(20*m.Samples.Len() + keyBytes)
	if p.Bytes() <= 0 || 2*p.Bytes() > wholeRows {
		t.Fatalf("rank 1 of 4 pins %d bytes of rows; every shard's rows take %d", p.Bytes(), wholeRows)
	}
	t.Logf("rank 1 of 4: %d samples pinned in %d bytes; all rows %d bytes", o.Samples.Len(), p.Bytes(), wholeRows)
	eager := repository.ManifestCatalog{M: m}
	for _, smp := range o.Samples.All() {
		i := int(smp)
		if p.Key(i) != eager.Key(i) || p.Size(i) != eager.Size(i) || p.Stratum(i) != eager.Stratum(i) {
			t.Fatalf("sample %d: pinned %q %d %d, whole %q %d %d", i, p.Key(i), p.Size(i), p.Stratum(i), eager.Key(i), eager.Size(i), eager.Stratum(i))
		}
		s1, o1, n1 := l.Locate(i)
		s2, o2, n2 := eager.Locate(i)
		if s1 != s2 || o1 != o2 || n1 != n2 || l.SampleSum(i) != eager.SampleSum(i) {
			t.Fatalf("sample %d: lazy at %d/%d+%d, whole at %d/%d+%d", i, s1, o1, n1, s2, o2, n2)
		}
		got, err := lazy.ReadSample(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := whole.ReadSample(ctx, i)
		if err != nil || !bytes.Equal(got, ref) {
			t.Fatalf("sample %d: %d bytes lazily, %d whole (%v)", i, len(got), len(ref), err)
		}
	}
	// A range across samples, and one that is not whole samples, verified
	// through the block checksums from the index.
	sh := int(m.Samples.Shard[o.Samples.At(0)])
	for _, r := range [][2]int64{{0, m.Shards[sh].Size}, {7, m.Shards[sh].Size - 20}} {
		a, err := lazy.ReadRange(ctx, sh, r[0], r[1])
		if err != nil {
			t.Fatal(err)
		}
		b, err := whole.ReadRange(ctx, sh, r[0], r[1])
		if err != nil || !bytes.Equal(a, b) {
			t.Fatalf("shard %d [%d,+%d): lazy and whole reads differ (%v)", sh, r[0], r[1], err)
		}
	}
	if n := l.Unpinned.Load(); n != 0 || reads() != shards {
		t.Fatalf("reads of pinned samples: %d unpinned lookups, %d index reads (want 0 and %d)", n, reads(), shards)
	}

	// A stratum's samples, listed from the counts, in its shards only.
	checkStrataListed(t, l, m)
}

// A lazily fetched index is checked like one read at open: a corrupt copy
// is passed over for an intact one, and with none intact the pin fails,
// naming the shard, and nothing is served.
func TestLazyIndexCorruptCopies(t *testing.T) {
	src := synthSource(t, synth.Imbalanced(120, 3, 0.6, 200, 3000, 4))
	ctx := context.Background()
	stores := ingestFormat(t, src, 2)
	ds, err := repository.Open(ctx, stores, "ds", repository.Options{LazyIndexes: true})
	if err != nil {
		t.Fatal(err)
	}
	whole, err := repository.Open(ctx, stores, "ds", repository.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := func(si int) string { return repository.IndexKey("ds", ds.Manifest.IngestID, si) }
	// Shard 1's first copy tried (store 1) is corrupt; all of shard 2's are.
	if err := stores[1].Put(ctx, key(1), []byte("not an index")); err != nil {
		t.Fatal(err)
	}
	for _, s := range stores {
		s.Put(ctx, key(2), []byte("garbage"))
	}
	first := func(s int) int32 { return int32(ds.Manifest.Shards[s].FirstSample) }
	p, err := ds.Lazy.Pin(ctx, layout.PositionsOf(int64(first(1))))
	if err != nil {
		t.Fatalf("shard 1 with one intact copy: %v", err)
	}
	if p.Size(int(first(1))) <= 0 {
		t.Fatalf("shard 1's first sample: size %d", p.Size(int(first(1))))
	}
	// Every copy corrupt: the pin holds shard 2's samples as lost, with
	// their strata (a rank-epoch serves the rest), and nothing else of them.
	lp, err := ds.Lazy.Pin(ctx, layout.PositionsOf(int64(first(2))))
	if err != nil || !lp.Lost(int(first(2))) || lp.Key(int(first(2))) != "" || lp.Size(int(first(2))) != 0 ||
		lp.Stratum(int(first(2))) != int(whole.Manifest.Samples.Stratum[first(2)]) {
		t.Fatalf("pin of shard 2 with every index copy corrupt: %v; want its sample pinned as lost, of its stratum", err)
	}
	if _, err := ds.ReadSample(ctx, int(first(2))); err == nil {
		t.Fatal("a sample of shard 2 was served with no intact index")
	}
	if _, err := ds.ReadRange(ctx, 2, 0, 10); err == nil {
		t.Fatal("a range of shard 2 was served with no intact index")
	}
	if _, _, size := ds.Lazy.Locate(int(first(2))); size != -1 {
		t.Fatalf("Locate of an unfetchable sample: size %d, want -1", size)
	}
}

// mapTier is an in-memory IndexTier.
type mapTier struct {
	mu   sync.Mutex
	objs map[int][]byte
}

func (m *mapTier) GetMeta(s int) ([]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.objs[s]
	return slices.Clone(b), ok
}

func (m *mapTier) PutMeta(s int, b []byte) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objs[s] = slices.Clone(b)
	return true
}

// Index objects kept in the disk tier are used only when they match the
// top-level manifest: a damaged one is fetched again from the stores and
// replaced; an intact one saves the fetch.
func TestLazyIndexTier(t *testing.T) {
	src := synthSource(t, synth.Imbalanced(120, 3, 0.6, 200, 3000, 4))
	ctx := context.Background()
	stores := ingestFormat(t, src, 2)
	open := func(tier *mapTier) *repository.LazyCatalog {
		ds, err := repository.Open(ctx, stores, "ds", repository.Options{LazyIndexes: true})
		if err != nil {
			t.Fatal(err)
		}
		ds.Lazy.SetTier(tier)
		return ds.Lazy
	}
	tier := &mapTier{objs: map[int][]byte{}}
	l := open(tier)
	first := int32(l.Manifest().Shards[1].FirstSample)
	if _, err := l.Pin(ctx, layout.PositionsOf(int64(first))); err != nil {
		t.Fatal(err)
	}
	intact, ok := tier.GetMeta(1)
	if !ok || l.IndexLoads.Load() != 1 || l.TierHits.Load() != 0 {
		t.Fatalf("first pin: tier holds shard 1 %v, %d loads, %d tier hits", ok, l.IndexLoads.Load(), l.TierHits.Load())
	}
	// Intact in the tier: no fetch.
	l = open(tier)
	if _, err := l.Pin(ctx, layout.PositionsOf(int64(first))); err != nil || l.IndexLoads.Load() != 0 || l.TierHits.Load() != 1 {
		t.Fatalf("pin with the tier's copy intact: %v, %d loads, %d tier hits", err, l.IndexLoads.Load(), l.TierHits.Load())
	}
	// One bit flipped in the tier: fetched again, and the tier's copy replaced.
	bad := slices.Clone(intact)
	bad[len(bad)/2] ^= 1
	tier.PutMeta(1, bad)
	l = open(tier)
	p, err := l.Pin(ctx, layout.PositionsOf(int64(first)))
	if err != nil || l.IndexLoads.Load() != 1 || l.TierHits.Load() != 0 {
		t.Fatalf("pin with the tier's copy damaged: %v, %d loads, %d tier hits", err, l.IndexLoads.Load(), l.TierHits.Load())
	}
	if again, _ := tier.GetMeta(1); !bytes.Equal(again, intact) || p.Size(int(first)) <= 0 {
		t.Fatal("the damaged copy in the tier was not replaced by the intact one")
	}
}
