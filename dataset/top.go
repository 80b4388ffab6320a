package dataset

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
// from the counts (CountsInput). A dataset held whole gives its per-sample
// columns. The orders are equal, whichever it is (TestOrderInputAgrees).
func OrderInput(ds *Dataset, p layout.Params) (*layout.Input, error) {
	var in *layout.Input
	var err error
	switch {
	case ds.Lazy == nil:
		in, err = LayoutInput(ds.Manifest)
	case ByRoot(ds, p):
		in, err = RootInput(ds.Manifest.Root)
	case countsSuffice(p):
		in, err = TopInput(ds.Manifest.Top)
	default:
		in, err = countsInput(ds.Lazy.table, len(ds.Manifest.Strata))
	}
	if err != nil {
		return nil, err
	}
	return in, groupByTime(in, &ds.Manifest.Header)
}

// countsSuffice reports whether orders of p are computed from counts alone
// (per shard or per group): global orders of order version 2.
func countsSuffice(p layout.Params) bool {
	return p.Window == 0 && !p.Affinity && p.OrderVersion() >= 2
}

// ByRoot reports whether OrderInput(ds, p) is a format-3 root's
// (RootInput). Its orders number samples group by group, not shard by
// shard as ds's catalog does: a rank-epoch's samples are pinned with
// Lazy.PinRoot, which gives them in the catalog's numbering.
func ByRoot(ds *Dataset, p layout.Params) bool {
	return ds.Lazy != nil && ds.Lazy.Root() && countsSuffice(p)
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
	return countsInput(newTopTable(t), len(t.Strata))
}

// countsInput is CountsInput from a shard table: in format 3 it reads
// every group object, in order.
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
