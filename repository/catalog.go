package repository

import (
	"strings"

	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/manifest"
)

// ManifestCatalog adapts a manifest to layout.SampleCatalog and layout.Geometry.
type ManifestCatalog struct{ M *manifest.Manifest }

var (
	_ layout.SampleCatalog = ManifestCatalog{}
	_ layout.Geometry      = ManifestCatalog{}
)

func (c ManifestCatalog) Key(i int) string         { return c.M.Samples.Key(i) }
func (c ManifestCatalog) Size(i int) int64         { return int64(c.M.Samples.Size[i]) }
func (c ManifestCatalog) Stratum(i int) int        { return int(c.M.Samples.Stratum[i]) }
func (c ManifestCatalog) StratumName(s int) string { return c.M.Strata[s].Name }
func (c ManifestCatalog) Class(s int) int          { return c.M.ClassOf(s) }
func (c ManifestCatalog) FragSize(shard int) int64 { return c.M.FragSize(shard) }
func (c ManifestCatalog) Locate(i int) (shard int, off, size int64) {
	s := &c.M.Samples
	return int(s.Shard[i]), int64(s.Offset[i]), int64(s.Size[i])
}

// LayoutInput indexes a manifest for layout.Order.
func LayoutInput(m *manifest.Manifest) (*layout.Input, error) {
	return layout.NewInput(m.Samples.Stratum, len(m.Strata), m.Samples.Shard, len(m.Shards))
}

// KeyBytes returns sample i's key without copying.
func (c ManifestCatalog) KeyBytes(i int) []byte { return c.M.Samples.KeyBytes(i) }

// NumStrata is the number of strata.
func (c ManifestCatalog) NumStrata() int { return len(c.M.Strata) }

// ShardSamples is the range of sample indexes in shard, for the disk tier.
func (c ManifestCatalog) ShardSamples(shard int) (first, n int) {
	sh := &c.M.Shards[shard]
	return sh.FirstSample, sh.NumSamples
}

// SampleSum is sample i's checksum written at ingest.
func (c ManifestCatalog) SampleSum(i int) uint32 { return c.M.Samples.Sum[i] }

// Complete is true: a manifest held whole knows every sample of a shard.
func (c ManifestCatalog) Complete(shard int) bool { return true }

// FieldNames are the listing's fields each sample carries (none: nil).
func (c ManifestCatalog) FieldNames() []string { return c.M.Fields }

// Fields are sample i's field values, one per FieldNames.
func (c ManifestCatalog) Fields(i int) []string {
	return splitFields(c.M.Samples.FieldsJoined(i), len(c.M.Fields))
}

// splitFields splits a sample's joined field values into n, "" for any
// missing (a lost index's placeholder).
func splitFields(joined string, n int) []string {
	out := strings.SplitN(joined, manifest.FieldSep, n)
	for len(out) < n {
		out = append(out, "")
	}
	return out
}

var _ layout.FieldCatalog = ManifestCatalog{}

// DiskNamespace is the disk tier namespace of a dataset's ingest (the
// mount's and warm's alike): its name and ingest id, so a dataset
// ingested again under the same name never meets stale bytes.
func DiskNamespace(h *manifest.Header) string { return h.Name + "-" + h.IngestID }

// ShardNamespace names the disk tier namespace of each shard of a dataset:
// the dataset and the ingest that uploaded the shard, whose bytes are the
// same in every version that holds it.
func ShardNamespace(h *manifest.Header) func(shard int) string {
	return func(shard int) string { id, _ := h.ShardObject(shard); return h.Name + "-" + id }
}

// SampleCount is m's number of samples, also when its rows (or, in format
// 3, its shards) are not loaded.
func SampleCount(m *manifest.Manifest) int64 {
	switch {
	case m.Samples.Len() > 0:
		return int64(m.Samples.Len())
	case m.Top != nil:
		return int64(m.Top.Samples())
	case m.Root != nil:
		return m.Root.Samples()
	}
	return 0
}
