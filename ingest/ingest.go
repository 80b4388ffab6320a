package ingest

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/erasure"
	"github.com/shardfs/shardfs/manifest"
	"github.com/shardfs/shardfs/repository"
	"github.com/shardfs/shardfs/verify"
)

// ErrExists: the dataset name is taken and --force was not given.
var ErrExists = repository.ErrExists

// Options configure Run.
type Options struct {
	Name                    string
	Stores                  []backend.Store
	Data, Parity, BlockSize int
	ShardSize               int64  // target shard size; default 64 MiB
	Seed                    uint64 // seed of the stratified placement
	Force                   bool   // replace an existing dataset
	// ShardsInFlight bounds memory: each holds about 2.5 shard sizes. Default 2.
	ShardsInFlight int
	Logger         *slog.Logger
	// Progress, if set, receives sample bytes as shards are uploaded.
	Progress func(bytes int64)
	// ChunkDone, if set, is called as each chunk of a stream of records
	// (stream.go) has been planned and written, with its number from 0:
	// the command steers the process's memory by it.
	ChunkDone func(chunk int)
	// Lock tunes the ingest lock (heartbeat and staleness).
	Lock repository.LockOptions
	// Format is the metadata format written: 1 (default), one manifest
	// with a row per sample; 2, a top-level manifest of per-shard class
	// counts plus one index object per shard (see manifest.Top); 3, format
	// 2's indexes under a root of per-group counts and a group object per
	// 1,024 shards (see manifest.Root).
	Format int
	// GroupShards is the shards of a format-3 group object: a mount reads
	// the group objects of the samples its ranks read, so smaller groups
	// mean less read for a rank whose samples lie in few of them. 0:
	// manifest.DefaultGroupShards.
	GroupShards int
	// A streaming ingest's chunk (stream.go): its first shard's number
	// in the dataset, and its strata as the stream numbers them.
	shardBase int
	strataOf  func(src *Source) ([]manifest.Stratum, []uint32)
	// localSegment: an append numbers its shards within its segment
	// (manifest.Segment.Local), as a part that reads only its slice of the
	// source must, since it cannot know the shards before its own. Only
	// tests set it, until such parts are built: an append knows its
	// parent's shards, and a dataset with a Local segment is refused by a
	// shardfs older than the format that carries one.
	localSegment bool
	// slicePart: a part that reads only its slice of the source stores
	// each shard's samples in the order of their strata's names, not of
	// their numbers: the commit numbers the dataset's strata by name, and
	// a shard must stay in the dataset's stratum order (slice.go).
	slicePart bool
	// ReleaseSource says the caller is done with the source once it is
	// planned: the plan drops each item's labels and field values as it
	// copies them into the manifest, which the upload reads instead, so a
	// source of records is not held twice. A released source cannot be
	// planned again.
	ReleaseSource bool
}

// Result summarizes a committed ingest.
type Result struct {
	Manifest      *manifest.Manifest
	Samples       int
	Bytes         int64 // sample bytes
	StoredBytes   int64 // fragment bytes written
	Elapsed       time.Duration
	OrphansPurged int
	// Copies is how many stores hold the committed manifest; CopyErrors
	// says why the others do not (run shardfs repair to restore them).
	Copies     int
	CopyErrors []error
	// Chunks is how many chunks a streaming ingest read its source in (0:
	// the source was read whole first); SampledBins are the --bins fields
	// it cut at its first chunk's quantiles (Manifest.Derived has their
	// edges, the outer ones widened to every value).
	Chunks      int
	SampledBins []string
}

// DefaultShardSize is the target shard size.
const DefaultShardSize = 64 << 20

// Run ingests src into opts.Stores as dataset opts.Name and commits it.
func Run(ctx context.Context, src *Source, opts Options) (*Result, error) {
	start := time.Now()
	log := opts.logger()
	codec, err := opts.check(ctx)
	if err != nil {
		return nil, err
	}
	txn, ctx, ingestID, err := begin(ctx, src, opts, log)
	if err != nil {
		return nil, err
	}
	defer txn.Release(context.WithoutCancel(ctx))
	m, windows, err := plan(src, opts, ingestID)
	if err != nil {
		return nil, err
	}
	parent := replaceLineage(ctx, opts, m, "ingest --force", log)
	log.Info("ingest plan", "dataset", opts.Name, "samples", m.Samples.Len(), "strata", len(m.Strata),
		"shards", len(m.Shards), "bytes", m.TotalBytes(), "k", opts.Data, "m", opts.Parity, "ingest_id", m.IngestID)

	res := &Result{Manifest: m, Samples: m.Samples.Len(), Bytes: m.TotalBytes()}
	all := make([]int, len(m.Shards))
	for i := range all {
		all[i] = i
	}
	if res.StoredBytes, err = uploadAndDescribe(ctx, src, m, windows, codec, opts, all, nil); err != nil {
		return nil, fmt.Errorf("ingest %s not committed: %w", opts.Name, err)
	}
	if err := commitReplacing(ctx, opts, txn, m, parent, res); err != nil {
		return nil, err
	}
	res.OrphansPurged = txn.Purge(ctx, m)
	res.Elapsed = time.Since(start)
	return res, nil
}

// begin starts an ingest of src (only its place is read) under a new
// ingest id: it refuses a source in the stores' datasets, takes the lock,
// and refuses to replace a committed dataset unless opts.Force. The caller
// releases the Txn.
func begin(ctx context.Context, src *Source, opts Options, log *slog.Logger) (*repository.Txn, context.Context, string, error) {
	if err := src.checkApart(ctx, opts.Stores, opts.Name); err != nil {
		return nil, ctx, "", err
	}
	ingestID := newIngestID()
	opts.Lock.Logger = log
	txn, ctx, err := repository.Begin(ctx, opts.Stores, opts.Name, ingestID, opts.Lock, log)
	if err != nil {
		return nil, ctx, "", fmt.Errorf("ingest %s: %w", opts.Name, err)
	}
	if err := txn.RefuseCommitted(ctx, opts.Force, ""); err != nil {
		if errors.Is(err, repository.ErrExists) {
			// Refused, yet under the lock: a commit of the dataset that
			// stopped past its commit point is finished, so a rerun of a
			// stopped command leaves what an uninterrupted one leaves.
			// What stops this leaves the refusal to be said; a dataset
			// that does not open (copies that cannot be used) is the
			// refusal's to explain.
			ds, n, ferr := txn.FinishCommit(ctx)
			switch {
			case ds != nil && ferr != nil:
				log.Warn("could not finish the commit a stopped run left; shardfs repair finishes it", "dataset", opts.Name, "err", ferr)
			case n > 0:
				log.Info("finished the commit a stopped run left", "dataset", opts.Name, "version", ds.Manifest.VersionNumber(), "objects_written", n)
			}
		}
		txn.Release(context.WithoutCancel(ctx))
		return nil, ctx, "", err
	}
	return txn, ctx, ingestID, nil
}

// replaceLineage makes m, an ingest with --force, the next version of the
// dataset it replaces, when that one's manifest can be read: m's history
// is the current one's, then m. It returns the version replaced (nil when
// there is none, or it cannot be read: then m starts a history of its own).
func replaceLineage(ctx context.Context, opts Options, m *manifest.Manifest, change string, log *slog.Logger) *manifest.Manifest {
	if !opts.Force {
		return nil
	}
	parent, err := repository.LoadHeader(ctx, opts.Stores, opts.Name, log)
	if err != nil {
		return nil
	}
	samples, bytes := repository.Totals(m)
	if m.Top != nil {
		samples = int64(m.Top.Samples())
	}
	m.Versions = append(slices.Clone(repository.History(parent)), manifest.VersionInfo{
		Number: parent.VersionNumber() + 1, IngestID: m.IngestID, Parent: parent.VersionNumber(),
		CreatedUnix: m.CreatedUnix, Samples: samples, Bytes: bytes, Change: change,
	})
	if m.Top != nil {
		m.Top.Versions = m.Versions
	}
	// The commit needs the replaced version's header only: its sample
	// table (27 MB of a 100,000-record ingest's heap) is not kept through
	// the upload.
	return &manifest.Manifest{Header: parent.Header}
}

// commitReplacing commits m through txn: as the next version of parent,
// which is kept, when m replaces a dataset whose history it carries; else
// as a dataset of its own. It words a failure for the one who ran it.
func commitReplacing(ctx context.Context, opts Options, txn *repository.Txn, m, parent *manifest.Manifest, res *Result) error {
	copies, copyErrs, err := txn.Commit(ctx, m, parent)
	res.Copies, res.CopyErrors = copies, copyErrs
	var notKept *repository.NotKeptError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &notKept):
		return fmt.Errorf("%s not changed: %w", opts.Name, err)
	case parent != nil:
		return fmt.Errorf("version %d of %s not committed: %w; version %d stays current and whole", m.VersionNumber(), opts.Name, err, parent.VersionNumber())
	}
	return fmt.Errorf("ingest %s not committed: %w; %s", opts.Name, err, notVisible(opts))
}

// uploadAndDescribe uploads the given shards of m's plan, then writes
// their indexes (formats 2 and 3) and the group objects (format 3), and
// sets m.Top and m.Root; the shards not given are earlier ones, whose
// index references are kept's. It returns the fragment bytes written.
func uploadAndDescribe(ctx context.Context, src *Source, m *manifest.Manifest, windows []int, codec *erasure.Codec, opts Options, shards []int, kept *manifest.Top) (int64, error) {
	stored, err := uploadShards(ctx, src, m, windows, codec, opts, shards, repository.Put)
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, repository.ErrLockLost) {
			err = cause
		}
		return 0, fmt.Errorf("%w (rerun the same command; the partial upload is removed then)", err)
	}
	if err := m.Validate(); err != nil {
		return 0, err
	}
	if opts.Format < 2 {
		return stored, nil
	}
	sizes, sums, err := writeIndexes(ctx, opts, m, shards, repository.Put)
	if err != nil {
		return 0, fmt.Errorf("%w (rerun the same command)", err)
	}
	if kept != nil {
		for s, ts := range kept.Shards {
			sizes[s], sums[s] = ts.IndexSize, ts.IndexSum
		}
	}
	if m.Top, err = manifest.NewTop(m, sizes, sums); err != nil {
		return 0, err
	}
	if opts.Format == 3 {
		if m.Root, err = writeGroups(ctx, opts, m.Top, repository.Put); err != nil {
			return 0, fmt.Errorf("%w (rerun the same command)", err)
		}
	}
	return stored, nil
}

// writeIndexes writes the index of each of the given shards of m to every
// store (format 2); each must reach m+1 stores. It returns their sizes and
// checksums, indexed by shard.
func writeIndexes(ctx context.Context, opts Options, m *manifest.Manifest, shards []int, write repository.WriteFunc) ([]int64, []uint32, error) {
	sizes, sums := make([]int64, len(m.Shards)), make([]uint32, len(m.Shards))
	// One index is encoded at a time, from m's rows as they are
	// (EncodeShardIndexOf); their writes overlap. Two indexes built whole
	// at once, as a streamed chunk's two shards of 512 KiB made them, each
	// a copy of its shard's keys, fields and records, raised the peak RSS
	// of a 1,000,000-document ingest at 512KiB to 53.3 MB; this way it
	// peaks at 51.0 (file:// stores on tmpfs, 3 runs each, medians).
	var encoding sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, si := range shards {
		g.Go(func() error {
			id, n := m.ShardObject(si)
			n += opts.shardBase
			encoding.Lock()
			b, err := manifest.EncodeShardIndexOf(m, si, n)
			encoding.Unlock()
			if err != nil {
				return err
			}
			if err := repository.PutSome(gctx, opts.Stores, repository.IndexObject(opts.Name, id, n), b, opts.Parity+1, write); err != nil {
				return fmt.Errorf("shard %d's index: %w", si, err)
			}
			sizes[si], sums[si] = int64(len(b)), manifest.IndexSum(b)
			return nil
		})
	}
	return sizes, sums, g.Wait()
}

// writeGroups cuts top into format 3's root and group objects and writes
// each group object to every store; each must reach m+1 stores.
func writeGroups(ctx context.Context, opts Options, top *manifest.Top, write repository.WriteFunc) (*manifest.Root, error) {
	groupShards := opts.GroupShards
	if groupShards == 0 {
		groupShards = manifest.DefaultGroupShards
	}
	root, objs, err := manifest.RootOf(top, groupShards)
	if err != nil {
		return nil, err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for gi, b := range objs {
		g.Go(func() error {
			if err := repository.PutSome(gctx, opts.Stores, repository.GroupObject(top.Name, top.IngestID, gi), b, opts.Parity+1, write); err != nil {
				return fmt.Errorf("group %d's object: %w", gi, err)
			}
			return nil
		})
	}
	return root, g.Wait()
}

func (opts *Options) logger() *slog.Logger {
	if opts.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return opts.Logger
}

// fillDefaults gives the sizes left at zero their defaults.
func (opts *Options) fillDefaults() {
	if opts.ShardSize <= 0 {
		opts.ShardSize = DefaultShardSize
	}
	if opts.BlockSize == 0 {
		opts.BlockSize = erasure.DefaultBlockSize
	}
	if opts.ShardsInFlight <= 0 {
		opts.ShardsInFlight = 2
	}
}

// check fills opts' defaults, checks them and the stores, and returns the codec.
func (opts *Options) check(ctx context.Context) (*erasure.Codec, error) {
	opts.fillDefaults()
	if opts.ShardSize > manifest.MaxShardSize {
		return nil, fmt.Errorf("--shard-size %d: at most %d bytes", opts.ShardSize, int64(manifest.MaxShardSize))
	}
	params := erasure.Params{Data: opts.Data, Parity: opts.Parity, BlockSize: opts.BlockSize}
	if err := params.Validate(); err != nil {
		return nil, err
	}
	if len(opts.Stores) != params.Total() {
		return nil, fmt.Errorf("%d stores given for --data %d --parity %d: pass exactly k+m = %d store URLs",
			len(opts.Stores), opts.Data, opts.Parity, params.Total())
	}
	if err := repository.CheckName(opts.Name); err != nil {
		return nil, err
	}
	if err := backend.CheckDistinct(opts.Stores); err != nil {
		return nil, err
	}
	codec, err := erasure.NewCodec(params)
	if err != nil {
		return nil, err
	}
	if err := pingAll(ctx, opts.Stores); err != nil {
		return nil, err
	}
	if err := checkAliases(ctx, opts.Stores, opts.Name); err != nil {
		return nil, err
	}
	return codec, nil
}

// checkAliases refuses stores that are one place under two names (two host
// names of one server, such as localhost and 127.0.0.1): CheckDistinct
// compares URLs, which cannot see that. Each store gets a probe object, and
// every store lists the probes: a store that sees another's is the same
// place. The probes are removed before it returns.
func checkAliases(ctx context.Context, stores []backend.Store, name string) error {
	i, j, err := repository.FindAlias(ctx, stores, nil, name)
	if err != nil || i < 0 {
		return err
	}
	return fmt.Errorf("stores %d (%s) and %d (%s) are the same place under two names: an object written through one is read through the other. Every store must be its own failure domain: pass k+m different stores",
		i, stores[i], j, stores[j])
}

// checkMigrationAliases is checkAliases across a migration's old and new
// stores together: a new store that is an old one under another name would
// be written into while its old set still depends on it. Old stores that do
// not answer are left out (a migration away from a failing store is the
// point); the new ones must answer.
func checkMigrationAliases(ctx context.Context, from, to []backend.Store, name string) error {
	all := append(slices.Clone(from), to...)
	optional := func(i int) bool { return i < len(from) }
	i, j, err := repository.FindAlias(ctx, all, optional, name)
	if err != nil || i < 0 {
		return err
	}
	where := func(k int) string {
		if k < len(from) {
			return fmt.Sprintf("old store %d (%s)", k, from[k])
		}
		return fmt.Sprintf("new store %d (%s)", k-len(from), to[k-len(from)])
	}
	if i < len(from) && j >= len(from) {
		return fmt.Errorf("%s and %s are the same place under two names: the migration would write into the stores it copies from, which stay the dataset's rollback. Nothing was written: pass new stores that are not the old ones",
			where(i), where(j))
	}
	return fmt.Errorf("%s and %s are the same place under two names: an object written through one is read through the other. Nothing was written: every store must be its own failure domain",
		where(i), where(j))
}

// plan places src's samples into shards: a pure function of the listing,
// the seed and the shard size, so every part of a distributed ingest
// computes the same plan on its own. Sample and block checksums are filled
// as shards are encoded. windows are the plan's read windows (place.go).
func plan(src *Source, opts Options, ingestID string) (m *manifest.Manifest, windows []int, err error) {
	if src.released {
		return nil, nil, errors.New("ingest: this source was planned and its labels and fields released: scan it again")
	}
	m = &manifest.Manifest{Header: manifest.Header{
		Name: opts.Name, IngestID: ingestID, CreatedUnix: time.Now().Unix(),
		Seed: opts.Seed, Data: opts.Data, Parity: opts.Parity, BlockSize: opts.BlockSize, ShardSize: opts.ShardSize,
		LabelFields: src.LabelFields, Fields: src.Fields, Derived: src.Derived,
		Members: src.Members, StrataOnly: src.StrataOnly,
	}}
	for _, s := range opts.Stores {
		m.Stores = append(m.Stores, s.String())
	}
	var strata []uint32
	m.Strata, strata = src.strata()
	if opts.strataOf != nil {
		// A streaming ingest's chunk: its strata are numbered as the
		// whole stream's (stream.go).
		m.Strata, strata = opts.strataOf(src)
	}
	placed := place(src, strata, len(m.Strata), opts.Seed, opts.ShardSize)
	shards := placed.shards
	if opts.Format >= 2 {
		// Format 2 stores a shard stratum by stratum, so a stratum's k-th
		// member is found from per-shard counts alone. A stable sort keeps
		// each stratum's members in the same order, and so the global
		// order (by keys) the same as format 1's.
		for _, sh := range shards {
			if opts.slicePart {
				slices.SortStableFunc(sh, func(a, b int) int { return cmp.Compare(m.Strata[strata[a]].Name, m.Strata[strata[b]].Name) })
				continue
			}
			slices.SortStableFunc(sh, func(a, b int) int { return cmp.Compare(strata[a], strata[b]) })
		}
	}
	m.Shards = make([]manifest.Shard, len(shards))
	m.Samples.Grow(src.tableBytes())
	var table []byte
	planned := make([]int32, 0, len(src.Items))
	for si, shard := range shards {
		for _, i := range shard {
			planned = append(planned, int32(i))
			it := &src.Items[i]
			m.Samples.Append(it.Key, strata[i], uint32(si), uint32(it.Size), 0)
			if src.Fields != nil {
				m.Samples.AppendFields(strings.Join(it.Fields, manifest.FieldSep))
			}
			if src.Members != nil {
				table = src.appendRecordTable(table[:0], it)
				m.Samples.AppendRecord(table)
			}
			if opts.ReleaseSource {
				// The manifest holds them now, and the upload never reads
				// them: dropped as the manifest grows, the two are not
				// held at once (see Options.ReleaseSource).
				it.Labels, it.Fields = nil, nil
			}
		}
	}
	src.released = src.released || opts.ReleaseSource
	if err := m.Finish(); err != nil {
		return nil, nil, err
	}
	src.planned, src.plannedFor = planned, m
	return m, placed.windows, nil
}

// appendRecordTable appends a record item's table in the manifest to
// table: its members, as indexes in s.Members, and their sizes.
func (s *Source) appendRecordTable(table []byte, it *Item) []byte {
	for _, mb := range it.Members {
		table = manifest.AppendRecord(table, int(mb.Name), int64(mb.Size))
	}
	return table
}

// tableBytes is what the manifest's sample table of all of s's items
// holds: their number, and the bytes of their keys, joined field values
// (0: s has no fields) and record tables (0: s holds no records).
func (s *Source) tableBytes() (n, keyBytes, fieldBytes, recordBytes int) {
	var scratch []byte
	for i := range s.Items {
		it := &s.Items[i]
		keyBytes += len(it.Key)
		if s.Fields != nil {
			fieldBytes += max(0, len(it.Fields)-1) * len(manifest.FieldSep)
			for _, v := range it.Fields {
				fieldBytes += len(v)
			}
		}
		if s.Members != nil {
			scratch = s.appendRecordTable(scratch[:0], it)
			recordBytes += len(scratch)
		}
	}
	return len(s.Items), keyBytes, fieldBytes, recordBytes
}

// uploadShards reads, encodes and uploads the given shards of m's plan,
// window by window (windows: the plan's, place.go), ShardsInFlight shards
// at a time, filling their sample and block checksums in m. The next
// window's source shards are read while this one's shards upload, so at
// most two windows are in memory. It returns the fragment bytes written.
func uploadShards(ctx context.Context, src *Source, m *manifest.Manifest, windows []int, codec *erasure.Codec, opts Options, shards []int, write repository.WriteFunc) (int64, error) {
	type window struct {
		shards  []int
		records *windowRecords // nil: read from the source item by item
	}
	next := make(chan window)
	var stored int64
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(next)
		for _, group := range windowsOf(windows, shards) {
			w := window{shards: group}
			if windows != nil {
				var err error
				if w.records, err = readWindowRecords(gctx, src, m, group); err != nil {
					return err
				}
			}
			select {
			case next <- w:
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		return nil
	})
	g.Go(func() error {
		for w := range next {
			n, err := uploadWindow(gctx, src, m, w.records, codec, opts, w.shards, write)
			stored += n
			if err != nil {
				return err
			}
		}
		return nil
	})
	err := g.Wait()
	return stored, err
}

// uploadWindow is uploadShards of shards whose records are read (nil:
// read from the source item by item).
func uploadWindow(ctx context.Context, src *Source, m *manifest.Manifest, records *windowRecords, codec *erasure.Codec, opts Options, shards []int, write repository.WriteFunc) (int64, error) {
	var mu sync.Mutex // guards stored
	var stored int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(opts.ShardsInFlight)
	for _, si := range shards {
		g.Go(func() error {
			buf, err := readShard(gctx, src, m, si, records, codec)
			if err != nil {
				return err
			}
			frags, sums, err := codec.EncodeIn(buf, m.Shards[si].Size)
			if err != nil {
				return err
			}
			m.Shards[si].Sums = sums
			up, uctx := errgroup.WithContext(gctx)
			id, n := m.ShardObject(si)
			n += opts.shardBase // a chunk of a stream numbers its shards from 0
			for f, frag := range frags {
				up.Go(func() error {
					store := opts.Stores[codec.Placement(n, f)]
					if err := write(uctx, store, repository.FragmentObject(opts.Name, id, n, f), frag); err != nil {
						return fmt.Errorf("upload shard %d fragment %d: %w", opts.shardBase+si, f, err)
					}
					return nil
				})
			}
			if err := up.Wait(); err != nil {
				return err
			}
			mu.Lock()
			stored += int64(len(frags)) * int64(len(frags[0]))
			mu.Unlock()
			if opts.Progress != nil {
				opts.Progress(m.Shards[si].Size)
			}
			return nil
		})
	}
	return stored, g.Wait()
}

func notVisible(opts Options) string {
	if opts.Force {
		return "the dataset it replaces is current and unchanged"
	}
	return "no dataset " + opts.Name + " is visible"
}

func pingAll(ctx context.Context, stores []backend.Store) error {
	_, errs := backend.Split(backend.OnEvery(stores, func(i int, s backend.Store) error {
		pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		if err := backend.Ping(pctx, s); err != nil {
			return fmt.Errorf("store %d: %w", i, err)
		}
		return nil
	}))
	return errors.Join(errs...)
}

func newIngestID() string {
	var b [4]byte
	crand.Read(b[:])
	return fmt.Sprintf("%s-%s", time.Now().UTC().Format("20060102T150405Z"), hex.EncodeToString(b[:]))
}

// stratifiedOrder returns item indexes in an order where every contiguous
// stretch mirrors the global stratum mix: item j of stratum c (in a seeded
// permutation of c) is placed at position (j+u_c)/n_c, with u_c in [0,1) a
// seeded offset, like systematic sampling of each stratum.
func stratifiedOrder(strata []uint32, nStrata int, seed uint64) []int {
	rng := rand.New(rand.NewPCG(seed, 0x5348415244))
	members := make([][]int, nStrata)
	for i, s := range strata {
		members[s] = append(members[s], i)
	}
	type pos struct {
		at   float64
		item int
	}
	all := make([]pos, 0, len(strata))
	for _, mem := range members {
		rng.Shuffle(len(mem), func(i, j int) { mem[i], mem[j] = mem[j], mem[i] })
		u := rng.Float64()
		for j, it := range mem {
			all = append(all, pos{(float64(j) + u) / float64(len(mem)), it})
		}
	}
	slices.SortStableFunc(all, func(a, b pos) int { return cmp.Compare(a.at, b.at) })
	out := make([]int, len(all))
	for i, p := range all {
		out[i] = p.item
	}
	return out
}

// cutShards cuts the ordered items into shards of about shardSize bytes.
// A sample larger than shardSize gets a shard of its own.
func cutShards(items []Item, order []int, shardSize int64) [][]int {
	var shards [][]int
	var cur []int
	var size int64
	for _, it := range order {
		if len(cur) > 0 && size+items[it].Size > shardSize {
			shards = append(shards, cur)
			cur, size = nil, 0
		}
		cur = append(cur, it)
		size += items[it].Size
	}
	if len(cur) > 0 {
		shards = append(shards, cur)
	}
	return shards
}

// readShard reads the samples of shard si back to back and records their
// checksums; records from read, when given (a window's). It returns them
// at the start of a buffer the codec encodes in place (EncodeIn): a shard
// is never copied to be encoded.
func readShard(ctx context.Context, src *Source, m *manifest.Manifest, si int, read *windowRecords, codec *erasure.Codec) ([]byte, error) {
	sh := &m.Shards[si]
	buf := make([]byte, codec.EncodedSize(sh.Size))
	data := buf[:sh.Size]
	itemOf := src.itemOf(m)
	files := src.filesOf() // the source shards records are read from, each opened once
	defer files.close()
	open := func(name string) (io.ReaderAt, error) {
		f, _, err := files.open(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("read record: %w", err)
		}
		return f, nil
	}
	var rows parquetRows
	defer rows.close()
	for j := sh.FirstSample; j < sh.FirstSample+sh.NumSamples; j++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		it := src.Items[itemOf(j)]
		off, size := int64(m.Samples.Offset[j]), int64(m.Samples.Size[j])
		if b, ok := src.made.get(it.lineAt); ok && it.lineLen > 0 && int64(len(b)) == size {
			copy(data[off:off+size], b) // checked against the scan's checksum below
		} else if b, ok := read.of(si, j, sh); ok && int64(len(b)) == size {
			copy(data[off:off+size], b)
		} else if read != nil {
			return nil, fmt.Errorf("record %q of shard %d is not in its read window (%d bytes read, %d planned)", it.Key, si, len(b), size)
		} else if it.row {
			if err := readParquetRecord(&it, src.Members, data[off:off+size], src.table, &rows); err != nil {
				return nil, err
			}
		} else if it.lineLen > 0 {
			if err := readJSONLRecord(&it, src.Members, data[off:off+size], *src.corpus, open); err != nil {
				return nil, err
			}
		} else if it.Members != nil {
			return nil, fmt.Errorf("record %q of shard %d: a record from tar shards is read with its window", it.Key, si)
		} else if err := readFile(it.Path, data[off:off+size]); err != nil {
			return nil, err
		}
		m.Samples.Sum[j] = verify.Sum(data[off : off+size])
		if it.summed && m.Samples.Sum[j] != it.sum {
			// The offsets, sizes and fields planned are the scan's; bytes
			// read from a source that changed since would match neither
			// the old source nor the new one (issue 55 item 3).
			return nil, fmt.Errorf("%s changed since the scan read it: the record's %d bytes now have checksum %08x, not the scan's %08x; re-run the ingest once the source is written whole and left alone", it.Where(), size, m.Samples.Sum[j], it.sum)
		}
		releaseHuge(size)
	}
	return buf, nil
}

func readFile(name string, p []byte) error {
	f, err := os.Open(name)
	if err != nil {
		return fmt.Errorf("read sample: %w", err)
	}
	defer f.Close()
	if _, err := io.ReadFull(f, p); err != nil {
		return fmt.Errorf("read sample %s: %w (did it change during ingest?)", name, err)
	}
	var one [1]byte
	if n, _ := f.Read(one[:]); n > 0 {
		return fmt.Errorf("read sample %s: file grew during ingest", name)
	}
	return nil
}

// itemOf returns the item of each of m's samples: the one the plan that
// made m put in that row, else (m is another's, an append's) the item
// with its key. A map of every key cost a 100,000-record upload 5 MB.
func (s *Source) itemOf(m *manifest.Manifest) func(j int) int {
	if s.plannedFor == m && len(s.planned) == m.Samples.Len() {
		planned := s.planned
		return func(j int) int { return int(planned[j]) }
	}
	index := s.keyIndex()
	return func(j int) int { return index[m.Samples.Key(j)] }
}

// keyIndex maps keys to item indexes, built once.
func (s *Source) keyIndex() map[string]int {
	s.indexOnce.Do(func() {
		s.index = make(map[string]int, len(s.Items))
		for i, it := range s.Items {
			s.index[it.Key] = i
		}
	})
	return s.index
}
