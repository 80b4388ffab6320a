package prefetch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"golang.org/x/sync/errgroup"

	"github.com/shardfs/shardfs/cache"
	"github.com/shardfs/shardfs/erasure"
)

// Warm fetches the given samples into the disk tier, skipping those it
// already holds: exactly what a set of ranks will read, before they read it.
// Samples are grouped by shard and fetched as ranges of up to MaxGET bytes,
// PrefetchGET at a time. progress, if set, receives the sample bytes handled.
func (r *Reader) Warm(ctx context.Context, samples []int64, progress func(bytes int64)) error {
	if r.tier == nil {
		return errors.New("warm needs a disk tier: pass --cache-dir")
	}
	type want struct {
		off, size int64
	}
	byShard := map[int][]want{}
	seen := map[int64]bool{}
	for _, s := range samples {
		if seen[s] {
			continue
		}
		seen[s] = true
		sl := r.tier.sampleSlot(int(s))
		if sl.Size > maxDiskSample || r.tier.disk.Has(sl) {
			if progress != nil {
				progress(sl.Size)
			}
			continue
		}
		byShard[sl.Shard] = append(byShard[sl.Shard], want{sl.Off, sl.Size})
	}
	shards := make([]int, 0, len(byShard))
	for sh := range byShard {
		shards = append(shards, sh)
	}
	slices.Sort(shards)
	// Warming fetches ahead of the readers, as prefetch does.
	g, gctx := errgroup.WithContext(erasure.WithReadKind(ctx, erasure.ReadPrefetch))
	g.SetLimit(r.cfg.PrefetchGET)
	for _, sh := range shards {
		ws := byShard[sh]
		slices.SortFunc(ws, func(a, b want) int { return cmp.Compare(a.off, b.off) })
		for i := 0; i < len(ws); {
			lo, hi, j := ws[i].off, ws[i].off+ws[i].size, i+1
			// Only back-to-back samples merge: warm fetches exactly what the ranks read.
			for j < len(ws) && ws[j].off == hi && ws[j].off+ws[j].size-lo <= r.cfg.MaxGET {
				hi = max(hi, ws[j].off+ws[j].size)
				j++
			}
			var bytes int64
			for _, w := range ws[i:j] {
				bytes += w.size
			}
			g.Go(func() error {
				if _, err := r.tier.ReadRange(gctx, sh, lo, hi-lo); err != nil {
					return fmt.Errorf("warm shard %d: %w", sh, err)
				}
				if progress != nil {
					progress(bytes)
				}
				return nil
			})
			i = j
		}
	}
	return g.Wait()
}

// fromDisk reports whether sample s, of size bytes, is read by a reader
// straight from the disk tier rather than through the memory cache: it fits
// one chunk, the tier may hold it and the memory cache does not.
func (r *Reader) fromDisk(s int, size int64) bool {
	return r.tier != nil && size <= maxDiskSample && size <= r.cfg.ChunkSize && !r.cache.Contains(cache.Key{Sample: int64(s)})
}

// serveFromDisk fills p with the whole of sample s straight from the disk
// tier, verified, when p is the whole sample, the tier holds it and the
// memory cache does not: one copy out of the kernel's page cache, where
// prefetch has asked the kernel to bring it (adviseDisk), instead of a
// copy into a cached chunk and another out of it.
func (r *Reader) serveFromDisk(s int, p []byte, off int64) bool {
	if r.tier == nil || off != 0 {
		return false
	}
	size := r.sampleSize(s)
	return int64(len(p)) == size && r.fromDisk(s, size) && r.tier.serve(s, p)
}

// adviseDisk reports whether sample s, of size bytes, will be served from
// the disk tier (serveFromDisk), having asked the kernel to bring it into
// its page cache; prefetch then leaves it out of its GETs.
func (r *Reader) adviseDisk(s int, size int64) bool {
	return r.fromDisk(s, size) && r.tier.advise(s)
}
