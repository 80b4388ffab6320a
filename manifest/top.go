package manifest

import (
	"fmt"
	"io"
	"slices"

	"github.com/shardfs/shardfs/verify"
)

// Format 2 splits a dataset's description in two, so that what a node
// holds scales with what it reads, not with the dataset:
//
//   - the top-level manifest (Top) holds what every node needs: erasure
//     parameters, stores, strata, and per shard its size, its sample count,
//     its count per stratum and the size and checksum of its index. That is
//     kilobytes to tens of megabytes, and it is enough to compute the order
//     (layout.NewCountInputFunc): within a shard, samples are stored
//     stratum by stratum, so stratum c's k-th member is found from the
//     per-shard counts alone.
//   - a per-shard index (ShardIndex) holds the shard's block checksums and
//     its samples' keys, sizes and checksums. A node fetches and verifies
//     it when it first needs the shard.
//
// Both are framed like a format-1 manifest (magic, version, lengths,
// CRC32C of header and payload, zstd body), and decoding never trusts a
// length before the checksummed bytes can hold it.

// TopVersion is the format of the top-level manifest and the shard
// indexes of a dataset without fields; TopVersionFields adds the fields
// (Header.Fields, Header.Derived, ShardIndex.Fields).
// TopVersionLineage adds the lineage (lineage.go) to the top-level
// manifest; the shard indexes stay in the first two.
// TopVersionRecords adds the records (records.go) to both, and a record
// table per sample to the shard indexes.
const (
	TopVersion        = 2
	TopVersionFields  = 3
	TopVersionLineage = 4
	TopVersionRecords = 5
	// TopVersionSegments: a lineage with a Local segment (VersionSegments).
	TopVersionSegments = 6
)

// topVersion is the format t is written in.
func (h *Header) topVersion() uint32 {
	if h.HasLocalSegments() {
		return TopVersionSegments
	}
	if h.HasRecords() {
		return TopVersionRecords
	}
	if h.HasLineage() {
		return TopVersionLineage
	}
	return h.indexVersion()
}

// indexVersion is the format of a shard index of a dataset with header h.
func (h *Header) indexVersion() uint32 {
	if h.HasRecords() {
		return TopVersionRecords
	}
	if h.HasFields() {
		return TopVersionFields
	}
	return TopVersion
}

// headerVersion maps a format-2 frame version to the header's.
func headerVersion(v uint32) uint32 {
	switch {
	case v >= TopVersionSegments:
		return VersionSegments
	case v >= TopVersionRecords:
		return VersionRecords
	case v >= TopVersionLineage:
		return VersionLineage
	case v >= TopVersionFields:
		return Version
	}
	return VersionLabels
}

const (
	topMagic   = "SHFSTOP2"
	indexMagic = "SHFSIDX2"
)

// Top is the top-level manifest of format 2.
type Top struct {
	Header
	Shards []TopShard
	shardCounts
}

// shardCounts holds the class counts of a run of shards, in two arenas: a
// shard whose counts fit 16 bits and cover at least a third of the strata
// keeps a dense row in dense[denseAt[s]:][:strata] (2 bytes a stratum);
// any other keeps its nonzero counts as (stratum, count) pairs, strata
// ascending, in pairs[pairAt[s]:pairAt[s+1]] (8 bytes a stratum present).
type shardCounts struct {
	dense   []uint16
	denseAt []int // -1: the shard's counts are pairs
	pairs   []uint32
	pairAt  []int
}

// TopShard is one shard in the top-level manifest.
type TopShard struct {
	Size       int64  // payload bytes
	NumSamples int    // samples in the shard
	IndexSize  int64  // bytes of its index object
	IndexSum   uint32 // CRC32C of its index object
}

// SetCounts records shard s's samples per stratum (len(counts): the
// strata); shards must be set in order 0, 1, 2, ...
func (t *shardCounts) SetCounts(s int, counts []int) {
	if len(t.pairAt) == 0 {
		t.pairAt = append(t.pairAt, 0)
	}
	if s != len(t.denseAt) {
		panic(fmt.Sprintf("manifest: SetCounts for shard %d after %d shards", s, len(t.denseAt)))
	}
	nonzero, small := 0, true
	for _, n := range counts {
		if n > 0 {
			nonzero++
		}
		small = small && n <= 0xffff
	}
	if small && 3*nonzero >= len(counts) {
		t.denseAt = append(t.denseAt, len(t.dense))
		for _, n := range counts {
			t.dense = append(t.dense, uint16(n))
		}
	} else {
		t.denseAt = append(t.denseAt, -1)
		for c, n := range counts {
			if n > 0 {
				t.pairs = append(t.pairs, uint32(c), uint32(n))
			}
		}
	}
	t.pairAt = append(t.pairAt, len(t.pairs))
}

// Counts writes shard s's samples per stratum into row (len(row): the strata).
func (t *shardCounts) Counts(s int, row []int) {
	if at := t.denseAt[s]; at >= 0 {
		for c, n := range t.dense[at : at+len(row)] {
			row[c] = int(n)
		}
		return
	}
	clear(row)
	for i := t.pairAt[s]; i < t.pairAt[s+1]; i += 2 {
		row[t.pairs[i]] = int(t.pairs[i+1])
	}
}

// Samples is the dataset's number of samples.
func (t *Top) Samples() int {
	n := 0
	for _, sh := range t.Shards {
		n += sh.NumSamples
	}
	return n
}

// EncodeTop serializes t.
func EncodeTop(t *Top) ([]byte, error) {
	if len(t.denseAt) != len(t.Shards) {
		return nil, fmt.Errorf("manifest: counts of %d shards set, %d shards", len(t.denseAt), len(t.Shards))
	}
	row := make([]int, len(t.Strata))
	v := t.topVersion()
	return frame(topMagic, v, func(e *encoder) {
		e.header(&t.Header, headerVersion(v))
		e.uvarint(uint64(len(t.Shards)))
		for s, sh := range t.Shards {
			e.uvarint(uint64(sh.Size))
			e.uvarint(uint64(sh.IndexSize))
			e.u32(sh.IndexSum)
			t.Counts(s, row)
			e.sparse(len(row), func(c int) bool { return row[c] > 0 }, func(c int) uint64 { return uint64(row[c]) })
		}
	})
}

// DecodeTop parses and checks a top-level manifest: every failure wraps
// ErrCorrupt, and stratum totals, shard sizes and sample counts must agree.
func DecodeTop(b []byte) (*Top, error) {
	var t *Top
	err := unframe(b, topMagic, TopVersion, TopVersionSegments, "a shardfs top-level manifest", func(r io.Reader, bodyLen int64, v uint32) error {
		d := newDecoder(r, bodyLen)
		t = &Top{}
		d.header(&t.Header, headerVersion(v))
		n := d.count(7)
		t.Shards = make([]TopShard, 0, n)
		// A dense row of 2·C bytes holds at least C/3 listed strata of 2 or
		// more body bytes each, so 3× the body bounds the dense arena.
		limit := int(3 * bodyLen)
		if c := len(t.Strata); c > 0 && n <= limit/c {
			limit = n * c
		}
		t.dense = make([]uint16, 0, limit)
		row := make([]int, len(t.Strata))
		for s := 0; s < n && d.err == nil; s++ {
			sh := TopShard{Size: int64(d.small("shard size", MaxShardSize)), IndexSize: int64(d.uvarint()), IndexSum: d.u32()}
			clear(row)
			d.sparse("shard", s, len(t.Strata), func(c int, n uint64) bool {
				if n == 0 || n > MaxShardSize {
					return false
				}
				sh.NumSamples += int(n)
				t.Strata[c].Count += int(n)
				row[c] = int(n)
				return true
			})
			if sh.NumSamples > int(max(sh.Size, 0)) {
				d.fail("shard %d: %d samples in %d bytes", s, sh.NumSamples, sh.Size)
			}
			t.Shards = append(t.Shards, sh)
			t.SetCounts(s, row)
		}
		if d.err == nil && d.left != 0 {
			d.fail("%d trailing bytes", d.left)
		}
		return d.err
	})
	if err != nil {
		return nil, err
	}
	if t.Data < 1 || len(t.Stores) != t.Data+t.Parity || t.BlockSize < 1 {
		return nil, fmt.Errorf("%w: RS(%d,%d) over %d stores, block size %d", ErrCorrupt, t.Data, t.Parity, len(t.Stores), t.BlockSize)
	}
	if err := t.validateLineage(len(t.Shards)); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return t, nil
}

// ShardIndex is one shard's index: its block checksums and its samples'
// rows, in the shard's order (stratum by stratum; offsets are the running
// sum of sizes).
type ShardIndex struct {
	Shard   int
	Sums    []uint32 // block checksums, fragment-major (see erasure.Shard)
	Keys    []string
	Stratum []uint32
	Size    []uint32
	Sum     []uint32 // CRC32C of each sample's bytes
	// Fields are each sample's field values joined by FieldSep; nil when
	// the dataset has no fields.
	Fields []string
	// Records are each sample's record table (records.go); nil when the
	// samples are not records.
	Records [][]byte
}

// EncodeIndex serializes x.
func EncodeIndex(x *ShardIndex) ([]byte, error) {
	n := len(x.Keys)
	if len(x.Stratum) != n || len(x.Size) != n || len(x.Sum) != n || x.Fields != nil && len(x.Fields) != n || x.Records != nil && len(x.Records) != n {
		return nil, fmt.Errorf("manifest: shard %d index columns of %d, %d, %d, %d, %d and %d rows", x.Shard, n, len(x.Stratum), len(x.Size), len(x.Sum), len(x.Fields), len(x.Records))
	}
	return encodeIndex(x.Shard, x.Sums, n, x.Fields != nil, x.Records != nil, func(i int) indexRow {
		r := indexRow{key: x.Keys[i], stratum: x.Stratum[i], size: x.Size[i], sum: x.Sum[i]}
		if x.Fields != nil {
			r.fields = x.Fields[i]
		}
		if x.Records != nil {
			r.record = x.Records[i]
		}
		return r
	})
}

// EncodeShardIndexOf is EncodeIndex(ShardIndexOf(m, si)) with the index's
// Shard number shard, written from m's rows as they are: the index is not
// built whole first (a copy of every key, field and record of the shard,
// which a streaming ingest held for each shard of a chunk at once).
func EncodeShardIndexOf(m *Manifest, si, shard int) ([]byte, error) {
	sh := m.Shards[si]
	first, n := sh.FirstSample, sh.NumSamples
	// As ShardIndexOf's columns are nil in a shard of no samples.
	return encodeIndex(shard, sh.Sums, n, m.Samples.HasFields() && n > 0, len(m.Members) > 0 && n > 0, func(i int) indexRow {
		j := first + i
		r := indexRow{key: m.Samples.Key(j), stratum: m.Samples.Stratum[j], size: m.Samples.Size[j], sum: m.Samples.Sum[j]}
		if m.Samples.HasFields() {
			r.fields = m.Samples.FieldsJoined(j)
		}
		if len(m.Members) > 0 {
			r.record = m.Samples.Record(j)
		}
		return r
	})
}

// indexRow is a shard index's row as encodeIndex writes it.
type indexRow struct {
	key                string
	stratum, size, sum uint32
	fields             string
	record             []byte
}

// encodeIndex writes a shard index of n rows, row(i) each.
func encodeIndex(shard int, sums []uint32, n int, fields, records bool, row func(i int) indexRow) ([]byte, error) {
	v := uint32(TopVersion)
	if fields {
		v = TopVersionFields
	}
	if records {
		v = TopVersionRecords
	}
	return frame(indexMagic, v, func(e *encoder) {
		if v >= TopVersionRecords {
			fieldsColumn := uint64(0) // 1: a fields column
			if fields && n > 0 {
				fieldsColumn = 1
			}
			e.uvarint(fieldsColumn)
		}
		e.uvarint(uint64(shard))
		e.uvarint(uint64(len(sums)))
		for _, v := range sums {
			e.u32(v)
		}
		e.uvarint(uint64(n))
		prev := ""
		for i := range n {
			r := row(i)
			shared := commonPrefix([]byte(prev), []byte(r.key))
			e.uvarint(uint64(shared))
			e.str(r.key[shared:])
			prev = r.key
			e.uvarint(uint64(r.stratum))
			e.uvarint(uint64(r.size))
			e.u32(r.sum)
			if v == TopVersionFields || v >= TopVersionRecords && fields {
				e.str(r.fields)
			}
			if v >= TopVersionRecords {
				e.bytes(r.record)
			}
		}
	})
}

// DecodeIndex parses shard's index and checks it against the top-level
// manifest: the shard it names, its sample count and bytes, strata stored
// stratum by stratum with the counts Top gives, and (k+m)·blocks
// checksums. Every failure wraps ErrCorrupt.
func DecodeIndex(b []byte, t *Top, shard int) (*ShardIndex, error) {
	if shard < 0 || shard >= len(t.Shards) {
		return nil, fmt.Errorf("shard %d of %d", shard, len(t.Shards))
	}
	row := make([]int, len(t.Strata))
	t.Counts(shard, row)
	return DecodeShardIndex(b, &t.Header, shard, t.Shards[shard], row)
}

// DecodeShardIndex is DecodeIndex against what a dataset's manifest says
// of the shard: its size and sample count (want) and its count per stratum
// (counts, which it takes). Format 3 reads them from the shard's group
// object.
func DecodeShardIndex(b []byte, h *Header, shard int, want TopShard, counts []int) (*ShardIndex, error) {
	t := h
	x := &ShardIndex{}
	// A segment's own ids, mapped to the dataset's as they are read.
	var strata, members []uint32
	if seg, _ := h.segmentOf(shard); seg != nil {
		strata, members = seg.Strata, seg.Members
	}
	err := unframe(b, indexMagic, TopVersion, TopVersionRecords, "a shardfs shard index", func(r io.Reader, bodyLen int64, v uint32) error {
		if v != t.indexVersion() {
			return fmt.Errorf("%w: shard %d index: format %d in a dataset whose indexes are format %d", ErrCorrupt, shard, v, t.indexVersion())
		}
		d := newDecoder(r, bodyLen)
		fields := v == TopVersionFields
		if v >= TopVersionRecords {
			fields = d.uvarint() == 1
			if fields != t.HasFields() {
				d.fail("a fields column %v in a dataset with fields %v", fields, t.HasFields())
			}
		}
		x.Shard = int(d.uvarint())
		ns := d.count(4)
		x.Sums = make([]uint32, 0, ns)
		for i := 0; i < ns && d.err == nil; i++ {
			x.Sums = append(x.Sums, d.u32())
		}
		n := d.count(7)
		x.Keys = make([]string, 0, n)
		x.Stratum = make([]uint32, 0, n)
		x.Size = make([]uint32, 0, n)
		x.Sum = make([]uint32, 0, n)
		if fields {
			x.Fields = make([]string, 0, n)
		}
		if v >= TopVersionRecords {
			x.Records = make([][]byte, 0, n)
		}
		var key []byte
		for i := 0; i < n && d.err == nil; i++ {
			// Compared as read: a value past 2^63 would turn negative as an int.
			shared := d.uvarint()
			if shared > uint64(len(key)) {
				d.fail("sample %d shares %d key bytes with a %d-byte key", i, shared, len(key))
				break
			}
			key = d.appendBytes(key[:shared])
			x.Keys = append(x.Keys, string(key))
			c := uint32(min(d.uvarint(), 1<<32-1))
			if strata != nil {
				if int64(c) >= int64(len(strata)) {
					d.fail("sample %d: stratum %d of a segment that maps %d", i, c, len(strata))
					break
				}
				c = strata[c]
			}
			x.Stratum = append(x.Stratum, c)
			x.Size = append(x.Size, uint32(min(d.uvarint(), MaxShardSize+1)))
			x.Sum = append(x.Sum, d.u32())
			if fields {
				x.Fields = append(x.Fields, d.str())
			}
			if v >= TopVersionRecords {
				table := d.appendBytes(nil)
				if members != nil && d.err == nil {
					var err error
					if table, err = mapMembers(table, members); err != nil {
						d.fail("sample %d: %v", i, err)
						break
					}
				}
				x.Records = append(x.Records, table)
				if err := t.checkRecord(x.Records[i], int64(x.Size[i])); err != nil && d.err == nil {
					d.fail("sample %d: %v", i, err)
				}
			}
		}
		if d.err == nil && d.left != 0 {
			d.fail("%d trailing bytes", d.left)
		}
		return d.err
	})
	if err != nil {
		return nil, err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: shard %d index: %s", ErrCorrupt, shard, fmt.Sprintf(format, args...))
	}
	if _, n := t.ShardObject(shard); x.Shard != n {
		return nil, bad("it names shard %d, its objects are numbered %d", x.Shard, n)
	}
	if len(x.Keys) != want.NumSamples {
		return nil, bad("%d samples, the manifest says %d", len(x.Keys), want.NumSamples)
	}
	row := counts
	if len(row) != len(t.Strata) {
		return nil, fmt.Errorf("shard %d index: counts of %d strata, the dataset has %d", shard, len(row), len(t.Strata))
	}
	var size int64
	for i := range x.Keys {
		c := x.Stratum[i]
		if int(c) >= len(t.Strata) || i > 0 && c < x.Stratum[i-1] {
			return nil, bad("sample %d: stratum %d out of order or range", i, c)
		}
		row[c]--
		size += int64(x.Size[i])
	}
	if slices.ContainsFunc(row, func(n int) bool { return n != 0 }) {
		return nil, bad("its strata do not match the manifest's counts")
	}
	if size != want.Size {
		return nil, bad("samples of %d bytes, the manifest says %d", size, want.Size)
	}
	frag := (want.Size + int64(t.Data) - 1) / int64(t.Data)
	blocks := (frag + int64(t.BlockSize) - 1) / int64(t.BlockSize)
	if int64(len(x.Sums)) != int64(t.Data+t.Parity)*blocks {
		return nil, bad("%d block checksums, want %d", len(x.Sums), int64(t.Data+t.Parity)*blocks)
	}
	return x, nil
}

// EncodeStored encodes m in the format it is stored in: its root when
// m.Root is set (format 3), its top-level manifest when m.Top is (format
// 2), else format 1.
func EncodeStored(m *Manifest) ([]byte, error) {
	if m.Root != nil {
		return EncodeRoot(m.Root)
	}
	if m.Top != nil {
		return EncodeTop(m.Top)
	}
	return Encode(m)
}

// IsTop reports whether b is framed as a top-level manifest.
func IsTop(b []byte) bool { return len(b) >= 8 && string(b[:8]) == topMagic }

// IndexSum is the checksum Top keeps of an encoded shard index.
func IndexSum(b []byte) uint32 { return verify.Sum(b) }

// Manifest is the manifest of t without its samples: what choosing among
// the stores' copies needs, and each shard's size and samples (numbered
// shard by shard). Expand fills in the rest.
func (t *Top) Manifest() *Manifest {
	h := t.Header
	h.Strata = slices.Clone(t.Strata)
	m := &Manifest{FormatVersion: int(t.topVersion()), Header: h, Top: t}
	m.Shards = make([]Shard, len(t.Shards))
	first := 0
	for s, sh := range t.Shards {
		m.Shards[s] = Shard{Size: sh.Size, FirstSample: first, NumSamples: sh.NumSamples}
		first += sh.NumSamples
	}
	return m
}

// NewTop describes m in format 2, with its shards' encoded indexes of the
// given sizes and checksums. m's samples must be stored stratum by stratum
// within each shard (the order ingest writes format 2 in).
func NewTop(m *Manifest, indexSize []int64, indexSum []uint32) (*Top, error) {
	if len(indexSize) != len(m.Shards) || len(indexSum) != len(m.Shards) {
		return nil, fmt.Errorf("manifest: %d and %d index references for %d shards", len(indexSize), len(indexSum), len(m.Shards))
	}
	t := &Top{Header: m.Header}
	t.Strata = slices.Clone(m.Strata)
	row := make([]int, len(m.Strata))
	for si, sh := range m.Shards {
		clear(row)
		for j := sh.FirstSample; j < sh.FirstSample+sh.NumSamples; j++ {
			if j > sh.FirstSample && m.Samples.Stratum[j] < m.Samples.Stratum[j-1] {
				return nil, fmt.Errorf("manifest: shard %d is not stored stratum by stratum (sample %d)", si, j)
			}
			row[m.Samples.Stratum[j]]++
		}
		t.Shards = append(t.Shards, TopShard{Size: sh.Size, NumSamples: sh.NumSamples, IndexSize: indexSize[si], IndexSum: indexSum[si]})
		t.SetCounts(si, row)
	}
	return t, nil
}

// ShardIndexOf is shard si's index in m.
func ShardIndexOf(m *Manifest, si int) *ShardIndex {
	sh := m.Shards[si]
	_, n := m.ShardObject(si)
	x := &ShardIndex{Shard: n, Sums: sh.Sums}
	for j := sh.FirstSample; j < sh.FirstSample+sh.NumSamples; j++ {
		x.Keys = append(x.Keys, m.Samples.Key(j))
		x.Stratum = append(x.Stratum, m.Samples.Stratum[j])
		x.Size = append(x.Size, m.Samples.Size[j])
		x.Sum = append(x.Sum, m.Samples.Sum[j])
		if m.Samples.HasFields() {
			x.Fields = append(x.Fields, m.Samples.FieldsJoined(j))
		}
		if len(m.Members) > 0 {
			x.Records = append(x.Records, m.Samples.Record(j))
		}
	}
	return x
}

// Expand is the whole manifest of t with its shards' indexes (each checked
// by DecodeIndex), in format 1's in-memory form, t kept in Top.
func Expand(t *Top, idx []*ShardIndex) (*Manifest, error) {
	if len(idx) != len(t.Shards) {
		return nil, fmt.Errorf("%w: %d shard indexes for %d shards", ErrCorrupt, len(idx), len(t.Shards))
	}
	m := t.Manifest()
	for si, x := range idx {
		m.Shards[si].Sums = x.Sums
		for j := range x.Keys {
			m.Samples.Append(x.Keys[j], x.Stratum[j], uint32(si), x.Size[j], x.Sum[j])
			if t.HasFields() {
				f := ""
				if x.Fields != nil {
					f = x.Fields[j]
				}
				m.Samples.AppendFields(f)
			}
			if len(t.Members) > 0 {
				m.Samples.AppendRecord(x.Records[j])
			}
		}
	}
	if err := m.Finish(); err != nil {
		return nil, err
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m, nil
}
