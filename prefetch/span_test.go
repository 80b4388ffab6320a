package prefetch

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/cache"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/internal/testds"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/metrics"
	"github.com/shardfs/shardfs/repository"
)

// rangeLog records the ranges asked of the stores.
type rangeLog struct {
	Fetcher
	mu     sync.Mutex
	ranges [][2]int64
}

func (l *rangeLog) record(off, n int64) {
	l.mu.Lock()
	l.ranges = append(l.ranges, [2]int64{off, n})
	l.mu.Unlock()
}

func (l *rangeLog) ReadRange(ctx context.Context, shard int, off, n int64) ([]byte, error) {
	l.record(off, n)
	return l.Fetcher.ReadRange(ctx, shard, off, n)
}

func (l *rangeLog) ReadRangeV(ctx context.Context, shard int, off int64, bufs [][]byte) error {
	l.record(off, int64(backend.VecLen(bufs)))
	return l.Fetcher.ReadRangeV(ctx, shard, off, bufs)
}

// neighbours is a reader with default settings over a dataset of 30
// samples of 100-120 kB, whose stores' ranges it logs, and the first of
// three neighbours in shard 0.
func neighbours(t *testing.T, seed uint64) (*testds.DS, *rangeLog, *Reader, int) {
	t.Helper()
	return neighboursWith(t, seed, DefaultConfig())
}

// neighboursWith is neighbours with the reader's settings.
func neighboursWith(t *testing.T, seed uint64, cfg Config) (*testds.DS, *rangeLog, *Reader, int) {
	t.Helper()
	met := metrics.New(make([]string, 6))
	ds := testds.New(t, synth.Spec{Counts: []int{30}, MinSize: 100_000, MaxSize: 120_000, Seed: seed}, met)
	cat := repository.ManifestCatalog{M: ds.Manifest}
	log := &rangeLog{Fetcher: ds}
	r := New(log, cat, cache.New(64<<20, nil), met, cfg, nil)
	t.Cleanup(func() { r.Close() })
	first, count := cat.ShardSamples(0)
	if count < 3 {
		t.Fatalf("shard 0 holds %d samples, want 3 or more", count)
	}
	return ds, log, r, first
}

// TestSpanSkipsWhatItDidNotClaim: a prefetch span planned over samples
// a, b, c whose middle sample was meanwhile fetched on demand (so the span
// claims only a and c) reads b's bytes again only when asked to (joinPrev:
// fetchSpan asks within RideGap, never beyond). Found by
// integration/TestExactResumeFetchesNothingBefore under load: one sample
// of the resumed batch was fetched twice.
func TestSpanSkipsWhatItDidNotClaim(t *testing.T) {
	ds, log, r, first := neighbours(t, 7)
	a, c := cache.Key{Sample: int64(first)}, cache.Key{Sample: int64(first + 2)}
	shard, aOff, aLen := r.chunkRange(a)
	_, cOff, cLen := r.chunkRange(c)
	pieces := []piece{{off: aOff, buf: make([]byte, aLen)}, {off: cOff, buf: make([]byte, cLen)}}
	if err := r.src.readPieces(context.Background(), shard, pieces); err != nil {
		t.Fatal(err)
	}
	for i, k := range []cache.Key{a, c} {
		want, err := ds.ReadRange(context.Background(), shard, pieces[i].off, int64(len(pieces[i].buf)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(pieces[i].buf, want) {
			t.Fatalf("sample %d: wrong bytes", k.Sample)
		}
	}
	var got int64
	for _, rg := range log.ranges {
		got += rg[1]
	}
	if got != aLen+cLen {
		t.Fatalf("read %d bytes in %d ranges %v for two samples of %d and %d bytes: the unclaimed one between them was read too",
			got, len(log.ranges), log.ranges, aLen, cLen)
	}
}

// TestSpanReadsIntoItsPieces: pieces within MergeGap of each other are one
// GET whose bytes land in the pieces' own buffers, the sample between them
// in scratch, and every piece holds its sample's verified bytes.
func TestSpanReadsIntoItsPieces(t *testing.T) {
	met := metrics.New(make([]string, 6))
	ds := testds.New(t, synth.Spec{Counts: []int{30}, MinSize: 100_000, MaxSize: 120_000, Seed: 9}, met)
	cat := repository.ManifestCatalog{M: ds.Manifest}
	log := &rangeLog{Fetcher: ds}
	cfg := DefaultConfig()
	cfg.MergeGap = 256 << 10
	r := New(log, cat, cache.New(64<<20, nil), met, cfg, nil)
	defer r.Close()
	first, count := cat.ShardSamples(0)
	if count < 5 {
		t.Fatalf("shard 0 holds %d samples, want 5 or more", count)
	}
	var pieces []piece
	var want int64
	for _, i := range []int{first, first + 2, first + 3} {
		shard, off, n := r.chunkRange(cache.Key{Sample: int64(i)})
		if shard != 0 {
			t.Fatalf("sample %d in shard %d", i, shard)
		}
		pieces = append(pieces, piece{off: off, buf: make([]byte, n)})
		want = off + n - pieces[0].off
	}
	if err := r.src.readPieces(context.Background(), 0, pieces); err != nil {
		t.Fatal(err)
	}
	for _, p := range pieces {
		exp, err := ds.ReadRange(context.Background(), 0, p.off, int64(len(p.buf)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(p.buf, exp) {
			t.Fatalf("piece at %d: wrong bytes", p.off)
		}
	}
	if len(log.ranges) != 1 || log.ranges[0] != [2]int64{pieces[0].off, want} {
		t.Fatalf("ranges %v, want one GET [%d, +%d)", log.ranges, pieces[0].off, want)
	}
}

// TestSpanRidesOnlyFetchedSamples: a span reads through the gap between
// two of its pieces only where schedule found a ride (joinPrev): samples
// the mount has fetched already, cached or read by an open rank-epoch. A
// sample that nobody reads again, or that an open rank-epoch reads later
// and is not cached, is never a ride: dropped, it would be fetched again.
func TestSpanRidesOnlyFetchedSamples(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Disabled = true // the open epoch's positions only: nothing is fetched behind the test's back
	ds, log, r, first := neighboursWith(t, 8, cfg)
	a, b, c := cache.Key{Sample: int64(first)}, cache.Key{Sample: int64(first + 1)}, cache.Key{Sample: int64(first + 2)}
	shard, aOff, aLen := r.chunkRange(a)
	_, bOff, bLen := r.chunkRange(b)
	_, cOff, cLen := r.chunkRange(c)
	if gap := cOff - (aOff + aLen); gap <= r.cfg.MergeGap || gap > r.cfg.RideGap {
		t.Fatalf("the gap between a and c is %d bytes: want more than MergeGap %d, at most RideGap %d", gap, r.cfg.MergeGap, r.cfg.RideGap)
	}

	// No rank-epoch is open and b is not cached: nobody reads it again.
	if r.fetchedAlready(shard, aOff+aLen, cOff) {
		t.Fatal("a sample nobody reads again, not cached, was taken for a ride")
	}
	// An epoch is open at its start: it reads b later, and b is not cached.
	in, _ := repository.LayoutInput(ds.Manifest)
	o, err := layout.Order(in, layout.Params{World: 1, Batch: 5, Alpha: 1})
	if err != nil {
		t.Fatal(err)
	}
	members := layout.NewMembers(o, repository.ManifestCatalog{M: ds.Manifest})
	h := r.Open(members.Epoch())
	defer h.Close()
	if r.fetchedAlready(shard, aOff+aLen, cOff) {
		t.Fatal("a sample an open epoch reads later, not cached, was taken for a ride")
	}
	// Read by it (and not cached), b rides.
	mb := -1
	for i := range members.Len() {
		if int64(members.Sample(i)) == b.Sample {
			mb = i
		}
	}
	if mb < 0 {
		t.Fatal("the epoch does not read b")
	}
	h.st.markRead(mb)
	if !r.fetchedAlready(shard, aOff+aLen, cOff) {
		t.Fatal("a sample an open epoch has read was not taken for a ride")
	}
	h.Close()
	// Cached, b rides.
	held, _, err := r.cache.Get(context.Background(), b, r.fetchChunk(b))
	if err != nil {
		t.Fatal(err)
	}
	r.cache.Release(held)
	if !r.fetchedAlready(shard, bOff, bOff+bLen) {
		t.Fatal("a cached sample was not taken for a ride")
	}

	// A ride is one GET over a, b and c, and a and c hold their own bytes.
	log.ranges = nil
	pieces := []piece{{off: aOff, buf: make([]byte, aLen)}, {off: cOff, buf: make([]byte, cLen), joinPrev: true}}
	if err := r.src.readPieces(context.Background(), shard, pieces); err != nil {
		t.Fatal(err)
	}
	for _, p := range pieces {
		want, err := ds.ReadRange(context.Background(), shard, p.off, int64(len(p.buf)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(p.buf, want) {
			t.Fatalf("piece at %d: wrong bytes", p.off)
		}
	}
	if len(log.ranges) != 1 || log.ranges[0] != [2]int64{aOff, cOff + cLen - aOff} {
		t.Fatalf("a ride asked ranges %v, want one GET [%d, +%d)", log.ranges, aOff, cOff+cLen-aOff)
	}
}
