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
// store. The runtime samples one scheduling in eight of each goroutine's,
// so a stall of a few goroutines can go unrecorded; the span's own end
// is the second witness: a request that returns a quarter of its bound
// after its deadline waited that long to run again (a store honours its
// context at once), so this process stalled at its end.

const schedLatencies = "/sched/latencies:seconds"

// stallWatch is the scheduler's latency counts at the start of a span.
type stallWatch struct {
	start   time.Time
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
	w := stallWatch{start: time.Now()}
	if h := readSchedLatencies(); h != nil {
		w.counts, w.buckets = slices.Clone(h.Counts), h.Buckets
	}
	return w
}

// stalled reports whether this process stalled in a span timed by bound
// that has just ended past it: a goroutine waited a quarter of the bound
// to run (the scheduler's record), or the span ended a quarter of the
// bound after it.
func (w stallWatch) stalled(bound time.Duration) bool {
	return time.Since(w.start)-bound >= bound/4 || w.stalledFor(bound/4)
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
