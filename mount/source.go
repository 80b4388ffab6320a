package mount

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/cache"
	"github.com/shardfs/shardfs/erasure"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/metrics"
	"github.com/shardfs/shardfs/repository"
)

// source is what a mount serves: one dataset, or a mix of several. Every
// place where the two differ asks the source, so that a mount decides
// which it serves once, in openDatasetOrMix, and a third kind would be one more
// implementation.
type source interface {
	// parts are the datasets served; the first is the one the mount
	// shows as its dataset.
	parts() []*repository.Dataset
	// plan makes the run's order (repository.PlanOrder's rules) and says
	// what the tree and the read path see.
	plan(mt *Mount, cfg Config) (readPath, *repository.OrderPlan, error)
	// openTier gives the disk tier the source's names for what it keeps.
	openTier(disk *cache.Disk)
	// watch follows the stores while the mount runs, until stop closes.
	watch(mt *Mount, stores []backend.Store, every time.Duration, stop chan struct{})
	// xattrs: the tree serves each sample's fields as extended attributes.
	xattrs() bool
	// describe puts the source into info.json's v.
	describe(v map[string]any, spec *layout.Spec, cfg Config)
	// heal hands a read's HealNeeded (shards numbered as the read path
	// numbers them) to the hinter of the dataset that holds the shard.
	heal(need *erasure.HealNeeded)
}

// datasetSource is one dataset: a version of it, its lazily loaded
// indexes, the trainer's feedback on it, and the newer versions the mount
// watches for.
type datasetSource struct {
	ds     *repository.Dataset
	hinter *repository.Hinter
}

// mixSource is several datasets dealt by weight, each at its current
// version, over the global order.
type mixSource struct {
	mix     *repository.Mix
	hinters []*repository.Hinter // by part
}

// openDatasetOrMix opens cfg's dataset, or every dataset of its mix.
func openDatasetOrMix(ctx context.Context, stores []backend.Store, cfg Config, log *slog.Logger, met erasure.Metrics, hinter func(string) *repository.Hinter) (source, error) {
	if cfg.Mix != nil {
		return openMix(ctx, stores, cfg.Mix, log, met, hinter)
	}
	ds, err := repository.Open(ctx, stores, cfg.Name, repository.Options{Logger: log, Metrics: met, LazyIndexes: true, Version: cfg.Version})
	if err != nil {
		return nil, err
	}
	h := hinter(cfg.Name)
	h.SetVersion(ds.Manifest)
	return datasetSource{ds, h}, nil
}

func openMix(ctx context.Context, stores []backend.Store, names []string, log *slog.Logger, met erasure.Metrics, hinter func(string) *repository.Hinter) (mixSource, error) {
	var parts []*repository.Dataset
	var hinters []*repository.Hinter
	for _, n := range names {
		ds, err := repository.Open(ctx, stores, n, repository.Options{Logger: log, Metrics: met})
		if err != nil {
			return mixSource{}, fmt.Errorf("--mix: %w", err)
		}
		h := hinter(n)
		h.SetVersion(ds.Manifest)
		parts, hinters = append(parts, ds), append(hinters, h)
	}
	mix, err := repository.NewMix(parts)
	return mixSource{mix, hinters}, err
}

func (s datasetSource) heal(need *erasure.HealNeeded) { s.hinter.Heal(need) }

// heal: the mix's shard is renumbered to its dataset's.
func (s mixSource) heal(need *erasure.HealNeeded) {
	part, shard := s.mix.PartShard(need.Shard)
	s.hinters[part].Heal(&erasure.HealNeeded{Shard: shard, Stores: need.Stores})
}

func (s datasetSource) parts() []*repository.Dataset { return []*repository.Dataset{s.ds} }
func (s mixSource) parts() []*repository.Dataset     { return s.mix.Parts }

// plan: one dataset held whole, or a format-2 or format-3 dataset whose
// rows are fetched on demand, with the trainer's feedback bound to it.
func (s datasetSource) plan(mt *Mount, cfg Config) (readPath, *repository.OrderPlan, error) {
	ds := s.ds
	rp := readPath{cat: repository.ManifestCatalog{M: ds.Manifest}, fetch: ds, ns: repository.DiskNamespace(&ds.Manifest.Header)}
	if rc, ok := (repository.ManifestCatalog{M: ds.Manifest}).ForLayout().(repository.RecordCatalog); ok {
		rp.cat = rc
	}
	var err error
	if mt.feedback, err = repository.BindFeedback(&ds.Manifest.Header, cfg.Spec, repository.FeedbackSource{
		Stores: ds.Stores, Name: ds.Name, Run: cfg.Run, Wait: cfg.ReportWait, Log: mt.log}); err != nil {
		return readPath{}, nil, err
	}
	if mt.feedback != nil {
		mt.runReaders = append(mt.runReaders, feedbackReader{mt, mt.feedback})
	}
	plan, err := repository.PlanOrder(ds, cfg.Spec)
	if err != nil {
		return readPath{}, nil, err
	}
	if ds.Lazy != nil {
		// Formats 2 and 3: no shard index (nor format 3's group object) is
		// read until a rank-epoch or a samples/ directory needs its shard,
		// and the order comes from the counts.
		lazy := lazyTree{ds.Lazy, repository.ByRoot(ds, plan.First)}
		rp.cat, rp.pinner = lazy, lazy
		if cfg.CacheDir != "" {
			ds.Lazy.PinWholeShards() // the disk tier keeps shards sample by sample
		}
		mt.Metrics.SetIndex(func() metrics.IndexSnapshot {
			held, groups := ds.Lazy.GroupsHeld()
			return metrics.IndexSnapshot{Loads: ds.Lazy.IndexLoads.Load(), TierHits: ds.Lazy.TierHits.Load(), Unpinned: ds.Lazy.Unpinned.Load(),
				GroupLoads: ds.Lazy.GroupLoads(), GroupsHeld: held, Groups: groups}
		})
	}
	return rp, plan, nil
}

func (s mixSource) plan(mt *Mount, cfg Config) (readPath, *repository.OrderPlan, error) {
	rp := readPath{cat: s.mix, fetch: s.mix, ns: s.mix.Namespace()}
	if rc, ok := s.mix.ForLayout().(repository.MixRecords); ok {
		rp.cat = rc
	}
	plan, err := s.mix.PlanOrder(cfg.Spec)
	if err == nil {
		mt.log.Info("mix of datasets", "shares_served", cfg.Spec.DescribeMix())
	}
	return rp, plan, err
}

// openTier: each shard's entries under the ingest that uploaded it, so the
// versions of the dataset share the shards they share; and its shard
// indexes, so a remount fetches none.
func (s datasetSource) openTier(disk *cache.Disk) {
	disk.SetShardNamespace(repository.ShardNamespace(&s.ds.Manifest.Header))
	if s.ds.Lazy != nil {
		s.ds.Lazy.SetTier(disk)
	}
}

func (s mixSource) openTier(*cache.Disk) {}

// watch: which version is current, for stats and metrics.
func (s datasetSource) watch(mt *Mount, stores []backend.Store, every time.Duration, stop chan struct{}) {
	mt.Metrics.VersionServed.Store(int64(s.ds.Manifest.VersionNumber()))
	mt.Metrics.VersionCurrent.Store(int64(s.ds.Current.VersionNumber()))
	go mt.watchVersion(stores, every, stop)
}

// watch: a mix reads each dataset's current version when it starts.
func (s mixSource) watch(*Mount, []backend.Store, time.Duration, chan struct{}) {}

func (s datasetSource) xattrs() bool { return len(s.ds.Manifest.Fields) > 0 }
func (s mixSource) xattrs() bool     { return false }

func (s datasetSource) describe(v map[string]any, _ *layout.Spec, _ Config) {
	v["classes"] = v["dataset"].(map[string]any)["classes"]
}

// describe: the mix's datasets, each with its weight and share, in place
// of the one dataset.
func (s mixSource) describe(v map[string]any, spec *layout.Spec, cfg Config) {
	weights, shares := spec.Base.Mix, layout.MixShares(spec.Base.Mix)
	if len(spec.MixGiven) == len(weights) {
		weights = spec.MixGiven // as the user gave them (Base.Mix may be scaled)
	}
	var parts []map[string]any
	for i, p := range s.mix.Parts {
		d := describeDataset(p.Manifest)
		d["weight"] = weights[i]
		d["share"] = shares[i]
		parts = append(parts, d)
	}
	delete(v, "dataset")
	v["mix"] = map[string]any{"datasets": cfg.Mix, "parts": parts}
	v["classes"] = s.mix.ClassNames()
}
