package ingest

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/manifest"
	"github.com/shardfs/shardfs/verify"
)

// WebDataset sources. A WebDataset shard is a tar whose members are
// grouped into records by key, as WebDataset itself groups them: a
// member's key is its path up to the first '.' of its base name, the rest
// is the member's name ("images/000123.seg.png": key "images/000123",
// member "seg.png"), and the members of one record are consecutive. A
// record's fields are its JSON member's top-level keys (member "json");
// the label and the strata are read from them.
//
// Refused, naming the shard and the member's offset in it, with nothing
// committed: a tar cut short or damaged; a member name with no key or no
// member name; a member other than a regular file or a directory; two
// members of one name in a record; a key that comes back after another
// record, in the same shard or another (two records with one key: a record
// split across two shards is this case too, since WebDataset would read it
// as two records); a record over the size bound; a JSON member that is not
// an object.

// MemberAt is one member of a record item as the plan and the upload keep
// it: its name as an index in Source.Members, and where its bytes lie in
// the file its record is in (Item.Path; JSONL and Parquet members, made
// at upload, have none). It takes 16 bytes, where a name and two int64s
// took 32, and a source of records holds one for each member of each
// record. While a source is scanned, Name indexes its recordBatch's names.
type MemberAt struct {
	Off  int64
	Size uint32 // a member fits a record, at most 2GiB-1
	Name uint16 // index in Source.Members (at most manifest.MaxMemberNames)
}

// FieldsMember is the member whose JSON object holds a record's fields.
const FieldsMember = "json"

// maxFieldsMember bounds a JSON member read for fields.
const maxFieldsMember = 16 << 20

// WebDatasetShards lists the tar shards a source names: a .tar file, a
// glob of them, or a directory holding .tar files and nothing else; each
// may be gzip-compressed (.tar.gz, .tgz), as WebDataset reads them. ok is
// false when src is none of these.
func WebDatasetShards(src string) (shards []string, ok bool, err error) {
	switch {
	case strings.ContainsAny(src, "*?["):
		shards, err = filepath.Glob(src)
		if err == nil && len(shards) == 0 {
			err = fmt.Errorf("source %s: no file matches the pattern", src)
		}
		return shards, true, err
	case isShardName(src):
		return []string{src}, true, nil
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return nil, false, nil // not a directory: the other scanners say what it is
	}
	for _, e := range entries {
		if e.IsDir() || !isShardName(e.Name()) {
			return nil, false, nil
		}
		shards = append(shards, filepath.Join(src, e.Name()))
	}
	return shards, len(shards) > 0, nil
}

// wdsRecord is a record as a source of records yields it, in a
// recordBatch: the file it is in and its member names are the batch's.
type wdsRecord struct {
	key     string
	off     int64      // its first member's header (WebDataset), or its line (JSONL)
	line    int        // its line in a JSONL file; 0 for WebDataset
	lineLen int64      // the line's bytes (JSONL)
	row     bool       // a Parquet row: off is its number
	members []MemberAt // Name: an index in the batch's names
	// sum is the CRC32C of the record's bytes as the scan read them (its
	// members back to back): the upload's checksum of the record must
	// equal it, or the source changed between the two (issue 55 item 3).
	sum uint32
	// fields are its field values joined by manifest.FieldSep, in the
	// order of their names, its batch's schemas[schema]: one string, where
	// a name and a value for each field took 32 bytes and an allocation.
	fields string
	schema uint16
}

// recordBatch is the records of one file of a source of records (a tar
// shard, a JSONL corpus, a Parquet file), in order. The file and the
// member names are kept once for the batch, not in each record: a
// 100,000-record scan held 32 bytes a member, now 16.
type recordBatch struct {
	file    string
	names   []string          // member names, by MemberAt.Name
	index   map[string]uint16 // names' indexes, while the batch is read
	records []wdsRecord
	// schemas are the sorted field names of its records, by
	// wdsRecord.schema; schemas[0] is none. Records of one writer share
	// one or a few.
	schemas [][]string
	// While the batch is read: a schema's names joined by NUL -> its
	// index, and buffers reused for each record.
	schemaIndex map[string]uint16
	keys        []string
	joined, key []byte
	fields      map[string]any // a record's decoded .json, reused
}

// member is the index of member name in b.names, added if new; false
// when b already has manifest.MaxMemberNames names (a source may not
// have more).
func (b *recordBatch) member(name string) (uint16, bool) {
	if i, ok := b.index[name]; ok {
		return i, true
	}
	if len(b.names) == manifest.MaxMemberNames {
		return 0, false
	}
	if b.index == nil {
		b.index = map[string]uint16{}
	}
	name = strings.Clone(name) // a header's or a line's bytes are not kept alive by it
	b.index[name] = uint16(len(b.names))
	b.names = append(b.names, name)
	return uint16(len(b.names) - 1), true
}

// addMembers appends members of these sizes and names to r (JSONL and
// Parquet records, whose members do not lie in their file), after
// checking they fit a record of at most limit bytes.
func (b *recordBatch) addMembers(r *wdsRecord, names []string, bodies [][]byte, limit int64) error {
	var size int64
	for _, body := range bodies {
		size += int64(len(body))
	}
	if size > limit {
		return fmt.Errorf("record %q holds %d bytes, more than the %d a record may have (--max-record-size; a record must fit one shard, at most 2GiB-1)", r.key, size, limit)
	}
	for k, body := range bodies {
		i, ok := b.member(names[k])
		if !ok {
			return fmt.Errorf("more than %d distinct member names", manifest.MaxMemberNames)
		}
		r.members = append(r.members, MemberAt{Size: uint32(len(body)), Name: i})
		r.sum = verify.Update(r.sum, body)
	}
	return nil
}

// doneReading drops what only reading the batch needed: the records,
// names and schemas are kept.
func (b *recordBatch) doneReading() {
	b.index, b.schemaIndex, b.keys, b.joined, b.key = nil, nil, nil, nil, nil
}

// setFields keeps obj, a record's decoded JSON object, as r's fields: a
// string, number or boolean as its text, a list or an object as its JSON
// text, null as "". A value holding NUL or manifest.FieldSep, which could
// not be told apart from the next value, is refused, naming r's place in
// file.
func (b *recordBatch) setFields(r *wdsRecord, obj map[string]any, file string) error {
	b.keys = b.keys[:0]
	for k := range obj {
		b.keys = append(b.keys, k)
	}
	slices.Sort(b.keys)
	b.joined, b.key = b.joined[:0], b.key[:0]
	for i, k := range b.keys {
		v := ""
		if x := obj[k]; x != nil {
			var err error
			if v, err = jsonLabel(x); err != nil {
				j, _ := json.Marshal(x) // a list or an object is kept as its JSON text
				v = string(j)
			}
		}
		if strings.ContainsAny(v, "\x00"+manifest.FieldSep) {
			return fmt.Errorf("%s: record %q: field %q holds a NUL or unit-separator (0x1f) character", r.where(file), r.key, k)
		}
		if i > 0 {
			b.joined = append(b.joined, manifest.FieldSep...)
			b.key = append(b.key, 0)
		}
		b.joined = append(b.joined, v...)
		b.key = append(b.key, k...)
	}
	if len(b.schemas) == 0 {
		b.schemas, b.schemaIndex = [][]string{nil}, map[string]uint16{"": 0}
	}
	if len(b.keys) == 0 {
		r.fields, r.schema = "", 0
		return nil
	}
	i, ok := b.schemaIndex[string(b.key)]
	if !ok {
		if len(b.schemas) > math.MaxUint16 {
			return fmt.Errorf("%s: record %q: more than %d different sets of fields in one file: give the records one set of fields (a missing value can be null)", r.where(file), r.key, math.MaxUint16)
		}
		i = uint16(len(b.schemas))
		b.schemas = append(b.schemas, slices.Clone(b.keys))
		b.schemaIndex[string(b.key)] = i
	}
	r.fields, r.schema = string(b.joined), i
	return nil
}

// fieldsOf splits r's fields into parts, one per name of its schema.
func (b *recordBatch) fieldsOf(r *wdsRecord, parts []string) []string {
	parts = parts[:0]
	if r.schema == 0 {
		return parts
	}
	rest := r.fields
	for range len(b.schemas[r.schema]) - 1 {
		i := strings.Index(rest, manifest.FieldSep)
		parts = append(parts, rest[:i])
		rest = rest[i+len(manifest.FieldSep):]
	}
	return append(parts, rest)
}

// where names the record's place in the source for a message; file is
// its batch's.
func (r *wdsRecord) where(file string) string {
	if r.row {
		return fmt.Sprintf("parquet %s row %d", file, r.off)
	}
	if r.line > 0 {
		return fmt.Sprintf("%s line %d", file, r.line)
	}
	if r.lineLen > 0 { // a line of a corpus's slice, whose number is not known
		return fmt.Sprintf("%s, the line at byte %d", file, r.off)
	}
	return fmt.Sprintf("shard %s at offset %d", file, r.off)
}

// scanWebDataset reads the records of the given local tar shards, sorted
// by name, holding only their metadata.
func scanWebDataset(shards []string, o ScanOptions) (*Source, error) {
	files := &localFiles{gz: &gzSizes{}}
	defer files.close()
	s, err := scanWebDatasetFrom(context.Background(), files, commonDir(shards), shards, o)
	if s != nil {
		s.gz = files.gz
	}
	return s, err
}

// scanWebDatasetFrom is scanWebDataset of shards read through files;
// root names the source in messages.
func scanWebDatasetFrom(ctx context.Context, files sourceFiles, root string, shards []string, o ScanOptions) (*Source, error) {
	slices.Sort(shards)
	s := &Source{Root: root}
	limit := o.MaxRecordSize
	if limit <= 0 || limit > manifest.MaxShardSize {
		limit = manifest.MaxShardSize
	}
	// The shards are read in parallel, one per core (the scan is the tar
	// reader's CPU: 80% of a 100,000-record ingest's before this, in a
	// profile), each into its own list; then joined in shard order.
	perShard := make([]recordBatch, len(shards))
	errs := make([]error, len(shards))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, sh := range shards {
		g.Go(func() error {
			f, size, err := files.open(gctx, sh)
			if err != nil {
				errs[i] = fmt.Errorf("shard %s: %w", sh, err)
				return nil
			}
			perShard[i], errs[i] = readShardRecords(sh, f, size, limit)
			releaseShard(f)
			return nil
		})
	}
	g.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, err := range errs {
			if err != nil {
				return nil, err // the first shard's, in order
			}
		}
	}
	type place struct{ batch, record int }
	seen := map[string]place{}
	for b := range perShard {
		for k := range perShard[b].records {
			r := &perShard[b].records[k]
			if prev, dup := seen[r.key]; dup {
				first := &perShard[prev.batch]
				return nil, duplicateKey(perShard[b].file, r.off, r.key, fmt.Sprintf("%s at offset %d", first.file, first.records[prev.record].off))
			}
			seen[r.key] = place{b, k}
		}
	}
	if len(seen) == 0 {
		return nil, fmt.Errorf("source %s: %w: the tar shards hold no members", s.Root, ErrEmpty)
	}
	return recordSource(s, "source "+root, o, perShard)
}

// recordSource fills s (Root set) from records read from a source of
// records, in batches (a WebDataset source's are its shards'): the member
// names, the fields (every record's JSON keys, in sorted order), the label
// and strata fields, and one item per record. It drops each batch once
// its items are made (batches[b] = nil), so the scan's records and the
// items they become are not all held at once (the largest live heap of a
// 100,000-record ingest fell from 78 to 66 MB).
func recordSource(s *Source, what string, o ScanOptions, batches []recordBatch) (*Source, error) {
	// The member names, in order of first appearance.
	n := 0
	for _, b := range batches {
		n += len(b.records)
		for _, r := range b.records {
			for _, m := range r.members {
				if name := b.names[m.Name]; !slices.Contains(s.Members, name) {
					s.Members = append(s.Members, name)
				}
			}
		}
	}
	if len(s.Members) > manifest.MaxMemberNames {
		return nil, fmt.Errorf("%s: %d distinct member names, at most %d: a member name must not carry the record's key (WebDataset splits a name at the first '.' of its base name)", what, len(s.Members), manifest.MaxMemberNames)
	}
	labelled := o.Label != ""
	for _, name := range s.Members {
		if err := layout.CleanMemberName(name, labelled); err != nil {
			return nil, fmt.Errorf("%s: %v", what, err)
		}
	}
	// Fields: every record's JSON keys, named in sorted order.
	names := map[string]bool{}
	for _, b := range batches {
		for _, schema := range b.schemas {
			for _, f := range schema {
				names[f] = true
			}
		}
	}
	if s.fixedFields {
		for k := range names {
			if !slices.Contains(s.Fields, k) {
				return nil, fmt.Errorf("%s: a record's .json member has the field %q, which no record of the first chunk has (they have: %s): a streaming ingest fixes the fields from its first chunk of records; give every record the same fields (a missing value can be null), or read the source whole with --stream=false", what, k, strings.Join(s.Fields, ", "))
			}
		}
		for _, f := range s.Fields {
			names[f] = true
		}
	} else {
		for k := range names {
			s.Fields = append(s.Fields, k)
		}
		sort.Strings(s.Fields)
	}
	if labelled {
		s.LabelFields = append(s.LabelFields, o.Label)
	}
	for _, f := range o.Strata {
		if f == o.Label || slices.Contains(s.LabelFields, f) {
			return nil, fmt.Errorf("--strata %s: %q is named twice (the label is a stratum already)", strings.Join(o.Strata, ","), f)
		}
		s.LabelFields = append(s.LabelFields, f)
		s.StrataOnly = append(s.StrataOnly, f)
	}
	if len(s.LabelFields) == 0 && len(o.TimeBuckets) == 0 && len(o.Bins) == 0 {
		return nil, errors.New("a source of records needs what batches balance: --label FIELD (what the model learns), --strata FIELD,..., --bins or --time-bucket, from the fields of each record's .json member")
	}
	for _, f := range s.LabelFields {
		if !names[f] {
			return nil, fmt.Errorf("%s: no record's .json member has the field %q (fields: %s)", what, f, strings.Join(s.Fields, ", "))
		}
	}
	if cap(s.Items) < n { // a stream's chunk made room for its carried items too
		s.Items = make([]Item, 0, n)
	}
	s.Items = s.Items[:0]
	for b := range batches {
		batch := &batches[b]
		global := make([]uint16, len(batch.names)) // the batch's member names' indexes in s.Members
		for i, name := range batch.names {
			global[i] = uint16(slices.Index(s.Members, name))
		}
		// at[k][f]: where the value of s.Fields[f] is in a record of
		// schema k (-1: it has none).
		at := make([][]int, len(batch.schemas))
		for k, schema := range batch.schemas {
			at[k] = make([]int, len(s.Fields))
			for f, name := range s.Fields {
				at[k][f] = slices.Index(schema, name)
			}
		}
		var parts []string
		for k := range batch.records {
			r := &batch.records[k]
			it := Item{Key: r.key, Path: batch.file, Line: r.line, Members: r.members, sum: r.sum, summed: true,
				Fields: make([]string, 0, len(s.Fields)), Labels: make([]string, 0, len(s.LabelFields))}
			it.lineAt, it.lineLen, it.row = r.off, r.lineLen, r.row
			for k := range it.Members { // the record's own array, its names made the source's
				it.Members[k].Name = global[it.Members[k].Name]
				it.Size += int64(it.Members[k].Size)
			}
			parts = batch.fieldsOf(r, parts)
			for f := range s.Fields {
				v := ""
				if len(at) > 0 && at[r.schema][f] >= 0 {
					v = parts[at[r.schema][f]] // a part of the record's one string
				}
				it.Fields = append(it.Fields, v)
			}
			for _, f := range s.LabelFields {
				v := it.Fields[slices.Index(s.Fields, f)]
				if v == "" {
					return nil, fmt.Errorf("%s: record %q has no field %q: every record needs it, since it makes the strata", r.where(batch.file), r.key, f)
				}
				it.Labels = append(it.Labels, v)
			}
			s.Items = append(s.Items, it)
		}
		*batch = recordBatch{}
	}
	return s, nil
}

// duplicateKey is the refusal of a key that comes back after the record
// at prev.
func duplicateKey(shard string, off int64, key, prev string) error {
	return fmt.Errorf("shard %s at offset %d: key %q again, after the record at %s: two records with one key (a record split across two shards is read as two records, as WebDataset reads it): give every record its own key, with its members together in one shard", shard, off, key, prev)
}

// scanReaders are the scan's read buffers, one per shard being scanned: a
// read fills one (a ranged GET of 4 MiB from a store), and a new one per
// shard was most of what a 100,000-record scan allocated (800 MB).
var scanReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4<<20) }}

// memoryScanReaders and fileScanReaders are scanReaders for a shard read
// whole into memory (Stream.readShards) and for a local file, where a
// fill costs a copy or a system call, not a request: two scanReaders of 4
// MiB were a third of a streaming ingest's live heap at --shard-size
// 512KiB, and its third largest allocation, made again after each GC
// cycle emptied the pool.
var (
	memoryScanReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 64<<10) }}
	fileScanReaders   = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 256<<10) }}
)

// scanReadersFor is the pool of scan buffers for reading f.
func scanReadersFor(f io.ReaderAt) *sync.Pool {
	switch f.(type) {
	case *bytes.Reader:
		return &memoryScanReaders
	case *oneVersion:
		return &fileScanReaders
	}
	return &scanReaders // a store's object: each fill is a ranged GET
}

// readShardRecords reads one tar shard's records (size bytes, through f,
// in one sequential pass). It reads the headers with plainTarHeaders, and
// a shard that declines with archive/tar.
func readShardRecords(shard string, f io.ReaderAt, size int64, limit int64) (recordBatch, error) {
	pool := scanReadersFor(f)
	br := pool.Get().(*bufio.Reader)
	defer func() {
		br.Reset(nil) // the pool keeps the buffer, not this shard's file
		pool.Put(br)
	}()
	got := recordBatch{file: shard}
	br.Reset(io.NewSectionReader(f, 0, size))
	err := scanShardRecords(&plainTarHeaders{br: br}, size, limit, &got, nil)
	if errors.Is(err, errNotPlain) {
		got = recordBatch{file: shard}
		br.Reset(io.NewSectionReader(f, 0, size))
		err = scanShardRecords(newStdTarHeaders(br), size, limit, &got, nil)
	}
	if err != nil {
		return recordBatch{}, err
	}
	got.doneReading()
	return got, nil
}

// scanShardRecords is readShardRecords of the member headers tr reads.
// It returns errNotPlain as it is, for readShardRecords to read again.
//
// With a cut (pieces.go), it keeps the members' bytes it reads, and hands
// batch and them on whenever they reach the cut's bounds, going on with a
// batch of its own; a record cut.given says was handed on already (a
// rescan by archive/tar) is read past.
func scanShardRecords(tr tarHeaders, size int64, limit int64, batch *recordBatch, cut *pieceCut) error {
	shard := batch.file
	seen := map[string]int64{} // key -> its record's offset, in this shard
	var cur wdsRecord          // the record being read, when open (a value: a pointer was an allocation a record)
	open := false
	given := false // cur was handed on before this scan began (cut.given)
	width := 1     // members of the last record
	var at int64   // where the next header starts
	flush := func() error {
		if !open {
			return nil
		}
		var size int64
		for _, m := range cur.members {
			size += int64(m.Size)
		}
		if size > limit {
			return fmt.Errorf("shard %s at offset %d: record %q holds %d bytes, more than the %d a record may have (--max-record-size; a record must fit one shard, at most 2GiB-1)", shard, cur.off, cur.key, size, limit)
		}
		seen[cur.key] = cur.off
		if !given {
			width = len(cur.members) // the next record most likely has as many
			batch.records = append(batch.records, cur)
			if cut != nil && cut.full(batch) {
				if err := cut.give(batch, cur.off); err != nil {
					return err
				}
			}
		}
		open = false
		return nil
	}
	for {
		h, err := tr.next()
		if err == io.EOF {
			break
		}
		if errors.Is(err, errNotPlain) {
			return err
		}
		if errors.As(err, new(changedFileError)) { // it names the shard
			return err
		}
		if errors.Is(err, backend.ErrChanged) { // not damaged: read again, it may be whole
			return fmt.Errorf("shard %s: %w", shard, err)
		}
		if err != nil {
			return fmt.Errorf("shard %s at offset %d: not a readable tar (%v): the shard is damaged or cut short; re-create it, or leave it out of the source", shard, at, err)
		}
		dataAt := h.dataAt
		hdrAt := at
		at = dataAt + (h.size+511)/512*512
		if h.sparse {
			// The checksums are taken over the bytes a member means; a
			// sparse member's are not in the archive as they are.
			return fmt.Errorf("shard %s at offset %d: member %q is a sparse file (GNU tar -S): its bytes in the archive are not its content, so shardfs cannot serve it from the shard; re-create the shard without --sparse (-S)", shard, hdrAt, h.name)
		}
		if dataAt+h.size > size {
			return fmt.Errorf("shard %s at offset %d: member %q is cut short (%d of its %d bytes are in the file): the shard is damaged or was not copied whole; re-create it, or leave it out of the source", shard, hdrAt, h.name, max(0, size-dataAt), h.size)
		}
		switch h.typeflag {
		case tar.TypeDir:
			continue
		case tar.TypeReg:
		default:
			return fmt.Errorf("shard %s at offset %d: member %q is not a regular file (tar type %q): a WebDataset shard holds files only", shard, hdrAt, h.name, h.typeflag)
		}
		name := strings.TrimPrefix(path.Clean(h.name), "./")
		dir, base := path.Split(name)
		dot := strings.IndexByte(base, '.')
		if dot <= 0 || dot == len(base)-1 {
			return fmt.Errorf("shard %s at offset %d: member %q has no key or no member name: WebDataset names a member <key>.<member> (for example 000123.jpg), cut at the first '.' of its base name", shard, hdrAt, h.name)
		}
		key, member := strings.Clone(dir+base[:dot]), base[dot+1:]
		if err := manifest.CheckKey(key); err != nil {
			return fmt.Errorf("shard %s at offset %d: member %q: key %q: %v", shard, hdrAt, h.name, key, err)
		}
		if !open || cur.key != key {
			if err := flush(); err != nil {
				return err
			}
			if prev, dup := seen[key]; dup {
				return duplicateKey(shard, hdrAt, key, fmt.Sprintf("%s at offset %d", shard, prev))
			}
			cur, open = wdsRecord{key: key, off: hdrAt, members: make([]MemberAt, 0, width)}, true
			given = cut != nil && hdrAt <= cut.given
		}
		if given {
			continue // its bytes were checked, kept and handed on by the scan before
		}
		idx, ok := batch.member(member)
		if !ok {
			return fmt.Errorf("shard %s at offset %d: member %q: the shard has more than %d distinct member names: a member name must not carry the record's key (WebDataset splits a name at the first '.' of its base name)", shard, hdrAt, h.name, manifest.MaxMemberNames)
		}
		if slices.ContainsFunc(cur.members, func(m MemberAt) bool { return m.Name == idx }) {
			return fmt.Errorf("shard %s at offset %d: record %q has two members named %q", shard, hdrAt, key, member)
		}
		if len(cur.members) == manifest.MaxRecordMembers {
			return fmt.Errorf("shard %s at offset %d: record %q has more than %d members", shard, hdrAt, key, manifest.MaxRecordMembers)
		}
		if h.size > limit { // before its size is kept in 32 bits
			return fmt.Errorf("shard %s at offset %d: record %q holds %d bytes or more, more than the %d a record may have (--max-record-size; a record must fit one shard, at most 2GiB-1)", shard, cur.off, key, h.size, limit)
		}
		cur.members = append(cur.members, MemberAt{Off: dataAt, Size: uint32(h.size), Name: idx})
		var keep *[]byte
		if cut != nil {
			keep = cut.member(dataAt)
		}
		if member != FieldsMember {
			// The member's bytes stream by the checksum the upload holds
			// them to: a shard rewritten since is refused, not served.
			if cur.sum, err = tr.sum(cur.sum, keep); err != nil {
				if errors.Is(err, errNotPlain) {
					return err
				}
				return fmt.Errorf("shard %s at offset %d: member %q: %v: the shard is damaged or cut short", shard, hdrAt, h.name, err)
			}
		}
		if member == FieldsMember {
			if h.size > maxFieldsMember {
				return fmt.Errorf("shard %s at offset %d: record %q's .json member is %d bytes, more than the %d read for fields", shard, hdrAt, key, h.size, maxFieldsMember)
			}
			b, err := tr.body()
			if errors.Is(err, errNotPlain) {
				return err
			}
			if err != nil {
				return fmt.Errorf("shard %s at offset %d: member %q: %v: the shard is damaged or cut short", shard, hdrAt, h.name, err)
			}
			cur.sum = verify.Update(cur.sum, b)
			if keep != nil {
				*keep = append(*keep, b...)
			}
			if batch.fields == nil {
				batch.fields = make(map[string]any, 4)
			}
			obj, err := decodeFieldsObject(b, batch.fields)
			if err != nil {
				return fmt.Errorf("shard %s at offset %d: member %q is not a JSON object (%v): a record's .json member holds its fields, one object (a loader's json.loads refuses anything else)", shard, hdrAt, h.name, err)
			}
			if err := batch.setFields(&cur, obj, shard); err != nil {
				return err
			}
		}
	}
	return flush()
}

// commonDir is the directory the shards share, for messages.
func commonDir(shards []string) string {
	if len(shards) == 0 {
		return ""
	}
	dir := filepath.Dir(shards[0])
	for _, s := range shards[1:] {
		for !strings.HasPrefix(filepath.Dir(s)+string(filepath.Separator), dir+string(filepath.Separator)) && dir != filepath.Dir(dir) {
			dir = filepath.Dir(dir)
		}
	}
	return dir
}
