// Package manifest owns the durable description of a dataset: erasure
// parameters, stores, strata (and which of their fields are the label:
// classes.go), shards with their block checksums, and per sample its key,
// stratum, shard, offset, size and checksum, and for a dataset of records
// its record table (records.go). It encodes to a
// compact, versioned, checksummed binary object, which ingest writes to every
// store after all fragments: that write is the commit point.
//
// Samples are kept in columns, not as a slice of structs, so 10M samples fit
// in about 30 bytes each plus their keys. Sample i is the i-th sample in
// (shard, offset) order; samples are packed back to back in their shard, so
// offsets are not stored but recomputed on decode.
//
// Three metadata formats: format 1, that one object; format 2, a top-level
// manifest of per-shard counts and an index object per shard (top.go);
// format 3, format 2's indexes under a root of per-group counts and a group
// object per group of shards (root.go), so that what every node reads
// stays small at millions of shards.
package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"unicode/utf8"
)

// Version is the format version this package writes for a dataset with
// fields (Header.Fields or Header.Derived); a dataset without them is
// written as VersionLabels, byte for byte as before fields existed, so
// older readers still read it.
const Version = 2

// VersionLabels is the format of a dataset whose samples carry labels only.
const VersionLabels = 1

// MaxShardSize bounds a shard (and so a sample), so offsets fit in 32 bits.
const MaxShardSize = 1<<31 - 1

// ErrCorrupt: the bytes are not a valid manifest.
var ErrCorrupt = errors.New("manifest is corrupt")

// Stratum is one class of samples: one label, or a tuple of labels.
type Stratum struct {
	Name   string   // directory-safe display name (labels joined with "+")
	Labels []string // one per Manifest.LabelFields
	Count  int
}

// Shard is one stored shard.
type Shard struct {
	Size        int64    // payload bytes
	FirstSample int      // index of its first sample; its samples are consecutive
	NumSamples  int      // number of samples
	Sums        []uint32 // block checksums, fragment-major (see erasure.Shard)
}

// Manifest is a dataset's durable description.
type Manifest struct {
	// FormatVersion is the encoding's version, as read; not the dataset's
	// version (Header.VersionNumber).
	FormatVersion int
	Header
	Shards  []Shard
	Samples Samples

	// Top is set when the dataset is stored in format 2: the top-level
	// manifest it was read from, or written as. A manifest read from the
	// stores holds only the header until its shard indexes are loaded
	// (Expand).
	Top *Top
	// Root is set when the dataset is stored in format 3: the root it was
	// read from, or written as. Top is then assembled from the root and
	// its group objects (NewTopOf, Top.AddGroup), and the rest is format 2's.
	Root *Root
}

// Header is what both metadata formats say of a dataset before its shards:
// its name and ingest, the erasure code, the stores and the strata. One
// codec (encodeHeader, decodeHeader) writes and reads it for both.
type Header struct {
	Name        string
	IngestID    string // names the object prefix of this ingest's fragments
	CreatedUnix int64
	Seed        uint64 // seed of the stratified placement of samples into shards

	Data, Parity, BlockSize int
	ShardSize               int64    // target shard size used at ingest
	Stores                  []string // store names at ingest, for messages only
	LabelFields             []string

	Strata []Stratum // Count is the dataset's samples of each stratum

	// Fields are the listing's fields kept per sample (Samples.Fields), in
	// the listing's order; empty when the listing had only a path and the
	// label fields.
	Fields []string
	// Derived are the label fields computed from a field at ingest (time
	// buckets, bins) rather than read as they are.
	Derived []Derived

	// Segments say which ingest uploaded each run of shards, in shard
	// order; empty when every shard is IngestID's (see lineage.go).
	Segments []Segment
	// Versions is the dataset's history up to this version, oldest first;
	// empty for a dataset committed once.
	Versions []VersionInfo

	// Members names the members of a dataset of records, each sample's
	// record table indexing them (records.go); empty for one file per
	// sample. StrataOnly are the label fields that make strata but are not
	// the label (records.go).
	Members    []string
	StrataOnly []string
}

// Derived is a label field computed from a listing field: a timestamp cut
// into buckets of Width seconds (aligned to Unix time 0), or a number cut
// into bins by Edges.
type Derived struct {
	Field string `json:"field"` // the listing field, and its name in LabelFields
	// Width is the length of a time bucket in seconds; 0 for bins.
	Width int64 `json:"bucket_seconds,omitempty"`
	// Edges are the bins' bounds, ascending: bin i holds Edges[i] <= v <
	// Edges[i+1], and the last bin also holds its upper edge.
	Edges []float64 `json:"bin_edges,omitempty"`
}

// HasFields reports whether h needs format Version rather than VersionLabels.
func (h *Header) HasFields() bool { return len(h.Fields) > 0 || len(h.Derived) > 0 }

// FieldSep separates the values of one sample's fields in Samples; listing
// values may not contain it (or any other control character).
const FieldSep = "\x1f"

// Samples is the columnar sample table.
type Samples struct {
	keys    []byte   // all keys, back to back
	keyEnd  []uint64 // keyEnd[i] is the end of key i in keys
	Stratum []uint32
	Shard   []uint32
	Offset  []uint32 // within the shard
	Size    []uint32
	Sum     []uint32 // CRC32C of the sample bytes

	// Per sample, its Header.Fields values joined by FieldSep, back to
	// back; nil when the dataset has no fields.
	fieldVals []byte
	fieldEnd  []uint64

	// Per sample, its record table (records.go), back to back; nil when
	// the samples are not records.
	recs   []byte
	recEnd []uint64
}

// Record returns sample i's record table (see RecordMembers); nil when the
// samples are not records. Do not modify it.
func (s *Samples) Record(i int) []byte {
	if s.recEnd == nil {
		return nil
	}
	start := uint64(0)
	if i > 0 {
		start = s.recEnd[i-1]
	}
	return s.recs[start:s.recEnd[i]]
}

// AppendRecord records the next sample's record table. Call it once per
// Append, for every sample or for none.
func (s *Samples) AppendRecord(table []byte) {
	s.recs = append(s.recs, table...)
	s.recEnd = append(s.recEnd, uint64(len(s.recs)))
}

// HasFields reports whether the samples carry field values.
func (s *Samples) HasFields() bool { return s.fieldEnd != nil }

// FieldsJoined returns sample i's field values joined by FieldSep.
func (s *Samples) FieldsJoined(i int) string {
	if s.fieldEnd == nil {
		return ""
	}
	start := uint64(0)
	if i > 0 {
		start = s.fieldEnd[i-1]
	}
	return string(s.fieldVals[start:s.fieldEnd[i]])
}

// AppendFields records the next sample's field values, joined by FieldSep.
// Call it once per Append, for every sample or for none.
func (s *Samples) AppendFields(joined string) {
	s.fieldVals = append(s.fieldVals, joined...)
	s.fieldEnd = append(s.fieldEnd, uint64(len(s.fieldVals)))
}

// Grow makes room for n more samples of keyBytes of keys in all, and,
// where fieldBytes or recordBytes is above zero, of their joined field
// values and record tables: a table built by Append in one pass then
// holds what it needs, not up to twice that.
func (s *Samples) Grow(n, keyBytes, fieldBytes, recordBytes int) {
	s.keys = slices.Grow(s.keys, keyBytes)
	s.keyEnd = slices.Grow(s.keyEnd, n)
	s.Stratum = slices.Grow(s.Stratum, n)
	s.Shard = slices.Grow(s.Shard, n)
	s.Size = slices.Grow(s.Size, n)
	s.Sum = slices.Grow(s.Sum, n)
	if fieldBytes > 0 {
		s.fieldVals = slices.Grow(s.fieldVals, fieldBytes)
		s.fieldEnd = slices.Grow(s.fieldEnd, n)
	}
	if recordBytes > 0 {
		s.recs = slices.Grow(s.recs, recordBytes)
		s.recEnd = slices.Grow(s.recEnd, n)
	}
}

// Len is the number of samples.
func (s *Samples) Len() int { return len(s.keyEnd) }

// Key returns sample i's key.
func (s *Samples) Key(i int) string {
	start := uint64(0)
	if i > 0 {
		start = s.keyEnd[i-1]
	}
	return string(s.keys[start:s.keyEnd[i]])
}

// KeyBytes returns sample i's key without copying. Do not modify it.
func (s *Samples) KeyBytes(i int) []byte {
	start := uint64(0)
	if i > 0 {
		start = s.keyEnd[i-1]
	}
	return s.keys[start:s.keyEnd[i]]
}

// Append adds a sample. Offsets are assigned by Finish.
func (s *Samples) Append(key string, stratum, shard, size, sum uint32) {
	s.keys = append(s.keys, key...)
	s.keyEnd = append(s.keyEnd, uint64(len(s.keys)))
	s.Stratum = append(s.Stratum, stratum)
	s.Shard = append(s.Shard, shard)
	s.Size = append(s.Size, size)
	s.Sum = append(s.Sum, sum)
}

// Finish recomputes derived fields: sample offsets, shard first/num samples,
// shard sizes and stratum counts. Samples must be in shard order.
func (m *Manifest) Finish() error {
	s := &m.Samples
	s.Offset = make([]uint32, s.Len())
	for i := range m.Shards {
		m.Shards[i].FirstSample, m.Shards[i].NumSamples, m.Shards[i].Size = 0, 0, 0
	}
	for i := range m.Strata {
		m.Strata[i].Count = 0
	}
	for i := 0; i < s.Len(); i++ {
		sh, st := int(s.Shard[i]), int(s.Stratum[i])
		if sh >= len(m.Shards) || st >= len(m.Strata) {
			return fmt.Errorf("%w: sample %d names shard %d / stratum %d that do not exist", ErrCorrupt, i, sh, st)
		}
		if i > 0 && s.Shard[i] < s.Shard[i-1] {
			return fmt.Errorf("%w: sample %d is out of shard order", ErrCorrupt, i)
		}
		shard := &m.Shards[sh]
		if shard.NumSamples == 0 {
			shard.FirstSample = i
		}
		if shard.Size+int64(s.Size[i]) > MaxShardSize {
			return fmt.Errorf("%w: shard %d exceeds %d bytes", ErrCorrupt, sh, int64(MaxShardSize))
		}
		s.Offset[i] = uint32(shard.Size)
		shard.Size += int64(s.Size[i])
		shard.NumSamples++
		m.Strata[st].Count++
	}
	return nil
}

// FragSize is the fragment size of shard i.
func (m *Manifest) FragSize(i int) int64 {
	return (m.Shards[i].Size + int64(m.Data) - 1) / int64(m.Data)
}

// Blocks is the number of checksum blocks per fragment of shard i.
func (m *Manifest) Blocks(i int) int {
	return int((m.FragSize(i) + int64(m.BlockSize) - 1) / int64(m.BlockSize))
}

// TotalBytes is the sum of all sample sizes; a format-3 manifest without
// its shards gives its groups'.
func (m *Manifest) TotalBytes() int64 {
	var n int64
	for _, sh := range m.Shards {
		n += sh.Size
	}
	if len(m.Shards) == 0 && m.Root != nil {
		for _, g := range m.Root.Groups {
			n += g.Size
		}
	}
	return n
}

// NumShards is the number of shards, also of a format-3 manifest without
// its shards.
func (m *Manifest) NumShards() int {
	if len(m.Shards) == 0 && m.Root != nil {
		return m.Root.NumShards()
	}
	return len(m.Shards)
}

// CheckKey reports whether key is acceptable as a sample key: a relative,
// slash-separated, valid UTF-8 path with no empty, "." or ".." element and no NUL.
func CheckKey(key string) error {
	if err := checkKey([]byte(key)); err != nil {
		return fmt.Errorf("key %q %s", key, err)
	}
	return nil
}

var (
	errKeyEmpty    = errors.New("is empty")
	errKeyUTF8     = errors.New("is not valid UTF-8")
	errKeyNUL      = errors.New("contains NUL")
	errKeyAbsolute = errors.New("is an absolute path")
	errKeyElement  = errors.New(`has an empty, "." or ".." path element, or a backslash`)
)

// checkKey is CheckKey without allocation, for validating millions of keys.
func checkKey(key []byte) error {
	switch {
	case len(key) == 0:
		return errKeyEmpty
	case key[0] == '/':
		return errKeyAbsolute
	case bytes.IndexByte(key, 0) >= 0:
		return errKeyNUL
	case bytes.IndexByte(key, '\\') >= 0:
		return errKeyElement
	case !utf8.Valid(key):
		return errKeyUTF8
	}
	for rest := key; ; {
		el := rest
		i := bytes.IndexByte(rest, '/')
		if i >= 0 {
			el = rest[:i]
		}
		if len(el) == 0 || string(el) == "." || string(el) == ".." {
			return errKeyElement
		}
		if i < 0 {
			return nil
		}
		rest = rest[i+1:]
	}
}

// DuplicateKey returns a key that occurs twice, or "" when keys are unique.
// It radix-sorts 64-bit hashes instead of building a map of 10M strings, and
// compares keys only for the rare equal hashes.
func (s *Samples) DuplicateKey() string {
	seed := maphash.MakeSeed()
	hs := make([]uint64, s.Len())
	for i := range hs {
		hs[i] = maphash.Bytes(seed, s.KeyBytes(i))
	}
	radixSort(hs)
	var collide map[uint64]bool
	for i := 1; i < len(hs); i++ {
		if hs[i] == hs[i-1] {
			if collide == nil {
				collide = map[uint64]bool{}
			}
			collide[hs[i]] = true
		}
	}
	if collide == nil {
		return ""
	}
	seen := map[string]bool{}
	for i := 0; i < s.Len(); i++ {
		if collide[maphash.Bytes(seed, s.KeyBytes(i))] {
			if seen[s.Key(i)] {
				return s.Key(i)
			}
			seen[s.Key(i)] = true
		}
	}
	return ""
}

// radixSort sorts a in place, 16 bits per pass. Below 65,536 values a
// comparison sort is cheaper: each pass clears and sums 65,536 counts (a
// 512 KiB table on the heap), which a streamed ingest's chunk of 4,096
// records paid in every chunk, twice its keys' own bytes.
func radixSort(a []uint64) {
	if len(a) < 1<<16 {
		slices.Sort(a)
		return
	}
	buf := make([]uint64, len(a))
	var count [1 << 16]int
	for shift := 0; shift < 64; shift += 16 {
		clear(count[:])
		for _, v := range a {
			count[(v>>shift)&0xffff]++
		}
		sum := 0
		for i, c := range count {
			count[i] = sum
			sum += c
		}
		for _, v := range a {
			d := (v >> shift) & 0xffff
			buf[count[d]] = v
			count[d]++
		}
		a, buf = buf, a
	}
}

// Validate checks everything a reader relies on: parameters, keys (clean and
// unique), stratum names, shard checksum tables and sample bounds.
func (m *Manifest) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
	if m.Data < 1 || m.Parity < 0 || m.Data+m.Parity > 256 {
		return bad("erasure parameters k=%d m=%d", m.Data, m.Parity)
	}
	if m.BlockSize < 1 || m.BlockSize > 1<<20 {
		return bad("block size %d", m.BlockSize)
	}
	if len(m.Stores) != m.Data+m.Parity {
		return bad("%d stores recorded, k+m = %d", len(m.Stores), m.Data+m.Parity)
	}
	seen := make(map[string]bool, len(m.Strata))
	for i, st := range m.Strata {
		if err := checkName(st.Name); err != nil || seen[st.Name] {
			return bad("stratum %d name %q: invalid or duplicate", i, st.Name)
		}
		if len(st.Labels) != len(m.LabelFields) {
			return bad("stratum %q has %d labels, %d label fields", st.Name, len(st.Labels), len(m.LabelFields))
		}
		seen[st.Name] = true
	}
	if err := m.Header.validateFields(); err != nil {
		return bad("%v", err)
	}
	if err := m.Header.validateLineage(len(m.Shards)); err != nil {
		return bad("%v", err)
	}
	if s := &m.Samples; s.HasFields() && len(s.fieldEnd) != s.Len() {
		return bad("%d samples with field values, %d samples", len(s.fieldEnd), s.Len())
	}
	for i := range m.Shards {
		if want := (m.Data + m.Parity) * m.Blocks(i); len(m.Shards[i].Sums) != want {
			return bad("shard %d has %d checksums, want %d", i, len(m.Shards[i].Sums), want)
		}
	}
	s := &m.Samples
	for i := 0; i < s.Len(); i++ {
		if err := checkKey(s.KeyBytes(i)); err != nil {
			return bad("sample %d: key %q %v", i, s.Key(i), err)
		}
	}
	if k := s.DuplicateKey(); k != "" {
		return bad("duplicate key %q", k)
	}
	return nil
}

// checkName accepts names usable as one directory element.
func checkName(n string) error {
	if n == "" || n == "." || n == ".." || strings.ContainsAny(n, "/\x00") || !utf8.ValidString(n) {
		return fmt.Errorf("invalid name %q", n)
	}
	return nil
}

// validateFields checks that every derived label field is a label field and
// is cut sensibly.
func (h *Header) validateFields() error {
	if err := h.validateRecords(); err != nil {
		return err
	}
	for _, d := range h.Derived {
		switch {
		case !slices.Contains(h.LabelFields, d.Field):
			return fmt.Errorf("derived field %q is not a label field", d.Field)
		case (d.Width > 0) == (len(d.Edges) > 0):
			return fmt.Errorf("derived field %q: either a bucket width or bin edges", d.Field)
		case d.Width < 0:
			return fmt.Errorf("derived field %q: bucket width %d", d.Field, d.Width)
		case len(d.Edges) == 1:
			return fmt.Errorf("derived field %q: one bin edge", d.Field)
		}
		for i := 1; i < len(d.Edges); i++ {
			if !(d.Edges[i] > d.Edges[i-1]) {
				return fmt.Errorf("derived field %q: bin edges not ascending", d.Field)
			}
		}
	}
	return nil
}
