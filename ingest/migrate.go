package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/erasure"
	"github.com/shardfs/shardfs/manifest"
	"github.com/shardfs/shardfs/repository"
)

// Migration copies a dataset, every version it keeps, to another set of
// stores, re-encoded in another erasure code if asked. It only reads the
// old stores, so mounts of them read on throughout, and the old set stays
// mountable: that is the rollback. Shards are read verified from the old
// stores (decoding around failed ones), re-encoded, written and read back
// one at a time, ShardsInFlight at once, so memory is bounded by the
// shard size, not the dataset. A rerun after a kill re-reads what is on
// the new stores and writes only what is missing or wrong. The new stores
// get the dataset's versions under their ingest ids, and then a commit of
// one more version, the migration, whose content is the current one's.

// MigrateOptions configure Migrate.
type MigrateOptions struct {
	Name string
	From []backend.Store // the dataset's stores
	To   []backend.Store // the new ones
	// Data, Parity and BlockSize are the new code; 0 keeps the dataset's.
	Data, Parity, BlockSize int
	ShardsInFlight          int
	Lock                    repository.LockOptions
	Logger                  *slog.Logger
	Progress                func(bytes int64)
}

// MigrateResult is a committed migration.
type MigrateResult struct {
	Version   int   // the migration's version on the new stores
	Versions  []int // the versions copied
	Shards    int   // distinct shards re-encoded
	Bytes     int64 // their payload bytes
	Written   int64 // fragment bytes written (or found intact) on the new stores
	Reused    int   // fragments a previous run had written, found intact
	From, To  string
	Elapsed   time.Duration
	Unchanged bool // the new stores hold this migration committed already
}

// shardKey names a shard as its objects are: the ingest that uploaded it
// and its number there (Header.ShardObject).
type shardKey struct {
	ingest string
	shard  int
}

// shardKeyOf is shard s of m's shardKey.
func shardKeyOf(m *manifest.Manifest, s int) shardKey {
	id, n := m.ShardObject(s)
	return shardKey{id, n}
}

// Migrate copies dataset opts.Name from opts.From to opts.To. Its phases:
// check the stores and the new code (migrationCode); lock both sets;
// open every kept version (versionsToMigrate); re-encode each distinct shard
// once onto the new stores (reencodeShards); write each version's
// description in the new code (writeVersions); commit the migration.
// Nothing is written to the old stores but the lock, so their current
// version stays current and whole whatever happens (the rollback).
func Migrate(ctx context.Context, opts MigrateOptions) (*MigrateResult, error) {
	start := time.Now()
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.ShardsInFlight <= 0 {
		opts.ShardsInFlight = 2
	}
	cur, params, codec, err := migrationCode(ctx, opts, log)
	if err != nil {
		return nil, err
	}
	res := &MigrateResult{From: fmt.Sprintf("RS(%d,%d) on %d stores", cur.Data, cur.Parity, len(opts.From)),
		To: fmt.Sprintf("RS(%d,%d) on %d stores", params.Data, params.Parity, params.Total())}

	// The old stores' lock keeps their current version current while we
	// copy it; the new stores' lock keeps anyone else from committing there.
	// (A Txn that never commits: it writes nothing to the old stores.)
	old, ctx, err := repository.Begin(ctx, opts.From, opts.Name, "migrate-"+cur.IngestID, opts.Lock, log)
	if err != nil {
		return nil, fmt.Errorf("migrate %s: %w", opts.Name, err)
	}
	defer old.Release(context.WithoutCancel(ctx))
	migrationID := newIngestID()
	txn, ctx, err := repository.Begin(ctx, opts.To, opts.Name, migrationID, opts.Lock, log)
	if err != nil {
		return nil, fmt.Errorf("migrate %s: the new stores: %w", opts.Name, err)
	}
	defer txn.Release(context.WithoutCancel(ctx))
	if cur, err = repository.LoadHeader(ctx, opts.From, opts.Name, log); err != nil {
		return nil, fmt.Errorf("migrate %s: %w", opts.Name, err)
	}
	if done, err := checkTarget(ctx, opts, cur, log); err != nil || done != nil {
		if done != nil {
			res.Unchanged, res.Version = true, done.VersionNumber()
		}
		return res, err
	}

	versions, err := versionsToMigrate(ctx, opts, cur, log, res)
	if err != nil {
		return nil, err
	}
	sums, err := reencodeShards(ctx, opts, codec, versions, res)
	if err != nil {
		return nil, fmt.Errorf("migrate %s not committed: %w (rerun the same command: what was written is checked and kept)", opts.Name, err)
	}
	wopts := Options{Name: opts.Name, Stores: opts.To, Data: params.Data, Parity: params.Parity}
	written := map[shardKey]indexRef{}
	last, err := writeVersions(ctx, opts, wopts, params, versions, sums, written)
	if err != nil {
		return nil, err
	}
	mig, err := migration(last, migrationID, res.From, res.To)
	if err != nil {
		return nil, err
	}
	if err := migrateMetadata(ctx, wopts, mig, formatOf(versions[len(versions)-1].Manifest), written); err != nil {
		return nil, fmt.Errorf("migrate %s not committed: %w (rerun the same command)", opts.Name, err)
	}
	if err := old.Refresh(ctx); err != nil {
		return nil, err
	}
	if _, _, err := txn.Commit(ctx, mig, nil); err != nil {
		return nil, fmt.Errorf("migrate %s not committed: %w (rerun the same command)", opts.Name, err)
	}
	res.Version = mig.VersionNumber()
	res.Elapsed = time.Since(start)
	return res, nil
}

// migrationCode checks the name and the stores (the new ones all differ
// from the old ones, answer, and are no alias of them), reads the current
// version, and makes the new code: the dataset's, where opts leaves a
// parameter 0.
func migrationCode(ctx context.Context, opts MigrateOptions, log *slog.Logger) (*manifest.Manifest, erasure.Params, *erasure.Codec, error) {
	var params erasure.Params
	if err := repository.CheckName(opts.Name); err != nil {
		return nil, params, nil, err
	}
	if err := backend.CheckDistinct(append(slices.Clone(opts.From), opts.To...)); err != nil {
		return nil, params, nil, fmt.Errorf("migrate %s: the new stores must all differ from the old ones and from each other: %w", opts.Name, err)
	}
	cur, err := repository.LoadHeader(ctx, opts.From, opts.Name, log)
	if err != nil {
		return nil, params, nil, fmt.Errorf("migrate %s: %w", opts.Name, err)
	}
	params = erasure.Params{Data: cmpOr(opts.Data, cur.Data), Parity: cmpOr(opts.Parity, cur.Parity), BlockSize: cmpOr(opts.BlockSize, cur.BlockSize)}
	if err := params.Validate(); err != nil {
		return nil, params, nil, err
	}
	if len(opts.To) != params.Total() {
		return nil, params, nil, fmt.Errorf("migrate %s: %d new stores for RS(%d,%d): pass exactly k+m = %d", opts.Name, len(opts.To), params.Data, params.Parity, params.Total())
	}
	codec, err := erasure.NewCodec(params)
	if err != nil {
		return nil, params, nil, err
	}
	if err := pingAll(ctx, opts.To); err != nil {
		return nil, params, nil, err
	}
	if err := checkMigrationAliases(ctx, opts.From, opts.To, opts.Name); err != nil {
		return nil, params, nil, err
	}
	return cur, params, codec, nil
}

// versionsToMigrate opens every version still kept, oldest first, the current
// one last, and lists them in res.
func versionsToMigrate(ctx context.Context, opts MigrateOptions, cur *manifest.Manifest, log *slog.Logger, res *MigrateResult) ([]*repository.Dataset, error) {
	var versions []*repository.Dataset
	for _, v := range repository.History(cur) {
		ds, err := repository.Open(ctx, opts.From, opts.Name, repository.Options{Logger: log, Version: v.Number})
		if errors.Is(err, repository.ErrNoVersion) {
			continue // removed by gc
		}
		if err != nil {
			return nil, fmt.Errorf("migrate %s: version %d: %w", opts.Name, v.Number, err)
		}
		versions = append(versions, ds)
		res.Versions = append(res.Versions, v.Number)
	}
	return versions, nil
}

// reencodeShards reads each distinct shard of the versions once, verified
// from the old stores, re-encodes it and writes (or finds intact) its
// fragments on the new stores, opts.ShardsInFlight at once; it returns
// each shard's new fragment checksums.
func reencodeShards(ctx context.Context, opts MigrateOptions, codec *erasure.Codec, versions []*repository.Dataset, res *MigrateResult) (map[shardKey][]uint32, error) {
	sums := map[shardKey][]uint32{}
	var mu sync.Mutex // guards sums, res
	for _, ds := range versions {
		m := ds.Manifest
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(opts.ShardsInFlight)
		for s := range m.Shards {
			key := shardKeyOf(m, s)
			mu.Lock()
			_, done := sums[key]
			if !done {
				sums[key] = nil // claimed
			}
			mu.Unlock()
			if done {
				continue
			}
			g.Go(func() error {
				// Read straight into the buffer the fragments are cut from.
				size := m.Shards[s].Size
				buf := make([]byte, codec.EncodedSize(size))
				// A shard in need of healing on the old stores is read whole
				// all the same: its new fragments are written from its bytes.
				if err := ds.ReadRangeV(gctx, s, 0, [][]byte{buf[:size]}); err != nil && erasure.Heal(err) == nil {
					return fmt.Errorf("read shard %d from the old stores: %w", s, err)
				}
				frags, fsums, err := codec.EncodeIn(buf, size)
				if err != nil {
					return err
				}
				fg, fctx := errgroup.WithContext(gctx)
				var reused int
				var rmu sync.Mutex
				for f, frag := range frags {
					fg.Go(func() error {
						st := opts.To[codec.Placement(key.shard, f)]
						again, err := repository.PutChecked(fctx, st, repository.FragmentObject(opts.Name, key.ingest, key.shard, f), frag)
						if err != nil {
							return fmt.Errorf("shard %d fragment %d: %w", s, f, err)
						}
						if again {
							rmu.Lock()
							reused++
							rmu.Unlock()
						}
						return nil
					})
				}
				if err := fg.Wait(); err != nil {
					return err
				}
				mu.Lock()
				sums[key] = fsums
				res.Shards++
				res.Bytes += m.Shards[s].Size
				res.Written += int64(len(frags)) * int64(len(frags[0]))
				res.Reused += reused
				mu.Unlock()
				if opts.Progress != nil {
					opts.Progress(m.Shards[s].Size)
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return nil, err
		}
	}
	return sums, nil
}

// writeVersions writes each version's description in the new code (its
// metadata objects, and its manifest kept under its version key, the
// current one's too) and returns the current one's, whose content the
// migration commits.
func writeVersions(ctx context.Context, opts MigrateOptions, wopts Options, params erasure.Params, versions []*repository.Dataset, sums map[shardKey][]uint32, written map[shardKey]indexRef) (*manifest.Manifest, error) {
	names := storeNames(opts.To)
	var last *manifest.Manifest
	for _, ds := range versions {
		m, err := recoded(ds.Manifest, params, names, sums)
		if err != nil {
			return nil, err
		}
		if err := migrateMetadata(ctx, wopts, m, formatOf(ds.Manifest), written); err != nil {
			return nil, fmt.Errorf("migrate %s not committed: %w (rerun the same command)", opts.Name, err)
		}
		// Every version is kept, the old current one too: the migration,
		// whose content is its, is committed after it.
		enc, err := manifest.EncodeStored(m)
		if err != nil {
			return nil, err
		}
		if err := repository.KeepVersion(ctx, opts.To, opts.Name, m.IngestID, enc, params.Data, params.Parity); err != nil {
			return nil, fmt.Errorf("migrate %s not committed: %w", opts.Name, err)
		}
		last = m
	}
	return last, nil
}

// checkTarget refuses new stores that hold another dataset of this name,
// and returns their manifest when they hold this migration, committed.
func checkTarget(ctx context.Context, opts MigrateOptions, cur *manifest.Manifest, log *slog.Logger) (*manifest.Manifest, error) {
	there, err := repository.LoadHeader(ctx, opts.To, opts.Name, log)
	switch {
	case errors.Is(err, repository.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("migrate %s: the new stores hold manifest copies of %s that cannot be used (%v): migrate onto stores that hold no dataset of this name", opts.Name, opts.Name, err)
	}
	if h := there.Versions; len(h) >= 2 && h[len(h)-2].IngestID == cur.IngestID && h[len(h)-1].Parent == cur.VersionNumber() && isMigration(h[len(h)-1]) {
		return there, nil
	}
	return nil, fmt.Errorf("migrate %s: the new stores hold another dataset of this name (ingest %s, version %d): nothing was written; migrate onto other stores, or remove it there first",
		opts.Name, there.IngestID, there.VersionNumber())
}

func isMigration(v manifest.VersionInfo) bool { return len(v.Change) >= 7 && v.Change[:7] == "migrate" }

// recoded is m in the new code on the new stores: every shard's block
// checksums are its re-encoding's; samples, segments and history are m's,
// but for the segments' id maps: the new stores' shard indexes are
// encoded in the dataset's ids (migrateMetadata).
func recoded(m *manifest.Manifest, p erasure.Params, stores []string, sums map[shardKey][]uint32) (*manifest.Manifest, error) {
	out := *m
	out.Header = m.Header
	out.Data, out.Parity, out.BlockSize, out.Stores = p.Data, p.Parity, p.BlockSize, stores
	out.Segments = slices.Clone(m.Segments)
	for i := range out.Segments {
		out.Segments[i].Strata, out.Segments[i].Members = nil, nil
	}
	out.Shards = slices.Clone(m.Shards)
	for s := range out.Shards {
		out.Shards[s].Sums = sums[shardKeyOf(m, s)]
	}
	out.Top, out.Root = nil, nil
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("migrate: version %d in the new code: %w", m.VersionNumber(), err)
	}
	return &out, nil
}

// migration is the version the migration commits: last's content, one
// version on.
func migration(last *manifest.Manifest, id, from, to string) (*manifest.Manifest, error) {
	m := *last
	m.Header = last.Header
	m.IngestID, m.CreatedUnix = id, time.Now().Unix()
	m.Segments = slices.Clone(last.SegmentsOr(len(last.Shards)))
	samples, bytes := repository.Totals(last)
	m.Versions = append(slices.Clone(repository.History(last)), manifest.VersionInfo{
		Number: last.VersionNumber() + 1, IngestID: id, Parent: last.VersionNumber(), CreatedUnix: m.CreatedUnix,
		Samples: samples, Bytes: bytes, Change: fmt.Sprintf("migrate from %s to %s", from, to),
	})
	m.Top, m.Root = nil, nil
	return &m, m.Validate()
}

// indexRef is an index object written to the new stores.
type indexRef struct {
	size int64
	sum  uint32
}

// migrateMetadata writes version m's shard indexes (shared by the
// versions that hold a shard, so each once) and, in format 3, its group
// objects to the new stores, and sets m.Top and m.Root, for a version
// stored in format 2 or 3.
func migrateMetadata(ctx context.Context, opts Options, m *manifest.Manifest, format int, written map[shardKey]indexRef) error {
	if format < 2 {
		return nil
	}
	sizes, sums := make([]int64, len(m.Shards)), make([]uint32, len(m.Shards))
	for s := range m.Shards {
		key := shardKeyOf(m, s)
		ref, ok := written[key]
		if !ok {
			b, err := manifest.EncodeIndex(manifest.ShardIndexOf(m, s))
			if err != nil {
				return err
			}
			if err := repository.PutSome(ctx, opts.Stores, repository.IndexObject(opts.Name, key.ingest, key.shard), b, opts.Parity+1, repository.Put); err != nil {
				return fmt.Errorf("shard %d's index: %w", s, err)
			}
			ref = indexRef{int64(len(b)), manifest.IndexSum(b)}
			written[key] = ref
		}
		sizes[s], sums[s] = ref.size, ref.sum
	}
	var err error
	if m.Top, err = manifest.NewTop(m, sizes, sums); err != nil {
		return err
	}
	if format == 3 {
		m.Root, err = writeGroups(ctx, opts, m.Top, repository.Put)
	}
	return err
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}
