package repository

import (
	"fmt"

	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/manifest"
)

// OrderPlan is a run's order bound to what it is made from: the spec, the
// input every rank-epoch's order is computed from, epoch 0's parameters
// (rank 0's, which every world has) and its batches per rank.
type OrderPlan struct {
	Spec  *layout.Spec
	Input *layout.Input
	First layout.Params
	Steps int
}

// BindTimes gives spec's time weighting the strata's time bucket starts
// from h, and refuses time weighting on a dataset without time buckets.
// A spec without time weighting is left as it is.
func BindTimes(h *manifest.Header, spec *layout.Spec) error {
	if spec.Recency == nil {
		return nil
	}
	times, err := manifest.StratumTimes(h)
	if err != nil {
		return fmt.Errorf("dataset %s: %v", h.Name, err)
	}
	spec.Recency.Start = times
	return spec.Recency.Validate()
}

// PlanOrder makes the order of a run over ds: the one call mount, warm and
// plan make, so that a Go caller of mount.Open is refused what the CLI is
// (a batch larger than the epoch, an empty epoch, a resume point past the
// end, options that do not combine). Its errors about the spec are
// *layout.SpecError.
func PlanOrder(ds *Dataset, spec *layout.Spec) (*OrderPlan, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if err := BindTimes(&ds.Manifest.Header, spec); err != nil {
		return nil, err
	}
	spec.ChooseWindow(Shape(ds))
	first, err := spec.Params(0, 0)
	if err != nil {
		return nil, err
	}
	in, err := OrderInput(ds, first)
	if err != nil {
		return nil, err
	}
	return bindOrder(spec, in, first)
}

// PlanOrder makes the order of a run over the mix: as PlanOrder, for the
// mix's input; spec.Base.Mix weights its datasets.
func (m *Mix) PlanOrder(spec *layout.Spec) (*OrderPlan, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if len(spec.Base.Mix) != len(m.Parts) {
		return nil, fmt.Errorf("a mix of %d datasets given %d weights", len(m.Parts), len(spec.Base.Mix))
	}
	spec.ChooseWindow(layout.Shape{}) // a mix is dealt over the global order
	first, err := spec.Params(0, 0)
	if err != nil {
		return nil, err
	}
	in, err := m.Input()
	if err != nil {
		return nil, err
	}
	return bindOrder(spec, in, first)
}

// Shape is what the automatic window is chosen from (layout.AutoWindow):
// ds's samples, shards and bytes, and whether its order's input holds every
// sample (a lazily loaded dataset's is counts), and whether its strata
// are tuples of fields the global order balances (several label fields, or
// time buckets).
func Shape(ds *Dataset) layout.Shape {
	m := ds.Manifest
	var n int64
	for _, c := range m.Strata {
		n += int64(c.Count)
	}
	_, _, timed, _ := manifest.TimeGroups(&m.Header)
	return layout.Shape{Samples: n, Shards: int64(m.NumShards()), Bytes: m.TotalBytes(), PerSample: ds.Lazy == nil,
		Fields: timed || len(m.LabelFields) >= 2}
}

func bindOrder(spec *layout.Spec, in *layout.Input, first layout.Params) (*OrderPlan, error) {
	steps, err := spec.Bind(in)
	if err != nil {
		return nil, err
	}
	return &OrderPlan{Spec: spec, Input: in, First: first, Steps: steps}, nil
}
