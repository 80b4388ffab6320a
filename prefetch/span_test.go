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

// TestSpanSkipsWhatItDidNotClaim: a prefetch span planned over samples
// a, b, c whose middle sample was meanwhile fetched on demand (so the span
// claims only a and c) must not read b's bytes again. Found by
// integration/TestExactResumeFetchesNothingBefore under load: one sample
// of the resumed batch was fetched twice.
func TestSpanSkipsWhatItDidNotClaim(t *testing.T) {
	met := metrics.New(make([]string, 6))
	ds := testds.New(t, synth.Spec{Counts: []int{30}, MinSize: 100_000, MaxSize: 120_000, Seed: 7}, met)
	cat := repository.ManifestCatalog{M: ds.Manifest}
	log := &rangeLog{Fetcher: ds}
	r := New(log, cat, cache.New(64<<20, nil), met, DefaultConfig(), nil)
	defer r.Close()
	// Three neighbours in one shard.
	first, count := cat.ShardSamples(0)
	if count < 3 {
		t.Fatalf("shard 0 holds %d samples, want 3 or more", count)
	}
	a, c := cache.Key{Sample: int64(first)}, cache.Key{Sample: int64(first + 2)}
	shard, aOff, aLen := r.chunkRange(a)
	_, cOff, cLen := r.chunkRange(c)
	pieces := []piece{{aOff, make([]byte, aLen)}, {cOff, make([]byte, cLen)}}
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
		pieces = append(pieces, piece{off, make([]byte, n)})
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
