package mount

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/cache"
	"github.com/shardfs/shardfs/fs"
	"github.com/shardfs/shardfs/manifest"
	"github.com/shardfs/shardfs/prefetch"
	"github.com/shardfs/shardfs/repository"
)

// Following new versions (mount --follow): each epoch is served from the
// version its run's log names (repository.RecordEpoch): the newest committed
// when the first node that needed the epoch recorded it. An append made
// during training therefore enters at the next epoch not yet recorded,
// never mid-epoch, and every node, and a job resumed later on any world
// size, serves each epoch from the same version.
//
// Why the bytes stay right: a mount serves only versions that are appends
// of one another, checked shard by shard (appendOf): the shards the
// smaller one has are the larger one's first shards, the same ingest, the
// same sizes and checksums, and so are its samples. A sample's number
// then means the same sample in both, which is what the memory cache and
// the disk tier key their chunks by; each version has its own catalog,
// order input and reader, all sharing the one cache. A version that is
// not an append of the one served (a rollback, or an ingest --force) is
// refused for its epoch, which answers EIO and says to remount.

// follower is a mount's --follow state.
type follower struct {
	mt     *Mount
	stores []backend.Store
	run    string
	wait   time.Duration

	mu     sync.Mutex  // guards epochs; held for map accesses only
	epochs map[int]int // epoch: the version it serves, as recorded

	// openMu guards what follows, and is held while a version is opened
	// (reads of the stores): nothing on the read path takes it.
	openMu   sync.Mutex
	sources  map[int]*fs.Source          // version: its read path (the base version: nil, the tree's own)
	versions map[int]*repository.Dataset // version: opened
	readers  []*prefetch.Reader
	// largest is the largest version served, whose shards the disk tier
	// names by the ingest that uploaded each (every version's are its).
	largest atomic.Pointer[manifest.Manifest]
}

// sourceAt is fs.Options.SourceAt: epoch's read path, recording which
// version it serves first if no node has.
func (f *follower) sourceAt(epoch int) (*fs.Source, error) {
	v, err := f.versionOf(epoch)
	if err != nil {
		return nil, err
	}
	return f.source(v)
}

// versionOf is the version epoch serves: read from the run's log, or
// recorded there now. While another node records it, it waits (up to the
// mount's --report-wait).
func (f *follower) versionOf(epoch int) (int, error) {
	f.mu.Lock()
	v, ok := f.epochs[epoch]
	f.mu.Unlock()
	if ok {
		return v, nil
	}
	name := f.mt.Dataset.Name
	deadline := time.Now().Add(f.wait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		rec, err := repository.RecordEpoch(ctx, f.stores, name, f.run, epoch, func() (int, error) {
			h, err := repository.LoadHeader(ctx, f.stores, name, f.mt.log)
			if err != nil {
				return 0, err
			}
			return h.VersionNumber(), nil
		}, f.mt.log)
		cancel()
		if err == nil {
			f.mu.Lock()
			f.epochs[epoch] = rec.Version
			f.mu.Unlock()
			f.mt.log.Info("epoch serves its recorded version", "run", f.run, "epoch", epoch, "version", rec.Version)
			return rec.Version, nil
		}
		// The last try is at the deadline, not a second before it.
		left := time.Until(deadline)
		if left <= 0 || !errors.Is(err, repository.ErrRecording) && !errors.Is(err, repository.ErrEpochIncomplete) {
			return 0, fmt.Errorf("--follow: which version epoch %d of run %s serves: %w", epoch, f.run, err)
		}
		time.Sleep(min(time.Second, left))
	}
}

// source is version v's read path: nil for the version the mount opened.
func (f *follower) source(v int) (*fs.Source, error) {
	base := f.mt.Dataset
	if v == base.Manifest.VersionNumber() {
		return nil, nil
	}
	f.openMu.Lock()
	defer f.openMu.Unlock()
	if s := f.sources[v]; s != nil {
		return s, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ds, err := repository.Open(ctx, f.stores, base.Name, repository.Options{Logger: f.mt.log, Metrics: f.mt.Metrics, Version: v})
	if err != nil {
		return nil, err
	}
	served := false
	defer func() {
		if !served {
			ds.Reader.Close() // the epoch answers EIO, and its next lookup opens the version again
		}
	}()
	// Sample numbers key the one cache every version shares, so v must
	// be on one chain of appends with every version this mount has
	// served, not only with the one it opened: after a rollback to an
	// ancestor and a new append, the new version is an append of the
	// base, yet its new samples have the numbers of the rolled-back
	// append's, whose bytes the cache may hold (issue 55 item 2). Every
	// version served is a prefix of the largest served (this check kept
	// it so), and two prefixes of one version are prefixes of each
	// other; so v is on the chain of them all if it is on the largest's.
	largest := f.largest.Load()
	small, large := largest, ds.Manifest
	if large.NumShards() < small.NumShards() {
		small, large = large, small
	}
	if err := appendOf(small, large); err != nil {
		return nil, fmt.Errorf("--follow: version %d is not an append of version %d, which this mount has served (%v): a rollback or a replacing ingest was committed since; remount to read it", v, largest.VersionNumber(), err)
	}
	// The order bound to this version: time weights and windows over its
	// own time buckets, new ones included.
	spec := *f.mt.spec
	if spec.Recency != nil {
		rc := *spec.Recency
		spec.Recency = &rc
		if err := repository.BindTimes(&ds.Manifest.Header, &spec); err != nil {
			return nil, err
		}
	}
	// A window not given is chosen for this version alone, as every node
	// that serves it chooses.
	spec.ChooseWindow(repository.Shape(ds))
	first, err := spec.Params(0, 0)
	if err != nil {
		return nil, err
	}
	in, err := repository.OrderInput(ds, first)
	if err != nil {
		return nil, err
	}
	cat := fs.TreeCatalog(repository.ManifestCatalog{M: ds.Manifest})
	if rc, ok := (repository.ManifestCatalog{M: ds.Manifest}).ForLayout().(repository.RecordCatalog); ok {
		cat = rc
	}
	if ds.Manifest.NumShards() > f.largest.Load().NumShards() {
		f.largest.Store(ds.Manifest)
	}
	if l, err := repository.TakeLease(ctx, f.stores, base.Name, ds.Manifest, f.mt.log); err == nil {
		f.mt.leases = append(f.mt.leases, l)
	} else {
		f.mt.log.Warn("could not lease a followed version (read-only credentials?): shardfs gc cannot see that this mount reads it", "version", v, "err", err)
	}
	hinter := f.mt.hinterFor(f.stores)(base.Name)
	hinter.SetVersion(ds.Manifest)
	pc := f.mt.readerCfg
	pc.Heal = hinter.Heal // this version's shards
	r := prefetch.New(ds, cat.(prefetch.ReadCatalog), f.mt.cache, f.mt.Metrics, pc, f.mt.log)
	f.readers = append(f.readers, r)
	// prefetch.New made r the cache's only judge of next use; every
	// reader's streams count, or an older epoch's prefetched chunks would
	// look unneeded while its ranks still read it.
	all := append([]*prefetch.Reader{f.mt.reader}, f.readers...)
	f.mt.cache.SetNextUse(func(k cache.Key) int64 {
		best := cache.NoUse
		for _, rd := range all {
			best = min(best, rd.NextUse(k))
		}
		return best
	})
	f.versions[v] = ds
	s := &fs.Source{Catalog: cat, Input: in, Reader: r, ParamsAt: spec.Params}
	f.sources[v] = s
	served = true
	f.mt.Metrics.VersionServed.Store(int64(max(int(f.mt.Metrics.VersionServed.Load()), v)))
	f.mt.log.Info("serving a newer version's epochs", "version", v, "samples", repository.SampleCount(ds.Manifest), "shards", ds.Manifest.NumShards())
	return s, nil
}

// shardNamespace is the disk tier's namespace of shard: the largest
// version served names every shard any version served has.
func (f *follower) shardNamespace(shard int) string {
	return repository.ShardNamespace(&f.largest.Load().Header)(shard)
}

// close ends the readers of the versions followed.
func (f *follower) close() {
	f.openMu.Lock()
	defer f.openMu.Unlock()
	for _, r := range f.readers {
		r.Close()
	}
	for _, ds := range f.versions {
		ds.Reader.Close()
	}
	f.readers, f.versions = nil, nil
}

// servedVersions are the epochs known so far and the version each serves.
func (f *follower) servedVersions() []map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var es []int
	for e := range f.epochs {
		es = append(es, e)
	}
	slices.Sort(es)
	var out []map[string]int
	for _, e := range es {
		out = append(out, map[string]int{"epoch": e, "version": f.epochs[e]})
	}
	return out
}

// appendOf explains why large is not an append of small (nil when it is):
// small's shards must be large's first shards, uploaded by the same ingest,
// with the same samples, sizes and checksums, and small's strata large's
// first strata.
func appendOf(small, large *manifest.Manifest) error {
	if small.NumShards() > large.NumShards() {
		return fmt.Errorf("it has fewer shards")
	}
	if small.Data != large.Data || small.Parity != large.Parity || small.BlockSize != large.BlockSize {
		return fmt.Errorf("another erasure code")
	}
	for s := range small.NumShards() {
		a, b := small.Shards[s], large.Shards[s]
		smallID, smallN := small.ShardObject(s)
		largeID, largeN := large.ShardObject(s)
		if smallID != largeID || smallN != largeN || a.Size != b.Size || a.FirstSample != b.FirstSample || a.NumSamples != b.NumSamples || !slices.Equal(a.Sums, b.Sums) {
			return fmt.Errorf("shard %d differs", s)
		}
	}
	if len(small.Strata) > len(large.Strata) {
		return fmt.Errorf("it has fewer strata")
	}
	for c := range small.Strata {
		if small.Strata[c].Name != large.Strata[c].Name {
			return fmt.Errorf("stratum %d is %q, not %q", c, large.Strata[c].Name, small.Strata[c].Name)
		}
	}
	n := small.Samples.Len()
	if n > large.Samples.Len() {
		return fmt.Errorf("it has fewer samples")
	}
	a, b := &small.Samples, &large.Samples
	for i := range n {
		if a.Stratum[i] != b.Stratum[i] || a.Shard[i] != b.Shard[i] || a.Offset[i] != b.Offset[i] || a.Size[i] != b.Size[i] || a.Sum[i] != b.Sum[i] ||
			string(a.KeyBytes(i)) != string(b.KeyBytes(i)) || string(a.Record(i)) != string(b.Record(i)) || a.HasFields() && a.FieldsJoined(i) != b.FieldsJoined(i) {
			return fmt.Errorf("sample %d differs", i)
		}
	}
	return nil
}
