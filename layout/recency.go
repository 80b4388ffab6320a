package layout

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Recency weights the strata of a dataset cut into time buckets by age,
// and picks the buckets an epoch reads. A stratum's time is its bucket's
// start; everything is in Unix seconds and a pure function of the epoch,
// so a resumed job, on any node, gets the weights and the window of the
// epoch it resumes in.
//
//   - HalfLife h > 0: w_c = 2^(−(T − t_c)/h), T the newest bucket read. The
//     weights are relative, so T cancels out of π: only ages between
//     buckets matter.
//   - Window W > 0: an epoch reads the buckets that start in (end−W, end].
//     Fixed (Step 0), end is AsOf. With Step S > 0 the window slides
//     forward: epoch e's ends at first+W+e·S (first: the oldest bucket's
//     start), and stops at AsOf.
//   - AsOf: buckets that start after it are never read (a backtest "as
//     of" a date). Default: the newest bucket.
//
// Buckets outside the window get weight 0 (layout.Params.Weights).
type Recency struct {
	Start    []int64 // per stratum, its time bucket's start; see StratumTimes
	HalfLife int64
	Window   int64
	Step     int64
	AsOf     int64 // math.MaxInt64 or 0: the newest bucket
}

// Validate explains what is wrong with r's spans; Weights also needs Start.
func (r *Recency) Validate() error {
	switch {
	case r.HalfLife < 0:
		return fmt.Errorf("recency half-life %s: must be > 0", span(r.HalfLife))
	case r.Window < 0:
		return fmt.Errorf("time window %s: must be > 0", span(r.Window))
	case r.Step < 0:
		return fmt.Errorf("time window step %s: must be > 0", span(r.Step))
	case r.Step > 0 && r.Window == 0:
		return specErr(OptTimeStep, "a time window step moves a time window: give {%s} too", OptTimeWindow)
	}
	return nil
}

// span prints seconds as a duration.
func span(s int64) string { return (time.Duration(s) * time.Second).String() }

// Weights returns each stratum's weight in epoch e, and the window the
// epoch reads ([from, to], bucket starts), or an error naming the window
// when it holds no bucket.
func (r *Recency) Weights(e int) (w []float64, from, to int64, err error) {
	if err := r.Validate(); err != nil {
		return nil, 0, 0, err
	}
	if len(r.Start) == 0 {
		return nil, 0, 0, errors.New("time weighting needs a dataset cut into time buckets: ingest it with --time-bucket FIELD=SPAN")
	}
	first, last := slices.Min(r.Start), slices.Max(r.Start)
	asOf := r.AsOf
	if asOf == 0 || asOf > last {
		asOf = last
	}
	from, to = math.MinInt64, asOf
	if r.Window > 0 {
		if r.Step > 0 {
			end := first + r.Window - 1
			steps := (asOf - end + r.Step - 1) / r.Step // epochs until the window reaches AsOf
			if int64(e) < steps {
				end += int64(e) * r.Step
			} else {
				end = asOf
			}
			to = end
		}
		from = to - r.Window + 1
	}
	w = make([]float64, len(r.Start))
	newest := int64(math.MinInt64)
	for _, t := range r.Start {
		if t >= from && t <= to {
			newest = max(newest, t)
		}
	}
	if newest == math.MinInt64 {
		return nil, from, to, fmt.Errorf("epoch %d: the time window %s .. %s holds no sample (the data spans %s .. %s): widen --time-window or move --as-of",
			e, when(max(from, first)), when(to), when(first), when(last))
	}
	for c, t := range r.Start {
		if t < from || t > to {
			continue
		}
		w[c] = 1
		if r.HalfLife > 0 {
			w[c] = math.Exp2(-float64(newest-t) / float64(r.HalfLife))
		}
	}
	return w, from, to, nil
}

// when prints Unix seconds as UTC RFC 3339.
func when(t int64) string { return time.Unix(t, 0).UTC().Format(time.RFC3339) }
