package layout

import (
	"archive/tar"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// SampleCatalog is what the file map needs to know about samples.
type SampleCatalog interface {
	Key(i int) string
	Size(i int) int64
	Stratum(i int) int
	StratumName(c int) string
	// Class is the class of stratum c: the index of its label, which a
	// batch's .cls member carries. Strata may share a class (a label cut
	// further by time or value), never the reverse.
	Class(c int) int
}

// LostCatalog is a SampleCatalog some of whose samples are lost: their metadata
// (key, size, checksums) has no intact copy anywhere, so nothing about them
// can be served. Their members keep their place in the order, as members
// with no bytes, and every byte of them, and of their index.csv rows, reads
// as an error (PieceLost): a reader of the rest of the rank-epoch is not
// held up, and no reader is ever handed a stand-in for a lost sample.
type LostCatalog interface {
	SampleCatalog
	Lost(i int) bool
}

// FieldCatalog is a SampleCatalog whose samples carry a listing's fields:
// index.csv shows them as columns after its own. Fields returns sample
// i's values, one per FieldNames.
type FieldCatalog interface {
	SampleCatalog
	FieldNames() []string
	Fields(i int) []string
}

// Tar member geometry: each sample is a ustar header, its bytes padded to
// 512, then a header and a one-block body for <name>.cls.
const (
	block      = 512
	trailerLen = 2 * block // the end-of-archive marker
)

func padded(n int64) int64 { return (n + block - 1) / block * block }

func memberLen(size int64) int64 { return block + padded(size) + 2*block }

// Members is the member table of one rank-epoch: the samples of its batches,
// in order, with their offsets in epoch.tar and their rows in index.csv.
type Members struct {
	order   *RankOrder
	cat     SampleCatalog
	off     []int64      // off[i]: start of member i in epoch.tar; off[n] = end of members
	dup     []uint32     // occurrence of member i's tar name before it in this rank-epoch
	rowOff  []int64      // rowOff[i]: start of row i in index.csv (after the header); rowOff[n] = size
	csvHead string       // index.csv's header row
	fields  FieldCatalog // nil: the catalog has no fields
	// Member i's size and class, kept beside off so that a read's extents
	// touch only this rank-epoch's arrays, not the dataset's columns.
	size  []int64
	class []int32
	lost  []bool   // nil: none is lost (see LostCatalog)
	rec   *records // nil: one member per sample (see RecordCatalog)
}

// NewMembers computes the member table of a rank-epoch.
func NewMembers(o *RankOrder, cat SampleCatalog) *Members {
	n := o.Samples.Len()
	m := &Members{order: o, cat: cat, off: make([]int64, n+1), dup: make([]uint32, n), rowOff: make([]int64, n+1),
		size: make([]int64, n), class: make([]int32, n)}
	seen := make(map[uint64]uint32, n)
	var row bytes.Buffer
	m.csvHead = csvHeader
	if fc, ok := cat.(FieldCatalog); ok && len(fc.FieldNames()) > 0 {
		m.fields = fc
		row.WriteString(strings.TrimSuffix(csvHeader, "\n"))
		cw := csv.NewWriter(&row)
		cw.Write(append([]string{""}, fieldColumns(fc.FieldNames())...))
		cw.Flush()
		m.csvHead = row.String()
		row.Reset()
	}
	m.rowOff[0] = int64(len(m.csvHead))
	var classOf []int32 // by stratum, -1 until asked: Class may cost a walk over the strata
	lc, _ := cat.(LostCatalog)
	if rc, ok := cat.(RecordCatalog); ok {
		m.rec = newRecords(o, rc)
	}
	for i, s := range o.Samples.All() {
		if lc != nil && lc.Lost(int(s)) {
			if m.lost == nil {
				m.lost = make([]bool, n)
			}
			m.lost[i] = true
		}
		size := cat.Size(int(s))
		c := cat.Stratum(int(s))
		for len(classOf) <= c {
			classOf = append(classOf, -1)
		}
		if classOf[c] < 0 {
			classOf[c] = int32(cat.Class(c))
		}
		m.size[i], m.class[i] = size, classOf[c]
		var stem string
		if m.rec != nil {
			m.off[i+1] = m.off[i] + m.rec.length(i)
			stem = RecordStem(cat.Key(int(s)))
		} else {
			m.off[i+1] = m.off[i] + memberLen(size)
			stem, _ = TarName(cat.Key(int(s)))
		}
		h := fnv.New64a()
		h.Write([]byte(stem))
		k := h.Sum64()
		m.dup[i] = seen[k]
		seen[k]++
		row.Reset()
		m.writeRow(&row, i)
		m.rowOff[i+1] = m.rowOff[i] + int64(row.Len())
	}
	return m
}

// Len is the number of members.
func (m *Members) Len() int { return m.order.Samples.Len() }

// Order is the rank-epoch's order.
func (m *Members) Order() *RankOrder { return m.order }

// Sample is the sample index of member i.
func (m *Members) Sample(i int) int { return int(m.order.Samples.At(i)) }

// Name returns member i's tar name stem (no extension) and extension; a
// record's members are named by Part instead, and ext is "".
func (m *Members) Name(i int) (stem, ext string) {
	if m.rec != nil {
		stem = RecordStem(m.cat.Key(m.Sample(i)))
	} else {
		stem, ext = TarName(m.cat.Key(m.Sample(i)))
	}
	if m.dup[i] > 0 {
		stem += "~" + strconv.FormatUint(uint64(m.dup[i]), 10)
	}
	return stem, ext
}

// Kind is what a virtual file is.
type Kind int

const (
	BatchTar Kind = iota
	EpochTar
	IndexCSV
)

// FileMap is the byte layout of one virtual file.
type FileMap struct {
	m           *Members
	kind        Kind
	first, last int   // members [first, last)
	base        int64 // epoch.tar offset of member first
	size        int64
}

// Batch returns the map of batch-b.tar.
func (m *Members) Batch(b int) *FileMap {
	B := m.order.Params.Batch
	f := &FileMap{m: m, kind: BatchTar, first: b * B, last: (b + 1) * B}
	f.base = m.off[f.first]
	f.size = m.off[f.last] - f.base + trailerLen
	return f
}

// Epoch returns the map of epoch.tar: every batch's members, one end marker.
func (m *Members) Epoch() *FileMap {
	return &FileMap{m: m, kind: EpochTar, first: 0, last: m.Len(), size: m.off[m.Len()] + trailerLen}
}

// Index returns the map of index.csv.
func (m *Members) Index() *FileMap {
	return &FileMap{m: m, kind: IndexCSV, first: 0, last: m.Len(), size: m.rowOff[m.Len()]}
}

// Name is the file's name in its rank directory.
func (f *FileMap) Name() string {
	switch f.kind {
	case EpochTar:
		return "epoch.tar"
	case IndexCSV:
		return "index.csv"
	}
	return BatchName(f.first / f.m.order.Params.Batch)
}

// Size is the file's exact size.
func (f *FileMap) Size() int64 { return f.size }

// Kind is the file's kind.
func (f *FileMap) Kind() Kind { return f.kind }

// Members is the member table behind the file.
func (f *FileMap) Members() *Members { return f.m }

// Range is the members [first, last) the file holds.
func (f *FileMap) Range() (first, last int) { return f.first, f.last }

// Piece says what an extent holds.
type Piece uint8

const (
	PieceSample    Piece = iota // sample bytes, to fetch
	PieceHeader                 // the sample's tar header
	PieceClsHeader              // the .cls member's tar header
	PieceCls                    // the .cls body: the class index
	PieceZero                   // padding and the end marker
	PieceRow                    // index.csv rows (Member is the first row; -1 for the header)
	PieceLost                   // a lost sample's member or index.csv row: reads fail (LostCatalog)
)

// ErrLost: a read touched a lost sample's member or row (see LostCatalog).
var ErrLost = errors.New("the sample is lost: its shard's index has no intact copy on any store (shardfs verify names it)")

// HasLost reports whether any member's sample is lost (see LostCatalog).
func (m *Members) HasLost() bool { return m.lost != nil }

// Lost reports whether member i's sample is lost (see LostCatalog).
func (m *Members) Lost(i int) bool { return m.lost != nil && m.lost[i] }

// Extent is one contiguous run of a file's bytes.
type Extent struct {
	Piece   Piece
	Part    uint16 // a record's member the header or sample bytes are of (see RecordCatalog)
	Member  int32  // member index in the rank-epoch (-1 for the trailer / CSV header)
	Off     int64  // offset within the piece (sample bytes, header, row...)
	Len     int64
	FileOff int64 // offset of this extent in the file
}

// Extents appends the extents covering [off, off+n) of the file to dst. It
// does not allocate when dst has room. Reads past the end are clipped.
func (f *FileMap) Extents(dst []Extent, off, n int64) []Extent {
	end := min(off+n, f.size)
	if off < 0 || off >= end {
		return dst
	}
	if f.kind == IndexCSV {
		return f.csvExtents(dst, off, end)
	}
	membersEnd := f.m.off[f.last] - f.base
	// First member whose end is past off.
	i := f.first + sort.Search(f.last-f.first, func(k int) bool { return f.m.off[f.first+k+1]-f.base > off })
	for pos := off; pos < end; {
		for i < f.last && f.m.off[i+1]-f.base <= pos {
			i++
		}
		if pos >= membersEnd {
			dst = append(dst, Extent{Piece: PieceZero, Member: -1, Off: pos - membersEnd, Len: end - pos, FileOff: pos})
			break
		}
		start := f.m.off[i] - f.base
		size := f.m.size[i]
		rel := pos - start
		if f.m.Lost(i) {
			l := min(f.m.off[i+1]-f.base, end) - pos
			dst = append(dst, Extent{Piece: PieceLost, Member: int32(i), Off: rel, Len: l, FileOff: pos})
			pos += l
			continue
		}
		if f.m.rec != nil {
			e := f.m.rec.extent(i, rel, f.m.class[i])
			e.Len = min(e.Len, end-pos)
			e.FileOff = pos
			dst = append(dst, e)
			pos += e.Len
			continue
		}
		var piece Piece
		var pStart, pLen int64
		switch p := padded(size); {
		case rel < block:
			piece, pStart, pLen = PieceHeader, 0, block
		case rel < block+size:
			piece, pStart, pLen = PieceSample, block, size
		case rel < block+p:
			piece, pStart, pLen = PieceZero, block+size, p-size
		case rel < 2*block+p:
			piece, pStart, pLen = PieceClsHeader, block+p, block
		default:
			cls := digits(int(f.m.class[i]))
			if rel < 2*block+p+cls {
				piece, pStart, pLen = PieceCls, 2*block+p, cls
			} else {
				piece, pStart, pLen = PieceZero, 2*block+p+cls, block-cls
			}
		}
		l := min(pLen-(rel-pStart), end-pos)
		dst = append(dst, Extent{Piece: piece, Member: int32(i), Off: rel - pStart, Len: l, FileOff: pos})
		pos += l
	}
	return dst
}

// digits is len(strconv.Itoa(v)) for v >= 0, without allocating.
func digits(v int) int64 {
	n := int64(1)
	for v >= 10 {
		v /= 10
		n++
	}
	return n
}

const csvHeader = "position,batch,key,stratum,size,alpha\n"

func (f *FileMap) csvExtents(dst []Extent, off, end int64) []Extent {
	if off < int64(len(f.m.csvHead)) {
		l := min(int64(len(f.m.csvHead)), end) - off
		dst = append(dst, Extent{Piece: PieceRow, Member: -1, Off: off, Len: l, FileOff: off})
		off += l
	}
	if off >= end {
		return dst
	}
	i := sort.Search(f.m.Len(), func(k int) bool { return f.m.rowOff[k+1] > off })
	if f.m.lost == nil {
		// One extent for the run of rows; Member is the first row, Off is within it.
		return append(dst, Extent{Piece: PieceRow, Member: int32(i), Off: off - f.m.rowOff[i], Len: end - off, FileOff: off})
	}
	// One extent for each run of rows, lost or not.
	for off < end {
		j := i + 1
		for j < f.m.Len() && f.m.rowOff[j] < end && f.m.Lost(j) == f.m.Lost(i) {
			j++
		}
		piece := PieceRow
		if f.m.Lost(i) {
			piece = PieceLost
		}
		l := min(f.m.rowOff[j], end) - off
		dst = append(dst, Extent{Piece: piece, Member: int32(i), Off: off - f.m.rowOff[i], Len: l, FileOff: off})
		off += l
		i = j
	}
	return dst
}

// Render fills p (len(p) == e.Len) with the synthesized bytes of e. It must
// not be called for PieceSample, whose bytes come from the stores.
func (f *FileMap) Render(e Extent, p []byte) {
	switch e.Piece {
	case PieceZero:
		clear(p)
	case PieceHeader, PieceClsHeader:
		var h [block]byte // on the stack: a heap header per member was 91% of the daemon's allocations under fio
		f.m.header(&h, int(e.Member), e.Piece == PieceClsHeader, int(e.Part))
		copy(p, h[e.Off:])
	case PieceCls:
		copy(p, strconv.Itoa(int(f.m.class[e.Member]))[e.Off:])
	case PieceRow:
		if e.Member < 0 {
			copy(p, f.m.csvHead[e.Off:])
			return
		}
		var buf bytes.Buffer
		skip := e.Off
		for i := int(e.Member); len(p) > 0 && i < f.m.Len(); i++ {
			buf.Reset()
			f.m.writeRow(&buf, i)
			n := copy(p, buf.Bytes()[skip:])
			p, skip = p[n:], 0
		}
	default:
		panic(fmt.Sprintf("layout: Render of piece %d", e.Piece))
	}
}

// tarEpoch is the modification time of every member: fixed, so bytes are deterministic.
var tarEpoch = time.Unix(0, 0)

// header renders member i's (or its .cls member's, or its record's member part's) 512-byte ustar header into h.
func (m *Members) header(h *[block]byte, i int, cls bool, part int) {
	stem, ext := m.Name(i)
	switch {
	case cls:
		ustarHeaderInto(h, int64(len(strconv.Itoa(int(m.class[i])))), stem, ".cls")
	case m.rec != nil:
		p := int(m.rec.first[i]) + part
		ustarHeaderInto(h, int64(m.rec.size[p]), stem, ".", m.rec.names[m.rec.name[p]])
	default:
		ustarHeaderInto(h, m.size[i], stem, ".", ext)
	}
}

// ustarTemplate is archive/tar's header of every member with the name, size
// and checksum fields left empty: every other field is the same for all
// members. templateSum is its checksum with those fields empty (the
// checksum field counts as spaces).
var ustarTemplate, templateSum = func() ([block]byte, int64) {
	var t [block]byte
	copy(t[:], tarHeader("x", 0))
	clear(t[0:100])   // name
	clear(t[124:136]) // size
	clear(t[148:156]) // checksum
	sum := int64(8 * ' ')
	for _, c := range t {
		sum += int64(c)
	}
	return t, sum
}()

// ustarHeaderInto writes into h the header archive/tar writes for a regular
// file of this size whose name is the parts joined (mode 0644, mtime 0, USTAR), filled
// into the template: the library's header writer was about 15% of the
// daemon's CPU under fio, one call per member per read, and a fresh 512-byte
// slice per header was most of the rest (first-touched heap). The name is
// copied in parts so that nothing is allocated.
// TestUstarHeaderMatchesArchiveTar pins the bytes.
func ustarHeaderInto(h *[block]byte, size int64, parts ...string) {
	n := 0
	for _, s := range parts {
		n += len(s)
	}
	if n > 100 || size >= 1<<33 || size < 0 {
		copy(h[:], tarHeader(strings.Join(parts, ""), size)) // never for TarName's names; kept exact anyway
		return
	}
	*h = ustarTemplate
	n = 0
	for _, s := range parts {
		n += copy(h[n:100], s)
	}
	formatOctal(h[124:136], size)
	sum := templateSum
	for _, c := range h[0:100] {
		sum += int64(c)
	}
	for _, c := range h[124:136] {
		sum += int64(c)
	}
	formatOctal(h[148:155], sum)
	h[155] = ' '
}

// formatOctal writes x as zero-padded octal digits and a NUL, as archive/tar does.
func formatOctal(b []byte, x int64) {
	n := len(b) - 1
	for j := n - 1; j >= 0; j-- {
		b[j] = byte('0' + x&7)
		x >>= 3
	}
	b[n] = 0
}

// tarHeader renders one header through archive/tar.
func tarHeader(name string, size int64) []byte {
	h := &tar.Header{Typeflag: tar.TypeReg, Mode: 0o644, ModTime: tarEpoch, Format: tar.FormatUSTAR, Name: name, Size: size}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(h); err != nil || buf.Len() != block {
		// TarName keeps names short and ASCII, so this cannot happen.
		panic(fmt.Sprintf("layout: tar header for %q: %v (%d bytes)", h.Name, err, buf.Len()))
	}
	return buf.Bytes()
}

func (m *Members) writeRow(w *bytes.Buffer, i int) {
	s := m.Sample(i)
	cw := csv.NewWriter(w)
	row := []string{
		strconv.Itoa(i), strconv.Itoa(i / m.order.Params.Batch), m.cat.Key(s),
		m.cat.StratumName(m.cat.Stratum(s)), strconv.FormatInt(m.cat.Size(s), 10),
		strconv.FormatFloat(m.order.Params.Alpha, 'g', -1, 64),
	}
	if m.fields != nil {
		row = append(row, m.fields.Fields(s)...)
	}
	cw.Write(row)
	cw.Flush()
}

// fieldColumns names the field columns of index.csv: a field whose name is
// one of index.csv's own columns gets the prefix "field_".
func fieldColumns(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n
		if slices.Contains(strings.Split(strings.TrimSpace(csvHeader), ","), n) {
			out[i] = "field_" + n
		}
	}
	return out
}

// Name limits: every member name fits the 100-byte ustar name field, with
// room for a "~N" repeat suffix (N up to 10 digits) and the ".cls" sibling.
const (
	maxExt  = 16
	maxStem = 100 - 1 - maxExt - 11
)

// TarName maps a sample key to its tar member name, WebDataset-style:
//
//   - the extension is what follows the last '.' of the key's base name
//     ("bin" if there is none), with characters other than [A-Za-z0-9]
//     replaced by '_' and at most 16 of them; "cls" is the label member's,
//     so a payload with that extension gets "cls_" instead;
//   - the stem is the rest of the key; characters other than
//     [A-Za-z0-9_-/] become '_' — in particular '.' does, because WebDataset
//     splits a member name at the first '.' of its base name;
//   - a stem longer than 72 bytes is cut to 63 and gets '_' and 8 hex digits
//     of a hash of the whole key, so long keys stay distinct;
//   - in a rank-epoch, the n-th repeat of a stem (a recycled sample, or two
//     keys that sanitize alike) gets the suffix "~n"; '~' never occurs otherwise.
func TarName(key string) (stem, ext string) {
	base := key
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		base = key[i+1:]
	}
	stemPart := key
	ext = "bin"
	if i := strings.LastIndexByte(base, '.'); i > 0 && i < len(base)-1 {
		ext = base[i+1:]
		stemPart = key[:len(key)-len(base)+i]
	}
	ext = sanitize(ext, false)
	if len(ext) > maxExt {
		ext = ext[:maxExt]
	}
	if ext == "cls" {
		ext = "cls_" // the label member is <stem>.cls: no payload may share its name
	}
	stem = sanitize(stemPart, true)
	if len(stem) > maxStem {
		h := fnv.New32a()
		h.Write([]byte(key))
		stem = fmt.Sprintf("%s_%08x", stem[:maxStem-9], h.Sum32())
	}
	return stem, ext
}

func sanitize(s string, path bool) string {
	clean := true
	for i := 0; i < len(s) && clean; i++ {
		clean = keptByte(s[i], path)
	}
	if clean {
		return s // the common case, once per member per read: no allocation
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if c := s[i]; keptByte(c, path) {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// keptByte reports whether sanitize keeps c as it is.
func keptByte(c byte, path bool) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	case path && (c == '_' || c == '-' || c == '/'):
		return true
	}
	return false
}

// Offset is where member i starts in epoch.tar; Offset(Len()) is where the members end.
// The difference of two offsets is the bytes a reader consumes between them.
func (m *Members) Offset(i int) int64 { return m.off[i] }
