package repository

import (
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/manifest"
)

// A dataset of records (manifest.Header.Members) is served through the
// same catalogs as one of a file per sample, with each sample's record
// table added: layout then lays every member of a record out in the batch
// tars, and a .cls only when the dataset has a label.

// ForLayout is the catalog a rank-epoch's member table reads: c itself, or
// with its record tables when the dataset's samples are records.
func (c ManifestCatalog) ForLayout() layout.SampleCatalog {
	if len(c.M.Members) == 0 {
		return c
	}
	return RecordCatalog{c}
}

// RecordCatalog is a ManifestCatalog of a dataset of records.
type RecordCatalog struct{ ManifestCatalog }

var (
	_ layout.RecordCatalog = RecordCatalog{}
	_ layout.FieldCatalog  = RecordCatalog{}
)

// Record appends sample i's members, in stored order.
func (c RecordCatalog) Record(dst []layout.Member, i int) []layout.Member {
	return appendMembers(dst, &c.M.Header, c.M.Samples.Record(i))
}

// Labelled reports whether the records have a label (a .cls member).
func (c RecordCatalog) Labelled() bool { return c.M.Labelled() }

func appendMembers(dst []layout.Member, h *manifest.Header, table []byte) []layout.Member {
	manifest.RecordMembers(table, func(m int, size int64) {
		dst = append(dst, layout.Member{Name: h.Members[m], Size: size})
	})
	return dst
}

// ForLayout is the catalog a rank-epoch's member table reads: p itself, or
// with its record tables when the dataset's samples are records.
func (p *Pinned) ForLayout() layout.SampleCatalog {
	if len(p.l.h.Members) == 0 {
		return p
	}
	return PinnedRecords{p}
}

// PinnedRecords is a Pinned catalog of a dataset of records.
type PinnedRecords struct{ *Pinned }

var (
	_ layout.RecordCatalog = PinnedRecords{}
	_ layout.FieldCatalog  = PinnedRecords{}
	_ layout.LostCatalog   = PinnedRecords{}
)

// Record appends sample i's members, in stored order; none for a lost
// sample (layout serves none of it).
func (p PinnedRecords) Record(dst []layout.Member, i int) []layout.Member {
	r, k := p.row(i)
	if r.records == nil {
		return dst
	}
	return appendMembers(dst, p.l.h, r.records[k])
}

// Labelled reports whether the records have a label (a .cls member).
func (p PinnedRecords) Labelled() bool { return p.l.h.Labelled() }
