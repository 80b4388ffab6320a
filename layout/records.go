package layout

import (
	"fmt"
	"hash/fnv"
	"strings"
)

// A record is a sample of several named members that share a key, as in
// WebDataset: 000123.jpg, 000123.txt and 000123.json are one record of key
// 000123 and members "jpg", "txt" and "json". Its members are stored back
// to back, in the record's order, as the sample's bytes, so a whole record
// is one range of one shard, read by one GET; a batch tar holds each member
// as <stem>.<member>, in that order, then <stem>.cls when the dataset has a
// label. A sample of a plain catalog is a record of one member, named by
// its key's extension (TarName), always with a .cls.

// Member is one member of a record: its name after the key (a WebDataset
// extension, such as "jpg" or "seg.png") and its size.
type Member struct {
	Name string
	Size int64
}

// RecordCatalog is a SampleCatalog whose samples are records.
type RecordCatalog interface {
	SampleCatalog
	// Record appends sample i's members, in stored order, to dst. Their
	// sizes sum to Size(i).
	Record(dst []Member, i int) []Member
	// Labelled reports whether the samples have a label: without one, a
	// batch tar holds no .cls member (the strata still balance batches).
	Labelled() bool
}

// records is a rank-epoch's member table of records: every member's parts
// (a record's members; "member" alone means a member of the rank-epoch).
type records struct {
	first []int32  // [n+1]: first part of member i
	name  []uint16 // per part: its index in names
	size  []uint32 // per part (a shard, so a record, is under 2^31 bytes)
	names []string
	cls   bool // each member ends with a .cls
}

// maxRecordMembers bounds the distinct member names of a rank-epoch's
// records: ingest refuses more (a name per record is a key in the wrong
// column, not a member).
const maxRecordMembers = 1 << 16

// newRecords reads the records of the rank-epoch's samples from cat. The
// manifest's decoder checks what it relies on (members that sum to the
// sample, sizes, at most maxRecordMembers names); a catalog that breaks it
// is a bug, and panics.
func newRecords(o *RankOrder, cat RecordCatalog) *records {
	n := o.Samples.Len()
	r := &records{first: make([]int32, 1, n+1), cls: cat.Labelled()}
	index := map[string]uint16{}
	var buf []Member
	for _, s := range o.Samples.All() {
		buf = cat.Record(buf[:0], int(s))
		var total int64
		for _, mb := range buf {
			k, ok := index[mb.Name]
			if !ok {
				if len(r.names) == maxRecordMembers {
					panic(fmt.Sprintf("layout: more than %d member names in a rank-epoch", maxRecordMembers))
				}
				k = uint16(len(r.names))
				index[mb.Name] = k
				r.names = append(r.names, mb.Name)
			}
			if mb.Size < 0 || mb.Size > 1<<31-1 {
				panic(fmt.Sprintf("layout: sample %d's member %q: size %d", s, mb.Name, mb.Size))
			}
			r.name = append(r.name, k)
			r.size = append(r.size, uint32(mb.Size))
			total += mb.Size
		}
		if total != cat.Size(int(s)) {
			panic(fmt.Sprintf("layout: sample %d's members hold %d bytes, the sample %d", s, total, cat.Size(int(s))))
		}
		r.first = append(r.first, int32(len(r.name)))
	}
	return r
}

// parts is the range of member i's parts.
func (r *records) parts(i int) (from, to int) { return int(r.first[i]), int(r.first[i+1]) }

// length is member i's bytes in a tar: each part's header and padded
// body, then the .cls member's header and block when labelled.
func (r *records) length(i int) int64 {
	var n int64
	from, to := r.parts(i)
	for p := from; p < to; p++ {
		n += block + padded(int64(r.size[p]))
	}
	if r.cls {
		n += 2 * block
	}
	return n
}

// RecordStem maps a record's key to its tar member stem. A key a member
// name can hold (RecordKeyHeld) is its own stem, byte for byte, so that a
// loader's __key__ is the key in index.csv and in the source; ingest
// refuses any other key of records. A dataset committed before that rule
// may hold others: they are mapped as TarName maps a sample key's stem
// (the whole key: it has no extension of its own, its members have).
func RecordStem(key string) string {
	if recordKeyHeld(key) == "" {
		return key
	}
	stem := sanitize(key, true)
	if len(stem) > maxStem {
		h := fnv.New32a()
		h.Write([]byte(key))
		stem = fmt.Sprintf("%s_%08x", stem[:maxStem-9], h.Sum32())
	}
	return stem
}

// RecordKeyHeld reports why a record's key cannot be its members' stem in
// a batch tar as it is, or nil when it can. A member is named
// <key>[~N].<member> (N: a repeat) in a 100-byte ustar name field, and
// WebDataset cuts a name into key and member at the first '.' of its base
// name. So a held key has no '.' after its last '/', no '~' (a repeat's
// mark), no control character, and at most 72 bytes (room for '~' and ten
// digits, '.' and a 16-byte member name). The key has passed
// manifest.CheckKey (valid UTF-8, relative, no empty, "." or ".." element).
func RecordKeyHeld(key string) error {
	if why := recordKeyHeld(key); why != "" {
		return fmt.Errorf("key %q %s", key, why)
	}
	return nil
}

// recordKeyHeld is RecordKeyHeld without allocating: the reason, or "".
func recordKeyHeld(key string) string {
	if len(key) > maxStem {
		return fmt.Sprintf("is %d bytes: a batch tar names a record's members <key>.<member> in 100 bytes, so a key may have at most %d", len(key), maxStem)
	}
	base := key[strings.LastIndexByte(key, '/')+1:]
	for i := 0; i < len(key); i++ {
		switch c := key[i]; {
		case c == '~':
			return "holds '~', which marks a repeat in a batch tar's member names (<key>~N.<member>)"
		case c < 0x20 || c == 0x7f:
			return "holds a control character"
		case c == '.' && i >= len(key)-len(base):
			return "has a '.' after its last '/': WebDataset readers cut a member name <key>.<member> at the first '.' of its base name, so the key would come back cut short"
		}
	}
	return ""
}

// CleanMemberName reports whether name may name a record's member: one to
// 16 of [A-Za-z0-9_.], not starting or ending with '.', and not "cls" when
// the dataset has a label (the label member's name). Ingest refuses others.
func CleanMemberName(name string, labelled bool) error {
	switch {
	case name == "" || len(name) > maxExt:
		return fmt.Errorf("member name %q: 1 to %d characters", name, maxExt)
	case name[0] == '.' || name[len(name)-1] == '.':
		return fmt.Errorf("member name %q starts or ends with '.'", name)
	case labelled && name == "cls":
		return fmt.Errorf("member name %q is the label's (.cls): rename the member, or ingest without a label", name)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !keptByte(c, false) && c != '_' && c != '.' {
			return fmt.Errorf("member name %q: only letters, digits, '_' and '.'", name)
		}
	}
	return nil
}

// extent is the piece of member i (a record) holding byte rel of it, to
// the piece's end: Len is the rest of the piece, FileOff is left to the
// caller. A part's sample bytes are at Off in the record's bytes, where
// the part starts at the sum of the sizes before it.
func (r *records) extent(i int, rel int64, class int32) Extent {
	from, to := r.parts(i)
	var at, src int64 // the part's start in the member, and in the record's bytes
	for p := from; p < to; p++ {
		size := int64(r.size[p])
		part := uint16(p - from)
		switch end := at + block + padded(size); {
		case rel < at+block:
			return Extent{Piece: PieceHeader, Part: part, Member: int32(i), Off: rel - at, Len: at + block - rel}
		case rel < at+block+size:
			off := rel - at - block
			return Extent{Piece: PieceSample, Part: part, Member: int32(i), Off: src + off, Len: size - off}
		case rel < end:
			return Extent{Piece: PieceZero, Member: int32(i), Off: rel - at - block - size, Len: end - rel}
		default:
			at, src = end, src+size
		}
	}
	// The .cls member after the parts (only when labelled: else rel is
	// past the member, which Extents never asks).
	cls := digits(int(class))
	switch {
	case rel < at+block:
		return Extent{Piece: PieceClsHeader, Member: int32(i), Off: rel - at, Len: at + block - rel}
	case rel < at+block+cls:
		return Extent{Piece: PieceCls, Member: int32(i), Off: rel - at - block, Len: at + block + cls - rel}
	default:
		return Extent{Piece: PieceZero, Member: int32(i), Off: rel - at - block - cls, Len: at + 2*block - rel}
	}
}
