package mount

import (
	"encoding/json"

	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/manifest"
	"github.com/shardfs/shardfs/repository"
)

// Info is what .shardfs/info.json says that only the caller knows, in its
// own words: the order options as given (the CLI's flag values, such as
// "resume_at": "3:1200" or "recency_half_life": "90d") and the mount's
// settings as given. The mount renders the rest from what it serves: the
// dataset (or mix), the erasure code, the order's parameters and batches
// per rank, alpha by epoch. A key the caller gives wins.
type Info struct {
	Order map[string]any
	Mount map[string]any
}

// infoJSON renders .shardfs/info.json: the dataset, the erasure code, the
// order and the mount's settings.
func (mt *Mount) infoJSON(cfg Config) ([]byte, error) {
	spec := cfg.Spec
	m := mt.Dataset.Manifest
	steps, err := layout.Steps(mt.Input, mt.Params)
	if err != nil {
		return nil, err
	}
	ds := describeDataset(m)
	// The version served, and the one current when the mount started: a
	// mount never switches, so a newer one means a remount would read it.
	ds["version"], ds["current_version"] = m.VersionNumber(), mt.Dataset.Current.VersionNumber()
	p := spec.Base
	order := map[string]any{"version": p.OrderVersion(), "seed": p.Seed, "world_size": p.World, "ranks": spec.Ranks, "batch_size": p.Batch,
		"epochs": spec.Epochs, "alpha": p.Alpha, "window": p.Window, "window_auto": spec.WindowChosen, "affinity": p.Affinity, "tail": p.Tail.String(), "epoch_size": p.EpochSize,
		"min_share": p.MinShare, "alpha_by_epoch": alphaByEpoch(spec), "alpha_by_epoch_note": "epochs 0, 1, ...; the last value holds for every later epoch",
		"batches_per_rank": steps}
	for k, v := range cfg.Info.Order {
		order[k] = v
	}
	settings := map[string]any{"cache_size": cfg.CacheSize, "prefetch": !cfg.NoPrefetch, "cache_dir": cfg.CacheDir, "direct_io": cfg.DirectIO}
	for k, v := range cfg.Info.Mount {
		settings[k] = v
	}
	v := map[string]any{
		"dataset": ds,
		"erasure": map[string]any{"data": m.Data, "parity": m.Parity, "block_size": m.BlockSize, "stores": mt.Metrics.Snapshot().Stores},
		"order":   order,
		"mount":   settings,
	}
	mt.src.describe(v, spec, cfg)
	b, err := json.MarshalIndent(v, "", "  ")
	return append(b, '\n'), err
}

// stratumInfo is a stratum as info.json lists it.
type stratumInfo struct {
	Name   string   `json:"name"`
	Labels []string `json:"labels"`
	Count  int      `json:"count"`
}

// describeDataset is what info.json says of one dataset.
func describeDataset(m *manifest.Manifest) map[string]any {
	var strata []stratumInfo
	for _, s := range m.Strata {
		strata = append(strata, stratumInfo{s.Name, s.Labels, s.Count})
	}
	classes, _ := m.Classes()
	d := map[string]any{"name": m.Name, "ingest_id": m.IngestID, "created_unix": m.CreatedUnix,
		"samples": repository.SampleCount(m), "bytes": m.TotalBytes(), "shards": m.NumShards(), "label_fields": m.LabelFields, "num_strata": len(m.Strata), "strata": strata,
		"class_fields": m.ClassFields(), "classes": classes}
	if m.HasFields() {
		d["fields"], d["derived"] = m.Fields, m.Derived
	}
	if m.HasRecords() {
		// Records: every member a batch tar holds of each, and whether
		// a .cls follows them.
		d["members"], d["strata_only"], d["labelled"] = m.Members, m.StrataOnly, m.Labelled()
	}
	return d
}

// alphaByEpoch is alpha in epochs 0, 1, ... until it stops changing (at
// most 1,000 epochs, or the spec's epochs).
func alphaByEpoch(s *layout.Spec) []float64 {
	n := s.Epochs
	if n == 0 || n > 1000 {
		n = 1000
	}
	out := make([]float64, 0, 8)
	for e := 0; e < n; e++ {
		out = append(out, s.AlphaAt(e))
	}
	last := len(out) - 1
	for last > 0 && out[last-1] == out[last] {
		last--
	}
	return out[:last+1]
}
