package mount

import (
	"context"
	"log/slog"

	"github.com/dustin/go-humanize"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/cache"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/metrics"
	"github.com/shardfs/shardfs/prefetch"
	"github.com/shardfs/shardfs/repository"
)

// WarmConfig is what Warm fills a disk tier with: the samples that ranks
// Ranks read in epochs First..First+Epochs-1 of the order Spec makes of
// dataset Name, the first Batches batches of each rank-epoch (0: all).
type WarmConfig struct {
	Stores        []backend.Store
	Name          string
	Spec          *layout.Spec
	Run           string // the run whose reports --feedback reads
	First, Epochs int
	Ranks         []int
	Batches       int
	CacheDir      string
	CacheDirSize  int64
	Log           *slog.Logger
	// Progress is told the bytes to warm before the first fetch, and
	// returns what each fetch's bytes are reported to (nil: nothing).
	Progress func(total int64) func(bytes int64)
}

// WarmResult is what Warm did.
type WarmResult struct {
	Samples      int   // distinct samples the ranks read
	Bytes        int64 // their bytes
	Fetched      int64 // samples fetched into the tier; the rest it held
	FetchedBytes int64
}

// Warm fetches into the disk tier at CacheDir exactly the samples the
// given ranks of a mount with the same order will read, under the names
// that mount's tier reads them by, skipping what the tier holds. A warm
// that is stopped keeps what it fetched: the result counts it.
func Warm(ctx context.Context, cfg WarmConfig) (*WarmResult, error) {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ds, err := repository.Open(ctx, cfg.Stores, cfg.Name, repository.Options{Logger: log})
	if err != nil {
		return nil, err
	}
	if cfg.Spec.Feedback != nil {
		// Without waiting for a report not yet made: the mount waits.
		if _, err := repository.BindFeedback(&ds.Manifest.Header, cfg.Spec, repository.FeedbackSource{Stores: cfg.Stores, Name: cfg.Name, Run: cfg.Run}); err != nil {
			return nil, err
		}
	}
	plan, err := repository.PlanOrder(ds, cfg.Spec)
	if err != nil {
		return nil, err
	}
	var samples []int64
	for e := cfg.First; e < cfg.First+cfg.Epochs; e++ {
		for _, r := range cfg.Ranks {
			p, err := cfg.Spec.Params(e, r)
			if err != nil {
				return nil, err
			}
			o, err := layout.Order(plan.Input, p)
			if err != nil {
				return nil, err
			}
			n := o.Batches
			if cfg.Batches > 0 {
				n = min(n, cfg.Batches)
			}
			samples = append(samples, o.Samples.Slice(0, n*p.Batch).Int64s()...)
		}
	}
	res := &WarmResult{}
	cat := repository.ManifestCatalog{M: ds.Manifest}
	seen := map[int64]bool{}
	for _, s := range samples {
		if !seen[s] {
			seen[s] = true
			res.Bytes += cat.Size(int(s))
		}
	}
	res.Samples = len(seen)
	// The tier's names are the mount's (readPath, newReader).
	disk, err := cache.OpenDisk(cfg.CacheDir, repository.DiskNamespace(&ds.Manifest.Header), cfg.CacheDirSize)
	if err != nil {
		return nil, err
	}
	disk.SetShardNamespace(repository.ShardNamespace(&ds.Manifest.Header))
	defer disk.Close()
	if res.Bytes > cfg.CacheDirSize {
		log.Warn("what the ranks read is larger than the disk tier: the earliest samples will be evicted by the latest",
			"read", humanize.IBytes(uint64(res.Bytes)), "cache_dir_size", humanize.IBytes(uint64(cfg.CacheDirSize)))
	}
	pc := prefetch.DefaultConfig()
	pc.Disk = disk
	pc.Disabled = true
	r := prefetch.New(ds, cat, cache.New(16<<20, nil), metrics.New(make([]string, len(cfg.Stores))), pc, log)
	defer r.Close()
	var progress func(int64)
	if cfg.Progress != nil {
		progress = cfg.Progress(res.Bytes)
	}
	err = r.Warm(ctx, samples, progress)
	res.Fetched, res.FetchedBytes = disk.Writes.Load(), disk.WriteBytes.Load()
	return res, err
}
