package manifest

import (
	"fmt"
	"sort"
)

// A dataset's versions. Every commit after the first (an append, a
// rollback, an ingest that replaces the dataset) writes a manifest that
// carries the dataset's history (Header.Versions) and says which ingest
// uploaded each run of its shards (Header.Segments). Earlier versions'
// fragments are never rewritten: an append adds shards after the last one,
// under its own ingest id, so shard s keeps its number, its objects and its
// samples in every later version that holds it.
//
// A manifest with neither is a dataset committed once: version 1, every
// shard uploaded by its own ingest. It is encoded byte for byte as before
// versions existed.

// VersionLineage is the header format that adds segments and versions to
// Version's fields; manifests, top-level manifests and roots that carry a
// lineage are framed in their format's lineage version (VersionLineage,
// TopVersionLineage, RootVersionLineage).
const VersionLineage = 3

// VersionSegments adds a segment's own shard numbering (Segment.Local)
// to VersionRecords' fields. Only a manifest with such a segment is
// written in it (TopVersionSegments, RootVersionSegments likewise): every
// other one is encoded byte for byte as before, and a shardfs that cannot
// number such a segment's objects refuses it ("upgrade shardfs") instead
// of looking for them under the wrong names.
const VersionSegments = 5

// Segment is a run of consecutive shards uploaded by one ingest: their
// fragment and index objects are under its ingest id.
type Segment struct {
	IngestID string
	Shards   int
	// Local: the segment's shards are numbered from 0 in their objects'
	// names and their placement on the stores (ShardObject), where other
	// segments' keep the dataset's numbers. A writer that cannot know how
	// many shards come before its own (a part of a distributed ingest that
	// reads only its slice of the source) numbers them so.
	Local bool
	// Strata and Members map the stratum and member ids in the segment's
	// shard indexes (and record tables) to the dataset's: a writer that
	// saw only its slice of the source numbered what it met. nil: the
	// dataset's own. Within each shard the samples must stay in the
	// order of the dataset's stratum ids once mapped (DecodeShardIndex
	// checks it).
	Strata, Members []uint32
}

// VersionInfo is one version in a dataset's history.
type VersionInfo struct {
	Number      int
	IngestID    string // the commit's ingest id: its manifest is kept under it (see repository.VersionKey)
	Parent      int    // the version that was current when it was committed; 0 for the first
	CreatedUnix int64
	Samples     int64
	Bytes       int64
	// Change says what the commit did, for people: "ingest", "append
	// 1200 samples", "rollback to 2".
	Change string
}

// HasLineage reports whether h carries segments or versions, and so needs
// its format's lineage version.
func (h *Header) HasLineage() bool { return len(h.Segments) > 0 || len(h.Versions) > 0 }

// ShardObject is the ingest id and the number under which shard s's
// fragments and index are stored, and by which its fragments are placed
// on the stores (erasure.Params.Placement): s itself, but for a shard of a
// Local segment, its number within the segment.
func (h *Header) ShardObject(s int) (ingest string, number int) {
	seg, first := h.segmentOf(s)
	if seg == nil {
		return h.IngestID, s
	}
	if seg.Local {
		return seg.IngestID, s - first
	}
	return seg.IngestID, s
}

// segmentOf is the segment that holds shard s, and its first shard; nil
// for a dataset never appended to. Past the last shard it is the last
// segment (validateLineage refuses a manifest with such a shard).
func (h *Header) segmentOf(s int) (*Segment, int) {
	first := 0
	for i := range h.Segments {
		seg := &h.Segments[i]
		if s < first+seg.Shards || i == len(h.Segments)-1 {
			return seg, first
		}
		first += seg.Shards
	}
	return nil, 0
}

// HasLocalSegments reports whether a segment of h numbers its shards or
// its ids on its own, and so h needs format VersionSegments.
func (h *Header) HasLocalSegments() bool {
	for _, s := range h.Segments {
		if s.Local || s.Strata != nil || s.Members != nil {
			return true
		}
	}
	return false
}

// SegmentIDs are the ingest ids h's shards are stored under, each once.
func (h *Header) SegmentIDs() []string {
	if len(h.Segments) == 0 {
		return []string{h.IngestID}
	}
	var ids []string
	seen := map[string]bool{}
	for _, s := range h.Segments {
		if !seen[s.IngestID] {
			seen[s.IngestID] = true
			ids = append(ids, s.IngestID)
		}
	}
	return ids
}

// SegmentsOr is h's segments, or, for a dataset never appended to, the one
// segment of its shards.
func (h *Header) SegmentsOr(shards int) []Segment {
	if len(h.Segments) > 0 {
		return h.Segments
	}
	return []Segment{{IngestID: h.IngestID, Shards: shards}}
}

// VersionNumber is the version h describes: the last of its history, or 1.
func (h *Header) VersionNumber() int {
	if len(h.Versions) == 0 {
		return 1
	}
	return h.Versions[len(h.Versions)-1].Number
}

// History is the dataset's versions up to and including h's, oldest first.
// A dataset committed once has the one version that its header implies;
// samples and bytes are given by the caller, who knows the shard table.
func (h *Header) History(samples, bytes int64) []VersionInfo {
	if len(h.Versions) > 0 {
		return h.Versions
	}
	return []VersionInfo{{Number: 1, IngestID: h.IngestID, CreatedUnix: h.CreatedUnix, Samples: samples, Bytes: bytes, Change: "ingest"}}
}

// FindVersion returns version n of h's history.
func FindVersion(history []VersionInfo, n int) (VersionInfo, bool) {
	i := sort.Search(len(history), func(i int) bool { return history[i].Number >= n })
	if i < len(history) && history[i].Number == n {
		return history[i], true
	}
	return VersionInfo{}, false
}

// validateLineage checks that the segments cover exactly shards shards and
// that the history ends with this commit, numbers rising.
func (h *Header) validateLineage(shards int) error {
	if len(h.Segments) > 0 {
		total := 0
		for i, s := range h.Segments {
			if s.IngestID == "" || s.Shards < 1 {
				return fmt.Errorf("segment %d: %d shards of ingest %q", i, s.Shards, s.IngestID)
			}
			total += s.Shards
		}
		if total != shards {
			return fmt.Errorf("segments hold %d shards, the dataset %d", total, shards)
		}
	}
	for i, v := range h.Versions {
		if v.Number < 1 || (i > 0 && v.Number <= h.Versions[i-1].Number) || v.Parent < 0 || v.Parent >= v.Number || v.IngestID == "" {
			return fmt.Errorf("version %d (entry %d, parent %d, ingest %q) out of order", v.Number, i, v.Parent, v.IngestID)
		}
	}
	if n := len(h.Versions); n > 0 && h.Versions[n-1].IngestID != h.IngestID {
		return fmt.Errorf("the last version is ingest %s, the manifest's %s", h.Versions[n-1].IngestID, h.IngestID)
	}
	return nil
}

// lineage writes h's segments and versions (header format VersionLineage).
func (e *encoder) lineage(h *Header) {
	e.uvarint(uint64(len(h.Segments)))
	for _, s := range h.Segments {
		e.str(s.IngestID)
		e.uvarint(uint64(s.Shards))
	}
	e.uvarint(uint64(len(h.Versions)))
	for _, v := range h.Versions {
		e.uvarint(uint64(v.Number))
		e.str(v.IngestID)
		e.uvarint(uint64(v.Parent))
		e.uvarint(uint64(v.CreatedUnix))
		e.uvarint(uint64(v.Samples))
		e.uvarint(uint64(v.Bytes))
		e.str(v.Change)
	}
}

// The flags of a segment's own numbering (format VersionSegments).
const (
	segmentLocal   = 1 << iota // Segment.Local
	segmentStrata              // a Segment.Strata map follows
	segmentMembers             // a Segment.Members map follows
)

// numbering writes how each segment numbers its shards and its ids
// (format VersionSegments).
func (e *encoder) numbering(h *Header) {
	for _, s := range h.Segments {
		var flags uint64
		if s.Local {
			flags |= segmentLocal
		}
		if s.Strata != nil {
			flags |= segmentStrata
		}
		if s.Members != nil {
			flags |= segmentMembers
		}
		e.uvarint(flags)
		for _, m := range [][]uint32{s.Strata, s.Members} {
			if m == nil {
				continue
			}
			e.uvarint(uint64(len(m)))
			for _, v := range m {
				e.uvarint(uint64(v))
			}
		}
	}
}

// numbering reads what encoder.numbering wrote; every id a map gives must
// be one of the dataset's.
func (d *decoder) numbering(h *Header) {
	for i := range h.Segments {
		seg := &h.Segments[i]
		flags := d.uvarint()
		if flags >= segmentMembers<<1 {
			d.fail("segment %d: numbering flags %#x", i, flags)
			return
		}
		seg.Local = flags&segmentLocal != 0
		read := func(what string, ids int) []uint32 {
			n := d.count(1)
			m := make([]uint32, 0, n)
			for j := 0; j < n && d.err == nil; j++ {
				v := d.uvarint()
				if v >= uint64(ids) {
					d.fail("segment %d: its %s id %d is the dataset's %d, which has %d", i, what, j, v, ids)
					return nil
				}
				m = append(m, uint32(v))
			}
			return m
		}
		if flags&segmentStrata != 0 {
			seg.Strata = read("stratum", len(h.Strata))
		}
		if flags&segmentMembers != 0 {
			seg.Members = read("member", len(h.Members))
		}
	}
}

// lineage reads what encoder.lineage wrote.
func (d *decoder) lineage(h *Header) {
	n := d.count(2)
	h.Segments = make([]Segment, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		h.Segments = append(h.Segments, Segment{IngestID: d.str(), Shards: d.small("segment shards", 1<<40)})
	}
	n = d.count(7)
	h.Versions = make([]VersionInfo, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		h.Versions = append(h.Versions, VersionInfo{
			Number: d.small("version", 1<<40), IngestID: d.str(), Parent: d.small("parent version", 1<<40),
			CreatedUnix: int64(d.small("version time", 1<<62)), Samples: int64(d.small("version samples", 1<<62)),
			Bytes: int64(d.small("version bytes", 1<<62)), Change: d.str(),
		})
	}
	if len(h.Segments) == 0 {
		h.Segments = nil
	}
	if len(h.Versions) == 0 {
		h.Versions = nil
	}
}
