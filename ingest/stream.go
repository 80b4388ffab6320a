package ingest

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/erasure"
	"github.com/shardfs/shardfs/manifest"
	"github.com/shardfs/shardfs/repository"
)

// A streaming ingest reads a source of records once, front to back, a
// chunk at a time, and holds one chunk: its records' metadata (about 600
// bytes a record) and, while a window uploads, the window's bytes. Memory
// is bounded by the chunk, not by the source (issue 59: a whole scan held
// 3.2 GB for 5,000,000 records; streamed, 137 MB). A source shard within
// its share of a window's bytes is read once, whole, scanned in memory,
// and its members' bytes kept until its records are uploaded (readShards,
// keptShard); a larger one is read once too, in pieces, each piece's
// members' bytes kept as its scan reads them (pieces.go). A JSONL
// corpus's records' bytes, as the scan made them, are kept likewise
// (madeRecords): a line is decoded once.
//
// Each chunk is planned as a source of its own would be (place.go: its
// windows, each output shard mirroring its window's stratum mix), and its
// shards are numbered after the chunks before it. The chunk's shards and
// their indexes go to the stores as it is done, and what the commit needs
// of them stays: per shard, its size, samples, index reference and count
// per stratum; per stratum, its name and count. So the metadata written
// is format 2 or 3, whose top-level manifest is those counts.
//
// What a whole scan decides from every record is decided from what is
// known when a chunk is read:
//   - strata are numbered in the order they first appear, not by name;
//   - the fields are the first chunk's, and a later record with another
//     is refused, naming it;
//   - member names are numbered in the order they first appear, as a
//     whole scan numbers them;
//   - --bins N are cut at the first chunk's quantiles (the sample read
//     first); a later value beyond them goes to the first or last bin,
//     whose outer edges widen to the values seen when the stream ends
//     (widenBins);
//   - a key is checked against its chunk's as it is read, and against
//     every other at the end (keys.go: sorted runs on local disk, merged),
//     before the commit.
//
// A refusal part way (a bad record, a key given twice) deletes what the
// ingest wrote (repository.Txn.Abandon), and commits nothing: the stores
// are left as it found them.

// streamChunkRecords bounds the records of a chunk once it holds a
// shard's bytes; a chunk also ends at about readWindow bytes of records.
// A chunk's last shard, part full, goes on to the next (eachChunk), so
// shards are full.
//
// It was 8,192. A chunk's records' metadata (items, scanned records, kept
// members, the plan: about 600 bytes a record) is the largest part of the
// live heap of a stream of small records, which a short source seldom
// reaches. At 4,096, once the chunk's fixed costs were cut (a radix sort's
// 512 KiB table, a second map of its keys, the window's records by key),
// 1,000,000 WebDataset records at --shard-size 512KiB peaked at 43.2 MB
// where they peaked at 50-51 (10,000 records: 36.6 where 40.5-41.5;
// file:// stores on tmpfs, medians of 3), and the ingest's CPU per GB
// stayed within 1.05x the single-pass floor (bench ingestcpu).
const streamChunkRecords = 1 << 12

// chunkFull says a chunk of n records of these bytes is done: at
// readWindow bytes; or, once it holds streamChunkRecords records and a
// shard's bytes, just past a whole number of shards, so that the part-full
// shard it carries on holds a few records.
//
// It ended at streamChunkRecords itself before, wherever that fell in a
// shard: 8,192 records of 126 bytes are 1.97 shards of 512 KiB, so every
// chunk wrote one shard and carried the next, 99% full, to the next chunk:
// each record was planned twice, and 4,000 records' items and bytes were
// carried in memory from chunk to chunk.
func chunkFull(n int, bytes, shardSize int64) bool {
	if bytes >= readWindow(shardSize) {
		return true
	}
	if n < streamChunkRecords || bytes < shardSize {
		return false
	}
	// The greedy cut (cutShards) leaves each full shard less than a record
	// short, so two average records a shard past a whole number of shards
	// leave the last shard a few records. A record that leaps the band
	// takes the chunk on to the next whole shard, or to readWindow.
	over := bytes % shardSize
	room := 2 * (bytes / int64(n)) * (bytes/shardSize + 1)
	return over >= room && over < room+shardSize/8
}

// Stream is a source of records read once, front to back: local WebDataset
// shards, WebDataset shards on a store, or a JSONL corpus.
type Stream struct {
	src  string // the source as given, for messages
	root string
	o    ScanOptions
	// Warnings say what the ingest noticed but accepted (Source.Warnings).
	Warnings []string

	shards []string // WebDataset shards, in order
	// allShards are the source's shards, of which shards is a part's
	// slice (Slice).
	allShards []string
	// sliceEmpty: the part's slice holds no shard, or no line's start.
	sliceEmpty bool
	files      sourceFiles
	store      backend.Store
	// versions holds every read of store's objects to one version.
	versions *backend.Versions
	gz       *gzSizes
	next     int      // the next shard to read
	queue    []queued // shards and pieces read whose records are not all chunked, and shards being read in pieces
	// kept are the members' bytes of shards the scan read whole into
	// memory, and of the pieces of those it reads in pieces (keptFiles),
	// by shard name; consumed, those whose records all went to the chunks
	// made, released when the next one is made unless it carries records
	// of theirs.
	keptMu   sync.RWMutex
	kept     map[string]keptPieces
	consumed []queued
	// keptBytes is what kept holds in memory, and keptPeak its most.
	keptBytes, keptPeak int64
	// pieces counts the pieces of shards read in pieces (pieces.go), and
	// scans those shards' scans under way.
	pieces int
	scans  scanCount

	corpus *jsonlReader
	ended  bool
	// made are the corpus's records' bytes, as its scan made them, of
	// the chunk being made and the records carried into it
	// (jsonlReader.made): a chunk of records and a shard, at most.
	made *madeRecords

	shardSize int64 // the ingest's, which bounds a chunk's bytes
	chunks    int
	members   []string              // member names so far, in order of first appearance
	fields    []string              // the first chunk's fields (before any is derived)
	shape     Source                // the last chunk's label fields, strata and fields, as derived
	binRange  map[string][2]float64 // each --bins field's least and greatest value so far
}

// OpenStream opens src for a streaming ingest: WebDataset shards (a
// directory, a .tar or a glob) or a JSONL corpus (with o.Members). It
// returns nil, and no error, for a source that is read whole: a listing
// or a tree of files (their metadata is small), or a Parquet file.
func OpenStream(src string, o ScanOptions) (*Stream, error) {
	shards, records, err := WebDatasetShards(src)
	if err != nil {
		return nil, err
	}
	st := &Stream{src: src, o: o}
	switch {
	case records && len(o.Members) == 0: // --member with shards: ScanWith refuses it
		slices.Sort(shards)
		st.shards, st.root, st.gz = shards, commonDir(shards), &gzSizes{}
		st.files = &localFiles{gz: st.gz}
	case filepath.Ext(src) == ".jsonl" && len(o.Members) > 0:
		if st.corpus, err = openJSONL(src, o); err != nil {
			return nil, err
		}
		st.made = newMadeRecords()
		st.corpus.made = st.made
		st.root = filepath.Dir(src)
	default:
		return nil, nil
	}
	return st, nil
}

// OpenStoreStream is OpenStream of the WebDataset shards on o.Store.
func OpenStoreStream(ctx context.Context, o ScanOptions) (*Stream, error) {
	shards, err := StoreShards(ctx, o.Store)
	if err != nil {
		return nil, err
	}
	slices.Sort(shards)
	st := &Stream{src: o.Store.String(), root: o.Store.String(), o: o, shards: shards, store: o.Store, gz: &gzSizes{}, versions: backend.NewVersions()}
	st.files = storeFiles{o.Store, st.gz, st.versions}
	return st, nil
}

// Close releases the source's files.
func (st *Stream) Close() {
	for _, q := range st.queue {
		if q.pieces != nil {
			q.pieces.stop()
		}
	}
	if st.corpus != nil {
		st.corpus.close()
	}
	if st.files != nil {
		st.files.close()
	}
}

// chunk reads the next chunk of records after carry (items of the chunk
// before, placed again with these) and makes it a Source; nil at the end.
func (st *Stream) chunk(ctx context.Context, carry []Item) (*Source, error) {
	// The chunk before is uploaded: the shards it consumed go, but those
	// that hold records it carried over to this one keep only those
	// records' members: a carry is the last shard of the chunk's last
	// window, whose records come from all over the window, so keeping
	// whole shards for it kept most of the source.
	carried := map[string][]MemberAt{}
	if len(st.consumed) > 0 { // a corpus keeps no shards: nothing to build this for
		for i := range carry {
			carried[carry[i].Path] = append(carried[carry[i].Path], carry[i].Members...)
		}
	}
	st.keptMu.Lock()
	left := st.consumed[:0]
	for _, c := range st.consumed {
		if members, ok := carried[c.file]; ok && c.kept != nil {
			if only := c.kept.only(members); len(only.offs) > 0 {
				st.replaceKept(c.file, c.kept, only)
				left = append(left, queued{recordBatch: recordBatch{file: c.file}, kept: only})
				continue
			}
		}
		if c.kept != nil {
			st.replaceKept(c.file, c.kept, nil)
		}
	}
	st.consumed = left
	st.keptMu.Unlock()
	if st.made != nil {
		// Likewise the corpus's records made: only the carried stay.
		lines := make([]int64, len(carry))
		for i := range carry {
			lines[i] = carry[i].lineAt
		}
		st.made = st.made.only(lines)
		st.corpus.made = st.made
	}
	n, bytes := len(carry), int64(0)
	for _, it := range carry {
		bytes += it.Size
	}
	var batches []recordBatch
	switch {
	case st.corpus != nil && !st.ended:
		b := recordBatch{file: st.src}
		ended, err := st.corpus.read(&b, func(records int, read int64) bool { return chunkFull(n+records, bytes+read, st.shardSize) })
		if err != nil {
			return nil, err
		}
		st.ended = ended
		b.doneReading()
		if len(b.records) > 0 {
			batches = append(batches, b)
			n += len(b.records)
		}
	case st.corpus == nil:
		for !chunkFull(n, bytes, st.shardSize) {
			if len(st.queue) == 0 {
				if err := st.readShards(ctx); err != nil {
					return nil, err
				}
				if len(st.queue) == 0 {
					break
				}
			}
			b := &st.queue[0]
			if b.pieces != nil {
				// A shard read in pieces: its next piece goes before it.
				pc, ok, err := b.pieces.next(ctx)
				if err != nil {
					return nil, err // the scan's names the shard
				}
				if !ok {
					st.queue = st.queue[1:]
					st.startScans()
					continue
				}
				st.keptMu.Lock()
				st.addKept(b.pieces.name, pc.kept)
				st.keptMu.Unlock()
				st.pieces++
				st.queue = slices.Insert(st.queue, 0, queued{recordBatch: pc.batch, kept: pc.kept})
				continue
			}
			take := 0
			for take < len(b.records) && !chunkFull(n, bytes, st.shardSize) {
				for _, m := range b.records[take].members {
					bytes += int64(m.Size)
				}
				take++
				n++
			}
			batches = append(batches, recordBatch{file: b.file, names: b.names, schemas: b.schemas, records: b.records[:take:take]})
			if b.records = b.records[take:]; len(b.records) == 0 {
				st.consumed = append(st.consumed, queued{recordBatch: recordBatch{file: b.file}, kept: b.kept})
				st.queue = st.queue[1:]
			}
		}
	}
	if len(batches) == 0 && len(carry) == 0 {
		if st.chunks == 0 {
			if st.corpus != nil {
				return nil, fmt.Errorf("corpus %s: %w: no line holds a record", st.src, ErrEmpty)
			}
			return nil, fmt.Errorf("source %s: %w: the tar shards hold no members", st.src, ErrEmpty)
		}
		return nil, nil
	}
	if err := checkChunkKeys(carry, batches); err != nil {
		return nil, err
	}
	s := &Source{Root: st.root, store: st.store, versions: st.versions, gz: st.gz, Members: slices.Clone(st.members), openFiles: st.openFiles}
	s.Items = make([]Item, 0, n) // the carried items join them without a copy
	if st.chunks > 0 {
		s.Fields, s.fixedFields = slices.Clone(st.fields), true
	}
	what := "source " + st.root
	if st.corpus != nil {
		what = "corpus " + st.src
	}
	if st.corpus != nil {
		s.corpus, s.made = &st.o, st.made
	}
	if len(batches) > 0 {
		var err error
		if s, err = recordSource(s, what, st.o, batches); err != nil {
			return nil, err
		}
		if st.chunks == 0 {
			st.fields = slices.Clone(s.Fields)
		}
		if err := checkSource(st.src, s, st.o, true); err != nil { // checkChunkKeys refused a key given twice
			if st.chunks == 0 && slices.ContainsFunc(st.o.Bins, func(b Bins) bool { return b.Edges == nil }) {
				err = fmt.Errorf("%w (a streaming ingest cuts --bins N from the quantiles of its first chunk of records: give the edges, e.g. --bins f=0,10,100, or read the whole source first with --stream=false)", err)
			}
			return nil, err
		}
		if st.chunks == 0 {
			// Quantile bins: the first chunk's quantiles cut the rest
			// (its records are the sample), the outer bins taking what
			// lies beyond them (streamChunks widens their edges).
			for i := range st.o.Bins {
				if b := &st.o.Bins[i]; b.Edges == nil {
					k := slices.IndexFunc(s.Derived, func(d manifest.Derived) bool { return d.Field == b.Field })
					b.Edges, b.sampled = s.Derived[k].Edges, true
				}
			}
		}
		for f, r := range s.binRange {
			if old, ok := st.binRange[f]; ok {
				r = [2]float64{min(r[0], old[0]), max(r[1], old[1])}
			}
			if st.binRange == nil {
				st.binRange = map[string][2]float64{}
			}
			st.binRange[f] = r
		}
		st.members = s.Members
		st.shape = Source{LabelFields: s.LabelFields, StrataOnly: s.StrataOnly, Derived: s.Derived, Fields: s.Fields}
	} else {
		// Only the records carried (the source ended at the chunk before's
		// end): their labels and fields are cut already, as the first
		// chunk's are.
		s.LabelFields, s.StrataOnly, s.Derived, s.Fields = st.shape.LabelFields, st.shape.StrataOnly, st.shape.Derived, st.shape.Fields
	}
	s.Items = append(s.Items, carry...)
	st.chunks++
	return s, nil
}

// checkChunkKeys refuses a key two records of a chunk share, the records
// carried into it included, naming both as the scan would; keys of
// different chunks meet at the end (keyRuns).
func checkChunkKeys(carry []Item, batches []recordBatch) error {
	n := len(carry)
	for _, b := range batches {
		n += len(b.records)
	}
	seen := make(map[string]int, n) // -> position: carry's, then the batches' records'
	at := func(pos int) string {
		if pos < len(carry) {
			return carry[pos].recordAt()
		}
		pos -= len(carry)
		for _, b := range batches {
			if pos < len(b.records) {
				return b.records[pos].where(b.file)
			}
			pos -= len(b.records)
		}
		return "?"
	}
	for i := range carry {
		seen[carry[i].Key] = i
	}
	pos := len(carry)
	for _, b := range batches {
		for k := range b.records {
			r := &b.records[k]
			if prev, dup := seen[r.key]; dup {
				return keyAgain(r.where(b.file), r.key, at(prev))
			}
			seen[r.key] = pos
			pos++
		}
	}
	return nil
}

// keyAgain refuses the record at where for its key, which the record at
// prev has.
func keyAgain(where, key, prev string) error {
	return keyAgainError{fmt.Errorf("%s: key %q again, after the record at %s: two records with one key (a record split across two shards is read as two records, as WebDataset reads it): give every record its own key", where, key, prev)}
}

// readShards reads the next few shards' records into the queue, one per
// core at once. A shard within its share of a window's bytes is read
// whole into memory first and scanned there, and its members' bytes kept
// (keptShard, keptFiles) until its records are uploaded: the upload takes
// their bytes from there, so the source is read once. A larger one is
// queued to be read once too, in pieces (pieces.go), its scan begun when
// it is among the first activeScans() of the queue.
func (st *Stream) readShards(ctx context.Context) error {
	if st.next == len(st.shards) {
		return nil
	}
	group := st.shards[st.next:min(len(st.shards), st.next+runtime.GOMAXPROCS(0))]
	st.next += len(group)
	got := make([]recordBatch, len(group))
	keep := make([]*keptShard, len(group))
	inPieces := make([]*shardPieces, len(group))
	limit := st.o.MaxRecordSize
	if limit <= 0 || limit > manifest.MaxShardSize {
		limit = manifest.MaxShardSize
	}
	budget := readWindow(st.shardSize) / int64(len(group))
	// Not errgroup.WithContext: a shard read in pieces goes on being read
	// after the group (its reads hold sctx), and the group's context ends
	// with the group. A failing shard lets the others' reads (a shard's
	// size, or at most budget bytes) end.
	var g errgroup.Group
	for i, sh := range group {
		g.Go(func() error {
			sctx, cancel := context.WithCancel(ctx)
			scanned := false // the scan in pieces owns cancel
			defer func() {
				if !scanned {
					cancel()
				}
			}()
			var buf []byte
			into := func(size int64) []byte {
				select {
				case buf = <-wholeShards:
				default:
				}
				if int64(cap(buf)) < size {
					buf = make([]byte, size)
				}
				return buf[:size]
			}
			defer func() {
				if buf != nil {
					select {
					case wholeShards <- buf:
					default:
					}
				}
			}()
			var f io.ReaderAt
			var size int64
			var data []byte
			var err error
			release := func() {}
			if wf, ok := st.files.(wholeFiles); ok && !compressedShard(sh) {
				// From a store, one GET reads the shard whole and says its
				// size; a larger one's first budget bytes, which its scan
				// in pieces takes from buf, and then the rest by ranged
				// reads.
				var whole bool
				if f, size, whole, err = wf.readWhole(sctx, sh, budget, into); err != nil {
					return fmt.Errorf("shard %s: %w", sh, err)
				}
				if whole {
					data = buf[:size]
					f = bytes.NewReader(data)
				} else {
					buf = nil // f holds it
				}
			} else {
				if f, size, err = st.files.open(sctx, sh); err != nil {
					return fmt.Errorf("shard %s: %w", sh, err)
				}
				opened := f
				release = func() {
					releaseShard(opened)
					if l, ok := st.files.(*localFiles); ok {
						l.forget(sh) // the scan has read it: nothing reads it through this file again
					}
				}
				if size <= budget {
					d := into(size)
					if _, err := f.ReadAt(d, 0); err == nil {
						data = d
						f = bytes.NewReader(data)
					} // else the scan of the source names what is wrong with it
				}
			}
			if data == nil {
				inPieces[i] = scanInPieces(sh, f, size, limit, pieceRecords, pieceBytes(st.shardSize), release, cancel, &st.scans)
				scanned = true
				return nil
			}
			defer release()
			if got[i], err = readShardRecords(sh, f, size, limit); err != nil {
				return err
			}
			if data != nil {
				keep[i] = keepMembers(data, &got[i])
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		for _, p := range inPieces {
			if p != nil {
				p.stop()
			}
		}
		return err
	}
	defer st.startScans()
	st.keptMu.Lock()
	defer st.keptMu.Unlock()
	for i, b := range got { // in the shards' order
		switch {
		case inPieces[i] != nil:
			st.queue = append(st.queue, queued{recordBatch: recordBatch{file: group[i]}, pieces: inPieces[i]})
		case len(b.records) > 0:
			st.queue = append(st.queue, queued{recordBatch: b, kept: keep[i]})
			if keep[i] != nil {
				st.addKept(group[i], keep[i])
			}
		}
	}
	return nil
}

// startScans lets the first activeScans() shards of the queue read in
// pieces begin their scans, in the queue's order.
func (st *Stream) startScans() {
	n, most := 0, st.activeScans()
	for _, q := range st.queue {
		if q.pieces != nil && n < most {
			q.pieces.begin()
			n++
		}
	}
}

// queued is a source shard, or a piece of one, whose records are not all
// in chunks yet, with its members' bytes when the stream keeps them
// (nil: the windows read them from the source); or a shard being read in
// pieces (pieces), whose next piece goes before it in the queue.
type queued struct {
	recordBatch
	kept   *keptShard
	pieces *shardPieces
}

// addKept keeps k, members' bytes of the source shard name, for the
// upload (keptMu held).
func (st *Stream) addKept(name string, k *keptShard) {
	if st.kept == nil {
		st.kept = map[string]keptPieces{}
	}
	ps := st.kept[name]
	i, _ := slices.BinarySearchFunc(ps, k.offs[0], func(p *keptShard, off int64) int { return cmp.Compare(p.offs[0], off) })
	st.kept[name] = slices.Insert(ps, i, k)
	st.keptBytes += k.bytes()
	st.keptPeak = max(st.keptPeak, st.keptBytes)
}

// replaceKept puts with in old's place among name's kept pieces, or
// drops old when with is nil (keptMu held).
func (st *Stream) replaceKept(name string, old, with *keptShard) {
	ps := st.kept[name]
	i := slices.Index(ps, old)
	if i < 0 {
		return
	}
	st.keptBytes -= old.bytes()
	if with == nil {
		ps = slices.Delete(ps, i, i+1)
	} else {
		ps[i] = with
		st.keptBytes += with.bytes()
	}
	if len(ps) == 0 {
		delete(st.kept, name)
	} else {
		st.kept[name] = ps
	}
}

// wholeShards are the buffers readShards reads a shard whole into, one a
// core: only its members' bytes are kept (keptShard), so the buffer is
// free again once they are copied. A new one per shard was the largest of
// what the stream allocated, and a sync.Pool lost them at each GC cycle.
var wholeShards = make(chan []byte, runtime.GOMAXPROCS(0))

// openFiles opens the stream's source files for a chunk's upload: the
// kept shards from memory, the others from the source.
func (st *Stream) openFiles() sourceFiles {
	under := sourceFiles(&localFiles{gz: st.gz})
	if st.store != nil {
		under = storeFiles{st.store, st.gz, st.versions}
	}
	return &keptFiles{st: st, under: under}
}

// keptFiles are a stream's kept shards, and the source for the others.
type keptFiles struct {
	st    *Stream
	under sourceFiles
}

func (k *keptFiles) open(ctx context.Context, name string) (io.ReaderAt, int64, error) {
	k.st.keptMu.RLock()
	ps, ok := k.st.kept[name]
	if ok {
		ps = slices.Clone(ps) // the stream changes its list when it makes the next chunk
	}
	k.st.keptMu.RUnlock()
	if ok {
		return ps, ps[0].size, nil
	}
	return k.under.open(ctx, name)
}

func (k *keptFiles) close() { k.under.close() }

// streamStrata numbers strata across a stream's chunks, in the order they
// first appear, and counts the samples of each that were uploaded.
type streamStrata struct {
	index map[string]int
	list  []manifest.Stratum
}

// of numbers src's items' strata, adding new ones; the list returned is
// every stratum so far (plan counts the chunk's own).
func (ss *streamStrata) of(src *Source) ([]manifest.Stratum, []uint32) {
	if ss.index == nil {
		ss.index = map[string]int{}
	}
	of := make([]uint32, len(src.Items))
	for i := range src.Items {
		name := stratumName(src.Items[i].Labels)
		id, ok := ss.index[name]
		if !ok {
			id = len(ss.list)
			ss.index[name] = id
			ss.list = append(ss.list, manifest.Stratum{Name: name, Labels: slices.Clone(src.Items[i].Labels)})
		}
		of[i] = uint32(id)
	}
	out := slices.Clone(ss.list)
	for i := range out {
		out[i].Count = 0
	}
	return out, of
}

// streamShard is what the commit needs of an uploaded shard: its entry in
// the top-level manifest and its nonzero counts per stratum.
type streamShard struct {
	top    manifest.TopShard
	counts []uint32 // stratum, count, stratum, count, ...
}

// RunStream ingests st in one pass, chunk by chunk, and commits it as Run
// does. Metadata format opts.Format 2 or 3 is written as asked; 0 chooses:
// a source that is one chunk is planned whole, by Run, in format 1 (what
// a whole scan of it would choose), and a longer one streams in format 2.
// Format 1, whose one manifest holds every record, is refused for a
// source longer than a chunk. It writes only under its own ingest id
// until the commit; a refusal or a failure before the commit deletes what
// it wrote.
func RunStream(ctx context.Context, st *Stream, opts Options) (*Result, error) {
	start := time.Now()
	log := opts.logger()
	codec, err := opts.check(ctx)
	if err != nil {
		return nil, err
	}
	first, whole, err := st.firstChunk(ctx, opts)
	if err != nil {
		return nil, err
	}
	if whole {
		if opts.Format == 0 {
			opts.Format = 1
		}
		opts.ReleaseSource = true
		return Run(ctx, first, opts)
	}
	switch opts.Format {
	case 0:
		opts.Format = 2
	case 1:
		return nil, fmt.Errorf("source %s: metadata format 1 holds every record in one manifest, so its source is read whole first: use Run, or format 2 or 3", st.src)
	}
	txn, ctx, ingestID, err := begin(ctx, &Source{Root: st.root, store: st.store}, opts, log)
	if err != nil {
		return nil, err
	}
	defer txn.Release(context.WithoutCancel(ctx))
	keys, err := newKeyRuns()
	if err != nil {
		return nil, fmt.Errorf("ingest %s: %w", opts.Name, err)
	}
	defer keys.close()
	res := &Result{}
	m, err := streamChunks(ctx, st, first, opts, codec, ingestID, keys, res, repository.Put, log)
	if err == nil {
		err = keys.checkUnique()
	}
	var parent *manifest.Manifest
	if err == nil {
		parent = replaceLineage(ctx, opts, m, "ingest --force", log)
		if opts.Format == 3 {
			if m.Root, err = writeGroups(ctx, opts, m.Top, repository.Put); err != nil {
				err = fmt.Errorf("%w (rerun the same command)", err)
			}
		}
	}
	if err != nil {
		// Nothing is committed: what this ingest wrote goes (Abandon's
		// proof: no manifest names this ingest's id).
		n, aerr := txn.Abandon(context.WithoutCancel(ctx), ingestID)
		log.Info("removed what the refused ingest wrote", "objects", n, "err", aerr)
		if cause := context.Cause(ctx); errors.Is(cause, repository.ErrLockLost) {
			err = cause
		}
		return nil, fmt.Errorf("ingest %s not committed: %w", opts.Name, err)
	}
	res.Manifest = m
	if err := commitReplacing(ctx, opts, txn, m, parent, res); err != nil {
		return nil, err
	}
	res.OrphansPurged = txn.Purge(ctx, m)
	res.Elapsed = time.Since(start)
	res.Chunks = st.chunks
	for _, b := range st.o.Bins {
		if b.sampled {
			res.SampledBins = append(res.SampledBins, b.Field)
		}
	}
	return res, nil
}

// eachChunk plans st chunk by chunk, first the chunk already read, and
// hands each chunk's plan to do: its shards numbered after the chunks
// before (Options.shardBase in copts), its strata as the stream numbers
// them. A chunk's part-full last shard is carried to the next chunk.
func eachChunk(ctx context.Context, st *Stream, first *Source, opts Options, ingestID string, strata *streamStrata, do func(src *Source, m *manifest.Manifest, windows []int, copts Options) error) error {
	var carry []Item
	shards := 0
	for chunk := 0; ; chunk++ {
		src, err := first, error(nil)
		// The first chunk is dropped once taken: held here, its records
		// and their bytes stayed live through every chunk after it.
		first = nil
		if chunk > 0 {
			src, err = st.chunk(ctx, carry)
		}
		if err != nil {
			return err
		}
		if src == nil {
			if shards == 0 {
				return fmt.Errorf("source %s: %w", st.src, ErrEmpty)
			}
			return nil
		}
		copts := opts
		copts.shardBase, copts.strataOf, copts.ReleaseSource = shards, strata.of, false
		copts.Seed = opts.Seed ^ uint64(chunk)*0x9e3779b97f4a7c15 // chunk 0: the seed itself
		m, windows, err := plan(src, copts, ingestID)
		if err != nil {
			return err
		}
		carry = nil
		if last := len(m.Shards) - 1; last > 0 && !st.done() && m.Shards[last].Size < opts.ShardSize {
			// The chunk's last shard is part full: its records start the
			// next chunk, and the rest is planned again without them, so
			// that shards are full but for the stream's last.
			sh := m.Shards[last]
			carry = make([]Item, 0, sh.NumSamples)
			drop := make([]bool, len(src.Items))
			for j := sh.FirstSample; j < sh.FirstSample+sh.NumSamples; j++ {
				drop[src.planned[j]] = true
				carry = append(carry, src.Items[src.planned[j]])
			}
			kept := 0 // in place: a copy of the chunk's items was a fifth of its heap
			for i := range src.Items {
				if !drop[i] {
					src.Items[kept] = src.Items[i]
					kept++
				}
			}
			clear(src.Items[kept:])
			src.Items = src.Items[:kept]
			if m, windows, err = plan(src, copts, ingestID); err != nil {
				return err
			}
		}
		if err := do(src, m, windows, copts); err != nil {
			return err
		}
		if opts.ChunkDone != nil {
			opts.ChunkDone(chunk)
		}
		for c := range m.Strata {
			strata.list[c].Count += m.Strata[c].Count
		}
		shards += len(m.Shards)
	}
}

// streamChunks plans and uploads st chunk by chunk, writing each shard's
// fragments and index with write, and returns the top-level manifest of
// it all (m.Top set).
func streamChunks(ctx context.Context, st *Stream, first *Source, opts Options, codec *erasure.Codec, ingestID string, keys *keyRuns, res *Result, write repository.WriteFunc, log *slog.Logger) (*manifest.Manifest, error) {
	var strata streamStrata
	var shards []streamShard
	var header *manifest.Header
	err := eachChunk(ctx, st, first, opts, ingestID, &strata, func(src *Source, m *manifest.Manifest, windows []int, copts Options) error {
		all := make([]int, len(m.Shards))
		for i := range all {
			all[i] = i
		}
		stored, err := uploadShards(ctx, src, m, windows, codec, copts, all, write)
		if err != nil {
			return err
		}
		if err := m.Validate(); err != nil {
			return err
		}
		sizes, sums, err := writeIndexes(ctx, copts, m, all, write)
		if err != nil {
			return err
		}
		if err := keys.add(src, m); err != nil {
			return err
		}
		row := make([]int, len(m.Strata))
		for si, sh := range m.Shards {
			clear(row)
			for j := sh.FirstSample; j < sh.FirstSample+sh.NumSamples; j++ {
				row[m.Samples.Stratum[j]]++
			}
			ss := streamShard{top: manifest.TopShard{Size: sh.Size, NumSamples: sh.NumSamples, IndexSize: sizes[si], IndexSum: sums[si]}}
			for c, n := range row {
				if n > 0 {
					ss.counts = append(ss.counts, uint32(c), uint32(n))
				}
			}
			shards = append(shards, ss)
		}
		res.Samples += m.Samples.Len()
		res.Bytes += m.TotalBytes()
		res.StoredBytes += stored
		if header == nil {
			h := m.Header
			header = &h
		}
		log.Debug("streamed a chunk", "first_shard", copts.shardBase, "samples", m.Samples.Len(), "shards", len(m.Shards))
		return nil
	})
	if err != nil {
		return nil, err
	}
	h := st.finish(*header, &strata, res.Samples)
	t := &manifest.Top{Header: h}
	row := make([]int, len(h.Strata))
	for si, sh := range shards {
		clear(row)
		for k := 0; k < len(sh.counts); k += 2 {
			row[sh.counts[k]] = int(sh.counts[k+1])
		}
		t.Shards = append(t.Shards, sh.top)
		t.SetCounts(si, row)
	}
	return t.Manifest(), nil
}

// finish is the stream's header once every chunk is planned: the first
// chunk's, with every member name and stratum, and the --bins cut from the
// first chunk widened (widenBins); it sets st.Warnings for the strata.
func (st *Stream) finish(h manifest.Header, strata *streamStrata, samples int) manifest.Header {
	counts := make(map[string]int, len(strata.list))
	for _, c := range strata.list {
		counts[c.Name] = c.Count
	}
	st.Warnings = (&Source{LabelFields: h.LabelFields}).strataWarnings(counts, samples)
	h.Members = slices.Clone(st.members)
	h.Strata = slices.Clone(strata.list)
	h.Derived = st.widenBins(h.LabelFields, slices.Clone(h.Derived), h.Strata)
	return h
}

// PlanStream says what RunStream would write for st, writing nothing and
// reading no store but the source: st's chunks are read and placed as
// RunStream places them, in the same memory, and a key two records share
// is refused as RunStream refuses it. A source of one chunk is planned
// whole, as Plan plans it.
func PlanStream(ctx context.Context, st *Stream, opts Options) (*DryRun, error) {
	if err := opts.checkPlan(); err != nil {
		return nil, err
	}
	first, whole, err := st.firstChunk(ctx, opts)
	if err != nil {
		return nil, err
	}
	if whole {
		return Plan(first, opts)
	}
	keys, err := newKeyRuns()
	if err != nil {
		return nil, err
	}
	defer keys.close()
	var strata streamStrata
	var header *manifest.Header
	d := &DryRun{}
	err = eachChunk(ctx, st, first, opts, "dry-run", &strata, func(src *Source, m *manifest.Manifest, windows []int, _ Options) error {
		if err := keys.add(src, m); err != nil {
			return err
		}
		d.Samples += m.Samples.Len()
		d.Bytes += m.TotalBytes()
		d.Shards += len(m.Shards)
		d.Windows += max(1, len(windows))
		for si := range m.Shards {
			d.StoredBytes += int64(opts.Data+opts.Parity) * m.FragSize(si)
		}
		if header == nil {
			h := m.Header
			header = &h
		}
		return nil
	})
	if err == nil {
		err = keys.checkUnique()
	}
	if err != nil {
		return nil, err
	}
	d.Strata = st.finish(*header, &strata, d.Samples).Strata
	d.Chunks = st.chunks
	return d, nil
}

// widenBins widens the outer edges of the --bins cut from the first
// chunk's quantiles to the least and greatest value the stream held, in
// derived and in the labels and names of the strata of the outer bins:
// a stratum is a number in the shard indexes, so its name is the top-level
// manifest's alone, written at the commit. It returns derived.
func (st *Stream) widenBins(labelFields []string, derived []manifest.Derived, strata []manifest.Stratum) []manifest.Derived {
	for _, b := range st.o.Bins {
		r, ok := st.binRange[b.Field]
		if !b.sampled || !ok {
			continue
		}
		k := slices.IndexFunc(derived, func(d manifest.Derived) bool { return d.Field == b.Field })
		col := slices.Index(labelFields, b.Field)
		old := derived[k].Edges
		edges := slices.Clone(old)
		last := len(edges) - 1
		edges[0], edges[last] = min(edges[0], r[0]), max(edges[last], r[1])
		derived[k].Edges = edges
		rename := map[string]string{
			manifest.BinLabel(old, 0):      manifest.BinLabel(edges, 0),
			manifest.BinLabel(old, last-1): manifest.BinLabel(edges, last-1),
		}
		for i := range strata {
			if to, ok := rename[strata[i].Labels[col]]; ok {
				strata[i].Labels = slices.Clone(strata[i].Labels)
				strata[i].Labels[col] = to
				strata[i].Name = stratumName(strata[i].Labels)
			}
		}
	}
	return derived
}

// firstChunk reads st's first chunk for an ingest or a plan with opts;
// whole says it is the whole source and opts let it be placed whole
// (metadata format 0 or 1), as Run and Plan place a scan.
func (st *Stream) firstChunk(ctx context.Context, opts Options) (first *Source, whole bool, err error) {
	st.shardSize = opts.ShardSize
	if first, err = st.chunk(ctx, nil); err != nil {
		return nil, false, err
	}
	if st.done() && opts.Format < 2 {
		st.Warnings = first.Warnings
		return first, true, nil
	}
	return first, false, nil
}

// done says every record of the stream has been read.
func (st *Stream) done() bool {
	if st.corpus != nil {
		return st.ended
	}
	return st.next == len(st.shards) && len(st.queue) == 0
}
