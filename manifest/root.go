package manifest

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
)

// Format 3 keeps what every node reads small however many shards there
// are. Format 2's top-level manifest holds every shard's count per stratum:
// at 15 million shards that is gigabytes on every node. Format 3 splits it:
//
//   - the root (Root) holds the erasure parameters, stores and strata, and
//     per group of shards (DefaultGroupShards, 1,024 by default) its shard
//     count, its bytes, its count per stratum and the size and checksum of
//     its group object. That is a few bytes a shard: 15 million shards of
//     100 strata make a root of a few MiB.
//   - a group object (Group) holds, per shard of the group, its size, the
//     size and checksum of its index, and its count per stratum, stored as
//     the difference from the group's even split (ingest's stratified
//     placement keeps the differences near zero, so a group of a thousand
//     shards is kilobytes after compression).
//   - the shard indexes are format 2's.
//
// The global order needs the root only. Samples are numbered group by
// group and, within a group, stratum by stratum (layout.NewCountInputFunc
// with a group standing where a shard would), so stratum c's k-th member
// is found from the root's counts alone, and it is the same sample as
// format 2's k-th member of c: within a group both list c's members shard
// by shard. Which shard holds it, and where, is read from its group's
// object (Group.Locate) when the sample is first read, as a shard's index
// is. A mode that reads some shards only (a window, rank affinity) reads
// the objects of their groups only.

// RootVersion is the format of the root and the group objects;
// RootVersionLineage, of a root that carries a lineage (lineage.go).
const (
	RootVersion        = 1
	RootVersionLineage = 2
	RootVersionRecords = 3
	// RootVersionSegments: a lineage with a Local segment (VersionSegments).
	RootVersionSegments = 4
)

const (
	rootMagic  = "SHFSROOT"
	groupMagic = "SHFSGRP1"
)

// DefaultGroupShards is the shards of a group, the last group of a part
// aside.
const DefaultGroupShards = 1024

// MaxGroupShards bounds a group, so that one group object stays small.
const MaxGroupShards = 1 << 16

// Root is the root of a format-3 dataset description.
type Root struct {
	Header
	Groups []RootGroup

	firstShard []int // [G+1]: each group's first shard
	// Each group's count per stratum: the nonzero ones as (stratum, count)
	// pairs, strata ascending, in totStratum/totCount[totAt[g]:totAt[g+1]].
	totStratum []uint32
	totCount   []int64
	totAt      []int
}

// RootGroup is one group of shards in the root.
type RootGroup struct {
	Shards     int    // shards in the group
	Samples    int64  // samples in the group
	Size       int64  // payload bytes of its shards
	ObjectSize int64  // bytes of its group object
	ObjectSum  uint32 // CRC32C of its group object
}

// AddGroup appends a group with counts[c] samples of stratum c
// (len(counts) = len(r.Strata)); Samples is set from the counts.
func (r *Root) AddGroup(g RootGroup, counts []int64) {
	if len(r.totAt) == 0 {
		r.totAt = []int{0}
		r.firstShard = []int{0}
	}
	g.Samples = 0
	for c, n := range counts {
		if n > 0 {
			r.totStratum = append(r.totStratum, uint32(c))
			r.totCount = append(r.totCount, n)
			g.Samples += n
		}
	}
	r.totAt = append(r.totAt, len(r.totStratum))
	r.firstShard = append(r.firstShard, r.firstShard[len(r.firstShard)-1]+g.Shards)
	r.Groups = append(r.Groups, g)
}

// SetObject records group g's encoded object: its size and checksum.
func (r *Root) SetObject(g int, b []byte) {
	r.Groups[g].ObjectSize, r.Groups[g].ObjectSum = int64(len(b)), IndexSum(b)
}

// RootOf describes the dataset of t in format 3, groups of groupShards
// shards: its root and its encoded group objects. The shard indexes stay
// format 2's.
func RootOf(t *Top, groupShards int) (*Root, [][]byte, error) {
	if groupShards < 1 || groupShards > MaxGroupShards {
		return nil, nil, fmt.Errorf("manifest: groups of %d shards: 1 to %d", groupShards, MaxGroupShards)
	}
	r := &Root{Header: t.Header}
	r.Strata = slices.Clone(t.Strata)
	row := make([]int, len(t.Strata))
	for first := 0; first < len(t.Shards); first += groupShards {
		total := make([]int64, len(t.Strata))
		gr := RootGroup{Shards: min(groupShards, len(t.Shards)-first)}
		for s := first; s < first+gr.Shards; s++ {
			t.Counts(s, row)
			for c, n := range row {
				total[c] += int64(n)
			}
			gr.Size += t.Shards[s].Size
		}
		r.AddGroup(gr, total)
	}
	objs := make([][]byte, len(r.Groups))
	for g := range r.Groups {
		x := NewGroup(r, g)
		for s := x.First; s < x.First+r.Groups[g].Shards; s++ {
			t.Counts(s, row)
			x.AddShard(t.Shards[s], row)
		}
		b, err := EncodeGroup(x, r)
		if err != nil {
			return nil, nil, err
		}
		objs[g] = b
		r.SetObject(g, b)
	}
	return r, objs, nil
}

// GroupCounts writes group g's samples per stratum into row (len(row): the strata).
func (r *Root) GroupCounts(g int, row []int) {
	clear(row)
	for i := r.totAt[g]; i < r.totAt[g+1]; i++ {
		row[r.totStratum[i]] = int(r.totCount[i])
	}
}

// FirstShard is group g's first shard; FirstShard(len(Groups)) is the
// dataset's shard count.
func (r *Root) FirstShard(g int) int {
	if len(r.firstShard) == 0 {
		return 0
	}
	return r.firstShard[g]
}

// NumShards is the dataset's number of shards.
func (r *Root) NumShards() int { return r.FirstShard(len(r.Groups)) }

// Samples is the dataset's number of samples.
func (r *Root) Samples() int64 {
	var n int64
	for _, g := range r.Groups {
		n += g.Samples
	}
	return n
}

// EncodeRoot serializes r.
func EncodeRoot(r *Root) ([]byte, error) {
	if len(r.totAt) != len(r.Groups)+1 && len(r.Groups) > 0 {
		return nil, fmt.Errorf("manifest: counts of %d groups set, %d groups", len(r.totAt)-1, len(r.Groups))
	}
	row := make([]int, len(r.Strata))
	v, hv := uint32(RootVersion), uint32(Version)
	if r.HasLineage() {
		v, hv = RootVersionLineage, VersionLineage
	}
	if r.HasRecords() {
		v, hv = RootVersionRecords, VersionRecords
	}
	if r.HasLocalSegments() {
		v, hv = RootVersionSegments, VersionSegments
	}
	return frame(rootMagic, v, func(e *encoder) {
		e.header(&r.Header, hv)
		e.uvarint(uint64(len(r.Groups)))
		for g, gr := range r.Groups {
			e.uvarint(uint64(gr.Shards))
			e.uvarint(uint64(gr.Size))
			e.uvarint(uint64(gr.ObjectSize))
			e.u32(gr.ObjectSum)
			r.GroupCounts(g, row)
			e.sparse(len(row), func(c int) bool { return row[c] > 0 }, func(c int) uint64 { return uint64(row[c]) })
		}
	})
}

// DecodeRoot parses and checks a root: every failure wraps ErrCorrupt.
func DecodeRoot(b []byte) (*Root, error) {
	var r *Root
	err := unframe(b, rootMagic, RootVersion, RootVersionSegments, "a shardfs dataset root", func(rd io.Reader, bodyLen int64, v uint32) error {
		var err error
		r, err = decodeRootBody(rd, bodyLen, v)
		return err
	})
	if err != nil {
		return nil, err
	}
	if r.Data < 1 || len(r.Stores) != r.Data+r.Parity || r.BlockSize < 1 {
		return nil, fmt.Errorf("%w: RS(%d,%d) over %d stores, block size %d", ErrCorrupt, r.Data, r.Parity, len(r.Stores), r.BlockSize)
	}
	if err := r.validateLineage(r.NumShards()); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return r, nil
}

// decodeRootBody parses a root's body, behind the frame's checksums.
func decodeRootBody(rd io.Reader, bodyLen int64, v uint32) (*Root, error) {
	d := newDecoder(rd, bodyLen)
	r := &Root{}
	hv := uint32(Version)
	if v >= RootVersionLineage {
		hv = VersionLineage
	}
	if v >= RootVersionRecords {
		hv = VersionRecords
	}
	if v >= RootVersionSegments {
		hv = VersionSegments
	}
	d.header(&r.Header, hv)
	n := d.count(8)
	r.Groups = make([]RootGroup, 0, n)
	row := make([]int64, len(r.Strata))
	for g := 0; g < n && d.err == nil; g++ {
		gr := RootGroup{Shards: d.small("group shards", MaxGroupShards), Size: int64(d.uvarint()), ObjectSize: int64(d.uvarint()), ObjectSum: d.u32()}
		clear(row)
		d.sparse("group", g, len(r.Strata), func(c int, n uint64) bool {
			row[c] = int64(n)
			return n > 0 && n <= math.MaxInt32 // a group holds 1 to 2^31-1 of a stratum listed
		})
		if d.err != nil {
			break
		}
		var samples int64
		for _, c := range row {
			samples += c
		}
		switch {
		case gr.Shards < 1:
			d.fail("group %d has no shard", g)
		case gr.Size < 0 || gr.Size > int64(gr.Shards)*MaxShardSize:
			d.fail("group %d: %d bytes in %d shards", g, gr.Size, gr.Shards)
		case samples > gr.Size:
			d.fail("group %d: %d samples in %d bytes", g, samples, gr.Size)
		case gr.ObjectSize < headerSize || gr.ObjectSize > 1<<30:
			d.fail("group %d: a group object of %d bytes", g, gr.ObjectSize)
		}
		for c, x := range row {
			r.Strata[c].Count += int(x)
		}
		r.AddGroup(gr, row)
	}
	if d.err == nil && d.left != 0 {
		d.fail("%d trailing bytes", d.left)
	}
	return r, d.err
}

// IsRoot reports whether b is framed as a format-3 root.
func IsRoot(b []byte) bool { return len(b) >= 8 && string(b[:8]) == rootMagic }

// Group is one group object: its shards' sizes, index references and
// counts per stratum.
type Group struct {
	Group  int
	First  int        // the group's first shard
	Shards []TopShard // NumSamples is set from the counts

	strata, shards int
	// prefix[c·(S+1)+j]: members of stratum c in the group's shards before
	// j. Counts and positions both come from it; a stratum's members in a
	// group fit 31 bits (DecodeRoot).
	prefix []int32
}

// NewGroup starts group g of r, whose shards are added with AddShard.
func NewGroup(r *Root, g int) *Group {
	n := r.Groups[g].Shards
	return &Group{Group: g, First: r.FirstShard(g), strata: len(r.Strata), shards: n, prefix: make([]int32, len(r.Strata)*(n+1))}
}

// AddShard appends a shard with counts[c] samples of stratum c.
func (x *Group) AddShard(sh TopShard, counts []int) {
	j := len(x.Shards)
	sh.NumSamples = 0
	for c, n := range counts {
		sh.NumSamples += n
		at := c*(x.shards+1) + j
		x.prefix[at+1] = x.prefix[at] + int32(n)
	}
	x.Shards = append(x.Shards, sh)
}

// Counts writes shard j of the group's samples per stratum into row.
func (x *Group) Counts(j int, row []int) {
	for c := range row {
		at := c*(x.shards+1) + j
		row[c] = int(x.prefix[at+1] - x.prefix[at])
	}
}

// evenSplitter gives the even split of per-stratum totals over n shards,
// shard after shard: shard j gets ⌊(j+1)·t/n⌋ − ⌊j·t/n⌋ of a total t. It
// needs no division per shard: t = q·n + rem, and a shard gets q, plus one
// where the running remainder passes n. Counts in a group object are
// stored as their difference from it: that formula is part of the format.
type evenSplitter struct {
	n           int
	q, rem, acc []int
}

func newEvenSplitter(total []int, n int) *evenSplitter {
	s := &evenSplitter{n: n, q: make([]int, len(total)), rem: make([]int, len(total)), acc: make([]int, len(total))}
	for c, t := range total {
		s.q[c], s.rem[c] = t/n, t%n
	}
	return s
}

// next writes the next shard's even split into row.
func (s *evenSplitter) next(row []int) {
	for c := range row {
		row[c] = s.q[c]
		if s.acc[c] += s.rem[c]; s.acc[c] >= s.n {
			s.acc[c] -= s.n
			row[c]++
		}
	}
}

// EncodeGroup serializes x, group x.Group of r: each count is written as
// its difference from the group's even split.
func EncodeGroup(x *Group, r *Root) ([]byte, error) {
	if x.Group < 0 || x.Group >= len(r.Groups) || len(x.Shards) != r.Groups[x.Group].Shards {
		return nil, fmt.Errorf("manifest: group %d of %d shards, the root has %d groups", x.Group, len(x.Shards), len(r.Groups))
	}
	total := make([]int, len(r.Strata))
	r.GroupCounts(x.Group, total)
	row, even := make([]int, len(r.Strata)), make([]int, len(r.Strata))
	split := newEvenSplitter(total, len(x.Shards))
	return frame(groupMagic, RootVersion, func(e *encoder) {
		e.uvarint(uint64(x.Group))
		e.uvarint(uint64(x.First))
		// The totals the differences are from, so that an object read
		// against a root of other totals is refused, not re-split.
		e.uvarint(uint64(len(total)))
		for _, n := range total {
			e.uvarint(uint64(n))
		}
		e.uvarint(uint64(len(x.Shards)))
		for j, sh := range x.Shards {
			e.uvarint(uint64(sh.Size))
			e.uvarint(uint64(sh.IndexSize))
			e.u32(sh.IndexSum)
			x.Counts(j, row)
			split.next(even)
			e.sparse(len(row), func(c int) bool { return row[c] != even[c] }, func(c int) uint64 { return zigzag(int64(row[c] - even[c])) })
		}
	})
}

func zigzag(v int64) uint64   { return uint64(v<<1) ^ uint64(v>>63) }
func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

// DecodeGroup parses group g's object and checks it against the root: the
// group and first shard it names, its shard count, every count at least
// zero, the counts summing to the root's per stratum, and the shards'
// bytes to the root's; the object's size and checksum must be the root's.
// Every failure wraps ErrCorrupt.
func DecodeGroup(b []byte, r *Root, g int) (*Group, error) {
	if g < 0 || g >= len(r.Groups) {
		return nil, fmt.Errorf("group %d of %d", g, len(r.Groups))
	}
	if want := r.Groups[g]; int64(len(b)) != want.ObjectSize || IndexSum(b) != want.ObjectSum {
		return nil, fmt.Errorf("%w: group %d object: %d bytes of checksum %08x, the root says %d bytes of %08x", ErrCorrupt, g, len(b), IndexSum(b), want.ObjectSize, want.ObjectSum)
	}
	var x *Group
	err := unframe(b, groupMagic, RootVersion, RootVersion, "a shardfs group object", func(rd io.Reader, bodyLen int64, _ uint32) error {
		var err error
		x, err = decodeGroupBody(rd, bodyLen, r, g)
		return err
	})
	if err != nil {
		return nil, err
	}
	return x, nil
}

// decodeGroupBody parses group g's body, behind the frame's checksums.
func decodeGroupBody(rd io.Reader, bodyLen int64, r *Root, g int) (*Group, error) {
	want := r.Groups[g]
	x := NewGroup(r, g)
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: group %d object: %s", ErrCorrupt, g, fmt.Sprintf(format, args...))
	}
	total := make([]int, len(r.Strata))
	r.GroupCounts(g, total)
	d := newDecoder(rd, bodyLen)
	name, first := d.uvarint(), d.uvarint()
	if nt := d.count(1); nt != len(total) && d.err == nil {
		return nil, bad("totals of %d strata, the root has %d", nt, len(total))
	}
	for c := 0; c < len(total) && d.err == nil; c++ {
		if n := d.uvarint(); n != uint64(total[c]) && d.err == nil {
			return nil, bad("%d samples of stratum %d, the root says %d", n, c, total[c])
		}
	}
	n := d.count(7)
	if d.err != nil {
		return nil, d.err
	}
	if n < 1 {
		return nil, bad("no shard")
	}
	if name != uint64(g) || first != uint64(x.First) || n != want.Shards {
		return nil, bad("it names group %d of %d shards from shard %d; the root says group %d of %d shards from shard %d", name, n, first, g, want.Shards, x.First)
	}
	row := make([]int, len(r.Strata))
	left := slices.Clone(total) // what the shards still to come hold
	split := newEvenSplitter(total, n)
	where := fmt.Sprintf("group %d shard", g)
	var size int64
	for j := 0; j < n && d.err == nil; j++ {
		sh := TopShard{Size: int64(d.small("shard size", MaxShardSize)), IndexSize: int64(d.uvarint()), IndexSum: d.u32()}
		split.next(row)
		d.sparse(where, j, len(row), func(c int, v uint64) bool {
			n := int64(row[c]) + unzigzag(v)
			row[c] = int(n)
			return v != 0 && n >= 0 && n <= MaxShardSize // a difference of 0 is not listed
		})
		for c, k := range row {
			left[c] -= k
			if left[c] < 0 {
				d.fail("group %d: shards %d and before hold more of stratum %d than the root's %d", g, j, c, total[c])
				break
			}
		}
		if d.err != nil {
			break
		}
		x.AddShard(sh, row)
		if x.Shards[j].NumSamples > int(sh.Size) {
			d.fail("group %d shard %d: %d samples in %d bytes", g, j, x.Shards[j].NumSamples, sh.Size)
		}
		size += sh.Size
	}
	if d.err == nil && d.left != 0 {
		d.fail("%d trailing bytes", d.left)
	}
	if d.err == nil && slices.ContainsFunc(left, func(n int) bool { return n != 0 }) {
		return nil, bad("its shards' counts do not sum to the root's")
	}
	if d.err == nil && size != want.Size {
		return nil, bad("shards of %d bytes, the root says %d", size, want.Size)
	}
	return x, d.err
}

// Locate is where group member k of stratum c lies (the k-th of c's
// members in the group, shard by shard): the shard (dataset-wide) and its
// position in that shard, which stores its samples stratum by stratum.
func (x *Group) Locate(c int, k int64) (shard, pos int, err error) {
	w := x.shards + 1
	if c < 0 || c >= x.strata || k < 0 || k >= int64(x.prefix[c*w+len(x.Shards)]) {
		return 0, 0, fmt.Errorf("group %d: no member %d of stratum %d", x.Group, k, c)
	}
	pre := x.prefix[c*w : c*w+len(x.Shards)+1]
	j := sort.Search(len(x.Shards), func(j int) bool { return int64(pre[j+1]) > k })
	pos = int(k - int64(pre[j]))
	for lower := range c {
		pos += int(x.prefix[lower*w+j+1] - x.prefix[lower*w+j]) // the shard stores strata below c first
	}
	return x.First + j, pos, nil
}

// Manifest is the manifest of r without its shards: what choosing among
// the stores' copies needs. NewTopOf and Top.AddGroup give the shards.
func (r *Root) Manifest() *Manifest {
	h := r.Header
	h.Strata = slices.Clone(r.Strata)
	return &Manifest{FormatVersion: int(h.topVersion()), Header: h, Root: r}
}

// NewTopOf starts the format-2 top-level manifest of r's dataset, whose
// shards AddGroup adds from r's group objects in order: the same shards,
// counts and index references, so that the dataset is read as format 2
// reads it. It holds every shard's counts: for what a node holds at 15
// million shards, see Root.
func NewTopOf(r *Root) *Top {
	t := &Top{Header: r.Header}
	t.Strata = slices.Clone(r.Strata)
	return t
}

// AddGroup appends group object x's shards: x must be the next group.
func (t *Top) AddGroup(x *Group) error {
	if x.First != len(t.Shards) || len(x.Shards) != x.shards {
		return fmt.Errorf("%w: group object %d starts at shard %d, after %d shards", ErrCorrupt, x.Group, x.First, len(t.Shards))
	}
	row := make([]int, len(t.Strata))
	for j, sh := range x.Shards {
		x.Counts(j, row)
		t.SetCounts(len(t.Shards), row)
		t.Shards = append(t.Shards, sh)
	}
	return nil
}
