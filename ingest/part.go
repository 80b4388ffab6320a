package ingest

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/gob"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/erasure"
	"github.com/shardfs/shardfs/manifest"
	"github.com/shardfs/shardfs/repository"
	"github.com/shardfs/shardfs/verify"
)

// A distributed ingest splits one ingest over N processes that never talk
// to each other: each computes the same plan from the same listing and
// seed, encodes and uploads the shards it owns (shard s belongs to part
// s mod N), reads every fragment back, and writes a part record with the
// checksums it computed. Commit, run once when all parts are done, reads
// the N records, checks that every fragment of every shard is on its store
// at its size, and commits the manifest exactly as a single-process ingest
// does. Until then nothing is visible, and a part that dies is rerun. In
// metadata formats 2 and 3 the rows are in the shard indexes the parts
// wrote: commit checks each record's rows as it reads it and keeps per
// shard only its counts and bytes, so it holds the rows of the few records
// it is reading (8 at a time), not the dataset's.

// Part is part Index of Count of a distributed ingest.
type Part struct{ Index, Count int }

func (p Part) String() string { return fmt.Sprintf("%d/%d", p.Index, p.Count) }

// MaxParts bounds the parts of one distributed ingest.
const MaxParts = 100000

// ParsePart reads "I/N", or with "auto" the part of a Kubernetes Indexed
// Job (JOB_COMPLETION_INDEX of JOB_COMPLETIONS) or a Slurm job array
// (SLURM_ARRAY_TASK_ID less SLURM_ARRAY_TASK_MIN, of SLURM_ARRAY_TASK_COUNT).
func ParsePart(s string, getenv func(string) string) (Part, error) {
	var idx, count string
	switch {
	case s == "auto" && getenv("JOB_COMPLETION_INDEX") != "":
		idx, count = getenv("JOB_COMPLETION_INDEX"), getenv("JOB_COMPLETIONS")
		if count == "" {
			return Part{}, errors.New("--part auto: JOB_COMPLETION_INDEX is set but JOB_COMPLETIONS is not: pass the job's completions in JOB_COMPLETIONS (see examples/k8s/ingest-job.yaml), or --part I/N")
		}
	case s == "auto" && getenv("SLURM_ARRAY_TASK_ID") != "":
		id, err1 := strconv.Atoi(getenv("SLURM_ARRAY_TASK_ID"))
		lo, err2 := strconv.Atoi(cmp.Or(getenv("SLURM_ARRAY_TASK_MIN"), "0"))
		if err1 != nil || err2 != nil {
			return Part{}, fmt.Errorf("--part auto: SLURM_ARRAY_TASK_ID %q / SLURM_ARRAY_TASK_MIN %q are not numbers", getenv("SLURM_ARRAY_TASK_ID"), getenv("SLURM_ARRAY_TASK_MIN"))
		}
		idx, count = strconv.Itoa(id-lo), getenv("SLURM_ARRAY_TASK_COUNT")
	case s == "auto":
		return Part{}, errors.New("--part auto: neither JOB_COMPLETION_INDEX (a Kubernetes Indexed Job) nor SLURM_ARRAY_TASK_ID (a Slurm job array) is set: pass --part I/N")
	default:
		var ok bool
		idx, count, ok = strings.Cut(s, "/")
		if !ok {
			return Part{}, fmt.Errorf("--part %q: use I/N, e.g. 0/4 for the first of 4 parts, or auto", s)
		}
	}
	i, err1 := strconv.Atoi(idx)
	n, err2 := strconv.Atoi(count)
	if err1 != nil || err2 != nil || n < 1 || n > MaxParts || i < 0 || i >= n {
		return Part{}, fmt.Errorf("--part %s/%s: use I/N with 0 <= I < N <= %d", idx, count, MaxParts)
	}
	return Part{i, n}, nil
}

// JobID is the identity shared by the parts of one distributed ingest:
// flag if given, else SHARDFS_JOB_ID, else SLURM_ARRAY_JOB_ID, else empty
// (the ingest is then named by its listing, seed and parameters alone).
func JobID(flag string, getenv func(string) string) string {
	return cmp.Or(flag, getenv("SHARDFS_JOB_ID"), getenv("SLURM_ARRAY_JOB_ID"))
}

// partIngestID names a distributed ingest by everything its plan depends
// on, so that every part derives the same id without talking to the others,
// and a different listing, seed or job never writes over another's
// fragments.
func partIngestID(src *Source, opts Options, job string, parts int) string {
	h := sha256.New()
	fmt.Fprintf(h, "shardfs part ingest v1\x00%s\x00%s\x00%d\x00%d\x00%d\x00%d\x00%d\x00%d\x00%q\x00",
		job, opts.Name, parts, opts.Seed, opts.Data, opts.Parity, opts.BlockSize, opts.ShardSize, src.LabelFields)
	var n [8]byte
	for _, it := range src.Items {
		h.Write([]byte(it.Key))
		binary.LittleEndian.PutUint64(n[:], uint64(it.Size))
		h.Write(n[:])
		for _, l := range it.Labels {
			h.Write([]byte{0})
			h.Write([]byte(l))
		}
		for _, f := range it.Fields {
			h.Write([]byte{2})
			h.Write([]byte(f))
		}
		h.Write([]byte{1})
	}
	return "job-" + hex.EncodeToString(h.Sum(nil)[:8])
}

// partRecord is what a part leaves for commit: the plan's header, which
// every part computed alike, and per owned shard its samples and checksums.
type partRecord struct {
	Format                  int
	Metadata                int // the dataset's metadata format, 1 to 3 (Options.Format)
	Name, IngestID          string
	Part, Parts             int
	Seed                    uint64
	Data, Parity, BlockSize int
	ShardSize               int64
	LabelFields             []string
	Fields                  []string
	Derived                 []manifest.Derived
	Strata                  []manifest.Stratum
	// Members and StrataOnly: a dataset of records (manifest.Header).
	Members         []string `json:",omitempty"`
	StrataOnly      []string `json:",omitempty"`
	Shards, Samples int      // in the whole plan
	Owned           []partShard
	// Parent is the ingest id of the version an append's parts add to, and
	// First its first new shard: the parts own shards First.., and the
	// plan's shards and strata before are the parent's. Empty and 0 for
	// an ingest.
	Parent string
	First  int
	// Windows are the plan's read windows (place.go): each one's first
	// shard; they decide which part owns which shard.
	Windows []int `json:",omitempty"`
	// A part that read only its slice (partRecordSlice, slice.go): the
	// ingest id of its segment, and the objects of its sorted keys. Its
	// Strata, Members and shards are its own, numbered as it met them.
	Segment   string     `json:",omitempty"`
	KeyPieces []keyPiece `json:",omitempty"`
}

// partShard is one owned shard: its rows, block checksums and id as its
// index holds them, its fragment size, and (metadata format 2) the size
// and checksum of the index object the part wrote.
//
// A record of format 2 (partRecordCounts: metadata format 2 or 3) holds
// no rows: its shards' rows are in the index objects the part wrote, and
// each shard says its id, Counts per stratum and Bytes instead. A commit
// that read 8 records of rows at once held every row of the dataset.
type partShard struct {
	manifest.ShardIndex
	FragLen   int64
	IndexSize int64
	IndexSum  uint32
	Counts    []int `json:",omitempty"`
	Bytes     int64 `json:",omitempty"`

	// counts is the shard's samples per stratum, and size its bytes: what
	// a commit of metadata format 2 or 3 keeps of the shard once its rows
	// are checked (thin); the rows are then dropped. Not encoded.
	counts []int
	size   int64
}

const partMagic = "SHARDFS-PART-1\n"

// The formats of a part record: partRecordRows holds its shards' rows
// (metadata format 1 needs them to assemble the manifest), and
// partRecordCounts their counts per stratum and bytes only.
const (
	partRecordRows   = 1
	partRecordCounts = 2
)

// encodePart is magic, CRC32C of the rest, then the zstd-compressed gob.
func encodePart(rec *partRecord) ([]byte, error) {
	var body bytes.Buffer
	zw, err := zstd.NewWriter(&body, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithWindowSize(partWindow))
	if err != nil {
		return nil, err
	}
	if err := gob.NewEncoder(zw).Encode(rec); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	out := append([]byte(partMagic), binary.LittleEndian.AppendUint32(nil, verify.Sum(body.Bytes()))...)
	return append(out, body.Bytes()...), nil
}

// errBadPart: a part record that is not one, or is damaged.
var errBadPart = errors.New("part record is damaged")

// partWindow is the zstd window of part records: zstd's default, which
// every record written so far used.
const partWindow = 8 << 20

func decodePart(b []byte) (*partRecord, error) {
	if len(b) < len(partMagic)+4 || string(b[:len(partMagic)]) != partMagic {
		return nil, fmt.Errorf("%w: not a shardfs part record", errBadPart)
	}
	sum := binary.LittleEndian.Uint32(b[len(partMagic):])
	body := b[len(partMagic)+4:]
	if !verify.Bytes(body, sum) {
		return nil, fmt.Errorf("%w: checksum mismatch", errBadPart)
	}
	// The window is the encoder's (8 MiB, zstd's default): a damaged or
	// crafted frame that declares a larger one is refused, not allocated
	// (the fuzzer's worker died under a window the old bound, 4 GiB,
	// allowed).
	zr, err := zstd.NewReader(bytes.NewReader(body), zstd.WithDecoderMaxWindow(partWindow), zstd.WithDecoderMaxMemory(1<<32), zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	rec := &partRecord{}
	if err := gob.NewDecoder(zr).Decode(rec); err != nil {
		return nil, fmt.Errorf("%w: %v", errBadPart, err)
	}
	if rec.Format != partRecordRows && rec.Format != partRecordCounts && rec.Format != partRecordSlice {
		return nil, fmt.Errorf("%w: format %d, this shardfs reads %d to %d: use the shardfs that wrote the parts", errBadPart, rec.Format, partRecordRows, partRecordSlice)
	}
	if rec.Format != partRecordRows && rec.Metadata < 2 {
		return nil, fmt.Errorf("%w: a record of counts without rows for metadata format %d, which needs the rows", errBadPart, rec.Metadata)
	}
	return rec, nil
}

// PartResult summarizes one finished part.
type PartResult struct {
	IngestID    string
	Part        Part
	Shards      int // shards this part uploaded
	AllShards   int
	Bytes       int64 // sample bytes of its shards
	StoredBytes int64
	Elapsed     time.Duration
}

// ErrAlreadyCommitted: the distributed ingest a part or commit belongs to
// is the committed one: there is nothing left to do.
var ErrAlreadyCommitted = repository.ErrAlreadyCommitted

// RunPart runs part of a distributed ingest of src: it uploads and
// verifies the shards the part owns and writes its part record. It takes
// no lock and writes nothing a reader sees; run Commit when every part is
// done. job names the ingest (see JobID); all parts must be given the same
// source, options and job.
func RunPart(ctx context.Context, src *Source, opts Options, part Part, job string) (*PartResult, error) {
	start := time.Now()
	log := opts.logger()
	if part.Count < 1 || part.Index < 0 || part.Index >= part.Count {
		return nil, fmt.Errorf("part %s: want 0 <= I < N", part)
	}
	codec, err := opts.check(ctx)
	if err != nil {
		return nil, err
	}
	if err := src.checkApart(ctx, opts.Stores, opts.Name); err != nil {
		return nil, err
	}
	id := partIngestID(src, opts, job, part.Count)
	// A part of the committed ingest writes nothing: it compares its work
	// with what was committed, and says whether the source still matches.
	committed := false
	if err := repository.RefuseCommitted(ctx, opts.Stores, opts.Name, opts.Force, id, log); errors.Is(err, ErrAlreadyCommitted) {
		committed = true
	} else if err != nil {
		return nil, err
	}
	m, windows, err := plan(src, opts, id)
	if err != nil {
		return nil, err
	}
	return runPart(ctx, src, opts, codec, part, m, windows, 0, "", committed, start)
}

// runPart uploads part's shards of plan m, those from first on (the new
// shards of an append to version parent; 0 and "" for an ingest), checks
// them and writes its record.
func runPart(ctx context.Context, src *Source, opts Options, codec *erasure.Codec, part Part, m *manifest.Manifest, windows []int, first int, parent string, committed bool, start time.Time) (*PartResult, error) {
	log := opts.logger()
	id := m.IngestID
	if n := len(m.Shards) - first; n < part.Count {
		log.Warn("more parts than shards: some parts have nothing to upload", "parts", part.Count, "shards", n)
	}
	owned := ownedShards(len(m.Shards), windows, first, part)
	if committed {
		return nil, compareCommitted(ctx, src, m, windows, codec, opts, part, owned)
	}
	// Marked before the first fragment: a purge by another ingest of this
	// name leaves the fragments of a running distributed ingest alone.
	if err := repository.PutSome(ctx, opts.Stores, repository.PartStartedObject(opts.Name, id), []byte(time.Now().UTC().Format(time.RFC3339)), 1, repository.Put); err != nil {
		return nil, fmt.Errorf("part %s of %s: %w", part, opts.Name, err)
	}
	log.Info("ingest part", "dataset", opts.Name, "part", part.String(), "ingest_id", id, "shards", len(owned), "of", len(m.Shards))
	res := &PartResult{IngestID: id, Part: part, Shards: len(owned), AllShards: len(m.Shards) - first}
	stored, err := uploadShards(ctx, src, m, windows, codec, opts, owned, repository.CreateOrSame)
	if err == nil {
		err = verifyUploads(ctx, m, codec, opts, owned)
	}
	if errors.Is(err, ErrSourceChanged) {
		return nil, sourceChanged(opts.Name, part, id, err, false)
	}
	if err != nil {
		return nil, fmt.Errorf("part %s of %s not done: %w (rerun this part)", part, opts.Name, err)
	}
	res.StoredBytes = stored
	var indexSize []int64
	var indexSum []uint32
	if opts.Format >= 2 {
		indexSize, indexSum, err = writeIndexes(ctx, opts, m, owned, repository.CreateOrSame)
		if errors.Is(err, ErrSourceChanged) {
			return nil, sourceChanged(opts.Name, part, id, err, false)
		}
		if err != nil {
			return nil, fmt.Errorf("part %s of %s not done: %w (rerun this part)", part, opts.Name, err)
		}
	}
	// Committed meanwhile (this part's bytes matched): its record would be
	// a stray one, so none is written.
	if parent == "" {
		if err := repository.RefuseCommitted(ctx, opts.Stores, opts.Name, opts.Force, id, log); err != nil {
			return nil, err
		}
	} else if h, err := repository.LoadHeader(ctx, opts.Stores, opts.Name, log); err == nil && h.IngestID == id {
		return nil, fmt.Errorf("%w: %s version %d was committed from these parts: nothing to do", ErrAlreadyCommitted, opts.Name, h.VersionNumber())
	}
	rec := &partRecord{Format: partRecordRows, Metadata: max(opts.Format, 1), Name: opts.Name, IngestID: id, Part: part.Index, Parts: part.Count, Parent: parent, First: first,
		Seed: m.Seed, Data: m.Data, Parity: m.Parity, BlockSize: m.BlockSize, ShardSize: m.ShardSize,
		LabelFields: m.LabelFields, Fields: m.Fields, Derived: m.Derived, Strata: m.Strata, Shards: len(m.Shards), Samples: m.Samples.Len(),
		Members: m.Members, StrataOnly: m.StrataOnly, Windows: windows}
	if opts.Format >= 2 {
		rec.Format = partRecordCounts
	}
	for _, si := range owned {
		ps := partShard{FragLen: m.FragSize(si)}
		if rec.Format == partRecordCounts {
			sh := &m.Shards[si]
			ps.ShardIndex.Shard, ps.Counts, ps.Bytes = si, make([]int, len(m.Strata)), sh.Size
			for j := sh.FirstSample; j < sh.FirstSample+sh.NumSamples; j++ {
				ps.Counts[m.Samples.Stratum[j]]++
			}
		} else {
			ps.ShardIndex = *manifest.ShardIndexOf(m, si)
		}
		if indexSize != nil {
			ps.IndexSize, ps.IndexSum = indexSize[si], indexSum[si]
		}
		rec.Owned = append(rec.Owned, ps)
		res.Bytes += m.Shards[si].Size
	}
	if err := writePartRecord(ctx, opts, rec); err != nil {
		return nil, err
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// writePartRecord writes rec, a part's record, on m+1 stores: it is the
// part's only proof of work, and must survive m lost stores.
func writePartRecord(ctx context.Context, opts Options, rec *partRecord) error {
	enc, err := encodePart(rec)
	if err != nil {
		return err
	}
	part := Part{rec.Part, rec.Parts}
	if err := repository.PutSome(ctx, opts.Stores, repository.PartObject(opts.Name, rec.IngestID, part.Index, part.Count), enc, opts.Parity+1, repository.Put); err != nil {
		return fmt.Errorf("part %s of %s not done: its record: %w (rerun this part)", part, opts.Name, err)
	}
	return nil
}

// shardPart is the part that uploads shard si of a plan whose new shards
// start at first: whole windows are dealt round-robin when the plan has
// at least one window per part (so the parts between them read each
// source shard once); else shards are.
func shardPart(si int, windows []int, first, parts int) int {
	if len(windows) >= parts {
		w, found := slices.BinarySearch(windows, si)
		if !found {
			w--
		}
		return w % parts
	}
	return (si - first) % parts
}

// ownedShards are the shards part uploads, of a plan of n shards.
func ownedShards(n int, windows []int, first int, part Part) []int {
	var owned []int
	for si := first; si < n; si++ {
		if shardPart(si, windows, first, part.Count) == part.Index {
			owned = append(owned, si)
		}
	}
	return owned
}

// compareCommitted is a part of the committed ingest run again: it encodes
// its shards and compares every fragment (and index object) with what the
// stores hold, writing nothing. Equal, there is nothing to do; different,
// the source changed since the commit, and the part says what to do.
func compareCommitted(ctx context.Context, src *Source, m *manifest.Manifest, windows []int, codec *erasure.Codec, opts Options, part Part, owned []int) error {
	_, err := uploadShards(ctx, src, m, windows, codec, opts, owned, repository.Same)
	if err == nil && opts.Format >= 2 {
		_, _, err = writeIndexes(ctx, opts, m, owned, repository.Same)
	}
	switch {
	case errors.Is(err, ErrSourceChanged):
		return sourceChanged(opts.Name, part, m.IngestID, err, true)
	case errors.Is(err, repository.ErrCommittedMissing):
		return fmt.Errorf("part %s of %s: the source matches what was committed, but %w: run shardfs verify and shardfs repair %s; nothing was written", part, opts.Name, err, opts.Name)
	case err != nil:
		return fmt.Errorf("part %s of %s: could not compare the source with what was committed: %w; nothing was written", part, opts.Name, err)
	}
	return fmt.Errorf("%w: %s was committed from these parts (ingest %s), and part %s's bytes match it: nothing to do", ErrAlreadyCommitted, opts.Name, m.IngestID, part)
}

// sourceChanged explains a part refused because its source changed.
func sourceChanged(name string, part Part, id string, err error, committed bool) error {
	if committed {
		return fmt.Errorf("part %s of %s: the source's content differs from what was committed (ingest %s, %v). Nothing was written. To ingest the new content, run every part with a new --job, then shardfs commit --force %s to replace the dataset", part, name, id, err, name)
	}
	return fmt.Errorf("part %s of %s: the source's content differs from what earlier runs of this ingest (%s) wrote (%v), and a part never writes over them. Nothing more was written. Run every part of the changed source with a new --job, then commit that one", part, name, id, err)
}

// verifyUploads reads every fragment of the given shards back and compares
// it with what was encoded: a part vouches for its shards in its record.
func verifyUploads(ctx context.Context, m *manifest.Manifest, codec *erasure.Codec, opts Options, shards []int) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(opts.ShardsInFlight)
	for _, si := range shards {
		g.Go(func() error {
			sh := m.Shards[si]
			fl := m.FragSize(si)
			nb := m.Blocks(si)
			got := make([]byte, fl)
			for f := 0; f < codec.Total(); f++ {
				id, n := m.ShardObject(si)
				store := opts.Stores[codec.Placement(n, f)]
				if err := repository.ReadAt(gctx, store, repository.FragmentObject(opts.Name, id, n, f), got, 0); err != nil {
					return fmt.Errorf("read back shard %d fragment %d: %w", si, f, err)
				}
				if _, b, _ := verify.Blocks(got, m.BlockSize, sh.Sums[f*nb:(f+1)*nb]); b >= 0 {
					return fmt.Errorf("read back shard %d fragment %d from %s: block %d does not match what was written", si, f, store, b)
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// ErrSourceChanged: a part found an object of its ingest already written
// with other bytes (repository.CreateOrSame).
var ErrSourceChanged = repository.ErrSourceChanged

// CommitOptions configure Commit.
type CommitOptions struct {
	Name   string
	Stores []backend.Store
	// IngestID picks the distributed ingest to commit when the stores hold
	// parts of several; empty: the only one whose parts are all present.
	IngestID string
	Force    bool // replace a committed dataset of the same name
	Logger   *slog.Logger
	Lock     repository.LockOptions
}

// Commit commits a distributed ingest whose parts are all done: it reads
// the part records, checks that together they are one whole plan and that
// every fragment of every shard is on its store at its size, then writes
// the manifest as a single-process ingest does. Nothing is visible before,
// and a commit that fails changes nothing a reader sees.
func Commit(ctx context.Context, copts CommitOptions) (*Result, error) {
	start := time.Now()
	opts := Options{Name: copts.Name, Stores: copts.Stores, Force: copts.Force, Logger: copts.Logger, Lock: copts.Lock}
	log := opts.logger()
	if err := repository.CheckName(opts.Name); err != nil {
		return nil, err
	}
	if err := backend.CheckDistinct(opts.Stores); err != nil {
		return nil, err
	}
	if err := pingAll(ctx, opts.Stores); err != nil {
		return nil, err
	}
	parts, err := repository.ListParts(ctx, opts.Stores, opts.Name)
	if err != nil {
		return nil, err
	}
	if m, err := repository.LoadHeader(ctx, opts.Stores, opts.Name, log); err == nil {
		// Records of the committed ingest are strays (a part rerun while
		// it committed): its work is in the manifest, they can go.
		parts = repository.DropParts(ctx, opts.Stores, opts.Name, m.IngestID, parts, log)
		if len(parts) == 0 && copts.IngestID == "" {
			return nil, finishCommitted(ctx, opts, "commit-"+m.IngestID,
				fmt.Errorf("%w: %s is committed (ingest %s) and no distributed ingest of it is pending: nothing to do", ErrAlreadyCommitted, opts.Name, m.IngestID))
		}
	}
	id, n, err := pickIngest(opts.Name, parts, copts.IngestID)
	if err != nil {
		return nil, err
	}
	opts.Lock.Logger = log
	txn, ctx, err := repository.Begin(ctx, opts.Stores, opts.Name, "commit-"+id, opts.Lock, log)
	if err != nil {
		return nil, fmt.Errorf("commit %s: %w", opts.Name, err)
	}
	defer txn.Release(context.WithoutCancel(ctx))
	committedErr := txn.RefuseCommitted(ctx, opts.Force, id)
	if errors.Is(committedErr, ErrAlreadyCommitted) {
		// A rerun of a commit that was stopped past its commit point, or
		// that committed with a store missing its copy: finish it, so the
		// rerun leaves what an uninterrupted commit leaves.
		if err := finishCommit(ctx, txn, log); err != nil {
			return nil, err
		}
		return nil, committedErr
	}
	recs, err := readParts(ctx, opts.Stores, opts.Name, id, n)
	if err != nil {
		return nil, err
	}
	if committedErr != nil && recs[0].Parent == "" { // an append's parts add to the committed dataset
		return nil, committedErr
	}
	if r := recs[0]; len(opts.Stores) != r.Data+r.Parity {
		return nil, fmt.Errorf("commit %s: %d stores given, but the parts were written RS(%d,%d) over %d stores: pass the parts' stores in the same order",
			opts.Name, len(opts.Stores), r.Data, r.Parity, r.Data+r.Parity)
	}
	var names []string
	for _, s := range opts.Stores {
		names = append(names, s.String())
	}
	r0 := recs[0]
	// An append's parts add to the version they read: it must still be
	// current, and its shards come first.
	var appendTo *manifest.Manifest
	var inherited []*partShard
	if r0.Parent != "" {
		if appendTo, inherited, err = appendParent(ctx, opts, r0, log); err != nil {
			return nil, err
		}
	}
	var m *manifest.Manifest
	partOf := func(si int) int { return (si - r0.First) % n }
	switch {
	case r0.Format == partRecordSlice:
		if m, err = assembleSlices(opts.Name, recs, names); err != nil {
			return nil, err
		}
		partOf = sliceOwners(recs)
		// Every part's keys are distinct within it; across parts, the
		// merge of their sorted keys finds a key two of them share.
		err = mergePartKeys(ctx, opts.Stores, opts.Name, recs)
	case r0.Metadata >= 2:
		m, err = assembleTop(opts.Name, recs, inherited, names)
	default:
		m, err = assemble(opts.Name, recs, inherited, names)
	}
	if err != nil {
		return nil, err
	}
	if err := checkFragments(ctx, opts.Stores, m, r0.First, n, partOf); err != nil {
		return nil, err
	}
	if r0.Metadata >= 2 {
		if err := checkIndexes(ctx, opts.Stores, m.Top, r0.First, n, partOf); err != nil {
			return nil, err
		}
	}
	parent := appendTo
	if appendTo != nil {
		appendLineage(m, appendTo, r0, n)
	} else {
		parent = replaceLineage(ctx, opts, m, "commit --force", log)
	}
	if recs[0].Metadata == 3 {
		// The commit writes the group objects: they follow from the
		// parts' records, and a rerun commit writes the same bytes.
		if m.Root, err = writeGroups(ctx, opts, m.Top, repository.Put); err != nil {
			return nil, fmt.Errorf("commit %s: %w (rerun the commit)", opts.Name, err)
		}
	}
	res := &Result{Manifest: m, Samples: m.Samples.Len(), Bytes: m.TotalBytes()}
	if m.Top != nil {
		res.Samples = m.Top.Samples()
	}
	for i := r0.First; i < len(m.Shards); i++ {
		res.StoredBytes += int64(m.Data+m.Parity) * m.FragSize(i)
	}
	if appendTo != nil { // what the append added
		before, bytes := repository.Totals(appendTo)
		res.Samples -= int(before)
		res.Bytes -= bytes
	}
	if err := commitReplacing(ctx, opts, txn, m, parent, res); err != nil {
		return nil, err
	}
	// The parts' work is in the manifest now; their records can go.
	if r0.Format == partRecordSlice {
		deleteSliceParts(context.WithoutCancel(ctx), opts.Stores, opts.Name, recs)
	}
	repository.DeleteParts(context.WithoutCancel(ctx), opts.Stores, opts.Name, id, n)
	res.OrphansPurged = txn.Purge(ctx, m)
	res.Elapsed = time.Since(start)
	return res, nil
}

// finishCommitted finishes, under the ingest lock, the commit of the
// dataset's current version where one stopped past its commit point, and
// then returns done: what a rerun of a commit that has nothing left to
// commit says.
func finishCommitted(ctx context.Context, opts Options, lockID string, done error) error {
	log := opts.logger()
	opts.Lock.Logger = log
	txn, ctx, err := repository.Begin(ctx, opts.Stores, opts.Name, lockID, opts.Lock, log)
	if err != nil {
		return fmt.Errorf("commit %s: %w", opts.Name, err)
	}
	defer txn.Release(context.WithoutCancel(ctx))
	if err := finishCommit(ctx, txn, log); err != nil {
		return err
	}
	return done
}

// pickIngest chooses the distributed ingest to commit among the parts:
// want if given, else the only one with every part present. It returns the
// ingest id and its number of parts.
func pickIngest(name string, parts []repository.PartRef, want string) (string, int, error) {
	type job struct {
		n    int
		have map[int]bool
	}
	jobs := map[string]*job{}
	for _, p := range parts {
		id := p.Job
		j := jobs[id]
		if j == nil {
			j = &job{have: map[int]bool{}}
			jobs[id] = j
		}
		if i, n := p.Index, p.Count; n > 0 {
			if j.n != 0 && j.n != n {
				return "", 0, fmt.Errorf("commit %s: ingest %s has parts of %d and of %d: rerun every part with the same --part I/N count", name, id, j.n, n)
			}
			j.n = n
			j.have[i] = true
		}
	}
	missing := func(id string, j *job) []string {
		var out []string
		for i := 0; i < j.n; i++ {
			if !j.have[i] {
				out = append(out, fmt.Sprintf("%d/%d", i, j.n))
			}
		}
		return out
	}
	if want != "" {
		j := jobs[want]
		if j == nil || j.n == 0 {
			return "", 0, fmt.Errorf("commit %s: no finished part of ingest %s on these stores: run shardfs ingest --part I/N first", name, want)
		}
		if m := missing(want, j); len(m) > 0 {
			return "", 0, fmt.Errorf("commit %s: ingest %s lacks parts %s: run shardfs ingest --part for each (a part that died is simply rerun), then commit again", name, want, strings.Join(m, ", "))
		}
		return want, j.n, nil
	}
	var complete []string
	var notes []string
	for id, j := range jobs {
		if j.n > 0 && len(missing(id, j)) == 0 {
			complete = append(complete, id)
		} else if j.n > 0 {
			notes = append(notes, fmt.Sprintf("ingest %s lacks parts %s", id, strings.Join(missing(id, j), ", ")))
		} else {
			notes = append(notes, fmt.Sprintf("ingest %s has started but no part has finished", id))
		}
	}
	slices.Sort(complete)
	slices.Sort(notes)
	switch {
	case len(complete) == 1:
		return complete[0], jobs[complete[0]].n, nil
	case len(complete) > 1:
		return "", 0, fmt.Errorf("commit %s: the parts of several ingests are all done (%s): pick one with --ingest-id", name, strings.Join(complete, ", "))
	case len(notes) > 0:
		return "", 0, fmt.Errorf("commit %s: no distributed ingest has all its parts: %s; run shardfs ingest --part for each missing part (a part that died is simply rerun), then commit again; an ingest that will not finish is dropped with shardfs commit --abandon INGEST_ID", name, strings.Join(notes, "; "))
	}
	return "", 0, fmt.Errorf("commit %s: no parts of a distributed ingest on these stores: run shardfs ingest --part I/N ... first", name)
}

// readParts reads part records 0..n-1 of ingest id, each from the first
// store that holds an intact copy.
func readParts(ctx context.Context, stores []backend.Store, name, id string, n int) ([]*partRecord, error) {
	recs := make([]*partRecord, n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range recs {
		g.Go(func() error {
			part := repository.PartObject(name, id, i, n)
			var errs []error
			for _, s := range stores {
				b, err := repository.ReadWhole(gctx, s, part)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				rec, err := decodePart(b)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", s, err))
					continue
				}
				if rec.IngestID != id || rec.Part != i || rec.Parts != n || rec.Name != name {
					errs = append(errs, fmt.Errorf("%s: %w: it says part %d/%d of %s ingest %s", s, errBadPart, rec.Part, rec.Parts, rec.Name, rec.IngestID))
					continue
				}
				if rec.Metadata >= 2 {
					// Its rows are in the shard indexes the part wrote: the
					// commit keeps per shard its counts, not its rows.
					if err := thin(name, rec); err != nil {
						return err
					}
				}
				recs[i] = rec
				return nil
			}
			return fmt.Errorf("commit %s: part %d/%d has no readable record (%v): rerun shardfs ingest --part %d/%d, then commit again", name, i, n, errors.Join(errs...), i, n)
		})
	}
	return recs, g.Wait()
}

// notOneIngest is a commit's refusal of part records that do not form one
// ingest.
func notOneIngest(name, format string, args ...any) error {
	return fmt.Errorf("commit %s: the parts do not form one ingest: %s; rerun every part with the same source, options and job", name, fmt.Sprintf(format, args...))
}

// owners checks that the records describe one plan and that each of its
// shards is held by exactly one of them, its owner, and returns them by
// shard.
// The shards before the records' First are the parent version's, given
// as inherited.
func owners(name string, recs []*partRecord, inherited []*partShard) ([]*partShard, error) {
	r0 := recs[0]
	if r0.Shards < 0 || r0.Shards > 1<<31 || r0.Samples < 0 || r0.First < 0 || r0.First > r0.Shards {
		return nil, notOneIngest(name, "part 0 claims %d shards from %d and %d samples", r0.Shards, r0.First, r0.Samples)
	}
	if len(inherited) != r0.First {
		return nil, notOneIngest(name, "the parts add to a version of %d shards, the dataset's has %d", r0.First, len(inherited))
	}
	if !cutsShards(r0.Windows, r0.First, r0.Shards) {
		return nil, notOneIngest(name, "part 0's read windows %v do not cut its %d shards", r0.Windows, r0.Shards)
	}
	owner := make([]*partShard, r0.Shards)
	copy(owner, inherited)
	for _, r := range recs {
		if r.Metadata != r0.Metadata || r.Seed != r0.Seed || r.Data != r0.Data || r.Parity != r0.Parity || r.BlockSize != r0.BlockSize || r.ShardSize != r0.ShardSize ||
			r.Shards != r0.Shards || r.Samples != r0.Samples || !slices.Equal(r.LabelFields, r0.LabelFields) || !sameStrata(r.Strata, r0.Strata) ||
			!slices.Equal(r.Fields, r0.Fields) || fmt.Sprint(r.Derived) != fmt.Sprint(r0.Derived) || r.Parent != r0.Parent || r.First != r0.First ||
			!slices.Equal(r.Members, r0.Members) || !slices.Equal(r.StrataOnly, r0.StrataOnly) || !slices.Equal(r.Windows, r0.Windows) {
			return nil, notOneIngest(name, "part %d's plan differs from part 0's", r.Part)
		}
		for k := range r.Owned {
			ps := &r.Owned[k]
			if ps.Shard < r0.First || ps.Shard >= r0.Shards || shardPart(ps.Shard, r.Windows, r0.First, r.Parts) != r.Part {
				return nil, notOneIngest(name, "part %d holds shard %d, which is not its own", r.Part, ps.Shard)
			}
			if owner[ps.Shard] != nil {
				return nil, notOneIngest(name, "shard %d appears twice", ps.Shard)
			}
			owner[ps.Shard] = ps
		}
	}
	for si, ps := range owner {
		if ps == nil {
			return nil, notOneIngest(name, "no part holds shard %d (part %d of %d should)", si, shardPart(si, r0.Windows, r0.First, r0.Parts), r0.Parts)
		}
	}
	return owner, nil
}

// cutsShards says whether windows cut shards first..n: empty, or strictly
// increasing from first, each below n.
func cutsShards(windows []int, first, n int) bool {
	for i, w := range windows {
		if (i == 0 && w != first) || (i > 0 && w <= windows[i-1]) || w >= n {
			return false
		}
	}
	return true
}

// checkColumns checks that shard ps's sample columns are as long as its keys.
func checkColumns(name string, r *partRecord, ps *partShard) error {
	if len(ps.Stratum) != len(ps.Keys) || len(ps.Size) != len(ps.Keys) || len(ps.Sum) != len(ps.Keys) ||
		(len(r.Fields) > 0 || len(r.Derived) > 0) != (ps.Fields != nil) || ps.Fields != nil && len(ps.Fields) != len(ps.Keys) {
		return notOneIngest(name, "shard %d's sample columns differ in length", ps.Shard)
	}
	return nil
}

// header is the manifest header the records' plan gives.
func header(name string, r0 *partRecord, stores []string) manifest.Header {
	return manifest.Header{Name: name, IngestID: r0.IngestID, CreatedUnix: time.Now().Unix(),
		Seed: r0.Seed, Data: r0.Data, Parity: r0.Parity, BlockSize: r0.BlockSize, ShardSize: r0.ShardSize,
		LabelFields: r0.LabelFields, Fields: r0.Fields, Derived: r0.Derived, Strata: slices.Clone(r0.Strata), Stores: stores,
		Members: r0.Members, StrataOnly: r0.StrataOnly}
}

// thin checks the rows of each shard of a record of metadata format 2 or
// 3 as a whole manifest would (columns, keys, strata stored stratum by
// stratum, bytes within a shard's bound and its fragments' size) and
// keeps of each its counts per stratum and bytes: the rows themselves are
// in the shard's index, which the part wrote and commit checks by size and
// checksum. So a commit holds a record's rows only while it reads it.
func thin(name string, r *partRecord) error {
	if r.Format == partRecordCounts || r.Format == partRecordSlice {
		return takeCounts(name, r)
	}
	for k := range r.Owned {
		ps := &r.Owned[k]
		if err := checkColumns(name, r, ps); err != nil {
			return err
		}
		ps.counts = make([]int, len(r.Strata))
		for j, key := range ps.Keys {
			c := int(ps.Stratum[j])
			if c >= len(r.Strata) || j > 0 && ps.Stratum[j] < ps.Stratum[j-1] {
				return notOneIngest(name, "shard %d sample %d: stratum %d out of order or of %d", ps.Shard, j, c, len(r.Strata))
			}
			if err := manifest.CheckKey(key); err != nil {
				return notOneIngest(name, "shard %d sample %d: key %q %v", ps.Shard, j, key, err)
			}
			ps.counts[c]++
			ps.size += int64(ps.Size[j])
			if ps.size > manifest.MaxShardSize {
				return notOneIngest(name, "shard %d exceeds %d bytes", ps.Shard, int64(manifest.MaxShardSize))
			}
		}
		if frag := (ps.size + int64(r.Data) - 1) / int64(max(r.Data, 1)); frag != ps.FragLen {
			return notOneIngest(name, "shard %d's fragments are %d bytes, its samples make %d", ps.Shard, ps.FragLen, frag)
		}
		ps.ShardIndex = manifest.ShardIndex{Shard: ps.Shard}
	}
	return nil
}

// takeCounts is thin of a record that holds counts, not rows: it checks
// each shard's counts (one per stratum, none negative), bytes (within a
// shard's bound, and what its fragments' size says) and that it holds no
// rows, and keeps the counts and bytes.
func takeCounts(name string, r *partRecord) error {
	for k := range r.Owned {
		ps := &r.Owned[k]
		if len(ps.Counts) != len(r.Strata) || len(ps.Keys) > 0 {
			return notOneIngest(name, "shard %d: %d counts for %d strata, and %d rows in a record of counts", ps.Shard, len(ps.Counts), len(r.Strata), len(ps.Keys))
		}
		if slices.ContainsFunc(ps.Counts, func(c int) bool { return c < 0 }) || ps.Bytes < 0 || ps.Bytes > manifest.MaxShardSize {
			return notOneIngest(name, "shard %d: counts %v, %d bytes", ps.Shard, ps.Counts, ps.Bytes)
		}
		if frag := (ps.Bytes + int64(r.Data) - 1) / int64(max(r.Data, 1)); frag != ps.FragLen {
			return notOneIngest(name, "shard %d's fragments are %d bytes, its samples make %d", ps.Shard, ps.FragLen, frag)
		}
		ps.counts, ps.size = ps.Counts, ps.Bytes
		ps.Counts = nil
	}
	return nil
}

// assembleTop builds the top-level manifest (metadata format 2, and what
// format 3 cuts into its root) from thinned part records: per shard its
// bytes, counts and index reference, no rows.
func assembleTop(name string, recs []*partRecord, inherited []*partShard, stores []string) (*manifest.Manifest, error) {
	owner, err := owners(name, recs, inherited)
	if err != nil {
		return nil, err
	}
	r0 := recs[0]
	t := &manifest.Top{Header: header(name, r0, stores)}
	total := make([]int, len(r0.Strata))
	samples := 0
	for si, ps := range owner {
		if ps.counts == nil {
			return nil, notOneIngest(name, "shard %d's record was not checked", si)
		}
		n := 0
		for c, k := range ps.counts {
			total[c] += k
			n += k
		}
		samples += n
		t.Shards = append(t.Shards, manifest.TopShard{Size: ps.size, NumSamples: n, IndexSize: ps.IndexSize, IndexSum: ps.IndexSum})
		t.SetCounts(si, ps.counts)
	}
	if samples != r0.Samples {
		return nil, notOneIngest(name, "the parts hold %d samples, the plan %d", samples, r0.Samples)
	}
	for c, st := range t.Strata {
		if st.Count != total[c] {
			return nil, notOneIngest(name, "stratum %s: %d samples in the shards, %d in the plan", st.Name, total[c], st.Count)
		}
	}
	// The header's checks (erasure parameters, stores, strata, fields); the
	// rows were checked by thin, and are unique by the plan every part
	// computed from the listing.
	if err := (&manifest.Manifest{Header: t.Header}).Validate(); err != nil {
		return nil, notOneIngest(name, "%v", err)
	}
	return t.Manifest(), nil
}

// assemble builds the manifest (metadata format 1) from the part records,
// in shard order, after checking that they describe one plan and cover it
// exactly.
func assemble(name string, recs []*partRecord, inherited []*partShard, stores []string) (*manifest.Manifest, error) {
	owner, err := owners(name, recs, inherited)
	if err != nil {
		return nil, err
	}
	r0 := recs[0]
	bad := func(format string, args ...any) error { return notOneIngest(name, format, args...) }
	m := &manifest.Manifest{Header: header(name, r0, stores), Shards: make([]manifest.Shard, r0.Shards)}
	for si, ps := range owner {
		if err := checkColumns(name, r0, ps); err != nil {
			return nil, err
		}
		for j, key := range ps.Keys {
			if int(ps.Stratum[j]) >= len(m.Strata) {
				return nil, bad("shard %d names stratum %d of %d", si, ps.Stratum[j], len(m.Strata))
			}
			m.Samples.Append(key, ps.Stratum[j], uint32(si), ps.Size[j], ps.Sum[j])
			if ps.Fields != nil {
				m.Samples.AppendFields(ps.Fields[j])
			}
			if len(r0.Members) > 0 {
				if j >= len(ps.Records) {
					return nil, bad("shard %d has %d record tables for %d samples", si, len(ps.Records), len(ps.Keys))
				}
				m.Samples.AppendRecord(ps.Records[j])
			}
		}
		m.Shards[si].Sums = ps.Sums
	}
	if m.Samples.Len() != r0.Samples {
		return nil, bad("the parts hold %d samples, the plan %d", m.Samples.Len(), r0.Samples)
	}
	if err := m.Finish(); err != nil {
		return nil, bad("%v", err)
	}
	for si, ps := range owner {
		if m.FragSize(si) != ps.FragLen {
			return nil, bad("shard %d's fragments are %d bytes, its samples make %d", si, ps.FragLen, m.FragSize(si))
		}
	}
	if err := m.Validate(); err != nil {
		return nil, bad("%v", err)
	}
	return m, nil
}

func sameStrata(a, b []manifest.Stratum) bool {
	return slices.EqualFunc(a, b, func(x, y manifest.Stratum) bool {
		return x.Name == y.Name && x.Count == y.Count && slices.Equal(x.Labels, y.Labels)
	})
}

// indexCheckBytes bounds the memory checkIndexes holds at once, in
// index bytes and what decoding them takes: 32 shards checked at once held
// every copy of their indexes, over a GB for shards of many tiny records
// (a 64 MiB shard of 200-byte captions has an index of about 13 MB).
const indexCheckBytes = 256 << 20

// indexCheckWeight is what checking an index of size bytes holds at
// once: two copies (the first intact one and the one compared with it)
// and the first one decoded, taken as six times its bytes (zstd-packed
// columns of ids, offsets and keys): an estimate, not a measured bound.
func indexCheckWeight(size int64) int64 { return 8 * size }

// checkIndexes checks that every shard's index (format 2) has an intact
// copy on more than m stores; a missing one names the part to rerun. The
// first copy that passes its CRC32C is decoded; the others must equal it.
func checkIndexes(ctx context.Context, stores []backend.Store, t *manifest.Top, first, parts int, partOf func(si int) int) error {
	weight := func(si int) int64 { return indexCheckWeight(t.Shards[si].IndexSize) }
	return checkShards(ctx, t.Name, first, len(t.Shards), parts, partOf, "shard indexes are missing", weight, indexCheckBytes, func(ctx context.Context, si int) []string {
		intact := 0
		var problems []string
		var decoded []byte // the first copy that decodes
		for _, s := range stores {
			b, err := repository.ReadIndexBytes(ctx, s, t, si)
			if err != nil {
				continue
			}
			switch {
			case decoded == nil:
				// Decoded as a mount decodes it: a part's own ids must map
				// to the dataset's in its stratum order (slice.go).
				if _, err := manifest.DecodeIndex(b, t, si); err != nil {
					problems = append(problems, fmt.Sprintf("shard %d's index on %s: %v", si, s, err))
					continue
				}
				decoded = b
			case !bytes.Equal(b, decoded):
				// Byte for byte the copy decoded, or it is not intact: both
				// passed the manifest's CRC32C, so this is all but
				// impossible, and decoding it too would cost its memory.
				problems = append(problems, fmt.Sprintf("shard %d's index on %s differs from its copy on another store", si, s))
				continue
			}
			intact++
		}
		if len(problems) > 0 {
			return problems
		}
		if intact <= t.Parity {
			return []string{fmt.Sprintf("shard %d's index is intact on %d stores", si, intact)}
		}
		return nil
	})
}

// checkFragments checks that every fragment of m is on its store at its
// size; a missing one names the part to rerun.
func checkFragments(ctx context.Context, stores []backend.Store, m *manifest.Manifest, first, parts int, partOf func(si int) int) error {
	p := erasure.Params{Data: m.Data, Parity: m.Parity, BlockSize: m.BlockSize}
	return checkShards(ctx, m.Name, first, len(m.Shards), parts, partOf, "fragments are missing or damaged", nil, 0, func(ctx context.Context, si int) []string {
		var problems []string
		for f := 0; f < p.Total(); f++ {
			id, n := m.ShardObject(si)
			size, err := repository.Stat(ctx, stores[p.Placement(n, f)], repository.FragmentObject(m.Name, id, n, f))
			switch {
			case err != nil:
				problems = append(problems, fmt.Sprintf("shard %d fragment %d: %v", si, f, err))
			case size != m.FragSize(si):
				problems = append(problems, fmt.Sprintf("shard %d fragment %d is %d bytes, want %d", si, f, size, m.FragSize(si)))
			}
		}
		return problems
	})
}

// checkShards runs check on every shard from first on (the parts' own),
// 32 at a time, and, with weight, at most budget of their weights at once
// (a shard weighing more than budget runs alone). The problems found fail
// the commit, naming the parts to rerun (shard s is part partOf(s)).
func checkShards(ctx context.Context, name string, first, shards, parts int, partOf func(si int) int, what string, weight func(si int) int64, budget int64, check func(ctx context.Context, si int) []string) error {
	var mu sync.Mutex
	var problems []string
	rerun := map[int]bool{}
	var held *semaphore.Weighted
	if weight != nil {
		held = semaphore.NewWeighted(budget)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for si := first; si < shards; si++ {
		var w int64
		if held != nil {
			// Taken before the goroutine starts, in shard order, so a
			// heavy shard waiting for room is not passed over for ever.
			w = min(max(weight(si), 0), budget)
			if err := held.Acquire(gctx, w); err != nil {
				break // ctx ended: said below
			}
		}
		g.Go(func() error {
			if held != nil {
				defer held.Release(w)
			}
			if found := check(gctx, si); len(found) > 0 {
				mu.Lock()
				problems = append(problems, found...)
				rerun[partOf(si)] = true
				mu.Unlock()
			}
			return nil
		})
	}
	g.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(problems) == 0 {
		return nil
	}
	slices.Sort(problems)
	var again []string
	for i := 0; i < parts; i++ {
		if rerun[i] {
			again = append(again, fmt.Sprintf("%d/%d", i, parts))
		}
	}
	if len(problems) > 5 {
		problems = append(problems[:5], fmt.Sprintf("and %d more", len(problems)-5))
	}
	return fmt.Errorf("commit %s: %s (%s): rerun shardfs ingest --part %s, then commit again; nothing was committed",
		name, what, strings.Join(problems, "; "), strings.Join(again, ", --part "))
}

// Abandon deletes the distributed ingest copts.IngestID of copts.Name,
// one that will not be committed, under the ingest lock: its parts'
// records, keys and marks, and the fragments and indexes they wrote
// (repository.Txn.AbandonJob, which says why nothing committed goes).
func Abandon(ctx context.Context, copts CommitOptions) (repository.AbandonReport, error) {
	opts := Options{Name: copts.Name, Stores: copts.Stores, Logger: copts.Logger, Lock: copts.Lock}
	log := opts.logger()
	if err := repository.CheckName(opts.Name); err != nil {
		return repository.AbandonReport{}, err
	}
	if err := backend.CheckDistinct(opts.Stores); err != nil {
		return repository.AbandonReport{}, err
	}
	if err := pingAll(ctx, opts.Stores); err != nil {
		return repository.AbandonReport{}, err
	}
	opts.Lock.Logger = log
	txn, ctx, err := repository.Begin(ctx, opts.Stores, opts.Name, "abandon-"+copts.IngestID, opts.Lock, log)
	if err != nil {
		return repository.AbandonReport{}, fmt.Errorf("abandon ingest %s of %s: %w", copts.IngestID, opts.Name, err)
	}
	defer txn.Release(context.WithoutCancel(ctx))
	return txn.AbandonJob(ctx, copts.IngestID)
}
