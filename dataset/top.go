package dataset

import (
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/manifest"
)

// OrderInput is the input from which the order of ds with params p is
// computed: the one choice that mount, warm and plan all make here, so that
// they compute one order. A dataset whose shard indexes are fetched lazily
// (format 2, opened with LazyIndexes) gives the per-shard counts
// (TopInput) where the order needs no more, else each sample's stratum and
// shard spelled out from the counts (CountsInput); a dataset held whole
// gives its per-sample columns. The orders are equal, whichever it is
// (TestOrderInputAgrees).
func OrderInput(ds *Dataset, p layout.Params) (*layout.Input, error) {
	var in *layout.Input
	var err error
	switch {
	case ds.Lazy == nil:
		in, err = LayoutInput(ds.Manifest)
	case p.Window == 0 && !p.Affinity && p.OrderVersion() >= 2:
		in, err = TopInput(ds.Manifest.Top)
	default:
		in, err = CountsInput(ds.Manifest.Top)
	}
	if err != nil {
		return nil, err
	}
	return in, groupByTime(in, &ds.Manifest.Header)
}

// groupByTime groups the strata of a dataset cut into time buckets by
// bucket, so that the global order deals each bucket's extras together
// and every batch holds each bucket within one sample of every other batch
// (layout: time groups).
func groupByTime(in *layout.Input, h *manifest.Header) error {
	group, n, ok, err := manifest.TimeGroups(h)
	if !ok || err != nil {
		return err
	}
	return in.SetGroups(group, n)
}

// TopInput is the order's input from a format-2 top-level manifest: its
// per-shard class counts, nothing per sample (see manifest.Top and
// layout.NewCountInputFunc). Global orders of order version 2 are
// computed from it.
func TopInput(t *manifest.Top) (*layout.Input, error) {
	return layout.NewCountInputFunc(len(t.Shards), len(t.Strata), t.Counts)
}

// CountsInput is the order's input for orders TopInput cannot compute
// (a window, affinity, order version 1): each sample's stratum and shard,
// spelled out from the per-shard counts (8 bytes a sample), still without
// a shard index.
func CountsInput(t *manifest.Top) (*layout.Input, error) {
	n := t.Samples()
	stratum, shard := make([]uint32, 0, n), make([]uint32, 0, n)
	row := make([]int, len(t.Strata))
	for s := range t.Shards {
		t.Counts(s, row)
		for c, k := range row {
			for range k {
				stratum = append(stratum, uint32(c))
				shard = append(shard, uint32(s))
			}
		}
	}
	return layout.NewInput(stratum, len(t.Strata), shard, len(t.Shards))
}
