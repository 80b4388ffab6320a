package ingest

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/shardfs/shardfs/manifest"
)

// TimeBucket cuts a timestamp field into buckets of Width, aligned to Unix
// time 0 (--time-bucket FIELD=30d).
type TimeBucket struct {
	Field string
	Width time.Duration
}

// Bins cuts a numeric field into ranges (--bins FIELD=8 or FIELD=0,128,512):
// Count quantile ranges computed from the data, or the ranges between the
// given Edges.
type Bins struct {
	Field string
	Count int
	Edges []float64
	// sampled: Edges are quantiles of a sample (a streaming ingest's first
	// chunk, stream.go): a value outside them goes to the first or last
	// bin, and the stream widens those bins' outer edges to the values
	// seen (Source.binRange) before it commits.
	sampled bool
}

// MaxFieldBytes bounds one sample's field values together: they are kept in
// the metadata every node reads (format 1) or in the shard's index.
const MaxFieldBytes = 64 << 10

// MaxBins bounds --bins N: more quantile ranges than this leave most
// strata too small for a batch to hold.
const MaxBins = 1024

// ParseSpan parses a length of time: a number with a unit s, m, h, d
// (24h) or w (7d), e.g. 30d, 12h, 1.5d.
func ParseSpan(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	unit := map[byte]time.Duration{'s': time.Second, 'm': time.Minute, 'h': time.Hour, 'd': 24 * time.Hour, 'w': 7 * 24 * time.Hour}
	if len(s) < 2 || unit[s[len(s)-1]] == 0 {
		return 0, fmt.Errorf("%q: use a number and a unit s, m, h, d or w, e.g. 30d", s)
	}
	x, err := strconv.ParseFloat(s[:len(s)-1], 64)
	if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, fmt.Errorf("%q: use a number and a unit s, m, h, d or w, e.g. 30d", s)
	}
	if math.Abs(x*float64(unit[s[len(s)-1]])) >= math.MaxInt64 {
		return 0, fmt.Errorf("%q: a span is at most 106751d (about 292 years)", s)
	}
	return time.Duration(x * float64(unit[s[len(s)-1]])), nil
}

// ParseTimeBucket parses FIELD=SPAN.
func ParseTimeBucket(s string) (TimeBucket, error) {
	field, span, ok := strings.Cut(s, "=")
	if !ok || strings.TrimSpace(field) == "" {
		return TimeBucket{}, fmt.Errorf("--time-bucket %q: use FIELD=SPAN, e.g. time=30d", s)
	}
	w, err := ParseSpan(span)
	if err != nil {
		return TimeBucket{}, fmt.Errorf("--time-bucket %s: %v", s, err)
	}
	if w < time.Second || w%time.Second != 0 {
		return TimeBucket{}, fmt.Errorf("--time-bucket %s: a bucket is a whole number of seconds, at least 1s", s)
	}
	return TimeBucket{Field: strings.TrimSpace(field), Width: w}, nil
}

// ParseBins parses FIELD=N (N quantile ranges) or FIELD=E0,E1,...,En
// (ascending edges, n ranges).
func ParseBins(s string) (Bins, error) {
	field, spec, ok := strings.Cut(s, "=")
	if !ok || strings.TrimSpace(field) == "" {
		return Bins{}, fmt.Errorf("--bins %q: use FIELD=N for N quantile ranges, or FIELD=E0,E1,... for explicit edges, e.g. len=8 or len=0,128,512,2048", s)
	}
	b := Bins{Field: strings.TrimSpace(field)}
	if !strings.Contains(spec, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(spec))
		if err != nil || n < 2 || n > MaxBins {
			return Bins{}, fmt.Errorf("--bins %s: the number of ranges must be 2..%d, or give edges: FIELD=E0,E1,...", s, MaxBins)
		}
		b.Count = n
		return b, nil
	}
	for _, e := range strings.Split(spec, ",") {
		x, err := strconv.ParseFloat(strings.TrimSpace(e), 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return Bins{}, fmt.Errorf("--bins %s: edge %q is not a number", s, e)
		}
		if len(b.Edges) > 0 && x <= b.Edges[len(b.Edges)-1] {
			return Bins{}, fmt.Errorf("--bins %s: edges must ascend", s)
		}
		b.Edges = append(b.Edges, x)
	}
	if len(b.Edges) > MaxBins+1 {
		return Bins{}, fmt.Errorf("--bins %s: at most %d ranges", s, MaxBins)
	}
	return b, nil
}

// ParseTime parses a timestamp: RFC 3339 (or its date alone, as UTC) or
// Unix seconds.
func ParseTime(v string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t, nil
	}
	if x, err := strconv.ParseFloat(v, 64); err == nil && !math.IsNaN(x) && math.Abs(x) < 1e12 {
		sec, frac := math.Modf(x)
		return time.Unix(int64(sec), int64(frac*1e9)).UTC(), nil
	}
	return time.Time{}, errors.New("not a timestamp: use RFC 3339 (2026-03-01T12:00:00Z) or Unix seconds")
}

// derive checks the listing's fields, and appends to every item's labels
// the derived label fields o asks for.
func (s *Source) derive(o ScanOptions) error {
	if s.Fields == nil && (len(o.TimeBuckets) > 0 || len(o.Bins) > 0) {
		return errors.New("--time-bucket and --bins need a listing with a header row (.csv) or named fields (.jsonl)")
	}
	column := func(field, flag string) (int, error) {
		i := slices.Index(s.Fields, field)
		switch {
		case i < 0:
			return 0, fmt.Errorf("%s %s: the listing has no field %q (its fields: %s)", flag, field, field, strings.Join(s.Fields, ", "))
		case slices.Contains(s.LabelFields, field):
			return 0, fmt.Errorf("%s %s: %q is already a label field (as it is, or cut by another flag): cut it once, and leave it out of --label-fields", flag, field, field)
		}
		return i, nil
	}
	for _, tb := range o.TimeBuckets {
		col, err := column(tb.Field, "--time-bucket")
		if err != nil {
			return err
		}
		width := int64(tb.Width / time.Second)
		times, err := parseColumn(s, col, tb.Field, "--time-bucket", "a timestamp", ParseTime)
		if err != nil {
			return err
		}
		labels := make([]string, len(times))
		named := map[int64]string{} // a bucket's label, made once: items share it
		for i, t := range times {
			start := manifest.BucketStart(t.Unix(), width)
			var ok bool
			if labels[i], ok = named[start]; !ok {
				labels[i] = manifest.BucketLabel(start, width)
				named[start] = labels[i]
			}
			// A bucket whose name does not read back (a year outside
			// 0000-9999) would commit a dataset no mount can order.
			if back, err := manifest.ParseBucketLabel(labels[i], width); err != nil || back != start {
				it := &s.Items[i]
				return fmt.Errorf("%s: field %s=%q falls in a bucket of the year %d: --time-bucket takes times in the years 0000-9999 (Unix seconds from -62167219200 to 253402300799): fix or drop the line",
					it.Where(), tb.Field, clip(it.Fields[col]), time.Unix(start, 0).UTC().Year())
			}
		}
		s.addLabel(tb.Field, labels, manifest.Derived{Field: tb.Field, Width: width})
	}
	for _, b := range o.Bins {
		col, err := column(b.Field, "--bins")
		if err != nil {
			return err
		}
		values, err := parseColumn(s, col, b.Field, "--bins", "a number", parseNumber)
		if err != nil {
			return err
		}
		edges := b.Edges
		if edges == nil {
			if edges, err = quantileEdges(values, b.Count); err != nil {
				return fmt.Errorf("--bins %s=%d: %v", b.Field, b.Count, err)
			}
			if len(edges)-1 < b.Count {
				s.Warnings = append(s.Warnings, fmt.Sprintf("--bins %s=%d: the values repeat so much that only %d distinct quantile ranges exist: %v", b.Field, b.Count, len(edges)-1, edges))
			}
		}
		labels := make([]string, len(s.Items))
		named := make([]string, len(edges)-1) // a bin's label, made once: items share it
		lo, hi := math.Inf(1), math.Inf(-1)
		for i, x := range values {
			lo, hi = min(lo, x), max(hi, x)
			if (x < edges[0] || x > edges[len(edges)-1]) && !b.sampled {
				it := &s.Items[i]
				return fmt.Errorf("%s: field %s=%v is outside the --bins edges %v..%v: widen the first or last edge", it.Where(), b.Field, x, edges[0], edges[len(edges)-1])
			}
			bin := max(0, binOf(edges, x)) // below the first edge: the first bin (b.sampled)
			if named[bin] == "" {
				named[bin] = manifest.BinLabel(edges, bin)
			}
			labels[i] = named[bin]
		}
		s.addLabel(b.Field, labels, manifest.Derived{Field: b.Field, Edges: edges})
		if len(values) > 0 {
			if s.binRange == nil {
				s.binRange = map[string][2]float64{}
			}
			s.binRange[b.Field] = [2]float64{lo, hi}
		}
	}
	if len(s.Derived) == 0 && !slices.ContainsFunc(s.Fields, func(f string) bool { return !slices.Contains(s.LabelFields, f) }) {
		// Labels only: written as before fields existed.
		s.Fields = nil
		for i := range s.Items {
			s.Items[i].Fields = nil
		}
		return nil
	}
	for i := range s.Items {
		it := &s.Items[i]
		n := 0
		for j, v := range it.Fields {
			if strings.ContainsAny(v, manifest.FieldSep+"\x00") {
				return fmt.Errorf("%s: field %q holds a NUL or unit-separator (0x1f) character: remove it", it.Where(), s.Fields[j])
			}
			n += len(v) + 1
		}
		if n > MaxFieldBytes {
			return fmt.Errorf("%s: its fields hold %d bytes, more than the %d a sample may carry: leave long values (captions, embeddings) out of the listing", it.Where(), n, MaxFieldBytes)
		}
	}
	s.warnStrata()
	return nil
}

// parseColumn parses field col of every item; a missing value, or one
// parse refuses, is an error naming the line and the field.
func parseColumn[T any](s *Source, col int, field, flag, want string, parse func(string) (T, error)) ([]T, error) {
	out := make([]T, len(s.Items))
	for i := range s.Items {
		it := &s.Items[i]
		v := it.Fields[col]
		if v == "" {
			return nil, fmt.Errorf("%s: no value for field %q: %s needs %s on every line", it.Where(), field, flag, want)
		}
		x, err := parse(v)
		if err != nil {
			return nil, fmt.Errorf("%s: field %s=%q is %v", it.Where(), field, clip(v), err)
		}
		out[i] = x
	}
	return out, nil
}

// parseNumber parses a finite number.
func parseNumber(v string) (float64, error) {
	x, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, errors.New("not a number: --bins needs a number on every line")
	}
	return x, nil
}

// addLabel appends a derived label field to the stratum tuple.
func (s *Source) addLabel(field string, labels []string, d manifest.Derived) {
	s.LabelFields = append(s.LabelFields, field)
	s.Derived = append(s.Derived, d)
	for i := range s.Items {
		s.Items[i].Labels = append(s.Items[i].Labels, labels[i])
	}
}

// quantileEdges cuts values into n ranges of about equal counts; equal
// quantiles merge, so a skewed field can yield fewer ranges.
func quantileEdges(values []float64, n int) ([]float64, error) {
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	if sorted[0] == sorted[len(sorted)-1] {
		return nil, fmt.Errorf("every line has the value %v: there is nothing to cut", sorted[0])
	}
	var edges []float64
	for i := 0; i < n; i++ {
		x := sorted[i*len(sorted)/n]
		if len(edges) == 0 || x > edges[len(edges)-1] {
			edges = append(edges, x)
		}
	}
	if last := sorted[len(sorted)-1]; last > edges[len(edges)-1] {
		edges = append(edges, last)
	}
	return edges, nil
}

// binOf is the range of edges that holds x (edges[0] <= x <= edges[last]).
func binOf(edges []float64, x float64) int {
	i := sort.Search(len(edges), func(i int) bool { return edges[i] > x }) - 1
	return min(i, len(edges)-2)
}

// sparseBalance says what balance each order gives a batch when strata
// are sparse.
func (s *Source) sparseBalance() string {
	if len(s.LabelFields) < 2 {
		return "every order holds each batch within one sample of each stratum's share, and such a stratum is in a batch or not"
	}
	rest := ""
	if len(s.LabelFields) > 2 {
		rest = fmt.Sprintf(", and bounds %s", strings.Join(s.LabelFields[2:], ","))
	}
	return fmt.Sprintf("the default order (version 5 and later, which reads such a dataset in the global order) still holds every batch within one sample of its share of each %s and each %s (the first two fields named)%s; order versions 1-4 and --window balance the strata only, which is little better than a shuffle on each field when most strata hold under one sample a batch", s.LabelFields[0], s.LabelFields[1], rest)
}

// warnStrata warns of strata too small for stratification to mean much.
func (s *Source) warnStrata() {
	counts := map[string]int{}
	for _, it := range s.Items {
		counts[stratumName(it.Labels)]++
	}
	s.Warnings = append(s.Warnings, s.strataWarnings(counts, len(s.Items))...)
}

// strataWarnings are warnStrata's, of these samples per stratum (n in all).
func (s *Source) strataWarnings(counts map[string]int, n int) (warnings []string) {
	single, example := 0, ""
	for name, n := range counts {
		if n == 1 {
			single++
			if example == "" || name < example {
				example = name
			}
		}
	}
	fields := strings.Join(s.LabelFields, ",")
	if single > 0 {
		warnings = append(warnings, fmt.Sprintf("%d of %d strata of the fields %s hold a single sample (e.g. %s): %s; to balance the strata themselves, use coarser --time-bucket or fewer --bins", single, len(counts), fields, example, s.sparseBalance()))
	}
	if len(counts) > 1000 && len(counts)*16 > n {
		warnings = append(warnings, fmt.Sprintf("%d strata of the fields %s for %d samples, %.1f samples each: a batch cannot hold every stratum; use coarser --time-bucket or fewer --bins", len(counts), fields, n, float64(n)/float64(len(counts))))
	}
	return warnings
}
