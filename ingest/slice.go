package ingest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/erasure"
	"github.com/shardfs/shardfs/manifest"
	"github.com/shardfs/shardfs/repository"
	"github.com/shardfs/shardfs/verify"
)

// Parts that read only their slice (issue 59). A part of a distributed
// ingest of WebDataset shards (a directory, or a store's objects) reads
// its slice of the source's shards once (Stream.Slice), streams it as a
// single-process ingest streams a source, and writes its shards as a
// segment of its own:
//   - named and placed by their numbers within it (manifest.Segment.Local):
//     it cannot know how many shards the parts before it make;
//   - under an ingest id of its own (repository.SliceSegmentID), marked started so
//     that a purge or gc leaves them alone until the commit;
//   - its strata and members numbered as it meets them, and each shard's
//     samples in the order of their strata's names (Options.slicePart).
//
// Its record (format partRecordSlice) holds what the commit needs: per
// shard its bytes, samples per stratum and index reference; its strata
// and members; and the objects that hold its keys, sorted
// (keyRuns.writePieces). The commit numbers the dataset's strata and
// members by name and maps each part's onto them (Segment.Strata,
// Segment.Members): by name on both sides, so a shard stays in the
// dataset's stratum order. It merges the parts' keys in a stream
// (mergePartKeys), refusing a key two records share, naming both, and
// then checks and commits as for any distributed ingest. Every part must
// cut the same strata: --bins needs its edges given.

// partRecordSlice is the record of a part that read only its slice.
const partRecordSlice = 3

// Slice keeps of st the shards of part: the I-th of N runs of its shards,
// in name order, about as many in each. Of a JSONL corpus, one file, it
// keeps the lines that start in the I-th of N runs of its bytes: its
// records must be keyed by a field (--key), since a part that reads only
// its slice does not know its lines' numbers.
func (st *Stream) Slice(part Part) error {
	if part.Count < 1 || part.Index < 0 || part.Index >= part.Count {
		return fmt.Errorf("part %s: want 0 <= I < N", part)
	}
	if st.corpus != nil {
		if !st.Sliceable() {
			return fmt.Errorf("--part %s: corpus %s keys its records by line number, which a part that reads only its slice does not know: give --key FIELD, a field unique to each record", part, st.src)
		}
		size := st.corpus.size
		from, to := int64(part.Index)*size/int64(part.Count), int64(part.Index+1)*size/int64(part.Count)
		lines, err := st.corpus.slice(from, to)
		if err != nil {
			return err
		}
		st.sliceEmpty = !lines
		return nil
	}
	st.allShards = st.shards
	n := len(st.shards)
	st.shards = st.shards[part.Index*n/part.Count : (part.Index+1)*n/part.Count]
	st.sliceEmpty = len(st.shards) == 0
	return nil
}

// sliceJobID names a distributed ingest of slices by what every part sees
// without reading the source: the job, the dataset, the parts, the
// options and the names of every source shard. A different source, job or
// option never writes over another's objects.
func sliceJobID(st *Stream, opts Options, job string, parts int) string {
	h := sha256.New()
	fmt.Fprintf(h, "shardfs slice part v1\x00%s\x00%s\x00%d\x00%d\x00%d\x00%d\x00%d\x00%d\x00%d\x00",
		job, opts.Name, parts, opts.Seed, opts.Data, opts.Parity, opts.BlockSize, opts.ShardSize, opts.Format)
	fmt.Fprintf(h, "%q\x00%q\x00%q\x00%d\x00", st.o.Label, st.o.Strata, st.o.LabelFields, st.o.MaxRecordSize)
	for _, b := range st.o.Bins {
		fmt.Fprintf(h, "bins %q %d %v\x00", b.Field, b.Count, b.Edges)
	}
	for _, b := range st.o.TimeBuckets {
		fmt.Fprintf(h, "time %+v\x00", b)
	}
	for _, s := range st.allShards {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	if st.corpus != nil {
		// The corpus's members and key field, and its size: every part
		// stats the file.
		fmt.Fprintf(h, "corpus %q %q %d\x00", filepath.Base(st.src), st.o.KeyField, st.corpus.size)
		for _, m := range st.o.Members {
			fmt.Fprintf(h, "member %q %q\x00", m.Field, m.Name)
		}
	}
	return "job-" + hex.EncodeToString(h.Sum(nil)[:8])
}

// RunSlicePart runs part of a distributed ingest of the WebDataset shards
// st reads: it streams the part's slice of them (reading nothing else of
// the source), uploads its shards, and writes its keys and its record.
// It takes no lock and writes nothing a reader sees; run Commit when every
// part is done. A rerun writes the same objects (CreateOrSame): a part
// that died is simply run again.
func RunSlicePart(ctx context.Context, st *Stream, opts Options, part Part, job string) (*PartResult, error) {
	start := time.Now()
	log := opts.logger()
	codec, err := opts.check(ctx)
	if err != nil {
		return nil, err
	}
	switch opts.Format {
	case 0:
		opts.Format = 2
	case 1:
		return nil, fmt.Errorf("--part %s: metadata format 1 holds every record in one manifest; parts that read only their slice write format 2 or 3", part)
	}
	for _, b := range st.o.Bins {
		if b.Edges == nil {
			return nil, fmt.Errorf("--part %s: --bins %s=%d cuts quantiles, and each part sees only its slice, so the parts would cut different bins: give the edges, e.g. --bins %s=0,10,100", part, b.Field, b.Count, b.Field)
		}
	}
	if err := st.Slice(part); err != nil {
		return nil, err
	}
	if err := (&Source{Root: st.root, store: st.store}).checkApart(ctx, opts.Stores, opts.Name); err != nil {
		return nil, err
	}
	id := sliceJobID(st, opts, job, part.Count)
	seg := repository.SliceSegmentID(id, part.Index)
	if err := repository.RefuseCommitted(ctx, opts.Stores, opts.Name, opts.Force, id, log); err != nil {
		return nil, err
	}
	// Marked before the first fragment: a purge by another ingest of this
	// name, or a gc, leaves the objects of a running part alone.
	for _, mark := range []string{id, seg} {
		if err := repository.PutSome(ctx, opts.Stores, repository.PartStartedObject(opts.Name, mark), []byte(time.Now().UTC().Format(time.RFC3339)), 1, repository.Put); err != nil {
			return nil, fmt.Errorf("part %s of %s: %w", part, opts.Name, err)
		}
	}
	if st.corpus != nil {
		log.Info("ingest part", "dataset", opts.Name, "part", part.String(), "ingest_id", id, "corpus", st.src, "from_byte", st.corpus.start, "to_byte", st.corpus.end, "of", st.corpus.size)
	} else {
		log.Info("ingest part", "dataset", opts.Name, "part", part.String(), "ingest_id", id, "source_shards", len(st.shards), "of", len(st.allShards))
	}
	rec := &partRecord{Format: partRecordSlice, Metadata: opts.Format, Name: opts.Name, IngestID: id, Part: part.Index, Parts: part.Count,
		Seed: opts.Seed, Data: opts.Data, Parity: opts.Parity, BlockSize: opts.BlockSize, ShardSize: opts.ShardSize, Segment: seg}
	res := &PartResult{IngestID: id, Part: part}
	if !st.sliceEmpty {
		err := streamSlice(ctx, st, opts, codec, seg, rec, res, log)
		if errors.Is(err, ErrEmpty) && st.chunks == 0 {
			// The slice holds no record (blank lines, empty tar shards):
			// nothing was written, and its part is done, with no shards.
			err = nil
		}
		if err != nil {
			if errors.Is(err, ErrSourceChanged) {
				return nil, sourceChanged(opts.Name, part, id, err, false)
			}
			var storeErr *backend.Error
			if errors.As(err, &storeErr) || ctx.Err() != nil {
				return nil, fmt.Errorf("part %s of %s not done: %w (rerun this part)", part, opts.Name, err)
			}
			// The source's own fault (a bad record, a key given twice):
			// a rerun reads the same.
			return nil, fmt.Errorf("part %s of %s refused: %w; nothing of it is visible: fix the source, then rerun this part", part, opts.Name, err)
		}
	}
	if err := repository.RefuseCommitted(ctx, opts.Stores, opts.Name, opts.Force, id, log); err != nil {
		return nil, err
	}
	if err := writePartRecord(ctx, opts, rec); err != nil {
		return nil, err
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// streamSlice streams st's slice into segment seg, and fills rec and res
// with what it wrote: its header, its shards and its keys' objects.
func streamSlice(ctx context.Context, st *Stream, opts Options, codec *erasure.Codec, seg string, rec *partRecord, res *PartResult, log *slog.Logger) error {
	first, _, err := st.firstChunk(ctx, opts) // format 2 or 3: never placed whole
	if err != nil {
		return err
	}
	keys, err := newKeyRuns()
	if err != nil {
		return err
	}
	defer keys.close()
	opts.slicePart = true
	var r Result
	m, err := streamChunks(ctx, st, first, opts, codec, seg, keys, &r, repository.CreateOrSame, log)
	if err != nil {
		return err
	}
	if rec.KeyPieces, err = keys.writePieces(ctx, opts, rec.IngestID, rec.Part, rec.Parts); err != nil {
		return err
	}
	t := m.Top
	rec.LabelFields, rec.Fields, rec.Derived, rec.Strata, rec.Members, rec.StrataOnly = t.LabelFields, t.Fields, t.Derived, t.Strata, t.Members, t.StrataOnly
	rec.Shards, rec.Samples = len(t.Shards), r.Samples
	row := make([]int, len(t.Strata))
	for si, sh := range t.Shards {
		t.Counts(si, row)
		rec.Owned = append(rec.Owned, partShard{ShardIndex: manifest.ShardIndex{Shard: si}, FragLen: (sh.Size + int64(opts.Data) - 1) / int64(opts.Data),
			IndexSize: sh.IndexSize, IndexSum: sh.IndexSum, Counts: slices.Clone(row), Bytes: sh.Size})
	}
	res.Shards, res.AllShards, res.Bytes, res.StoredBytes = len(t.Shards), len(t.Shards), r.Bytes, r.StoredBytes
	return nil
}

// keyPiece is one object of a part's sorted keys: its size and checksum.
type keyPiece struct {
	Size int64
	Sum  uint32
}

// keyPieceBytes bounds one object of a part's keys: a commit holds one
// of each part's at a time.
const keyPieceBytes = 1 << 20

// writePieces merges k's runs, refusing a key two of its records share,
// and writes the keys in order, with where each record is, to objects of
// about keyPieceBytes each (repository.PartKeysObject), each on m+1
// stores. The commit merges every part's in a stream (mergePartKeys).
func (k *keyRuns) writePieces(ctx context.Context, opts Options, id string, part, parts int) ([]keyPiece, error) {
	var pieces []keyPiece
	var buf []byte
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		o := repository.PartKeysObject(opts.Name, id, part, parts, len(pieces))
		if err := repository.PutSome(ctx, opts.Stores, o, buf, opts.Parity+1, repository.Put); err != nil {
			return fmt.Errorf("its keys: %w", err)
		}
		pieces = append(pieces, keyPiece{int64(len(buf)), verify.Sum(buf)})
		buf = buf[:0]
		return nil
	}
	err := k.merge(func(key, where []byte) error {
		buf = appendString(appendString(buf, key), where)
		if len(buf) >= keyPieceBytes {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	return pieces, err
}

// pieceReader reads a part's key objects in order, each whole and
// checked against the checksum its record keeps, one at a time.
type pieceReader struct {
	ctx    context.Context
	stores []backend.Store
	name   string
	rec    *partRecord
	next   int
	cur    *bytes.Reader
}

func (p *pieceReader) Read(b []byte) (int, error) {
	for p.cur == nil || p.cur.Len() == 0 {
		if p.next == len(p.rec.KeyPieces) {
			return 0, io.EOF
		}
		want := p.rec.KeyPieces[p.next]
		o := repository.PartKeysObject(p.name, p.rec.IngestID, p.rec.Part, p.rec.Parts, p.next)
		var errs []error
		p.cur = nil
		for _, s := range p.stores {
			got, err := repository.ReadWhole(p.ctx, s, o)
			if err == nil && (int64(len(got)) != want.Size || verify.Sum(got) != want.Sum) {
				err = fmt.Errorf("%s: %d bytes that fail their checksum", s, len(got))
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			p.cur = bytes.NewReader(got)
			break
		}
		if p.cur == nil {
			return 0, fmt.Errorf("part %d/%d's keys, object %d: no intact copy (%w): rerun shardfs ingest --part %d/%d", p.rec.Part, p.rec.Parts, p.next, errors.Join(errs...), p.rec.Part, p.rec.Parts)
		}
		p.next++
	}
	return p.cur.Read(b)
}

// mergePartKeys merges every part's sorted keys, refusing the first key
// two records share, naming both: what a single-process ingest's keyRuns
// refuses, with one part's keys at a time per part in memory.
func mergePartKeys(ctx context.Context, stores []backend.Store, name string, recs []*partRecord) error {
	var readers []*runReader
	for i, r := range recs {
		readers = append(readers, &runReader{r: bufio.NewReaderSize(&pieceReader{ctx: ctx, stores: stores, name: name, rec: r}, 64<<10), run: i})
	}
	err := mergeRuns(readers, true, nil)
	if err != nil && !errors.Is(err, errKeyAgain) {
		return fmt.Errorf("commit %s: %w", name, err)
	}
	return err
}

// assembleSlices builds the top-level manifest of a distributed ingest of
// slices from its part records: the dataset's strata and members are the
// parts', numbered by name; each part with shards is a segment of its own,
// numbering its shards (Local) and its ids (maps) on its own.
func assembleSlices(name string, recs []*partRecord, stores []string) (*manifest.Manifest, error) {
	r0 := recs[0]
	var shaped *partRecord // the first part with shards: its fields and label fields are every part's
	strata := map[string]manifest.Stratum{}
	members := map[string]bool{}
	for _, r := range recs {
		if r.Format != partRecordSlice || r.Metadata != r0.Metadata || r.Seed != r0.Seed || r.Data != r0.Data || r.Parity != r0.Parity ||
			r.BlockSize != r0.BlockSize || r.ShardSize != r0.ShardSize || r.Segment != repository.SliceSegmentID(r0.IngestID, r.Part) {
			return nil, notOneIngest(name, "part %d's options differ from part 0's", r.Part)
		}
		if len(r.Owned) == 0 {
			continue
		}
		if shaped == nil {
			shaped = r
		}
		if !slices.Equal(r.LabelFields, shaped.LabelFields) || !slices.Equal(r.Fields, shaped.Fields) || fmt.Sprint(r.Derived) != fmt.Sprint(shaped.Derived) ||
			!slices.Equal(r.StrataOnly, shaped.StrataOnly) {
			return nil, notOneIngest(name, "part %d's records have fields %v (label fields %v), part %d's %v (%v): every record of a source must have the same fields", r.Part, r.Fields, r.LabelFields, shaped.Part, shaped.Fields, shaped.LabelFields)
		}
		for _, c := range r.Strata {
			if have, ok := strata[c.Name]; ok && !slices.Equal(have.Labels, c.Labels) {
				return nil, notOneIngest(name, "stratum %s has labels %v in part %d, %v in another", c.Name, c.Labels, r.Part, have.Labels)
			}
			strata[c.Name] = manifest.Stratum{Name: c.Name, Labels: c.Labels}
		}
		for _, m := range r.Members {
			members[m] = true
		}
	}
	if shaped == nil {
		return nil, fmt.Errorf("commit %s: %w: no part read a record", name, ErrEmpty)
	}
	names := slices.Sorted(maps.Keys(strata))
	h := manifest.Header{Name: name, IngestID: r0.IngestID, CreatedUnix: time.Now().Unix(),
		Seed: r0.Seed, Data: r0.Data, Parity: r0.Parity, BlockSize: r0.BlockSize, ShardSize: r0.ShardSize, Stores: stores,
		LabelFields: shaped.LabelFields, Fields: shaped.Fields, Derived: shaped.Derived, StrataOnly: shaped.StrataOnly,
		Members: slices.Sorted(maps.Keys(members))}
	stratumID := map[string]uint32{}
	for i, n := range names {
		stratumID[n] = uint32(i)
		h.Strata = append(h.Strata, strata[n])
	}
	memberID := map[string]uint32{}
	for i, n := range h.Members {
		memberID[n] = uint32(i)
	}
	type shard struct {
		top    manifest.TopShard
		counts []int
	}
	var shards []shard
	for _, r := range recs {
		if len(r.Owned) == 0 {
			continue
		}
		seg := manifest.Segment{IngestID: r.Segment, Shards: len(r.Owned), Local: true}
		for _, c := range r.Strata {
			seg.Strata = append(seg.Strata, stratumID[c.Name])
		}
		for _, m := range r.Members {
			seg.Members = append(seg.Members, memberID[m])
		}
		h.Segments = append(h.Segments, seg)
		for k := range r.Owned {
			ps := &r.Owned[k]
			if ps.Shard != k || len(ps.counts) != len(r.Strata) {
				return nil, notOneIngest(name, "part %d's shard %d is listed %d-th, with %d counts for %d strata", r.Part, ps.Shard, k, len(ps.counts), len(r.Strata))
			}
			row := make([]int, len(h.Strata))
			n := 0
			for c, count := range ps.counts {
				row[seg.Strata[c]] += count
				h.Strata[seg.Strata[c]].Count += count
				n += count
			}
			shards = append(shards, shard{manifest.TopShard{Size: ps.size, NumSamples: n, IndexSize: ps.IndexSize, IndexSum: ps.IndexSum}, row})
		}
	}
	// The header's checks (erasure parameters, stores, strata, fields,
	// the segments' maps against them); the segments cover the shards by
	// construction.
	segments := h.Segments
	h.Segments = nil
	if err := (&manifest.Manifest{Header: h}).Validate(); err != nil {
		return nil, notOneIngest(name, "%v", err)
	}
	h.Segments = segments
	t := &manifest.Top{Header: h}
	for si, sh := range shards {
		t.Shards = append(t.Shards, sh.top)
		t.SetCounts(si, sh.counts)
	}
	return t.Manifest(), nil
}

// deleteSliceParts deletes what the parts of a committed ingest of slices
// left besides their records: their keys and their segments' started
// marks (the commit's last step, as DeleteParts).
func deleteSliceParts(ctx context.Context, stores []backend.Store, name string, recs []*partRecord) {
	for _, r := range recs {
		repository.DeleteSlicePart(ctx, stores, name, r.IngestID, r.Part, r.Parts, len(r.KeyPieces), r.Segment)
	}
}

// sliceOwners says which part wrote each shard of an ingest of slices: the
// parts with shards, in order, one segment each.
func sliceOwners(recs []*partRecord) func(si int) int {
	var owner []int
	for _, r := range recs {
		for range r.Owned {
			owner = append(owner, r.Part)
		}
	}
	return func(si int) int { return owner[si] }
}

// Sliceable says whether parts of st can each read only their slice: a
// source of WebDataset shards, or a JSONL corpus whose records are keyed
// by a field (--key), not by their lines' numbers.
func (st *Stream) Sliceable() bool { return st.corpus == nil || st.o.KeyField != "" }
