package ingest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/erasure"
	"github.com/shardfs/shardfs/manifest"
	"github.com/shardfs/shardfs/repository"
)

// Appending to a dataset: a new version whose shards are the current
// version's, untouched, followed by shards of the new samples only, under
// the append's own ingest id (manifest.Segment). The commit is an ingest's
// (the lock, then repository.Commit), so a killed append leaves the current
// version current and whole, and its uploads are removed by the next
// ingest or append of the dataset.

// ErrDuplicateKeys: an append carries samples whose keys the dataset holds.
var ErrDuplicateKeys = errors.New("keys already in the dataset")

// AppendOptions configure Append, besides Options' stores, name, shard
// size, memory and logging. The erasure code, block size, metadata format
// and seed are the dataset's.
type AppendOptions struct {
	// SkipExisting leaves out the listing's samples whose key the dataset
	// holds, instead of refusing the append.
	SkipExisting bool
}

// AppendResult is a committed append.
type AppendResult struct {
	Result
	Version, Parent int
	Skipped         int // samples left out by SkipExisting
}

// Append adds src's samples to the committed dataset opts.Name as its next
// version. Nothing is written when it refuses.
func Append(ctx context.Context, src *Source, opts Options, aopts AppendOptions) (*AppendResult, error) {
	start := time.Now()
	log := opts.logger()
	_, codec, err := appendTarget(ctx, src, &opts)
	if err != nil {
		return nil, err
	}
	ingestID := newIngestID()
	opts.Lock.Logger = log
	txn, ctx, err := repository.Begin(ctx, opts.Stores, opts.Name, ingestID, opts.Lock, log)
	if err != nil {
		return nil, fmt.Errorf("append to %s: %w", opts.Name, err)
	}
	defer txn.Release(context.WithoutCancel(ctx))
	// Read under the lock: no other commit can make another version
	// current until this one is done.
	parent, err := openParent(ctx, opts, 0)
	if err != nil {
		return nil, err
	}
	skipped, err := dropExisting(src, parent, aopts.SkipExisting)
	if errors.Is(err, ErrNothingToDo) {
		// A rerun of an append that committed and was stopped before its
		// commit finished (a kill past the commit point): finish it, so the
		// rerun leaves what an uninterrupted append leaves.
		if ferr := finishCommit(ctx, txn, log); ferr != nil {
			return nil, ferr
		}
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	m, newShards, windows, err := planAppend(src, opts, parent, ingestID)
	if err != nil {
		return nil, err
	}
	res := &AppendResult{Result: Result{Manifest: m, Samples: src.count(), Bytes: m.TotalBytes() - parent.TotalBytes()},
		Version: m.VersionNumber(), Parent: parent.VersionNumber(), Skipped: skipped}
	log.Info("append plan", "dataset", opts.Name, "samples", res.Samples, "shards", len(newShards),
		"bytes", res.Bytes, "version", res.Version, "ingest_id", ingestID)
	if res.StoredBytes, err = uploadAndDescribe(ctx, src, m, windows, codec, opts, newShards, parent.Top); err != nil {
		return nil, fmt.Errorf("append to %s not committed: %w", opts.Name, err)
	}
	if err := commitReplacing(ctx, opts, txn, m, parent, &res.Result); err != nil {
		return nil, err
	}
	res.OrphansPurged = txn.Purge(ctx, m)
	res.Elapsed = time.Since(start)
	return res, nil
}

// appendTarget reads the header of the dataset src is appended to, checks
// src and opts against it, and gives opts the dataset's code, seed, shard
// size (unless set) and format.
func appendTarget(ctx context.Context, src *Source, opts *Options) (*manifest.Manifest, *erasure.Codec, error) {
	if err := repository.CheckName(opts.Name); err != nil {
		return nil, nil, err
	}
	head, err := repository.LoadHeader(ctx, opts.Stores, opts.Name, opts.logger())
	if errors.Is(err, repository.ErrNotFound) {
		return nil, nil, fmt.Errorf("append to %s: %w (create it first with shardfs ingest SRC %s)", opts.Name, err, opts.Name)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("append to %s: %w", opts.Name, err)
	}
	if err := checkSameParams(*opts, head); err != nil {
		return nil, nil, err
	}
	switch {
	case head.HasRecords() && src.Members == nil:
		return nil, nil, fmt.Errorf("append to %s: it is a dataset of records (members %s), and the source holds a file per sample: append records (WebDataset shards, a .jsonl corpus with --member, a .parquet file); nothing was written", opts.Name, strings.Join(head.Members, ", "))
	case !head.HasRecords() && src.Members != nil:
		return nil, nil, fmt.Errorf("append to %s: it holds a file per sample, and the source holds records: ingest the records as a dataset of their own (a --mix mounts both); nothing was written", opts.Name)
	}
	opts.Data, opts.Parity, opts.BlockSize, opts.Seed = head.Data, head.Parity, head.BlockSize, head.Seed
	if opts.ShardSize <= 0 {
		opts.ShardSize = head.ShardSize
	}
	opts.Format = formatOf(head)
	if err := checkSameFields(src, head); err != nil {
		return nil, nil, err
	}
	if err := src.checkApart(ctx, opts.Stores, opts.Name); err != nil {
		return nil, nil, err
	}
	codec, err := opts.check(ctx)
	return head, codec, err
}

// openParent reads version n (0: the current one) of the dataset an append
// adds to, whole, refusing stores that hold another dataset.
func openParent(ctx context.Context, opts Options, n int) (*manifest.Manifest, error) {
	ds, err := repository.Open(ctx, opts.Stores, opts.Name, repository.Options{Logger: opts.logger(), Version: n})
	if err != nil {
		return nil, fmt.Errorf("append to %s: %w", opts.Name, err)
	}
	for i, p := range ds.Places {
		if p.State == repository.Foreign {
			return nil, fmt.Errorf("append to %s: store %d (%s) holds %s: run shardfs verify %s, and repair it, before appending", opts.Name, i, opts.Stores[i], p.Detail, opts.Name)
		}
	}
	return ds.Manifest, nil
}

// finishCommit finishes the commit of the dataset's current version where
// one stopped past its commit point (repository.FinishCommit); with the
// ingest lock held.
func finishCommit(ctx context.Context, txn *repository.Txn, log *slog.Logger) error {
	ds, n, err := txn.FinishCommit(ctx)
	if n > 0 {
		log.Info("finished the commit a stopped run left", "dataset", txn.Name, "version", ds.Manifest.VersionNumber(), "objects_written", n)
	}
	return err
}

// formatOf is the metadata format a dataset is stored in.
func formatOf(m *manifest.Manifest) int {
	switch {
	case m.Root != nil:
		return 3
	case m.Top != nil:
		return 2
	}
	return 1
}

// checkSameParams refuses erasure and format options that differ from the
// dataset's: an append takes them from the dataset.
func checkSameParams(opts Options, h *manifest.Manifest) error {
	var diff []string
	if opts.Data != 0 && opts.Data != h.Data || opts.Parity != 0 && opts.Parity != h.Parity {
		diff = append(diff, fmt.Sprintf("--data %d --parity %d (the dataset is RS(%d,%d))", opts.Data, opts.Parity, h.Data, h.Parity))
	}
	if opts.BlockSize != 0 && opts.BlockSize != h.BlockSize {
		diff = append(diff, fmt.Sprintf("--block-size %d (the dataset's is %d)", opts.BlockSize, h.BlockSize))
	}
	if opts.Format != 0 && opts.Format != formatOf(h) {
		diff = append(diff, fmt.Sprintf("--format %d (the dataset's is %d)", opts.Format, formatOf(h)))
	}
	if len(diff) > 0 {
		return fmt.Errorf("append to %s: %s: an append keeps the dataset's erasure code and format; leave these out (to change them, shardfs migrate)", h.Name, strings.Join(diff, ", "))
	}
	return nil
}

// checkSameFields refuses a listing whose label fields, fields or derived
// fields are not the dataset's: its samples would not be stratified, or
// described, as the dataset's are. New values of the label fields (new
// classes) are fine.
func checkSameFields(src *Source, h *manifest.Manifest) error {
	same := func(a, b []string) bool { return slices.Equal(a, b) || len(a) == 0 && len(b) == 0 }
	var diff []string
	if !same(src.LabelFields, h.LabelFields) {
		diff = append(diff, fmt.Sprintf("label fields %q, the dataset's %q", src.LabelFields, h.LabelFields))
	}
	if !same(src.StrataOnly, h.StrataOnly) {
		diff = append(diff, fmt.Sprintf("--strata %q, the dataset's %q", src.StrataOnly, h.StrataOnly))
	}
	switch {
	case h.HasRecords():
		// A record's fields are the keys of its .json: new records may
		// lack some of the dataset's (their values are then empty, as a
		// record's of one ingest are), but a field the dataset does not
		// have would have no column to go in.
		var extra []string
		for _, f := range src.Fields {
			if !slices.Contains(h.Fields, f) {
				extra = append(extra, f)
			}
		}
		if len(extra) > 0 {
			diff = append(diff, fmt.Sprintf("the .json fields %q, which the dataset's records do not have (theirs: %q)", extra, h.Fields))
		}
	case !same(src.Fields, h.Fields):
		diff = append(diff, fmt.Sprintf("fields %q, the dataset's %q", src.Fields, h.Fields))
	}
	if (len(src.Derived) > 0 || len(h.Derived) > 0) && !reflect.DeepEqual(src.Derived, h.Derived) {
		diff = append(diff, fmt.Sprintf("derived fields %v, the dataset's %v", src.Derived, h.Derived))
	}
	if len(diff) > 0 {
		how := "same columns, same --label-fields, --time-bucket and --bins"
		if h.HasRecords() {
			how = "the .json fields the dataset's records have, the same --label, --strata, --time-bucket and --bins"
		}
		return fmt.Errorf("append to %s: the source has %s: an append must describe its samples as the dataset does (%s); nothing was written",
			h.Name, strings.Join(diff, "; "), how)
	}
	return nil
}

// recordsOf maps src's records into dataset h's columns: memberOf[i] is
// src.Members[i]'s index in members, h's member names followed by those
// new to it (a record's members may change from one append to the next:
// a new caption format, a second image); fieldOf[f] is h.Fields[f]'s index
// in src.Fields (-1: the new records lack it, and its value is empty).
func recordsOf(src *Source, h *manifest.Header) (members []string, memberOf []int, fieldOf []int, err error) {
	members = slices.Clone(h.Members)
	for _, name := range src.Members {
		i := slices.Index(members, name)
		if i < 0 {
			i = len(members)
			members = append(members, name)
		}
		memberOf = append(memberOf, i)
	}
	if len(members) > manifest.MaxMemberNames {
		return nil, nil, nil, fmt.Errorf("append to %s: %d member names with the new records', at most %d", h.Name, len(members), manifest.MaxMemberNames)
	}
	for _, f := range h.Fields {
		fieldOf = append(fieldOf, slices.Index(src.Fields, f))
	}
	return members, memberOf, fieldOf, nil
}

// dropExisting refuses src when it holds keys the dataset has, naming the
// first few, or with skip leaves those samples out. It returns how many
// were left out.
func dropExisting(src *Source, m *manifest.Manifest, skip bool) (int, error) {
	have := make(map[string]struct{}, m.Samples.Len())
	for i := 0; i < m.Samples.Len(); i++ {
		have[m.Samples.Key(i)] = struct{}{}
	}
	var dup []string
	kept := src.Items[:0:0]
	for _, it := range src.Items {
		if _, ok := have[it.Key]; ok {
			dup = append(dup, it.Key)
			continue
		}
		kept = append(kept, it)
	}
	if len(dup) > 0 && !skip {
		return 0, fmt.Errorf("%w: %d of the %d samples to append are in %s already (%s%s): pass --skip-existing to append only the others; nothing was written",
			ErrDuplicateKeys, len(dup), len(src.Items), m.Name, strings.Join(dup[:min(5, len(dup))], ", "), map[bool]string{true: ", ...", false: ""}[len(dup) > 5])
	}
	if len(kept) == 0 {
		// Only with skip: the rerun of an append that committed.
		return len(dup), fmt.Errorf("%w: every one of the %d samples is in %s already (version %d)", ErrNothingToDo, len(src.Items), m.Name, m.VersionNumber())
	}
	src.Items = kept // before anything built src's key index
	return len(dup), nil
}

// count is the number of samples src holds.
func (s *Source) count() int { return len(s.Items) }

// planAppend is parent's next version: parent's strata, shards and rows as
// they are, then src's samples placed into new shards as an ingest places
// them. A stratum new to the dataset is added after the existing ones, so
// every earlier shard keeps its stratum numbers. It returns the new
// version's manifest (block and sample checksums of the new shards to be
// filled by the upload), the new shards, and their read windows (place.go;
// nil: one window).
func planAppend(src *Source, opts Options, parent *manifest.Manifest, ingestID string) (*manifest.Manifest, []int, []int, error) {
	now := time.Now().Unix()
	h := parent.Header
	h.IngestID, h.CreatedUnix = ingestID, now
	h.Strata = slices.Clone(parent.Strata)
	h.Stores = storeNames(opts.Stores)
	index := make(map[string]int, len(h.Strata))
	for i, st := range h.Strata {
		index[st.Name] = i
	}
	newStrata, of := src.strata()
	strata := make([]uint32, len(of))
	for i, c := range of {
		st := newStrata[c]
		j, ok := index[st.Name]
		if !ok {
			j = len(h.Strata)
			index[st.Name] = j
			h.Strata = append(h.Strata, manifest.Stratum{Name: st.Name, Labels: st.Labels})
		}
		strata[i] = uint32(j)
	}
	// The new samples alone are placed as an ingest of them would be, with
	// the dataset's seed moved on by the version, so that appends of like
	// listings are not placed alike.
	seed := opts.Seed + uint64(parent.VersionNumber())
	// (place: records from tar shards window by window, each window's
	// records in shards of their own, read once; other sources as before.)
	placed := place(src, strata, len(h.Strata), seed, opts.ShardSize)
	shards := placed.shards
	if opts.Format >= 2 {
		for _, sh := range shards {
			slices.SortStableFunc(sh, func(a, b int) int { return cmp.Compare(strata[a], strata[b]) })
		}
	}
	first := len(parent.Shards)
	for w := range placed.windows {
		placed.windows[w] += first
	}
	h.Segments = append(slices.Clone(parent.SegmentsOr(first)), manifest.Segment{IngestID: ingestID, Shards: len(shards), Local: opts.localSegment})
	m := &manifest.Manifest{Header: h}
	m.Shards = make([]manifest.Shard, first+len(shards))
	for s := range parent.Shards {
		m.Shards[s].Sums = parent.Shards[s].Sums
	}
	records := parent.HasRecords()
	var memberOf, fieldOf []int
	if records {
		var err error
		if m.Members, memberOf, fieldOf, err = recordsOf(src, &parent.Header); err != nil {
			return nil, nil, nil, err
		}
	}
	ps := &parent.Samples
	for i := 0; i < ps.Len(); i++ {
		m.Samples.Append(ps.Key(i), ps.Stratum[i], ps.Shard[i], ps.Size[i], ps.Sum[i])
		if ps.HasFields() {
			m.Samples.AppendFields(ps.FieldsJoined(i))
		}
		if records {
			m.Samples.AppendRecord(ps.Record(i))
		}
	}
	newShards := make([]int, len(shards))
	var table []byte
	var values []string
	for k, shard := range shards {
		si := first + k
		newShards[k] = si
		for _, i := range shard {
			it := &src.Items[i]
			m.Samples.Append(it.Key, strata[i], uint32(si), uint32(it.Size), 0)
			switch {
			case records:
				values = values[:0]
				for _, f := range fieldOf {
					v := ""
					if f >= 0 {
						v = it.Fields[f]
					}
					values = append(values, v)
				}
				if parent.Samples.HasFields() {
					m.Samples.AppendFields(strings.Join(values, manifest.FieldSep))
				}
				table = table[:0]
				for _, mb := range it.Members {
					table = manifest.AppendRecord(table, memberOf[mb.Name], int64(mb.Size))
				}
				m.Samples.AppendRecord(table)
			case parent.Samples.HasFields():
				m.Samples.AppendFields(strings.Join(it.Fields, manifest.FieldSep))
			}
		}
	}
	if err := m.Finish(); err != nil {
		return nil, nil, nil, err
	}
	samples, bytes := repository.Totals(m)
	m.Versions = append(slices.Clone(repository.History(parent)), manifest.VersionInfo{
		Number: parent.VersionNumber() + 1, IngestID: ingestID, Parent: parent.VersionNumber(), CreatedUnix: now,
		Samples: samples, Bytes: bytes, Change: fmt.Sprintf("append %d samples", len(src.Items)),
	})
	return m, newShards, placed.windows, nil
}

// storeNames lists the stores' names, as a manifest records them.
func storeNames(stores []backend.Store) []string {
	var out []string
	for _, s := range stores {
		out = append(out, s.String())
	}
	return out
}

// appendPartID names a distributed append to version parent of the
// dataset: its parts' plan depends on the listing and on the version
// they add to.
func appendPartID(src *Source, opts Options, job string, parts int, parent string) string {
	return partIngestID(src, opts, job+"\x00append to\x00"+parent, parts)
}

// RunAppendPart is one part of a distributed append of src to dataset
// opts.Name: like RunPart, it uploads and checks the new shards the part
// owns and writes its record, writing nothing a reader sees; shardfs
// commit then commits the version. Every part reads the current version,
// checks src against it as Append does, and plans the same new shards.
func RunAppendPart(ctx context.Context, src *Source, opts Options, aopts AppendOptions, part Part, job string) (*PartResult, error) {
	start := time.Now()
	if part.Count < 1 || part.Index < 0 || part.Index >= part.Count {
		return nil, fmt.Errorf("part %s: want 0 <= I < N", part)
	}
	head, codec, err := appendTarget(ctx, src, &opts)
	if err != nil {
		return nil, err
	}
	// This append, committed already, is the current version: its parent
	// is the one before, and the part compares its work with it.
	version, committed := 0, false
	if h := head.Versions; len(h) >= 2 && appendPartID(src, opts, job, part.Count, h[len(h)-2].IngestID) == head.IngestID {
		version, committed = h[len(h)-2].Number, true
	}
	parent, err := openParent(ctx, opts, version)
	if err != nil {
		return nil, err
	}
	id := appendPartID(src, opts, job, part.Count, parent.IngestID)
	if _, err := dropExisting(src, parent, aopts.SkipExisting); err != nil {
		return nil, err
	}
	m, _, windows, err := planAppend(src, opts, parent, id)
	if err != nil {
		return nil, err
	}
	return runPart(ctx, src, opts, codec, part, m, windows, len(parent.Shards), parent.IngestID, committed, start)
}

// appendParent is the version a distributed append's parts add to, which
// must still be current, and its shards as the commit's owners take them:
// rows in format 1, counts and index references in formats 2 and 3.
func appendParent(ctx context.Context, opts Options, r0 *partRecord, log *slog.Logger) (*manifest.Manifest, []*partShard, error) {
	ds, err := repository.Open(ctx, opts.Stores, opts.Name, repository.Options{Logger: log, LazyIndexes: r0.Metadata >= 2})
	if err != nil {
		return nil, nil, fmt.Errorf("commit %s: the version its parts append to: %w", opts.Name, err)
	}
	// The commit takes every shard of the parent: in format 3, from all
	// of its group objects.
	p, err := repository.ExpandRoot(ctx, opts.Stores, ds.Manifest)
	if err != nil {
		return nil, nil, fmt.Errorf("commit %s: the version its parts append to: %w", opts.Name, err)
	}
	if p.IngestID != r0.Parent {
		return nil, nil, fmt.Errorf("commit %s: the parts append to ingest %s, but version %d (ingest %s) is current now: run the parts again, on the current version; nothing was committed",
			opts.Name, r0.Parent, p.VersionNumber(), p.IngestID)
	}
	if formatOf(p) != r0.Metadata || p.Data != r0.Data || p.Parity != r0.Parity || p.BlockSize != r0.BlockSize {
		return nil, nil, notOneIngest(opts.Name, "the parts' code or format differs from the version they append to")
	}
	out := make([]*partShard, len(p.Shards))
	row := make([]int, len(r0.Strata))
	for s := range p.Shards {
		if p.Top == nil {
			out[s] = &partShard{ShardIndex: *manifest.ShardIndexOf(p, s), FragLen: p.FragSize(s)}
			continue
		}
		clear(row)
		p.Top.Counts(s, row[:len(p.Strata)])
		ts := p.Top.Shards[s]
		out[s] = &partShard{ShardIndex: manifest.ShardIndex{Shard: s}, FragLen: p.FragSize(s), IndexSize: ts.IndexSize, IndexSum: ts.IndexSum,
			counts: slices.Clone(row), size: ts.Size}
	}
	return p, out, nil
}

// appendLineage gives m, assembled from the parts of an append to parent,
// its segments and history.
func appendLineage(m, parent *manifest.Manifest, r0 *partRecord, parts int) {
	m.Segments = append(slices.Clone(parent.SegmentsOr(r0.First)), manifest.Segment{IngestID: m.IngestID, Shards: len(m.Shards) - r0.First})
	samples, bytes := repository.Totals(m)
	before, _ := repository.Totals(parent)
	m.Versions = append(slices.Clone(repository.History(parent)), manifest.VersionInfo{
		Number: parent.VersionNumber() + 1, IngestID: m.IngestID, Parent: parent.VersionNumber(), CreatedUnix: m.CreatedUnix,
		Samples: samples, Bytes: bytes, Change: fmt.Sprintf("append %d samples (%d parts)", samples-before, parts),
	})
	if m.Top != nil {
		m.Top.Segments, m.Top.Versions = m.Segments, m.Versions
	}
}
