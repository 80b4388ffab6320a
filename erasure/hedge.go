package erasure

import (
	"context"
	"time"

	"github.com/shardfs/shardfs/backend"
)

// hedger is the one rule, used by every read path, for when the reads in
// flight of one request are late and another fragment should be asked.
// At the hedge deadline, reads that are all streaming (their first byte
// arrived, or their store lags no more than the rest of the set: load, not
// one slow store) get one streaming allowance to finish; past it, or at
// once when one of them is neither, they are late. The caller then asks
// another fragment and makes the late stores suspects (Health.Suspect):
// slowness alone never marks a store down.
type hedger struct {
	deadline, allowance time.Duration
	extended            bool
	timer               *time.Timer
}

// newHedger starts the clock of a request of n bytes whose slowest store's
// hedge deadline is deadline. The caller's own deadline, if ctx has one,
// bounds both: the hedge is asked by a quarter of the time left, and a
// stream's allowance ends by half of it, so the fragments asked then have
// half the time left to arrive. A store's deadline comes from its own
// recent latency, and a store slow a moment ago can have one past the
// caller's read timeout: a read it then trickled failed at that timeout
// with no hedge asked (TestFlowMetricsLive, EIO at 10 s).
func newHedger(ctx context.Context, deadline time.Duration, n int) *hedger {
	allowance := streamAllowance(deadline, n)
	if until, ok := ctx.Deadline(); ok {
		left := time.Until(until)
		deadline = max(min(deadline, left/4), time.Millisecond)
		allowance = max(min(allowance, left/2-deadline), time.Millisecond)
	}
	return &hedger{deadline: deadline, allowance: allowance, timer: time.NewTimer(deadline)}
}

// streamAllowance is how much longer than its hedge deadline a read may
// take once its store has answered: its bytes may share our bandwidth with
// many other reads, but a store that stalls mid-body is still hedged
// around, after three more deadlines plus n bytes at 5 MB/s.
func streamAllowance(deadline time.Duration, n int) time.Duration {
	return 3*deadline + time.Duration(float64(n)/5e6*float64(time.Second))
}

// C fires when the reads in flight are due.
func (hg *hedger) C() <-chan time.Time { return hg.timer.C }

// late is called when C fired, with whether every read in flight is
// streaming: it reports whether they are late, or else grants the one
// streaming allowance (C fires again when it ends).
func (hg *hedger) late(streaming bool) bool {
	if streaming && !hg.extended {
		hg.extended = true
		hg.timer.Reset(hg.allowance)
		return false
	}
	return true
}

// Why a read was hedged (Metrics.HedgedRead).
const (
	// HedgeNoFirstByte: its store had not begun to answer by the deadline
	// while the others of its set kept up.
	HedgeNoFirstByte = "no_first_byte"
	// HedgeStalled: its store answered, then delivered too slowly to finish
	// within the streaming allowance.
	HedgeStalled = "stalled"
)

// HedgeReasons are every reason a read is hedged for.
var HedgeReasons = []string{HedgeNoFirstByte, HedgeStalled}

// reason is why the reads in flight were found late.
func (hg *hedger) reason() string {
	if hg.extended {
		return HedgeStalled
	}
	return HedgeNoFirstByte
}

// again gives the reads in flight, one more asked beside them, another
// deadline.
func (hg *hedger) again() { hg.timer.Reset(hg.deadline) }

func (hg *hedger) stop() { hg.timer.Stop() }

// streaming reports whether a read launched at start on store, whose first
// byte is fb, is on time though past its deadline: its first byte arrived,
// or fewer than need other stores keep up while it lags.
func (r *Reader) streaming(fb *backend.FirstByte, store int, start time.Time, need int) bool {
	return fb.Arrived() || !r.lagging(store, start, need)
}
