package backend

import (
	"runtime/metrics"
	"slices"
	"time"
)

// A timeout is wall time, and it counts this process's own waits as well as
// the store's: on a training node whose cores are all busy, a goroutine
// ready to run can wait seconds for a core, and a request whose deadline
// ran out in that wait was never a store's to answer. stallWatch tells the
// two apart with the Go scheduler's own record: the distribution of how
// long goroutines waited, ready, before they ran (/sched/latencies). When
// some goroutine waited a good part of a timeout in the span a request was
// timed, this process stalled, and the timeout is no evidence against the
// store. The runtime samples one scheduling in eight; a stall holds every
// ready goroutine at once, so it is recorded many times over.

const schedLatencies = "/sched/latencies:seconds"

// stallWatch is the scheduler's latency counts at the start of a span.
type stallWatch struct {
	counts  []uint64
	buckets []float64 // upper bounds: counts[i] waited in [buckets[i], buckets[i+1])
}

func readSchedLatencies() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: schedLatencies}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil // a runtime without the metric: no stall is ever seen
	}
	return s[0].Value.Float64Histogram()
}

// watchStalls starts a span.
func watchStalls() stallWatch {
	h := readSchedLatencies()
	if h == nil {
		return stallWatch{}
	}
	return stallWatch{counts: slices.Clone(h.Counts), buckets: h.Buckets}
}

// stalledFor reports whether, since the span started, a goroutine of this
// process waited at least d, ready to run, before it ran.
func (w stallWatch) stalledFor(d time.Duration) bool {
	if w.counts == nil {
		return false
	}
	h := readSchedLatencies()
	if h == nil || len(h.Counts) != len(w.counts) {
		return false
	}
	for i := len(h.Counts) - 1; i >= 0 && h.Buckets[i] >= d.Seconds(); i-- {
		if h.Counts[i] > w.counts[i] {
			return true
		}
	}
	return false
}
