package dataset

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/shardfs/shardfs/erasure"
	"github.com/shardfs/shardfs/manifest"
)

// Damage is one missing or corrupt fragment.
type Damage struct {
	Shard, Frag, Store int
	StoreName          string
	Err                error
}

// Report is the result of Verify.
type Report struct {
	Shards, Fragments int
	Bytes             int64 // fragment bytes read
	Damaged           []Damage
	Unrecoverable     []int    // shards with more than m damaged fragments
	BadSamples        []string // samples whose decoded bytes fail their own checksum
	BadManifests      []int    // stores whose manifest copy is missing, corrupt or stale
}

// Intact reports whether nothing is wrong.
func (r *Report) Intact() bool {
	return len(r.Damaged) == 0 && len(r.BadSamples) == 0 && len(r.BadManifests) == 0
}

// Recoverable reports whether repair can fix everything.
func (r *Report) Recoverable() bool { return len(r.Unrecoverable) == 0 && len(r.BadSamples) == 0 }

// Verify reads every fragment of every shard, checks every block checksum,
// then decodes every shard and checks every sample checksum. progress, if
// not nil, receives fragment bytes as they are checked.
func (d *Dataset) Verify(ctx context.Context, progress func(bytes int64)) (*Report, error) {
	m := d.Manifest
	rep := &Report{Shards: len(m.Shards), Fragments: len(m.Shards) * (m.Data + m.Parity)}
	var mu sync.Mutex // guards rep
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(2) // each shard in flight holds up to one shard of data
	for i := range m.Shards {
		g.Go(func() error {
			sh := d.Shard(i)
			damaged := d.checkShard(gctx, sh)
			fragBytes := sh.FragSize * int64(m.Data+m.Parity)
			if progress != nil {
				progress(fragBytes)
			}
			var badSamples []string
			unrecoverable := len(damaged) > m.Parity
			if !unrecoverable {
				data, err := d.Reader.ReadRange(gctx, sh, 0, m.Shards[i].Size)
				if err != nil {
					if gctx.Err() != nil {
						return gctx.Err()
					}
					unrecoverable = true
				} else {
					first := m.Shards[i].FirstSample
					for j := first; j < first+m.Shards[i].NumSamples; j++ {
						off, size := m.Samples.Offset[j], m.Samples.Size[j]
						if erasure.Checksum(data[off:off+size]) != m.Samples.Sum[j] {
							badSamples = append(badSamples, m.Samples.Key(j))
						}
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			rep.Bytes += fragBytes
			rep.Damaged = append(rep.Damaged, damaged...)
			rep.BadSamples = append(rep.BadSamples, badSamples...)
			if unrecoverable {
				rep.Unrecoverable = append(rep.Unrecoverable, i)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	sort.Slice(rep.Damaged, func(i, j int) bool {
		a, b := rep.Damaged[i], rep.Damaged[j]
		return a.Shard < b.Shard || a.Shard == b.Shard && a.Frag < b.Frag
	})
	sort.Ints(rep.Unrecoverable)
	for i, s := range d.Stores {
		cp, err := readManifest(ctx, s, d.Name)
		if err != nil || cp.IngestID != m.IngestID {
			rep.BadManifests = append(rep.BadManifests, i)
		}
	}
	return rep, nil
}

// checkShard checks all fragments of a shard in parallel.
func (d *Dataset) checkShard(ctx context.Context, sh *erasure.Shard) []Damage {
	n := d.Manifest.Data + d.Manifest.Parity
	errs := make([]*erasure.FragmentError, n)
	var wg sync.WaitGroup
	for f := 0; f < n; f++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[f] = d.Reader.CheckFragment(ctx, sh, f)
		}()
	}
	wg.Wait()
	var out []Damage
	for _, e := range errs {
		if e != nil {
			out = append(out, Damage{Shard: e.Shard, Frag: e.Frag, Store: e.Store, StoreName: e.StoreName, Err: e.Err})
		}
	}
	return out
}

// ErrUnrecoverable: some shard lost more than m fragments; repair writes nothing.
var ErrUnrecoverable = errors.New("dataset is unrecoverable")

// Repair rebuilds every damaged fragment in rep from the survivors, writes it
// back and rewrites bad manifest copies. When any shard is unrecoverable it
// writes nothing at all. It returns the number of fragments written.
func (d *Dataset) Repair(ctx context.Context, rep *Report, progress func(bytes int64)) (int, error) {
	if !rep.Recoverable() {
		return 0, fmt.Errorf("%w: shards %v have more than m=%d damaged fragments; nothing was written",
			ErrUnrecoverable, rep.Unrecoverable, d.Manifest.Parity)
	}
	byShard := map[int][]int{}
	for _, dm := range rep.Damaged {
		byShard[dm.Shard] = append(byShard[dm.Shard], dm.Frag)
	}
	var mu sync.Mutex
	written := 0
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(2)
	for shard, frags := range byShard {
		g.Go(func() error {
			sh := d.Shard(shard)
			rebuilt, err := d.Reader.Rebuild(gctx, sh, frags)
			if err != nil {
				return fmt.Errorf("rebuild shard %d: %w", shard, err)
			}
			for f, b := range rebuilt {
				store := d.Reader.Codec().Placement(shard, f)
				if err := d.Stores[store].Put(gctx, FragmentKey(d.Name, d.Manifest.IngestID, shard, f), b); err != nil {
					return fmt.Errorf("write rebuilt shard %d fragment %d: %w", shard, f, err)
				}
				mu.Lock()
				written++
				mu.Unlock()
				if progress != nil {
					progress(int64(len(b)))
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return written, err
	}
	if len(rep.BadManifests) > 0 {
		b, err := manifest.Encode(d.Manifest)
		if err != nil {
			return written, err
		}
		for _, i := range rep.BadManifests {
			if err := d.Stores[i].Put(ctx, ManifestKey(d.Name), b); err != nil {
				return written, fmt.Errorf("rewrite manifest copy: %w", err)
			}
			written++
		}
	}
	return written, nil
}
