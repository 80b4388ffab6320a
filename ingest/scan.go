package ingest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/manifest"
)

// Item is one sample of the source.
type Item struct {
	Path   string   // file to read (a record: the source shard it is in)
	Key    string   // relative path, the sample's key
	Labels []string // one per Source.LabelFields
	Size   int64
	// Fields are the listing's values, one per Source.Fields ("" where a
	// line has none); Line is the item's line in the listing.
	Fields []string
	Line   int
	// Members are a record's members, in stored order (WebDataset, JSONL
	// and Parquet sources); nil for a file per sample. Size is their sum.
	Members []MemberAt
	// lineAt and lineLen place a JSONL record's line in Path: its bytes
	// are made from it again at upload (lineLen 0: a WebDataset record,
	// whose first header lineAt is, for messages). With row, lineAt is a
	// Parquet record's row in Path.
	lineAt, lineLen int64
	row             bool
	// summed: sum is the CRC32C of the record's bytes as the scan read
	// them (a record of a WebDataset, JSONL or Parquet source), which the
	// upload's checksum of them must equal.
	summed bool
	sum    uint32
}

// Where names the item for a message: its line in the listing, or the
// record and the shard it is in.
func (it *Item) Where() string {
	if it.row {
		return fmt.Sprintf("parquet %s row %d (record %q)", it.Path, it.lineAt, it.Key)
	}
	if it.Members != nil && it.Line > 0 {
		return fmt.Sprintf("%s line %d (record %q)", it.Path, it.Line, it.Key)
	}
	if it.Members != nil {
		return fmt.Sprintf("record %q in %s", it.Key, it.Path)
	}
	return fmt.Sprintf("line %d (%s)", it.Line, it.Key)
}

// recordAt names a record's place in its file for a message, as the scan
// names it (wdsRecord.where).
func (it *Item) recordAt() string {
	switch {
	case it.row:
		return fmt.Sprintf("parquet %s row %d", it.Path, it.lineAt)
	case it.lineLen > 0 && it.Line > 0:
		return fmt.Sprintf("%s line %d", it.Path, it.Line)
	case it.lineLen > 0: // a line of a corpus's slice, whose number is not known
		return fmt.Sprintf("%s, the line at byte %d", it.Path, it.lineAt)
	case it.Members != nil:
		return fmt.Sprintf("shard %s at offset %d", it.Path, it.lineAt)
	}
	return it.Where()
}

// Source is a scanned input.
type Source struct {
	Root        string
	LabelFields []string
	Items       []Item
	// Fields are a listing's field names besides path, in the listing's
	// order; nil for a directory tree, and for a listing that holds only
	// its label fields and derives none (so its metadata is written as
	// before fields existed).
	Fields []string
	// Derived are the label fields cut from a field (ScanOptions.TimeBuckets, Bins).
	Derived []manifest.Derived
	// Members names the members of a source of records, in order of
	// first appearance; nil for a file per sample. StrataOnly are the
	// label fields that make strata but not the label (ScanOptions.Strata).
	Members    []string
	StrataOnly []string
	corpus     *ScanOptions // a JSONL corpus: how its lines make records
	// made are a streamed corpus's records' bytes as its scan made them,
	// by their line's offset (jsonlReader.made); the upload takes a
	// record's from here when they are, and makes them again from the
	// line when not.
	made  *madeRecords
	store backend.Store // the store its WebDataset shards are read from; nil: local files
	// versions holds the reads of store's objects to the versions the
	// scan read (storeFiles).
	versions *backend.Versions
	table    *parquetTable // a Parquet source: how its rows make records
	gz       *gzSizes      // its compressed shards' decompressed sizes, from the scan
	// Warnings say what the scan noticed but accepted: strata with a
	// single sample, or very many strata.
	Warnings []string
	// Symlinks counts the symbolic links the scan followed; Outside, those
	// of them that lead out of the source (followed only when asked).
	Symlinks, Outside int

	realRoot string // Root with its symbolic links resolved, for listings

	// fixedFields: Fields are given, not read (a streaming ingest's chunk
	// after the first, stream.go), and a record with another is refused.
	fixedFields bool
	// binRange is the least and greatest value of each --bins field.
	binRange map[string][2]float64
	// openFiles, when set, opens the files its records are read from (a
	// streaming ingest's chunk: the shards its scan kept in memory, the
	// others from the source); filesOf else.
	openFiles func() sourceFiles

	indexOnce sync.Once
	index     map[string]int // key -> item, built by keyIndex

	released bool // planned, its items' labels and fields dropped (Options.ReleaseSource)
	// planned is the item of each sample row of plannedFor, the manifest
	// the last plan made.
	planned    []int32
	plannedFor *manifest.Manifest
}

// ErrEmpty: the source holds no samples.
var ErrEmpty = errors.New("no samples found")

// Scan reads src: a directory SRC/<label>/<file...>, or a listing file
// ending in .csv (columns path,label[,more labels]; an optional header row
// starting with "path" names the label columns) or .jsonl (objects with
// "path" and the label fields, default "label"). Listed paths are relative
// to the listing's directory and become the keys.
//
// A symbolic link that leads out of the source (the tree's root, or the
// listing's directory) is refused: a source is what lies below it. Use
// ScanWith with FollowSymlinks to follow such links.
func Scan(src string, labelFields []string) (*Source, error) {
	return ScanWith(src, ScanOptions{LabelFields: labelFields})
}

// ScanOptions are Scan's choices.
type ScanOptions struct {
	LabelFields []string // listings: the fields that form the stratum (default "label")
	// FollowSymlinks follows symbolic links that lead out of the source.
	FollowSymlinks bool
	// TimeBuckets and Bins add label fields cut from a listing field: a
	// timestamp into buckets, a number into ranges (see fields.go).
	TimeBuckets []TimeBucket
	Bins        []Bins
	// Sources of records (WebDataset shards): Label names the field the
	// model learns ("": none), Strata the fields that make strata besides.
	Label  string
	Strata []string
	// MaxRecordSize refuses a larger record (0: manifest.MaxShardSize).
	MaxRecordSize int64
	// Members makes a JSONL file a corpus of records: each line one, the
	// fields named members (see jsonl.go); KeyField names the key field.
	Members  []MemberField
	KeyField string
	// Store, when set, is the source: WebDataset shards, its objects whose
	// keys end in .tar, read with ranged GETs (ScanStore).
	Store backend.Store
}

// ScanStore scans the WebDataset shards of o.Store.
func ScanStore(ctx context.Context, o ScanOptions) (*Source, error) {
	shards, err := StoreShards(ctx, o.Store)
	if err != nil {
		return nil, err
	}
	gz, versions := &gzSizes{}, backend.NewVersions()
	s, err := scanWebDatasetFrom(ctx, storeFiles{o.Store, gz, versions}, o.Store.String(), shards, o)
	if err != nil {
		return nil, err
	}
	s.store, s.gz, s.versions = o.Store, gz, versions
	return s, checkSource(o.Store.String(), s, o, false)
}

// MaxLabelBytes bounds one label, and MaxStratumBytes the stratum name made
// of a sample's labels: a stratum names a directory under samples/, and a
// file name has at most 255 bytes.
const (
	MaxLabelBytes   = 200
	MaxStratumBytes = 255
)

// ScanWith is Scan with options.
func ScanWith(src string, o ScanOptions) (*Source, error) {
	shards, records, err := WebDatasetShards(src)
	if err != nil {
		return nil, err
	}
	corpus := strings.HasSuffix(src, ".jsonl") && len(o.Members) > 0
	table := strings.HasSuffix(src, ".parquet")
	switch {
	case len(o.Members) > 0 && !corpus && !table:
		return nil, fmt.Errorf("source %s: --member makes fields of a .jsonl corpus or columns of a .parquet file members of its records: give one", src)
	case !records && !corpus && !table && (o.Label != "" || len(o.Strata) > 0):
		return nil, fmt.Errorf("source %s: --label and --strata name fields of records (WebDataset shards: a directory of .tar files (or .tar.gz, .tgz), a .tar, or a glob of them; a .jsonl corpus with --member; a .parquet file); a listing names its label with --label-fields", src)
	}
	records = records || corpus || table
	var fi os.FileInfo
	if !records {
		if fi, err = os.Stat(src); err != nil {
			return nil, fmt.Errorf("source %s: %w", src, err)
		}
	}
	var s *Source
	switch {
	case table:
		s, err = scanParquet(src, o)
	case corpus:
		s, err = scanJSONLRecords(src, o)
		if s != nil {
			s.corpus = &o
		}
	case records:
		s, err = scanWebDataset(shards, o)
	case fi.IsDir():
		s, err = scanTree(src, o.FollowSymlinks)
	case strings.HasSuffix(src, ".csv"):
		s, err = scanCSV(src, o)
	case strings.HasSuffix(src, ".jsonl"):
		s, err = scanJSONL(src, o)
	default:
		return nil, fmt.Errorf("source %s: not a directory, .csv or .jsonl file", src)
	}
	if err != nil {
		return nil, err
	}
	if len(s.Items) == 0 {
		return nil, fmt.Errorf("source %s: %w: expected %s/<class>/<file> or a .csv/.jsonl listing of path,label", src, ErrEmpty, src)
	}
	if !records && fi.IsDir() && (len(o.TimeBuckets) > 0 || len(o.Bins) > 0) {
		return nil, fmt.Errorf("source %s: --time-bucket and --bins cut a listing's fields: list the samples in a .csv or .jsonl with those fields", src)
	}
	return s, checkSource(src, s, o, false)
}

// checkSource cuts the derived fields of a scanned source and checks its
// keys, labels and sizes; keysChecked: its keys are known to be unique
// (a streamed chunk's, checkChunkKeys), not checked again.
func checkSource(src string, s *Source, o ScanOptions, keysChecked bool) error {
	if err := s.derive(o); err != nil {
		return fmt.Errorf("source %s: %w", src, err)
	}
	var seen map[string]string // nil: keysChecked, a map of every key the second time
	if !keysChecked {
		seen = make(map[string]string, len(s.Items))
	}
	derived := make([]bool, len(s.LabelFields))
	for i, f := range s.LabelFields {
		derived[i] = slices.ContainsFunc(s.Derived, func(d manifest.Derived) bool { return d.Field == f })
	}
	for _, it := range s.Items {
		if err := manifest.CheckKey(it.Key); err != nil {
			return fmt.Errorf("source %s: %v: keys must be relative paths inside the source", src, err)
		}
		if r, ok := controlRune(it.Key); ok {
			// A key names a file under samples/ and a row of index.csv: a
			// control character there is an escape sequence in a listing
			// or a broken row, as it is in a label.
			return fmt.Errorf("source %s: %s: key %q holds the control character %U: keys name files under samples/ and rows of index.csv; rename the file or the record", src, it.Where(), it.Key, r)
		}
		if len(s.Members) > 0 {
			// A batch tar names a record's members by its key, as the
			// source spells it, so that a loader's __key__ is the key in
			// index.csv and in the source; a key a member name cannot
			// hold would come back as another (issue 59: laion.v1.2/x
			// came back as laion_v1_2/x, and a.b/x, a_b/x and "a b/x"
			// as one key).
			if err := layout.RecordKeyHeld(it.Key); err != nil {
				return fmt.Errorf("source %s: %s: %v: rename the record (a WebDataset shard's member names, up to the first '.'; a JSONL line's or Parquet row's --key field), or leave --key out to key a corpus's records by line or row number", src, it.Where(), err)
			}
		}
		if seen != nil {
			if prev, dup := seen[it.Key]; dup {
				return fmt.Errorf("source %s: duplicate key %q (from %s and %s): every sample needs its own path", src, it.Key, prev, it.Path)
			}
			seen[it.Key] = it.Path
		}
		for i, l := range it.Labels {
			if err := checkLabel(l); err != nil {
				return fmt.Errorf("source %s: sample %q has label %s=%q: %v", src, it.Key, s.LabelFields[i], clip(l), err)
			}
			// "+" joins a tuple's labels into the stratum name: (x+y, z)
			// and (x, y+z) would be one stratum and one class.
			// Derived labels (bins such as 1e+06..2e+06) are written by
			// ingest from fixed edges, and cannot make such a pair.
			if len(it.Labels) > 1 && strings.Contains(l, stratumSep) && !derived[i] {
				return fmt.Errorf("source %s: %s: label %s=%q contains %q, which joins the labels of --label-fields %s into one stratum name, so two different tuples could share it: replace the %q in the listing (for example with \"-\")",
					src, it.Where(), s.LabelFields[i], clip(l), stratumSep, strings.Join(s.LabelFields, ","), stratumSep)
			}
		}
		if n := len(stratumName(it.Labels)); n > MaxStratumBytes {
			return fmt.Errorf("source %s: sample %q: its labels %s make a stratum name of %d bytes, more than the %d a directory name under samples/ may have: use shorter labels or fewer --label-fields", src, it.Key, strings.Join(s.LabelFields, ","), n, MaxStratumBytes)
		}
		if it.Size > manifest.MaxShardSize {
			return fmt.Errorf("source %s: sample %q is %d bytes; samples up to %d bytes are supported", src, it.Key, it.Size, int64(manifest.MaxShardSize))
		}
	}
	return nil
}

// checkLabel accepts a label that can name a directory and a stratum:
// non-empty, not "." or "..", without '/', NUL or other control characters.
func checkLabel(l string) error {
	if l == "" || l == "." || l == ".." || strings.ContainsRune(l, '/') {
		return errors.New(`labels must be non-empty, not "." or "..", and contain no '/'`)
	}
	if len(l) > MaxLabelBytes {
		return fmt.Errorf("the label is %d bytes: labels name directories under samples/ and may have at most %d bytes", len(l), MaxLabelBytes)
	}
	if r, ok := controlRune(l); ok {
		return fmt.Errorf("labels may not contain control characters such as newlines (found %q)", r)
	}
	return nil
}

// controlRune is the first control character in s (C0, DEL or C1: what a
// terminal or a CSV reader takes as other than text), if any.
func controlRune(s string) (rune, bool) {
	for _, r := range s {
		if r < 0x20 || r >= 0x7f && r <= 0x9f {
			return r, true
		}
	}
	return 0, false
}

// clip shortens a value for an error message.
func clip(v string) string {
	if len(v) > 64 {
		return v[:64] + fmt.Sprintf("... (%d bytes)", len(v))
	}
	return v
}

// stratumName is the name of the stratum a sample's labels make.
func stratumName(labels []string) string { return strings.Join(labels, stratumSep) }

// stratumSep joins a tuple of labels into a stratum name.
const stratumSep = "+"

// scanTree walks root/<class>/<file...>. Symlinked class directories (and
// symlinked directories below them) are followed, as torchvision's
// ImageFolder does, when they stay inside root, or when follow is set; a
// directory reached twice is refused as a loop.
func scanTree(root string, follow bool) (*Source, error) {
	s := &Source{Root: root, LabelFields: []string{"label"}}
	visited := map[string]bool{}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, fmt.Errorf("source %s: %w", root, err)
	}
	visited[realRoot] = true
	w := &treeWalk{s: s, root: root, realRoot: realRoot, follow: follow, visited: visited}
	return s, w.walk(root, "")
}

// treeWalk is one scan of a tree.
type treeWalk struct {
	s              *Source
	root, realRoot string
	follow         bool
	visited        map[string]bool
}

// followLink resolves the symbolic link p (key in the source), and counts
// it; one that leads out of the source is refused unless asked for.
func (w *treeWalk) followLink(p, key string) (string, error) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("source %s: %w", w.root, err)
	}
	return real, followed(w.s, w.root, w.realRoot, key, real, w.follow)
}

// followed counts a symbolic link at key that leads to real, and refuses
// one that leads out of realRoot unless follow is set.
func followed(s *Source, root, realRoot, key, real string, follow bool) error {
	s.Symlinks++
	if rel, err := filepath.Rel(realRoot, real); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
		return nil
	}
	if !follow {
		return fmt.Errorf("source %s: %s is a symbolic link to %s, outside the source: pass --follow-symlinks to ingest what it leads to, or copy it into the source", root, key, real)
	}
	s.Outside++
	return nil
}

// walk adds the files below dir, whose key prefix is prefix ("" at the root).
func (w *treeWalk) walk(dir, prefix string) error {
	s, root, visited := w.s, w.root, w.visited
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("source %s: %w", root, err)
		}
		if d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		key := path.Join(prefix, filepath.ToSlash(rel))
		if d.Type()&fs.ModeSymlink != 0 {
			real, err := w.followLink(p, key)
			if err != nil {
				return err
			}
			if fi, err := os.Stat(p); err == nil && fi.IsDir() {
				if visited[real] {
					return fmt.Errorf("source %s: symlinked directory %s leads to %s, which is already part of the source (a loop or a duplicate)", root, key, real)
				}
				visited[real] = true
				return w.walk(p+"/", key)
			}
		}
		label, _, nested := strings.Cut(key, "/")
		if !nested {
			return fmt.Errorf("source %s: file %s is not inside a class directory: expected %s/<class>/<file>", root, key, root)
		}
		fi, err := os.Stat(p) // follows symlinks
		if err != nil {
			return fmt.Errorf("source %s: %w", root, err)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("source %s: %s is not a regular file", root, rel)
		}
		s.Items = append(s.Items, Item{Path: p, Key: key, Labels: []string{label}, Size: fi.Size()})
		return nil
	})
}

// maxListingLine bounds a line of a listing (CSV or JSONL of files and
// their labels), as it is read.
const maxListingLine = 16 << 20

func scanCSV(name string, o ScanOptions) (*Source, error) {
	labelFields := o.LabelFields
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", name, err)
	}
	defer f.Close()
	r := csv.NewReader(newLineBound(skipBOM(f), maxListingLine))
	r.FieldsPerRecord = -1
	s := &Source{Root: filepath.Dir(name)}
	cols := []int{1}
	s.LabelFields = []string{"label"}
	for line := 1; ; line++ {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if long := (*LineTooLongError)(nil); errors.As(err, &long) {
			return nil, fmt.Errorf("listing %s line %d: longer than %d bytes: a listing's line names one file and its labels; is this a listing?", name, long.Line, maxListingLine)
		}
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", name, err)
		}
		if line == 1 && len(rec) > 0 && strings.EqualFold(strings.TrimSpace(rec[0]), "path") {
			for i, h := range rec {
				for j := range i {
					if strings.TrimSpace(rec[j]) == strings.TrimSpace(h) {
						return nil, fmt.Errorf("listing %s line 1: the header names %q twice (columns %d and %d), so which one is meant is unclear: rename one", name, strings.TrimSpace(h), j+1, i+1)
					}
				}
			}
			cols, s.LabelFields, err = pickColumns(rec, labelFields)
			if err != nil {
				return nil, fmt.Errorf("listing %s: %w", name, err)
			}
			for _, h := range rec[1:] {
				s.Fields = append(s.Fields, strings.TrimSpace(h))
			}
			continue
		}
		var labels []string
		for _, c := range cols {
			if c >= len(rec) {
				return nil, fmt.Errorf("listing %s line %d: %d columns, want path and %d label(s)", name, line, len(rec), len(cols))
			}
			labels = append(labels, strings.TrimSpace(rec[c]))
		}
		it, err := listedItem(s, strings.TrimSpace(rec[0]), labels, o.FollowSymlinks)
		if err != nil {
			return nil, fmt.Errorf("listing %s line %d: %w", name, line, err)
		}
		it.Line = line
		if s.Fields != nil {
			it.Fields = make([]string, len(s.Fields))
			for i := range it.Fields {
				if i+1 < len(rec) {
					it.Fields[i] = strings.TrimSpace(rec[i+1])
				}
			}
		}
		s.Items = append(s.Items, it)
	}
	return s, nil
}

// skipBOM reads r without the UTF-8 byte order mark some editors and
// spreadsheet exports put first (else it would be part of the first path,
// or of the header's first name).
func skipBOM(r io.Reader) io.Reader {
	br := bufio.NewReader(r)
	if b, err := br.Peek(3); err == nil && string(b) == "\ufeff" {
		br.Discard(3)
	}
	return br
}

// pickColumns maps a header row to the label columns to use: those named
// by want, or else the column named "label" (or the only column besides
// path). Other columns are not part of the stratum unless asked for.
func pickColumns(header, want []string) ([]int, []string, error) {
	if len(want) == 0 {
		switch {
		case slices.ContainsFunc(header[1:], func(h string) bool { return strings.TrimSpace(h) == "label" }):
			want = []string{"label"}
		case len(header) == 2:
			want = []string{strings.TrimSpace(header[1])}
		default:
			return nil, nil, fmt.Errorf("the header %v has no column named label: name the column(s) that form the stratum with --label-fields, e.g. --label-fields %s", header, strings.TrimSpace(header[1]))
		}
	}
	var cols []int
	for _, w := range want {
		i := -1
		for j, h := range header {
			if j > 0 && strings.TrimSpace(h) == w {
				i = j
			}
		}
		if i < 0 {
			return nil, nil, fmt.Errorf("label field %q is not in the header %v", w, header)
		}
		cols = append(cols, i)
	}
	if len(cols) == 0 {
		return nil, nil, fmt.Errorf("header %v has no label column", header)
	}
	return cols, want, nil
}

func scanJSONL(name string, o ScanOptions) (*Source, error) {
	labelFields := o.LabelFields
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", name, err)
	}
	defer f.Close()
	if len(labelFields) == 0 {
		labelFields = []string{"label"}
	}
	s := &Source{Root: filepath.Dir(name), LabelFields: labelFields}
	sc := bufio.NewScanner(skipBOM(f))
	sc.Buffer(make([]byte, 64<<10), maxListingLine)
	for line := 1; sc.Scan(); line++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var obj map[string]any
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.UseNumber()
		if err := dec.Decode(&obj); err != nil {
			return nil, fmt.Errorf("listing %s line %d: %w", name, line, err)
		}
		p, ok := obj["path"].(string)
		if !ok {
			return nil, fmt.Errorf("listing %s line %d: no string field \"path\"", name, line)
		}
		var labels []string
		for _, lf := range labelFields {
			v, ok := obj[lf]
			if !ok {
				return nil, fmt.Errorf("listing %s line %d: no label field %q", name, line, lf)
			}
			l, err := jsonLabel(v)
			if err != nil {
				return nil, fmt.Errorf("listing %s line %d: label field %q: %v", name, line, lf, err)
			}
			labels = append(labels, l)
		}
		it, err := listedItem(s, p, labels, o.FollowSymlinks)
		if err != nil {
			return nil, fmt.Errorf("listing %s line %d: %w", name, line, err)
		}
		it.Line = line
		if it.Fields, err = jsonFields(s, obj); err != nil {
			return nil, fmt.Errorf("listing %s line %d: %w", name, line, err)
		}
		s.Items = append(s.Items, it)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("listing %s: %w", name, err)
	}
	for i := range s.Items { // fields first seen on a later line
		for len(s.Items[i].Fields) < len(s.Fields) {
			s.Items[i].Fields = append(s.Items[i].Fields, "")
		}
	}
	return s, nil
}

// jsonFields returns obj's values of s.Fields, adding the names it has not
// seen before (sorted, so a line's key order does not matter).
func jsonFields(s *Source, obj map[string]any) ([]string, error) {
	var added []string
	for k := range obj {
		if k != "path" && !slices.Contains(s.Fields, k) {
			added = append(added, k)
		}
	}
	sort.Strings(added)
	s.Fields = append(s.Fields, added...)
	out := make([]string, len(s.Fields))
	for i, f := range s.Fields {
		v, ok := obj[f]
		if !ok || v == nil {
			continue
		}
		if l, err := jsonLabel(v); err == nil {
			out[i] = l
			continue
		}
		b, err := json.Marshal(v) // a list or an object is kept as its JSON text
		if err != nil {
			return nil, fmt.Errorf("field %q: %v", f, err)
		}
		out[i] = string(b)
	}
	return out, nil
}

// jsonLabel accepts a string, number or boolean label; null, lists and
// objects have no single name to become a class.
func jsonLabel(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case json.Number:
		return v.String(), nil
	case bool:
		return fmt.Sprint(v), nil
	case nil:
		return "", errors.New("is null: every sample needs a label (a string or a number)")
	default:
		return "", fmt.Errorf("is a %T (%v): a label must be a string or a number", v, v)
	}
}

// listedItem checks a listed path before touching the file system with it.
// A path that passes through a symbolic link is counted, and refused when
// it leads out of the listing's directory unless follow is set.
func listedItem(s *Source, p string, labels []string, follow bool) (Item, error) {
	if err := manifest.CheckKey(p); err != nil {
		return Item{}, fmt.Errorf("path: %v: list paths relative to the listing's directory", err)
	}
	key := path.Clean(p)
	full := filepath.Join(s.Root, filepath.FromSlash(key))
	real, err := filepath.EvalSymlinks(full)
	if err != nil {
		return Item{}, err
	}
	if s.realRoot == "" {
		if s.realRoot, err = filepath.EvalSymlinks(s.Root); err != nil {
			return Item{}, err
		}
	}
	if filepath.Join(s.realRoot, filepath.FromSlash(key)) != real {
		if err := followed(s, s.Root, s.realRoot, key, real, follow); err != nil {
			return Item{}, err
		}
	}
	fi, err := os.Stat(full)
	if err != nil {
		return Item{}, err
	}
	if !fi.Mode().IsRegular() {
		return Item{}, fmt.Errorf("%s is not a regular file", full)
	}
	return Item{Path: full, Key: key, Labels: labels, Size: fi.Size()}, nil
}

// strata groups items by their label tuple; strata are sorted by name so
// their indexes do not depend on input order.
func (s *Source) strata() ([]manifest.Stratum, []uint32) {
	index := map[string]int{}
	var names []string
	labelsOf := map[string][]string{}
	for _, it := range s.Items {
		n := stratumName(it.Labels)
		if _, ok := labelsOf[n]; !ok {
			labelsOf[n] = it.Labels
			names = append(names, n)
		}
	}
	sort.Strings(names)
	out := make([]manifest.Stratum, len(names))
	for i, n := range names {
		index[n] = i
		out[i] = manifest.Stratum{Name: n, Labels: labelsOf[n]}
	}
	of := make([]uint32, len(s.Items))
	for i, it := range s.Items {
		of[i] = uint32(index[stratumName(it.Labels)])
		out[of[i]].Count++
	}
	return out, of
}
