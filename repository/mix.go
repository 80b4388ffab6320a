package repository

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/shardfs/shardfs/erasure"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/manifest"
)

// Mix reads several committed datasets as one, for a weighted mixing order
// (layout.Params.Mix): their sample, stratum and shard indexes follow each
// other in the order given, and every key and stratum name starts with its
// dataset's name, so no two collide (tar members, samples/<dataset>/<class>/).
// It is a layout.SampleCatalog and Geometry, a prefetch Fetcher and DiskIndex.
type Mix struct {
	Parts []*Dataset
	cats  []ManifestCatalog
	// Offsets of each part's first sample, stratum, shard and class; one
	// extra entry holds the totals.
	samples, strata, shards, classes []int
	classNames                       []string // "<dataset>/<class>", by class
}

// NewMix combines parts, which must have distinct names.
func NewMix(parts []*Dataset) (*Mix, error) {
	m := &Mix{Parts: parts, samples: []int{0}, strata: []int{0}, shards: []int{0}, classes: []int{0}}
	seen := map[string]bool{}
	for i, p := range parts {
		if seen[p.Name] {
			return nil, fmt.Errorf("dataset %s is in the mix twice: give each dataset once, with its weight", p.Name)
		}
		seen[p.Name] = true
		// A batch tar holds samples of one kind: records (their members,
		// and a .cls only when labelled) or a file and its .cls each.
		if first := parts[0].Manifest; i > 0 && (p.Manifest.HasRecords() != first.HasRecords() || p.Manifest.Labelled() != first.Labelled()) {
			return nil, fmt.Errorf("--mix %s and %s: %s, %s: a mix's batches hold samples of one kind; mix datasets of records with records that are all labelled or all not, and datasets of a file per sample with each other",
				parts[0].Name, p.Name, kindOf(parts[0].Name, first), kindOf(p.Name, p.Manifest))
		}
		c := ManifestCatalog{M: p.Manifest}
		m.cats = append(m.cats, c)
		m.samples = append(m.samples, m.samples[len(m.samples)-1]+p.Manifest.Samples.Len())
		m.strata = append(m.strata, m.strata[len(m.strata)-1]+len(p.Manifest.Strata))
		m.shards = append(m.shards, m.shards[len(m.shards)-1]+len(p.Manifest.Shards))
		names, _ := p.Manifest.Classes()
		m.classes = append(m.classes, m.classes[len(m.classes)-1]+len(names))
		for _, n := range names {
			m.classNames = append(m.classNames, p.Name+"/"+n)
		}
	}
	return m, nil
}

// kindOf words what kind of samples dataset name holds, for a refusal.
func kindOf(name string, m *manifest.Manifest) string {
	switch {
	case !m.HasRecords():
		return name + " holds a file per sample"
	case m.Labelled():
		return name + " holds records with a label"
	}
	return name + " holds records without a label"
}

// ForLayout is the catalog a rank-epoch's member table reads: m itself,
// or with its parts' record tables when they hold records.
func (m *Mix) ForLayout() layout.SampleCatalog {
	if !m.Parts[0].Manifest.HasRecords() {
		return m
	}
	return MixRecords{m}
}

// MixRecords is a Mix of datasets of records: each sample's members are
// its dataset's, by their names (the datasets may name different ones).
type MixRecords struct{ *Mix }

var _ layout.RecordCatalog = MixRecords{}

// Record appends sample i's members, in stored order.
func (m MixRecords) Record(dst []layout.Member, i int) []layout.Member {
	p, j := m.sample(i)
	pm := m.Parts[p].Manifest
	return appendMembers(dst, &pm.Header, pm.Samples.Record(j))
}

// Labelled reports whether the records have a label (NewMix refuses a mix
// of labelled and unlabelled records).
func (m MixRecords) Labelled() bool { return m.Parts[0].Manifest.Labelled() }

// locate finds the part holding global index i of offsets.
func locate(offsets []int, i int) (part, local int) {
	p := sort.SearchInts(offsets, i+1) - 1
	return p, i - offsets[p]
}

func (m *Mix) sample(i int) (int, int) { return locate(m.samples, i) }

func (m *Mix) Key(i int) string {
	p, j := m.sample(i)
	return m.Parts[p].Name + "/" + m.cats[p].Key(j)
}
func (m *Mix) KeyBytes(i int) []byte { return []byte(m.Key(i)) }
func (m *Mix) Size(i int) int64      { p, j := m.sample(i); return m.cats[p].Size(j) }
func (m *Mix) Stratum(i int) int     { p, j := m.sample(i); return m.strata[p] + m.cats[p].Stratum(j) }
func (m *Mix) StratumName(s int) string {
	p, c := locate(m.strata, s)
	return m.Parts[p].Name + "/" + m.cats[p].StratumName(c)
}
func (m *Mix) NumStrata() int { return m.strata[len(m.strata)-1] }

// Class numbers the (dataset, class) pairs of the mix in the order the
// datasets were given, each dataset's classes in its own order.
func (m *Mix) Class(s int) int {
	p, c := locate(m.strata, s)
	return m.classes[p] + m.cats[p].Class(c)
}

// ClassNames are the mix's classes by index: "<dataset>/<class>".
func (m *Mix) ClassNames() []string { return m.classNames }
func (m *Mix) FragSize(shard int) int64 {
	p, sh := locate(m.shards, shard)
	return m.cats[p].FragSize(sh)
}
func (m *Mix) Locate(i int) (shard int, off, size int64) {
	p, j := m.sample(i)
	sh, off, size := m.cats[p].Locate(j)
	return m.shards[p] + sh, off, size
}
func (m *Mix) ShardSamples(shard int) (first, n int) {
	p, sh := locate(m.shards, shard)
	first, n = m.cats[p].ShardSamples(sh)
	return m.samples[p] + first, n
}
func (m *Mix) SampleSum(i int) uint32 { p, j := m.sample(i); return m.cats[p].SampleSum(j) }

// Complete is true: the datasets of a mix are held whole.
func (m *Mix) Complete(shard int) bool { return true }

// ReadRange reads verified bytes of a shard from the dataset holding it. A
// *erasure.HealNeeded it returns names the mix's shard (see PartShard).
func (m *Mix) ReadRange(ctx context.Context, shard int, off, n int64) ([]byte, error) {
	p, sh := locate(m.shards, shard)
	b, err := m.Parts[p].ReadRange(ctx, sh, off, n)
	return b, mixShard(err, shard)
}

// ReadRangeV is ReadRangeV of the dataset the mix's shard belongs to.
func (m *Mix) ReadRangeV(ctx context.Context, shard int, off int64, bufs [][]byte) error {
	p, sh := locate(m.shards, shard)
	return mixShard(m.Parts[p].ReadRangeV(ctx, sh, off, bufs), shard)
}

// PartShard is the dataset of the mix (its index in Parts) that holds the
// mix's shard, and the shard's number there.
func (m *Mix) PartShard(shard int) (part, partShard int) { return locate(m.shards, shard) }

// mixShard renumbers a part's HealNeeded to the mix's shard, as its reader
// named it.
func mixShard(err error, shard int) error {
	if h := erasure.Heal(err); h != nil {
		return &erasure.HealNeeded{Shard: shard, Stores: h.Stores}
	}
	return err
}

// Input is the layout input of the mix, each stratum in its dataset's group.
func (m *Mix) Input() (*layout.Input, error) {
	n := m.samples[len(m.samples)-1]
	stratum := make([]uint32, 0, n)
	shard := make([]uint32, 0, n)
	for p, part := range m.Parts {
		s := &part.Manifest.Samples
		for i := 0; i < s.Len(); i++ {
			stratum = append(stratum, uint32(m.strata[p])+s.Stratum[i])
			shard = append(shard, uint32(m.shards[p])+s.Shard[i])
		}
	}
	in, err := layout.NewInput(stratum, m.NumStrata(), shard, m.shards[len(m.shards)-1])
	if err != nil {
		return nil, err
	}
	group := make([]int, m.NumStrata())
	for s := range group {
		group[s], _ = locate(m.strata, s)
	}
	if err := in.SetGroups(group, len(m.Parts)); err != nil {
		return nil, err
	}
	// Rank affinity deals each part, and each ingest of a part, apart.
	var starts []int64
	for p, part := range m.Parts {
		if p > 0 {
			starts = append(starts, int64(m.samples[p]))
		}
		inPart, err := segmentStarts(&part.Manifest.Header, func(s int) (int64, error) { return int64(part.Manifest.Shards[s].FirstSample), nil })
		if err != nil {
			return nil, err
		}
		for _, x := range inPart {
			starts = append(starts, int64(m.samples[p])+x)
		}
	}
	return in, in.SetSegments(slices.Compact(starts))
}

// Namespace names the mix for the disk tier: every part's ingest, so a
// re-ingest of any part never meets stale bytes.
func (m *Mix) Namespace() string {
	var b strings.Builder
	b.WriteString("mix")
	for _, p := range m.Parts {
		b.WriteString("-" + DiskNamespace(&p.Manifest.Header))
	}
	if b.Len() > 200 { // a file name must stay under 255 bytes
		sum := sha256.Sum256([]byte(b.String()))
		return "mix-" + hex.EncodeToString(sum[:16])
	}
	return b.String()
}
