package dataset

import (
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/manifest"
)

// TopInput is the order's input from a format-2 top-level manifest: its
// per-shard class counts, nothing per sample (see manifest.Top and
// layout.NewCountInputFunc). Global orders of order version 2 are
// computed from it.
func TopInput(t *manifest.Top) (*layout.Input, error) {
	return layout.NewCountInputFunc(len(t.Shards), len(t.Strata), t.Counts)
}
