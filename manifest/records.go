package manifest

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// Records. A dataset ingested from records (WebDataset shards, JSONL,
// Parquet) has samples of several named members (Header.Members names
// them all), stored back to back as the sample's bytes; each sample's
// record table says which members it has, in stored order, and their
// sizes. Its strata may include fields that are not the label
// (Header.StrataOnly), and it may have no label at all. A dataset of one
// file per sample has neither and is encoded byte for byte as before.

// VersionRecords is the header format that adds Members and StrataOnly to
// VersionLineage's; manifests, top-level manifests, roots and shard indexes
// of a dataset of records are framed in their format's records version
// (VersionRecords, TopVersionRecords, RootVersionRecords).
const VersionRecords = 4

// MaxRecordMembers bounds the members of one record, and MaxMemberNames
// the distinct member names of a dataset: a record with more is a key in
// the wrong place, not a record.
const (
	MaxRecordMembers = 256
	MaxMemberNames   = 4096
)

// HasRecords reports whether h is a dataset of records.
func (h *Header) HasRecords() bool { return len(h.Members) > 0 || len(h.StrataOnly) > 0 }

// Labelled reports whether the dataset's samples have a label (a class):
// every dataset of one file per sample has; a dataset of records whose
// strata are all StrataOnly or derived has none, and its batches carry no
// .cls member.
func (h *Header) Labelled() bool { return len(h.Members) == 0 || len(h.ClassFields()) > 0 }

// AppendRecord appends to table a member of the record: its index in
// Header.Members and its size.
func AppendRecord(table []byte, member int, size int64) []byte {
	table = binary.AppendUvarint(table, uint64(member))
	return binary.AppendUvarint(table, uint64(size))
}

// RecordMembers calls f for each member in a record's table, in order;
// the table must have passed checkRecord.
func RecordMembers(table []byte, f func(member int, size int64)) {
	for len(table) > 0 {
		m, n := binary.Uvarint(table)
		table = table[n:]
		size, n := binary.Uvarint(table)
		table = table[n:]
		f(int(m), int64(size))
	}
}

// checkRecord checks a sample's record table against the header and the
// sample's size: members the header names, each once, at most
// MaxRecordMembers, whose sizes sum to size.
func (h *Header) checkRecord(table []byte, size int64) error {
	var total int64
	var seen []int
	for rest := table; len(rest) > 0; {
		m, n := binary.Uvarint(rest)
		if n <= 0 {
			return fmt.Errorf("a record table cut short")
		}
		rest = rest[n:]
		sz, n := binary.Uvarint(rest)
		if n <= 0 {
			return fmt.Errorf("a record table cut short")
		}
		rest = rest[n:]
		switch {
		case m >= uint64(len(h.Members)):
			return fmt.Errorf("a record's member %d of %d names", m, len(h.Members))
		case slices.Contains(seen, int(m)):
			return fmt.Errorf("a record holds member %q twice", h.Members[m])
		case len(seen) == MaxRecordMembers:
			return fmt.Errorf("a record of more than %d members", MaxRecordMembers)
		case sz > MaxShardSize:
			return fmt.Errorf("a record's member %q of %d bytes", h.Members[m], sz)
		}
		seen = append(seen, int(m))
		total += int64(sz)
	}
	if len(seen) == 0 {
		return fmt.Errorf("a record without members")
	}
	if total != size {
		return fmt.Errorf("a record's members hold %d bytes, the sample %d", total, size)
	}
	return nil
}

// validateRecords checks the header's records fields.
func (h *Header) validateRecords() error {
	if len(h.Members) > MaxMemberNames {
		return fmt.Errorf("%d member names, at most %d", len(h.Members), MaxMemberNames)
	}
	for i, m := range h.Members {
		if m == "" || slices.Contains(h.Members[:i], m) {
			return fmt.Errorf("member name %q empty or repeated", m)
		}
	}
	for _, f := range h.StrataOnly {
		if !slices.Contains(h.LabelFields, f) || h.derived(f) {
			return fmt.Errorf("strata-only field %q is not a label field read as listed", f)
		}
	}
	if len(h.Members) == 0 && len(h.LabelFields) > 0 && len(h.ClassFields()) == 0 {
		// A sample of one file always carries a .cls: it needs a label.
		return fmt.Errorf("every label field (%v) is derived or strata-only: the dataset has no label", h.LabelFields)
	}
	return nil
}

func (e *encoder) records(h *Header) {
	e.strs(h.Members)
	e.strs(h.StrataOnly)
}

func (d *decoder) records(h *Header) {
	h.Members = d.strs()
	h.StrataOnly = d.strs()
}

// mapMembers is a record table whose member ids are a segment's, with the
// dataset's ids (Segment.Members) in their place.
func mapMembers(table []byte, ids []uint32) ([]byte, error) {
	out := make([]byte, 0, len(table))
	for len(table) > 0 {
		m, n := binary.Uvarint(table)
		if n <= 0 {
			return nil, fmt.Errorf("a record table that does not parse")
		}
		table = table[n:]
		size, n := binary.Uvarint(table)
		if n <= 0 {
			return nil, fmt.Errorf("a record table that does not parse")
		}
		table = table[n:]
		if m >= uint64(len(ids)) {
			return nil, fmt.Errorf("member %d of a segment that maps %d", m, len(ids))
		}
		out = AppendRecord(out, int(ids[m]), int64(size))
	}
	return out, nil
}
