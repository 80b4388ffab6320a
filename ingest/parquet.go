package ingest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"

	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/manifest"
)

// Parquet sources of records (Hugging Face datasets and most tables). Each
// row is a record: its binary columns are members (the bytes as stored;
// --member COLUMN=NAME renames one, e.g. image=jpg, and makes a string
// column a member too), and its other columns are fields, in its .json
// member and for --label and --strata: numbers, strings and booleans as
// they are, nested columns (lists, structs, maps) as JSON. A null binary
// value leaves the member out of that record. Its key is the column --key
// names, else the row's number. A column of a physical type shardfs does
// not serve (INT96, FIXED_LEN_BYTE_ARRAY) is refused, naming it.

// parquetColumn is how a top-level column of a Parquet file makes records.
type parquetColumn struct {
	name   string
	member string // the member it makes; "" for a field
	text   bool   // its values are text (STRING, ENUM or JSON): UTF-8
}

// parquetColumns classifies the schema's top-level columns.
func parquetColumns(file string, schema *parquet.Schema, o ScanOptions) ([]parquetColumn, error) {
	renamed := map[string]string{}
	for _, mf := range o.Members {
		renamed[mf.Field] = mf.Name
	}
	var cols []parquetColumn
	for _, f := range schema.Fields() {
		c := parquetColumn{name: f.Name()}
		if f.Leaf() {
			t := f.Type()
			switch t.Kind() {
			case parquet.ByteArray:
				lt := t.LogicalType()
				text := lt != nil && (isType[*format.StringType](lt) || isType[*format.EnumType](lt) || isType[*format.JsonType](lt))
				c.text = text
				if !text || renamed[c.name] != "" {
					c.member = c.name
				}
			case parquet.Boolean, parquet.Int32, parquet.Int64, parquet.Float, parquet.Double:
				if renamed[c.name] != "" {
					return nil, fmt.Errorf("parquet %s: --member %s=%s: column %q holds %s values, not bytes or text", file, c.name, renamed[c.name], c.name, t.Kind())
				}
			default:
				return nil, fmt.Errorf("parquet %s: column %q has the physical type %s, which shardfs cannot serve: convert it (INT96 timestamps to INT64 ones; fixed-length bytes to BYTE_ARRAY) or drop the column", file, c.name, t.Kind())
			}
		} else if renamed[c.name] != "" {
			return nil, fmt.Errorf("parquet %s: --member %s=%s: column %q is nested (a list, struct or map), not bytes or text", file, c.name, renamed[c.name], c.name)
		}
		if n := renamed[c.name]; n != "" {
			c.member = n
		}
		if c.member != "" {
			if err := layout.CleanMemberName(c.member, o.Label != ""); err != nil {
				return nil, fmt.Errorf("parquet %s: column %q: %v: name its member with --member %s=NAME", file, c.name, err, c.name)
			}
			if c.member == FieldsMember {
				return nil, fmt.Errorf("parquet %s: column %q would be the member %q, which holds a record's other fields: name it with --member %s=NAME", file, c.name, FieldsMember, c.name)
			}
		}
		cols = append(cols, c)
	}
	for field := range renamed {
		if !slices.ContainsFunc(cols, func(c parquetColumn) bool { return c.name == field }) {
			return nil, fmt.Errorf("parquet %s: --member %s=%s: no column %q", file, field, renamed[field], field)
		}
	}
	if !slices.ContainsFunc(cols, func(c parquetColumn) bool { return c.member != "" }) {
		return nil, fmt.Errorf("parquet %s: no binary column, and no --member COLUMN=NAME: a record needs a member", file)
	}
	return cols, nil
}

func isType[T any](lt *format.LogicalType) bool { _, ok := lt.Value.(T); return ok }

// parquetRecord makes a row's record: its key, members (in column order,
// then "json" when fields remain) and fields.
func parquetRecord(row map[string]any, cols []parquetColumn, o ScanOptions, rowNo int64) (key string, names []string, bodies [][]byte, fields map[string]any, err error) {
	fields = map[string]any{}
	for _, c := range cols {
		v := row[c.name]
		// A string column is text: bytes that are not UTF-8 would reach
		// the loader as text it cannot decode (a member), or be replaced
		// with U+FFFD in .json, silently. A binary column keeps any bytes.
		// (A field is text whatever its type: .json holds it as a string.)
		if str, ok := v.(string); ok && (c.text || c.member == "") && !utf8.ValidString(str) {
			return "", nil, nil, nil, fmt.Errorf("column %q: byte %d is not UTF-8, in a string column: re-encode the text as UTF-8, or store bytes that are not text in a binary column (BYTE_ARRAY without the STRING annotation), which a --member keeps as they are", c.name, invalidUTF8At(str))
		}
		if c.member == "" {
			if v != nil {
				fields[c.name] = v
			}
			continue
		}
		switch v := v.(type) {
		case nil:
		case []byte:
			names, bodies = append(names, c.member), append(bodies, v)
		case string:
			names, bodies = append(names, c.member), append(bodies, []byte(v))
		default:
			return "", nil, nil, nil, fmt.Errorf("column %q holds a %T", c.name, v)
		}
	}
	key = fmt.Sprintf("%012d", rowNo)
	if o.KeyField != "" {
		v, ok := fields[o.KeyField]
		if !ok {
			return "", nil, nil, nil, fmt.Errorf("no key column %q (--key), or it is null", o.KeyField)
		}
		key = fmt.Sprint(v)
	}
	if names, bodies, err = appendFieldsMember(names, bodies, fields); err != nil {
		return "", nil, nil, nil, err
	}
	if len(names) == 0 {
		return "", nil, nil, nil, errors.New("every column is null: a record needs a member")
	}
	return key, names, bodies, fields, nil
}

// openParquet opens a Parquet file for reading rows as maps of its
// columns. The reader panics on some damaged files; those panics become
// errors in the functions that read (see recovered).
func openParquet(name string) (*oneVersion, *parquet.GenericReader[map[string]any], error) {
	f, err := openOneVersion(name)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if err := checkFooter(f, fi.Size()); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("not a readable Parquet file (%v): the file is damaged or cut short", err)
	}
	// The page index (column and offset indexes) and the bloom filters
	// serve lookups by value; a scan reads every row in order and needs
	// neither. The reader allocates their lengths as the footer states
	// them, summed over the column chunks, before it reads them: a 722-byte
	// file whose footer gave each index 2³¹−1 bytes made it allocate 12 GB
	// (ended FuzzParquet's worker in CI with exit status 2).
	pf, err := parquet.OpenFile(f, fi.Size(), parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err == nil {
		err = checkPages(f, fi.Size(), pf.Metadata())
	}
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("not a readable Parquet file (%v): the file is damaged or cut short", err)
	}
	return f, parquet.NewGenericReader[map[string]any](pf, pf.Schema()), nil // pf, not f: given a file, the reader opens it again with the defaults
}

// checkFooter checks a Parquet file's frame before the reader sees it: the
// magic at both ends, a footer that fits in the file, and every length
// the footer states fits in the footer (checkThriftLengths). The reader
// allocates the footer's length as the file states it: a damaged length
// made it allocate 3.5 GB for a 300-byte file (found by FuzzParquet).
func checkFooter(f io.ReaderAt, size int64) error {
	if size < 12 {
		return fmt.Errorf("%d bytes, shorter than a Parquet file's frame", size)
	}
	var head [4]byte
	var tail [8]byte
	if _, err := f.ReadAt(head[:], 0); err != nil {
		return err
	}
	if _, err := f.ReadAt(tail[:], size-8); err != nil {
		return err
	}
	if string(head[:]) != "PAR1" || string(tail[4:]) != "PAR1" {
		return errors.New("no PAR1 magic at its start and end")
	}
	n := int64(binary.LittleEndian.Uint32(tail[:4]))
	if n > size-12 {
		return fmt.Errorf("its footer says it is %d bytes, more than the file's %d", n, size)
	}
	footer := make([]byte, n) // at most the file's size, checked above
	if _, err := f.ReadAt(footer, size-8-n); err != nil {
		return err
	}
	return checkThriftLengths(footer)
}

// Bounds on one page, checked before the reader allocates what a page
// header states: a damaged header made it allocate 831 MB for a 700-byte
// file (found by FuzzParquet).
const (
	maxPageBytes  = 1 << 30 // a page's bytes, decompressed
	maxPageRatio  = 64      // decompressed over compressed bytes, past the first MiB
	maxPageValues = 1 << 26 // values in one page
)

// checkPages walks every column chunk's page headers, as the reader will,
// and checks that each page lies inside its chunk, inside the file, and
// within the bounds above.
func checkPages(f io.ReaderAt, size int64, md *format.FileMetaData) error {
	for g, rg := range md.RowGroups {
		for c, col := range rg.Columns {
			m := col.MetaData
			start := m.DataPageOffset
			if m.DictionaryPageOffset > 0 && m.DictionaryPageOffset < start {
				start = m.DictionaryPageOffset
			}
			end := start + m.TotalCompressedSize
			if start < 4 || m.TotalCompressedSize < 0 || end > size-8 || end < start {
				return fmt.Errorf("row group %d column %d lies at bytes %d..%d, outside the file's %d", g, c, start, end, size)
			}
			for pos := start; pos < end; {
				header, err := pageHeaderBytes(f, pos, end)
				if err != nil {
					return fmt.Errorf("row group %d column %d: page header at byte %d: %v", g, c, pos, err)
				}
				var h format.PageHeader
				if err := thrift.Unmarshal(new(thrift.CompactProtocol), header, &h); err != nil {
					return fmt.Errorf("row group %d column %d: page header at byte %d: %v", g, c, pos, err)
				}
				pos += int64(len(header))
				values := int64(0)
				switch {
				case h.DataPageHeader.Valid:
					values = int64(h.DataPageHeader.V.NumValues)
				case h.DataPageHeaderV2.Valid:
					values = int64(h.DataPageHeaderV2.V.NumValues)
				case h.DictionaryPageHeader.Valid:
					values = int64(h.DictionaryPageHeader.V.NumValues)
				}
				comp, full := int64(h.CompressedPageSize), int64(h.UncompressedPageSize)
				switch {
				case comp < 0 || pos+comp > end:
					return fmt.Errorf("row group %d column %d: a page at byte %d says it holds %d bytes, past its column chunk's end at %d", g, c, pos, comp, end)
				case full < 0 || full > maxPageBytes || full > maxPageRatio*comp+1<<20:
					return fmt.Errorf("row group %d column %d: a page at byte %d says it decompresses from %d to %d bytes (at most %d, and %dx)", g, c, pos, comp, full, maxPageBytes, maxPageRatio)
				case values < 0 || values > maxPageValues:
					return fmt.Errorf("row group %d column %d: a page at byte %d says it holds %d values (at most %d)", g, c, pos, values, maxPageValues)
				}
				pos += comp
			}
		}
	}
	return nil
}

// maxPageHeaderBytes bounds one page header: its fields are sizes, counts
// and encodings, and its statistics' min and max values, which writers
// keep short (parquet-go and Arrow cut them at a few dozen bytes).
const maxPageHeaderBytes = 16 << 20

// pageHeaderBytes reads the page header that starts at pos, in a column
// chunk that ends at end, and returns its bytes once checkThriftLengths
// has walked them: the header states lengths (its statistics' values) that
// a decoder allocates before it reads them, so each must fit in the bytes
// that follow it. It reads 4 KiB, and more while the header goes on past
// what it read.
func pageHeaderBytes(f io.ReaderAt, pos, end int64) ([]byte, error) {
	limit := min(end-pos, maxPageHeaderBytes)
	for n := min(4<<10, limit); ; n = min(2*n, limit) {
		b := make([]byte, n)
		if _, err := f.ReadAt(b, pos); err != nil {
			return nil, err
		}
		w := thriftWalker{b: b}
		err := w.value(thriftStruct, 0)
		switch {
		case err == nil:
			return b[:w.at], nil
		case n < limit:
			continue // a length past what was read may fit in what follows
		case errors.Is(err, errThriftShort) && limit == maxPageHeaderBytes:
			return nil, fmt.Errorf("longer than %d bytes", maxPageHeaderBytes)
		default:
			return nil, fmt.Errorf("at its byte %d: %w", w.at, err)
		}
	}
}

// recovered turns a panic of the Parquet reader into *err.
func recovered(name string, err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("parquet %s: the reader failed (%v): the file is damaged, or holds what shardfs cannot read", name, p)
	}
}

// scanParquet reads a Parquet file's records, row by row, holding their
// metadata only.
func scanParquet(name string, o ScanOptions) (_ *Source, err error) {
	defer recovered(name, &err)
	f, r, err := openParquet(name)
	if err != nil {
		return nil, fmt.Errorf("parquet %s: %w", name, err)
	}
	defer f.Close()
	defer r.Close()
	cols, err := parquetColumns(name, r.Schema(), o)
	if err != nil {
		return nil, err
	}
	limit := o.MaxRecordSize
	if limit <= 0 || limit > manifest.MaxShardSize {
		limit = manifest.MaxShardSize
	}
	seen := map[string]int64{}
	batch := recordBatch{file: name}
	rows := make([]map[string]any, 64)
	for rowNo := int64(0); ; {
		for i := range rows {
			rows[i] = map[string]any{} // the reader fills a map it is given
		}
		n, err := r.Read(rows)
		for _, row := range rows[:n] {
			key, names, bodies, fields, err := parquetRecord(row, cols, o, rowNo)
			if err != nil {
				return nil, fmt.Errorf("parquet %s row %d: %v", name, rowNo, err)
			}
			if err := manifest.CheckKey(key); err != nil {
				return nil, fmt.Errorf("parquet %s row %d: key %q: %v", name, rowNo, key, err)
			}
			if prev, dup := seen[key]; dup {
				return nil, fmt.Errorf("parquet %s row %d: key %q again, after row %d: two records with one key; give every record its own --key", name, rowNo, key, prev)
			}
			seen[key] = rowNo
			rec := wdsRecord{key: key, off: rowNo, row: true}
			if err := batch.setFields(&rec, fields, name); err != nil {
				return nil, err
			}
			if err := batch.addMembers(&rec, names, bodies, limit); err != nil {
				return nil, fmt.Errorf("parquet %s row %d: %v", name, rowNo, err)
			}
			batch.records = append(batch.records, rec)
			rowNo++
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("parquet %s row %d: %v: the file is damaged or cut short", name, rowNo, err)
		}
	}
	if len(batch.records) == 0 {
		return nil, fmt.Errorf("parquet %s: %w: it holds no rows", name, ErrEmpty)
	}
	batch.doneReading()
	s, err := recordSource(&Source{Root: filepath.Dir(name)}, "parquet "+name, o, []recordBatch{batch})
	if s != nil {
		s.table = &parquetTable{cols: cols, opts: o}
	}
	return s, err
}

// parquetTable says how a Parquet source's rows make records, for upload.
type parquetTable struct {
	cols []parquetColumn
	opts ScanOptions
}

// parquetRows reads rows of Parquet files by number, keeping each file's
// reader open.
type parquetRows struct {
	files   map[string]*oneVersion
	readers map[string]*parquet.GenericReader[map[string]any]
}

func (p *parquetRows) close() {
	for _, r := range p.readers {
		r.Close()
	}
	for _, f := range p.files {
		f.Close()
	}
}

func (p *parquetRows) row(name string, rowNo int64) (_ map[string]any, err error) {
	defer recovered(name, &err)
	r, ok := p.readers[name]
	if !ok {
		f, pr, err := openParquet(name)
		if err != nil {
			return nil, err
		}
		if p.files == nil {
			p.files, p.readers = map[string]*oneVersion{}, map[string]*parquet.GenericReader[map[string]any]{}
		}
		p.files[name], p.readers[name] = f, pr
		r = pr
	}
	if err := r.SeekToRow(rowNo); err != nil {
		return nil, err
	}
	rows := []map[string]any{{}}
	if n, err := r.Read(rows); n != 1 {
		return nil, fmt.Errorf("row %d: %v", rowNo, err)
	}
	return rows[0], nil
}

// readParquetRecord makes a Parquet record's bytes again, from its row, into p.
func readParquetRecord(it *Item, memberNames []string, p []byte, t *parquetTable, rows *parquetRows) error {
	row, err := rows.row(it.Path, it.lineAt)
	if err != nil {
		return fmt.Errorf("read record %q: parquet %s row %d: %w (did the file change during ingest?)", it.Key, it.Path, it.lineAt, err)
	}
	_, names, bodies, _, err := parquetRecord(row, t.cols, t.opts, it.lineAt)
	return copyMembers(it, memberNames, names, bodies, err, p)
}

// invalidUTF8At is the offset of the first byte of s that is not UTF-8.
func invalidUTF8At(s string) int {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n <= 1 {
				return i
			}
		}
	}
	return len(s)
}
