package repository

import (
	"context"
	"fmt"
	"math"

	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/manifest"
)

// OrderInput is the input from which the order of ds with params p is
// computed: the one choice that mount, warm and plan all make here, so that
// they compute one order. A dataset whose shard indexes are fetched lazily
// (format 2 or 3, opened with LazyIndexes) gives its counts where the
// order needs no more: per shard (TopInput) in format 2, per group
// (RootInput) in format 3, whose orders number samples group by group (see
// ByRoot). Other orders get each sample's stratum and shard spelled out
// from the counts (countsInput). A dataset held whole gives its per-sample
// columns. The orders are equal, whichever it is (TestOrderInputAgrees).
func OrderInput(ds *Dataset, p layout.Params) (*layout.Input, error) {
	var in *layout.Input
	var err error
	need := p.Needs()
	switch {
	case ds.Lazy == nil:
		in, err = LayoutInput(ds.Manifest)
	case need == layout.NeedsSamples:
		in, err = countsInput(ds.Lazy.table, len(ds.Manifest.Strata))
	case ds.Lazy.Root():
		in, err = RootInput(ds.Manifest.Root)
	default:
		in, err = TopInput(ds.Manifest.Top)
	}
	if err != nil {
		return nil, err
	}
	if need == layout.NeedsRanges {
		if err := affinityInput(in, ds); err != nil {
			return nil, err
		}
	}
	return in, groupByTime(in, &ds.Manifest.Header)
}

// affinityInput gives in what rank-affine orders of version 3 need of ds
// (see layout.AffinityRanges): its segments, one per ingest of its
// shards, and, opened lazily, the per-shard counts of a range of samples,
// which in format 3 come from the one or two group objects of the range.
func affinityInput(in *layout.Input, ds *Dataset) error {
	first := func(s int) (int64, error) { return int64(ds.Manifest.Shards[s].FirstSample), nil }
	if l := ds.Lazy; l != nil {
		first = func(s int) (int64, error) {
			f, _, err := l.table.shard(lookup, s, nil)
			return f, err
		}
		in.SetShardRuns(l.ShardRuns)
	}
	starts, err := segmentStarts(&ds.Manifest.Header, first)
	if err != nil {
		return err
	}
	return in.SetSegments(starts)
}

// segmentStarts is the first sample of each of h's segments after the
// first; first gives a shard's first sample.
func segmentStarts(h *manifest.Header, first func(s int) (int64, error)) ([]int64, error) {
	var out []int64
	shard := 0
	for i, seg := range h.Segments {
		if i > 0 {
			x, err := first(shard)
			if err != nil {
				return nil, fmt.Errorf("dataset %s: where its ingest %s's samples start: %w", h.Name, seg.IngestID, err)
			}
			out = append(out, x)
		}
		shard += seg.Shards
	}
	return out, nil
}

// ShardRuns lists the shards holding samples [lo, hi), with their counts:
// what a rank-affine order of version 3 reads (layout.Input.SetShardRuns).
// In format 3 it reads the group objects of those shards only.
func (l *LazyCatalog) ShardRuns(lo, hi int64) ([]layout.ShardRun, error) {
	table, strata := l.table, len(l.h.Strata)
	if lo >= hi {
		return nil, nil
	}
	s, _, err := table.shardOf(lookup, lo)
	if err != nil {
		return nil, err
	}
	var out []layout.ShardRun
	for ; s < table.numShards(); s++ {
		row := make([]int, strata)
		first, sh, err := table.shard(lookup, s, row)
		if err != nil {
			return nil, err
		}
		out = append(out, layout.ShardRun{First: first, Counts: row})
		if first+int64(sh.NumSamples) >= hi {
			break // the next shard's group may not be the range's
		}
	}
	return out, nil
}

// ByRoot reports whether OrderInput(ds, p) is a format-3 root's
// (RootInput). Its orders number samples group by group, not shard by
// shard as ds's catalog does: a rank-epoch's samples are pinned with
// Lazy.PinRoot, which gives them in the catalog's numbering.
func ByRoot(ds *Dataset, p layout.Params) bool {
	return ds.Lazy != nil && ds.Lazy.Root() && p.Needs() == layout.NeedsCounts
}

// groupByTime gives the order what it balances besides the strata: each
// stratum's field values (its labels, numbered per field in the order the
// user named the fields; order version 5 balances every batch on the
// first two), and, for a dataset cut into time buckets, each stratum's
// bucket, so that earlier versions deal each bucket's extras together and
// every batch holds each bucket within one sample of every other batch
// (layout: time groups).
func groupByTime(in *layout.Input, h *manifest.Header) error {
	if err := in.SetFields(fieldValues(h)); err != nil {
		return err
	}
	group, n, ok, err := manifest.TimeGroups(h)
	if !ok || err != nil {
		return err
	}
	return in.SetGroups(group, n)
}

// fieldValues numbers each label field's values in the order the strata
// first hold them, and gives each stratum its tuple of numbers.
func fieldValues(h *manifest.Header) [][]uint32 {
	numbers := make([]map[string]uint32, len(h.LabelFields))
	for j := range numbers {
		numbers[j] = map[string]uint32{}
	}
	out := make([][]uint32, len(h.Strata))
	for c, st := range h.Strata {
		out[c] = make([]uint32, len(st.Labels))
		for j, label := range st.Labels {
			x, ok := numbers[j][label]
			if !ok {
				x = uint32(len(numbers[j]))
				numbers[j][label] = x
			}
			out[c][j] = x
		}
	}
	return out
}

// TopInput is the order's input from a format-2 top-level manifest: its
// per-shard class counts, nothing per sample (see manifest.Top and
// layout.NewCountInputFunc). Global orders of order version 2 are
// computed from it.
func TopInput(t *manifest.Top) (*layout.Input, error) {
	return layout.NewCountInputFunc(len(t.Shards), len(t.Strata), t.Counts)
}

// countsInput is the order's input for orders the counts alone cannot
// compute (a window, order version 1, affinity before version 3): each
// sample's stratum and shard, spelled out from a shard table's counts (8
// bytes a sample), still without a shard index. In format 3 it reads every
// group object, in order.
func countsInput(table shardTable, strata int) (*layout.Input, error) {
	n := table.samples()
	if n > math.MaxInt32 {
		return nil, fmt.Errorf("%d samples: a window, rank affinity or order version 1 lists each sample's stratum and shard, at most %d; the global order of order version 2 has no such limit", n, math.MaxInt32)
	}
	stratum, shard := make([]uint32, 0, n), make([]uint32, 0, n)
	row := make([]int, strata)
	for s := range table.numShards() {
		if _, _, err := table.shard(context.Background(), s, row); err != nil {
			return nil, err
		}
		for c, k := range row {
			for range k {
				stratum = append(stratum, uint32(c))
				shard = append(shard, uint32(s))
			}
		}
	}
	return layout.NewInput(stratum, strata, shard, table.numShards())
}
