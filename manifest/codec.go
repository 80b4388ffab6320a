package manifest

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/shardfs/shardfs/verify"
)

// On-store layout:
//
//	header (40 bytes, little-endian):
//	  magic "SHFSMANI" | version u32 | flags u32 | body length u64 |
//	  payload length u64 | payload CRC32C u32 | header CRC32C u32 (of the 36 bytes before it)
//	payload: the zstd-compressed body (varints and length-prefixed strings).
const (
	magic      = "SHFSMANI"
	headerSize = 40
)

// Encode serializes m. Call Finish first.
func Encode(m *Manifest) ([]byte, error) {
	v := uint32(VersionLabels)
	if m.HasFields() {
		v = Version
		if !m.Samples.HasFields() {
			return nil, fmt.Errorf("manifest: dataset %s has fields %v but its samples carry no values", m.Name, m.Fields)
		}
	}
	if m.HasLineage() {
		v = VersionLineage
	}
	if m.HasRecords() {
		v = VersionRecords
		if m.Samples.recEnd == nil && len(m.Members) > 0 {
			return nil, fmt.Errorf("manifest: dataset %s has members %v but its samples carry no record tables", m.Name, m.Members)
		}
	}
	if m.HasLocalSegments() {
		v = VersionSegments
	}
	fieldColumn := m.Header.fieldColumn(v)
	return frame(magic, v, func(e *encoder) {
		e.uvarint(uint64(v))
		e.header(&m.Header, v)
		e.uvarint(uint64(len(m.Shards)))
		for _, sh := range m.Shards {
			e.uvarint(uint64(len(sh.Sums)))
			for _, v := range sh.Sums {
				e.u32(v)
			}
		}
		s := &m.Samples
		e.uvarint(uint64(s.Len()))
		e.uvarint(uint64(len(s.keys)))
		var prev []byte
		var prevShard uint32
		for i := 0; i < s.Len(); i++ {
			key := s.KeyBytes(i)
			shared := commonPrefix(prev, key)
			e.uvarint(uint64(shared))
			e.bytes(key[shared:])
			prev = key
			e.uvarint(uint64(s.Stratum[i]))
			e.uvarint(uint64(s.Shard[i] - prevShard))
			prevShard = s.Shard[i]
			e.uvarint(uint64(s.Size[i]))
			e.u32(s.Sum[i])
			if fieldColumn {
				e.str(s.FieldsJoined(i))
			}
			if len(m.Members) > 0 {
				e.bytes(s.Record(i))
			}
		}
	})
}

// frame writes a body with the header every shardfs metadata object
// carries: magic, format version, lengths, and CRC32C of the zstd payload
// and of the header itself.
//
// A body of at most smallFrame bytes (a small shard index, a group
// object, a small manifest) is gathered whole and compressed in one call
// by smallEncoder, whose few encoders live as long as the process. A
// larger one streams through an encoder of frameWriters. A streaming
// encoder per shard index, taken from a pool that every GC cycle emptied,
// held about 540 kB while it wrote an index of 120 kB: 8 at once raised a
// streaming ingest's most live heap from 9 to 13 MB (with the indexes
// built but not encoded, 9), and gathered whole they cut its peak RSS
// from 56 to 53 MB (1,000,000 short documents, --shard-size 512KiB; issue
// 59).
//
// Its encoders and buffers are reused: a fresh streaming encoder allocated
// and cleared its window on every call, which was a quarter of the CPU of
// describing 15 million shards in 14,554 group objects (plan --describe at
// ten billion samples: 12.5 of 59 s in zstd's ensureHist). A reused
// encoder writes what a fresh one of its kind writes.
func frame(magic string, version uint32, body func(e *encoder)) ([]byte, error) {
	if smallEncoderErr != nil {
		return nil, smallEncoderErr
	}
	fw := frameWriters.Get().(*frameWriter)
	defer frameWriters.Put(fw)
	sw := &fw.spill // its stream and payload were cleared when it was put back
	sw.small, sw.n = sw.small[:0], 0
	fw.bw.Reset(sw)
	body(&encoder{w: fw.bw})
	err := fw.bw.Flush()
	var payload []byte
	switch {
	case err != nil:
	case sw.zw == nil:
		payload = smallEncoder.EncodeAll(sw.small, make([]byte, 0, len(sw.small)/2+64))
	default:
		err = sw.zw.Close()
		payload = sw.payload.Bytes()
	}
	// The pooled writers hold no reference to this call's payload, which
	// may be megabytes, once they are back in the pool; a body buffer
	// grown past smallFrame is not kept.
	fw.bw.Reset(nil)
	if sw.zw != nil {
		sw.zw.Reset(nil)
		frameStreams.Put(sw.zw)
		sw.zw = nil
	}
	sw.payload = bytes.Buffer{}
	if cap(sw.small) > smallFrame {
		sw.small = nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]byte, headerSize, headerSize+len(payload))
	copy(out, magic)
	binary.LittleEndian.PutUint32(out[8:], version)
	binary.LittleEndian.PutUint64(out[16:], uint64(sw.n))
	binary.LittleEndian.PutUint64(out[24:], uint64(len(payload)))
	binary.LittleEndian.PutUint32(out[32:], verify.Sum(payload))
	binary.LittleEndian.PutUint32(out[36:], verify.Sum(out[:36]))
	return append(out, payload...), nil
}

// smallFrame is the largest body frame compresses in one call. The shard
// indexes of --shard-size 512KiB of short records have bodies of about
// 120 kB; those of 4MiB, about 430 kB, stream: gathered whole, 8 at once
// held their rows uncompressed, and a streaming ingest at 4MiB peaked 5
// MB higher than with them streamed (RSS, 3 runs each).
const smallFrame = 256 << 10

// frameWriter is frame's buffer and the body's destination.
type frameWriter struct {
	bw    *bufio.Writer
	spill spillWriter
}

// spillWriter gathers a body in small until it passes smallFrame, and then
// streams it, what it gathered first, through zw into payload.
type spillWriter struct {
	small   []byte
	zw      *zstd.Encoder
	payload bytes.Buffer
	n       int64 // the body's bytes
}

func (s *spillWriter) Write(p []byte) (int, error) {
	s.n += int64(len(p))
	if s.zw == nil && len(s.small)+len(p) <= smallFrame {
		s.small = append(s.small, p...)
		return len(p), nil
	}
	if s.zw == nil {
		if zw, ok := frameStreams.Get().(*zstd.Encoder); ok {
			zw.Reset(&s.payload)
			s.zw = zw
		} else {
			zw, err := newFrameEncoder(&s.payload)
			if err != nil {
				return 0, err
			}
			s.zw = zw
		}
		if _, err := s.zw.Write(s.small); err != nil {
			return 0, err
		}
		s.small = s.small[:0]
	}
	return s.zw.Write(p)
}

// frameWindow is the zstd window of metadata objects. Their matches are
// near (a row's key shares a prefix with the row before it), and the
// default window of 8 MiB was allocated afresh each time a GC cycle
// emptied frameWriters: 128 MB of a 100,000-record streaming ingest's
// 1.3 GB of allocations, for objects of a few kB.
const frameWindow = 1 << 20

func newFrameEncoder(w io.Writer) (*zstd.Encoder, error) {
	return zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithWindowSize(frameWindow), zstd.WithLowerEncoderMem(true))
}

// smallEncoder compresses bodies of at most smallFrame bytes in one call
// (EncodeAll), with newFrameEncoder's options but its window, and one
// encoder: calls at once take turns.
//
// Its window is smallWindow: an encoder holds about twice its window (its
// history) and a table of 256 kB, and two with frameWindow's 1 MiB held
// 2.8 MB for as long as the process, a fifth of a streaming ingest's live
// heap. Bodies that small find their matches near anyway.
//
// It had two encoders. The second is made the first time two bodies are
// compressed at once, as a stream's shard indexes are written (8 at
// once), which a short source seldom meets and a long one always does:
// 0.5 MB of live heap, and 1.5 MB of the peak RSS of 1,000,000 WebDataset
// records at --shard-size 512KiB (41.1 -> 39.6 MB, medians of 4, file://
// stores on tmpfs), for 3% more CPU. A body of 120 kB takes a fraction of
// a millisecond to compress; the index's upload takes longer.
var smallEncoder, smallEncoderErr = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithWindowSize(smallWindow), zstd.WithLowerEncoderMem(true), zstd.WithEncoderConcurrency(1))

// smallWindow is smallEncoder's zstd window.
const smallWindow = 128 << 10

var (
	frameWriters = sync.Pool{New: func() any { return &frameWriter{bw: bufio.NewWriterSize(nil, 64<<10)} }}
	frameStreams sync.Pool // of *zstd.Encoder, newFrameEncoder's, for bodies over smallFrame
)

func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

type encoder struct {
	w   *bufio.Writer
	buf [binary.MaxVarintLen64]byte
}

// header writes h: the part of a manifest every format shares. Format
// version v >= Version adds the fields and derived label fields, v >=
// VersionLineage the segments and versions (lineage.go).
func (e *encoder) header(h *Header, v uint32) {
	e.str(h.Name)
	e.str(h.IngestID)
	e.uvarint(uint64(h.CreatedUnix))
	e.uvarint(h.Seed)
	e.uvarint(uint64(h.Data))
	e.uvarint(uint64(h.Parity))
	e.uvarint(uint64(h.BlockSize))
	e.uvarint(uint64(h.ShardSize))
	e.strs(h.Stores)
	e.strs(h.LabelFields)
	e.uvarint(uint64(len(h.Strata)))
	for _, st := range h.Strata {
		e.str(st.Name)
		e.strs(st.Labels)
	}
	if v < Version {
		return
	}
	defer func() {
		if v >= VersionLineage {
			e.lineage(h)
		}
		if v >= VersionRecords {
			e.records(h)
		}
		if v >= VersionSegments {
			e.numbering(h)
		}
	}()
	e.strs(h.Fields)
	e.uvarint(uint64(len(h.Derived)))
	for _, d := range h.Derived {
		e.str(d.Field)
		e.uvarint(uint64(d.Width))
		e.uvarint(uint64(len(d.Edges)))
		for _, x := range d.Edges {
			e.w.Write(binary.LittleEndian.AppendUint64(e.buf[:0], math.Float64bits(x)))
		}
	}
}

func (e *encoder) uvarint(v uint64) { e.w.Write(binary.AppendUvarint(e.buf[:0], v)) }
func (e *encoder) u32(v uint32)     { e.w.Write(binary.LittleEndian.AppendUint32(e.buf[:0], v)) }
func (e *encoder) bytes(b []byte)   { e.uvarint(uint64(len(b))); e.w.Write(b) }
func (e *encoder) str(s string)     { e.uvarint(uint64(len(s))); e.w.WriteString(s) }

// sparse writes the strata below strata for which keep holds, with
// value(c) each, as their number and then (stratum delta, value) pairs,
// strata ascending: how a top-level manifest, a root and a group object
// store a row of counts or of differences.
func (e *encoder) sparse(strata int, keep func(c int) bool, value func(c int) uint64) {
	n := 0
	for c := range strata {
		if keep(c) {
			n++
		}
	}
	e.uvarint(uint64(n))
	prev := 0
	for c := range strata {
		if keep(c) {
			e.uvarint(uint64(c - prev))
			e.uvarint(value(c))
			prev = c
		}
	}
}

func (e *encoder) strs(ss []string) {
	e.uvarint(uint64(len(ss)))
	for _, s := range ss {
		e.str(s)
	}
}

// Decode parses and validates a manifest. Every failure wraps ErrCorrupt
// and says what is wrong; corrupt input never panics and never makes it
// allocate more than a small multiple of the stated, checksummed body size.
func Decode(b []byte) (*Manifest, error) {
	var m *Manifest
	err := unframe(b, magic, VersionLabels, VersionSegments, "a shardfs manifest", func(r io.Reader, bodyLen int64, v uint32) (err error) {
		m, err = decodeBody(r, bodyLen, v)
		return err
	})
	return m, err
}

// unframe checks the header and checksums frame wrote and hands the
// decompressed body, and its format version (oldest..newest), to body.
func unframe(b []byte, magic string, oldest, newest uint32, what string, body func(r io.Reader, bodyLen int64, v uint32) error) error {
	if len(b) < headerSize {
		return fmt.Errorf("%w: %d bytes, shorter than the %d-byte header (truncated?)", ErrCorrupt, len(b), headerSize)
	}
	if string(b[:8]) != magic {
		return fmt.Errorf("%w: bad magic: not %s", ErrCorrupt, what)
	}
	if !verify.Bytes(b[:36], binary.LittleEndian.Uint32(b[36:])) {
		return fmt.Errorf("%w: header checksum mismatch", ErrCorrupt)
	}
	version := binary.LittleEndian.Uint32(b[8:])
	if version < oldest || version > newest {
		return fmt.Errorf("%w: format version %d, this shardfs reads versions %d to %d: upgrade shardfs", ErrCorrupt, version, oldest, newest)
	}
	bodyLen := binary.LittleEndian.Uint64(b[16:])
	payloadLen := binary.LittleEndian.Uint64(b[24:])
	if payloadLen != uint64(len(b)-headerSize) {
		return fmt.Errorf("%w: payload is %d bytes, header says %d (truncated?)", ErrCorrupt, len(b)-headerSize, payloadLen)
	}
	if bodyLen > 1<<40 {
		return fmt.Errorf("%w: body of %d bytes", ErrCorrupt, bodyLen)
	}
	payload := b[headerSize:]
	if !verify.Bytes(payload, binary.LittleEndian.Uint32(b[32:])) {
		return fmt.Errorf("%w: payload checksum mismatch", ErrCorrupt)
	}
	if bodyLen <= smallBody {
		// A shard index or a small manifest: one shared decoder, no
		// per-call windows and goroutines (a fresh streaming decoder cost
		// about 5 MB of allocations per shard index).
		out, err := smallDecoder.DecodeAll(payload, make([]byte, 0, bodyLen))
		if err != nil {
			return fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		return body(bytes.NewReader(out[:min(uint64(len(out)), bodyLen)]), int64(bodyLen), version)
	}
	zr, err := zstd.NewReader(bytes.NewReader(payload), zstd.WithDecoderConcurrency(2), zstd.WithDecoderMaxMemory(1<<34))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	defer zr.Close()
	return body(io.LimitReader(zr, int64(bodyLen)), int64(bodyLen), version)
}

// smallBody is the largest body decoded whole by smallDecoder.
const smallBody = 16 << 20

// smallDecoder decodes small bodies for every caller at once; a payload
// that would decompress past its memory bound is an error, not an
// allocation.
var smallDecoder, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(smallBody+1<<20))

// decodeBody parses a body of bodyLen bytes from r.
func decodeBody(r io.Reader, bodyLen int64, version uint32) (*Manifest, error) {
	d := newDecoder(r, bodyLen)
	m := &Manifest{}
	if v := d.uvarint(); d.err == nil && v != uint64(version) {
		return nil, fmt.Errorf("%w: body version %d in a version %d frame", ErrCorrupt, v, version)
	}
	m.FormatVersion = int(version)
	d.header(&m.Header, version)
	n := d.count(1)
	m.Shards = make([]Shard, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		ns := d.count(4)
		sums := make([]uint32, 0, ns)
		for j := 0; j < ns && d.err == nil; j++ {
			sums = append(sums, d.u32())
		}
		m.Shards = append(m.Shards, Shard{Sums: sums})
	}
	n = d.count(8) // a sample takes at least 8 bytes
	s := &m.Samples
	s.keyEnd = make([]uint64, 0, n)
	s.Stratum = make([]uint32, 0, n)
	s.Shard = make([]uint32, 0, n)
	s.Size = make([]uint32, 0, n)
	s.Sum = make([]uint32, 0, n)
	fieldColumn := m.Header.fieldColumn(version)
	if fieldColumn {
		s.fieldEnd = make([]uint64, 0, n)
	}
	records := len(m.Members) > 0
	if records {
		s.recEnd = make([]uint64, 0, n)
	}
	// Keys are front-coded, so their total may exceed the body; the
	// preallocation is still capped by the body size against corrupt totals.
	s.keys = make([]byte, 0, min(d.uvarint(), uint64(4*d.left+1<<20)))
	var shard uint64
	prevStart := 0
	for i := 0; i < n && d.err == nil; i++ {
		// Compared as read: a value past 2^63 would turn negative as an int.
		shared := d.uvarint()
		if prevLen := len(s.keys) - prevStart; shared > uint64(prevLen) {
			d.fail("sample %d shares %d key bytes with a %d-byte key", i, shared, prevLen)
			break
		}
		start := len(s.keys)
		s.keys = append(s.keys, s.keys[prevStart:prevStart+int(shared)]...)
		s.keys = d.appendBytes(s.keys)
		prevStart = start
		s.keyEnd = append(s.keyEnd, uint64(len(s.keys)))
		st := d.uvarint()
		shard += d.uvarint()
		size := d.uvarint()
		if st >= uint64(len(m.Strata)) || shard >= uint64(len(m.Shards)) || size > MaxShardSize {
			d.fail("sample %d: stratum %d, shard %d or size %d out of range", i, st, shard, size)
			break
		}
		s.Stratum = append(s.Stratum, uint32(st))
		s.Shard = append(s.Shard, uint32(shard))
		s.Size = append(s.Size, uint32(size))
		s.Sum = append(s.Sum, d.u32())
		if fieldColumn {
			s.fieldVals = d.appendBytes(s.fieldVals)
			s.fieldEnd = append(s.fieldEnd, uint64(len(s.fieldVals)))
		}
		if records {
			at := len(s.recs)
			s.recs = d.appendBytes(s.recs)
			s.recEnd = append(s.recEnd, uint64(len(s.recs)))
			if err := m.Header.checkRecord(s.recs[at:], int64(size)); err != nil && d.err == nil {
				d.fail("sample %d: %v", i, err)
			}
		}
	}
	if d.err == nil && d.left != 0 {
		d.fail("%d trailing bytes", d.left)
	}
	if d.err != nil {
		return nil, d.err
	}
	if err := m.Finish(); err != nil {
		return nil, err
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m, nil
}

// decoder reads the body with a sticky error and a byte budget that bounds
// every count, so corrupt lengths cannot cause huge allocations.
type decoder struct {
	r    *bufio.Reader
	left int64
	err  error
}

func newDecoder(r io.Reader, bodyLen int64) *decoder {
	return &decoder{r: bufio.NewReaderSize(r, int(min(1<<20, max(4<<10, bodyLen)))), left: bodyLen}
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, err := binary.ReadUvarint(d)
	if err != nil {
		// ReadUvarint returns a partial value with its error: never use it.
		d.fail("truncated body: %v", err)
		return 0
	}
	return v
}

// ReadByte lets binary.ReadUvarint consume from the budget.
func (d *decoder) ReadByte() (byte, error) {
	if d.left <= 0 {
		return 0, io.ErrUnexpectedEOF
	}
	c, err := d.r.ReadByte()
	if err == nil {
		d.left--
	} else if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return c, err
}

func (d *decoder) u32() uint32 {
	var v uint32
	for i := 0; i < 4; i++ {
		c, err := d.ReadByte()
		if err != nil {
			d.fail("truncated body")
			return 0
		}
		v |= uint32(c) << (8 * i)
	}
	return v
}

func (d *decoder) read(p []byte) {
	if d.err != nil {
		return
	}
	if int64(len(p)) > d.left {
		d.fail("truncated body")
		return
	}
	if _, err := io.ReadFull(d.r, p); err != nil {
		d.fail("truncated body: %v", err)
		return
	}
	d.left -= int64(len(p))
}

// count reads an element count, each element taking at least minBytes.
func (d *decoder) count(minBytes int64) int {
	v := d.uvarint()
	if d.err != nil {
		return 0
	}
	if v > uint64(d.left/minBytes) {
		d.fail("count %d exceeds the remaining %d bytes", v, d.left)
		return 0
	}
	return int(v)
}

// sparse reads what encoder.sparse wrote, for what idx (as "shard 7"):
// strata must ascend and lie below strata, and take(c, v) must accept
// each value, or the decoder fails naming the stratum.
func (d *decoder) sparse(what string, idx, strata int, take func(c int, v uint64) bool) {
	k := d.count(2)
	c := uint64(0)
	for i := 0; i < k && d.err == nil; i++ {
		delta, v := d.uvarint(), d.uvarint()
		c += delta
		switch {
		case d.err != nil:
		case i > 0 && delta == 0:
			d.fail("%s %d: stratum %d listed twice", what, idx, c)
		case c >= uint64(strata):
			d.fail("%s %d: stratum %d of %d", what, idx, c, strata)
		case !take(int(c), v):
			d.fail("%s %d: stratum %d: %d out of range", what, idx, c, v)
		}
	}
}

func (d *decoder) small(what string, max uint64) int {
	v := d.uvarint()
	if d.err != nil {
		return 0
	}
	if v > max {
		d.fail("%s %d exceeds %d", what, v, max)
		return 0
	}
	return int(v)
}

func (d *decoder) appendBytes(dst []byte) []byte {
	n := d.count(1)
	if d.err != nil {
		return dst
	}
	start := len(dst)
	dst = slices.Grow(dst, n)[:start+n]
	d.read(dst[start:])
	return dst
}

func (d *decoder) str() string { return string(d.appendBytes(nil)) }

func (d *decoder) strs() []string {
	n := d.count(1)
	out := make([]string, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		out = append(out, d.str())
	}
	return out
}

// header reads what encoder.header wrote for format version v into h.
func (d *decoder) header(h *Header, v uint32) {
	h.Name = d.str()
	h.IngestID = d.str()
	h.CreatedUnix = int64(d.uvarint())
	h.Seed = d.uvarint()
	h.Data = d.small("data fragments", 256)
	h.Parity = d.small("parity fragments", 256)
	h.BlockSize = d.small("block size", 1<<20)
	h.ShardSize = int64(d.small("shard size", MaxShardSize))
	h.Stores = d.strs()
	h.LabelFields = d.strs()
	n := d.count(2)
	h.Strata = make([]Stratum, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		h.Strata = append(h.Strata, Stratum{Name: d.str(), Labels: d.strs()})
	}
	if v < Version {
		return
	}
	h.Fields = d.strs()
	n = d.count(3)
	h.Derived = make([]Derived, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		x := Derived{Field: d.str(), Width: int64(d.small("bucket width", 1<<62))}
		ne := d.count(8)
		for j := 0; j < ne && d.err == nil; j++ {
			var b [8]byte
			d.read(b[:])
			x.Edges = append(x.Edges, math.Float64frombits(binary.LittleEndian.Uint64(b[:])))
		}
		h.Derived = append(h.Derived, x)
	}
	if v >= VersionLineage {
		d.lineage(h)
	}
	if v >= VersionRecords {
		d.records(h)
	}
	if v >= VersionSegments {
		d.numbering(h)
	}
	if d.err == nil {
		if err := h.validateFields(); err != nil {
			d.fail("%v", err)
		}
	}
}

// fieldColumn reports whether a format-1 manifest of frame version v keeps
// a field value per sample: always in Version, and in VersionLineage when
// the dataset has fields.
func (h *Header) fieldColumn(v uint32) bool {
	return v == Version || v >= VersionLineage && h.HasFields()
}

// rawBody returns the decompressed body of an encoded manifest, for tests and tools.
func rawBody(b []byte) ([]byte, error) {
	if len(b) < headerSize {
		return nil, ErrCorrupt
	}
	zr, err := zstd.NewReader(bytes.NewReader(b[headerSize:]))
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	return io.ReadAll(zr)
}
