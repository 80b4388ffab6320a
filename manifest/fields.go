package manifest

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// BucketStart is the start of the bucket of width seconds that holds Unix time u.
func BucketStart(u, width int64) int64 {
	q := u / width
	if u%width < 0 {
		q--
	}
	return q * width
}

// BucketLabel names the bucket that starts at start: its date when buckets
// are whole days, else its RFC 3339 time.
func BucketLabel(start, width int64) string {
	t := time.Unix(start, 0).UTC()
	if width%86400 == 0 {
		return t.Format(time.DateOnly)
	}
	return t.Format(time.RFC3339)
}

// ParseBucketLabel reads back the start of the bucket BucketLabel named.
// Labels of years outside 0000-9999 do not read back: ingest refuses them.
func ParseBucketLabel(label string, width int64) (int64, error) {
	layout := time.RFC3339
	if width%86400 == 0 {
		layout = time.DateOnly
	}
	t, err := time.Parse(layout, label)
	if err != nil {
		return 0, err
	}
	return t.Unix(), nil
}

// BinLabel names bin i of edges.
func BinLabel(edges []float64, i int) string {
	return formatEdge(edges[i]) + ".." + formatEdge(edges[i+1])
}

// StratumTimes returns each stratum's time bucket start (Unix seconds),
// read back from its label of the first time-bucketed field.
func StratumTimes(h *Header) ([]int64, error) {
	i := slices.IndexFunc(h.Derived, func(d Derived) bool { return d.Width > 0 })
	if i < 0 {
		return nil, errors.New("it has no time buckets: --recency-half-life, --time-window and --as-of need a dataset ingested with --time-bucket FIELD=SPAN")
	}
	d := h.Derived[i]
	col := slices.Index(h.LabelFields, d.Field)
	out := make([]int64, len(h.Strata))
	for c, st := range h.Strata {
		t, err := ParseBucketLabel(st.Labels[col], d.Width)
		if err != nil {
			return nil, fmt.Errorf("%w: stratum %q: time bucket %q does not read back as a time (years 0000-9999)", ErrCorrupt, st.Name, st.Labels[col])
		}
		out[c] = t
	}
	return out, nil
}

// TimeGroups numbers the time buckets of h's strata (oldest first) and
// gives each stratum its bucket's number; ok is false when h has no time
// buckets.
func TimeGroups(h *Header) (group []int, n int, ok bool, err error) {
	if !slices.ContainsFunc(h.Derived, func(d Derived) bool { return d.Width > 0 }) {
		return nil, 0, false, nil
	}
	times, err := StratumTimes(h)
	if err != nil {
		return nil, 0, false, err
	}
	distinct := slices.Compact(slices.Sorted(slices.Values(times)))
	group = make([]int, len(times))
	for c, t := range times {
		group[c], _ = slices.BinarySearch(distinct, t)
	}
	return group, len(distinct), true, nil
}

// formatEdge prints a bin edge as short as it reads back exactly.
func formatEdge(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
