package backend

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Health wraps a Store and keeps what its reads say about it: recent
// latency and failures. A store that fails several times in a row is marked
// down, so its callers read around it without paying a timeout. It stays
// down until something it answers proves it back: when its backoff period
// ends, one small probe (at most one at a time) asks it, and a last-resort
// read through the wrapper that succeeds counts too. No read need wait on a
// store marked down beyond ProbeTimeout: those in flight to which it has
// sent nothing when its silence marks it down are ended then.
//
// Slowness is not failure: a read that loses a hedge race only makes the
// store a suspect (Suspect), and one small probe decides. A store that
// answers nothing, neither the probe nor any other read, within
// SuspectTimeout is down; one that answers was merely busy. A timeout in
// which this process itself could not run is no verdict (runProbe).
//
// The wrapper sees every ReadAt and ReadAtV, their latency and their store
// faults. What it cannot see — bytes that failed or passed the caller's
// checksums, a read that lost a hedge race — the caller tells it (Corrupted,
// Verified, Suspect). Other methods pass through unobserved.
type Health struct {
	Store
	opts     HealthOptions
	probeKey string          // what a probe reads one byte of
	report   func(down bool) // called outside the lock when the state flips

	mu        sync.Mutex // guards the fields below
	strikes   int
	corrupt   int // checksum failures since its last read that verified
	downUntil time.Time
	backoff   time.Duration
	down      bool
	faulty    bool // down for store faults (not answering), not for wrong bytes
	probing   bool
	lat       [64]time.Duration // ring of recent successful latencies
	byLat     []time.Duration   // the same latencies, sorted: Deadline reads its p95 without sorting
	n         int
	answered  time.Time // when a read through the wrapper last got an answer
	// replied is when a read through the wrapper last ended with
	// anything the store sent, an error too (a 5xx, a body cut short),
	// rather than the request timeout's silence (abandonStalledReads).
	replied time.Time
	reads   map[*pendingRead]struct{} // reads in flight
	timer   *time.Timer               // the next background probe of a store marked down
	stopped bool                      // Stop was called: no more background probes
}

// HealthOptions tune health tracking and the hedge deadlines derived from
// it. Zero fields take defaults.
type HealthOptions struct {
	Strikes      int           // consecutive failures that mark a store down (3)
	MinBackoff   time.Duration // first down period (1s)
	MaxBackoff   time.Duration // longest down period (10s)
	HedgeFloor   time.Duration // smallest hedge deadline (150ms)
	HedgeFactor  float64       // deadline = factor × recent p95 latency (3)
	HedgeRate    float64       // plus bytes / this many bytes per second (100 MB/s)
	DisableHedge bool          // for the reader of a set: never hedge
	// SuspectTimeout bounds the probe of a store that lost a hedge race (2s).
	SuspectTimeout time.Duration
	// ProbeTimeout bounds a last-resort read from a store marked down (1s),
	// so reads fail fast while the stores a range needs stay down.
	ProbeTimeout time.Duration
}

func (o *HealthOptions) fill() {
	if o.Strikes <= 0 {
		o.Strikes = 3
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 10 * time.Second
	}
	if o.HedgeFloor <= 0 {
		o.HedgeFloor = 150 * time.Millisecond
	}
	if o.HedgeFactor <= 0 {
		o.HedgeFactor = 3
	}
	if o.HedgeRate <= 0 {
		o.HedgeRate = 100e6
	}
	if o.SuspectTimeout <= 0 {
		o.SuspectTimeout = 2 * time.Second
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = time.Second
	}
}

// pendingRead is a read in flight, for Stalled.
type pendingRead struct {
	start time.Time
	fb    *FirstByte
	// cancel ends the read when the store is marked down for not
	// answering before its first byte came (abandonStalledReads).
	cancel context.CancelCauseFunc
}

// errAbandoned is why a read that waited for its first byte from a store
// is ended when the store is marked down for not answering.
var errAbandoned = fmt.Errorf("%w: marked down for not answering while this read waited for its first byte", ErrUnavailable)

// WithHealth wraps s. A probe reads one byte of probeKey: the store need not
// hold it, since any answer, even "no such object", proves it up. report, if
// set, is told each time the store is marked down (true) or healthy again.
func WithHealth(s Store, probeKey string, opts HealthOptions, report func(down bool)) *Health {
	opts.fill()
	if report == nil {
		report = func(bool) {}
	}
	return &Health{Store: s, opts: opts, probeKey: probeKey, report: report}
}

// Unwrap returns the store the wrapper observes.
func (h *Health) Unwrap() Store { return h.Store }

// ReadAt reads through the store and records the outcome.
func (h *Health) ReadAt(ctx context.Context, key string, p []byte, off int64) error {
	ctx, rd := h.begin(ctx)
	err := h.Store.ReadAt(ctx, key, p, off)
	return h.end(ctx, rd, err)
}

// ReadAtV reads through the store and records the outcome.
func (h *Health) ReadAtV(ctx context.Context, key string, bufs [][]byte, off int64) error {
	ctx, rd := h.begin(ctx)
	err := h.Store.ReadAtV(ctx, key, bufs, off)
	return h.end(ctx, rd, err)
}

// ReadWhole reads through the store and records the outcome.
func (h *Health) ReadWhole(ctx context.Context, key string, max int64, into func(size int64) []byte) (int64, bool, error) {
	ctx, rd := h.begin(ctx)
	size, whole, err := h.Store.ReadWhole(ctx, key, max, into)
	return size, whole, h.end(ctx, rd, err)
}

// begin registers a read in flight, with a FirstByte in its context (the
// caller's, if it passed one), and a context of its own that
// abandonStalledReads can end.
func (h *Health) begin(ctx context.Context) (context.Context, *pendingRead) {
	fb, _ := ctx.Value(firstByteKey{}).(*FirstByte)
	if fb == nil {
		fb = &FirstByte{}
		ctx = WithFirstByte(ctx, fb)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	rd := &pendingRead{start: time.Now(), fb: fb, cancel: cancel}
	h.mu.Lock()
	if h.reads == nil {
		h.reads = map[*pendingRead]struct{}{}
	}
	h.reads[rd] = struct{}{}
	h.mu.Unlock()
	return ctx, rd
}

// end records the read's outcome: a success with the time to its first
// byte, or a strike for a store fault. A missing object, a short one or a
// caller that gave up says nothing about the store.
//
// A read abandoned when the store was marked down (abandonStalledReads)
// fails with errAbandoned, a store fault, which strikes nothing more: the
// faults that marked the store down were counted.
func (h *Health) end(ctx context.Context, rd *pendingRead, err error) error {
	abandoned := err != nil && errors.Is(context.Cause(ctx), errAbandoned)
	rd.cancel(nil)
	if abandoned {
		err = &Error{Store: h.String(), Op: "read", Err: errAbandoned}
	}
	h.mu.Lock()
	delete(h.reads, rd)
	if err == nil || errors.Is(err, ErrNotExist) || errors.Is(err, ErrShortRead) {
		h.answered = time.Now()
	}
	if storeReplied(err) || rd.fb.Arrived() {
		h.replied = time.Now()
	}
	h.mu.Unlock()
	switch {
	case err == nil:
		d := time.Since(rd.start)
		if first, ok := rd.fb.Since(rd.start); ok {
			d = first
		}
		h.ok(d)
	case abandoned:
	case IsStoreFault(err):
		h.strike(1, true)
	}
	return err
}

// IsStoreFault reports whether err says the store itself is sick
// (unreachable, failing, not answering within its request timeout, refusing
// our credentials), as opposed to one object being missing or damaged, or
// the caller giving up or running out of time.
func IsStoreFault(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrAccessDenied) || errors.Is(err, ErrNoBucket)
}

// Down reports whether the store is marked down. Past its backoff, it
// starts a probe that can bring the store back, and still says down until
// the probe answers.
func (h *Health) Down() bool {
	h.mu.Lock()
	if !h.down {
		h.mu.Unlock()
		return false
	}
	if time.Now().Before(h.downUntil) || h.probing {
		h.mu.Unlock()
		return true
	}
	h.probing = true
	h.mu.Unlock()
	go h.runProbe(h.opts.ProbeTimeout)
	return true
}

// Unreachable reports whether the store is marked down because it does not
// answer (as opposed to answering with wrong bytes), without probing it:
// asking it costs a timeout, not a quick answer.
func (h *Health) Unreachable() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.down && h.faulty
}

// MarkedDown reports whether the store is marked down, without probing it.
func (h *Health) MarkedDown() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.down
}

// ok records a success: the store is healthy again, unless it was marked
// down less than its backoff ago. That hysteresis keeps a store that
// answers with wrong bytes, or answers only now and then, from flapping
// between down and healthy on every read; a probe at the end of the
// backoff brings it back (probed says so).
func (h *Health) ok(d time.Duration) { h.answer(d, false) }

func (h *Health) answer(d time.Duration, probed bool) {
	h.mu.Lock()
	h.recordLatency(d)
	if h.down && !probed && time.Now().Before(h.downUntil) {
		h.mu.Unlock()
		return
	}
	h.strikes = 0
	wasDown := h.down
	h.down = false
	if h.corrupt == 0 {
		// A store that served wrong bytes keeps its backoff until a read
		// from it verifies: its next checksum failure sends it down for
		// longer, not for the first period again.
		h.backoff = 0
	}
	h.mu.Unlock()
	if wasDown {
		h.report(false)
	}
}

// Corrupted records a read whose bytes failed the caller's checksums: the
// store answers, with wrong bytes. Strikes of this kind are cleared only by
// a read that verifies (Verified), not by a probe or an answer alone, so a
// store that keeps serving flipped bytes stays down, for ever longer
// periods, and reads stop going to it first.
func (h *Health) Corrupted() {
	h.mu.Lock()
	h.corrupt++
	n := h.corrupt
	h.mu.Unlock()
	if n >= h.opts.Strikes {
		h.strike(h.opts.Strikes, false)
	}
}

// Verified records a read from the store whose bytes passed their checksums.
func (h *Health) Verified() {
	h.mu.Lock()
	h.corrupt = 0
	h.mu.Unlock()
}

// strike adds n strikes; enough of them in a row mark the store down.
// fault says they are store faults (no answer), not wrong bytes.
func (h *Health) strike(n int, fault bool) {
	h.mu.Lock()
	wasUnreachable := h.down && h.faulty
	h.strikes += n
	if fault && h.down {
		h.faulty = true
	}
	mark := false
	if h.strikes >= h.opts.Strikes && (!h.down || !time.Now().Before(h.downUntil)) {
		if h.backoff == 0 {
			h.backoff = h.opts.MinBackoff
		} else {
			h.backoff = min(2*h.backoff, h.opts.MaxBackoff)
		}
		h.downUntil = time.Now().Add(h.backoff)
		mark = !h.down
		if mark {
			h.faulty = fault
		}
		h.down = true
	}
	if h.down && !h.stopped {
		// Probe it in the background when the backoff ends, so that a
		// store that comes back is seen back on an idle mount too, and
		// reads need not ask a store marked down to find out.
		if h.timer == nil {
			h.timer = time.AfterFunc(time.Until(h.downUntil), h.backgroundProbe)
		} else {
			h.timer.Reset(time.Until(h.downUntil))
		}
	}
	if h.down && h.faulty && !wasUnreachable {
		h.abandonStalledReads()
	}
	h.mu.Unlock()
	if mark {
		h.report(true)
	}
}

// abandonStalledReads ends the reads in flight that have had no first
// byte, when the store is marked down for not answering (h.mu held).
//
// Those reads were asked before the faults that marked it down came back,
// and would wait for their own timeouts: a read's caller waiting on one
// (a prefetch in flight that a FUSE read waits on, or a fragment read
// whose hedge already failed) waited its whole --read-timeout with the
// store known down: in CI on c92419a, 9.9 s for one batch file
// (TestMoreThanMStoresHungBusy). Ended, they fail as a store fault, and
// their callers decode around the store or fail at once, as reads asked
// after the mark do. A read streaming bytes is answering, and is left to
// finish; so is every read of a store marked down for wrong bytes, which
// answers, and whose checksums decide. Reads asked after the mark (the
// last resorts and probes, bounded by ProbeTimeout) are not ended by the
// strikes that follow: this runs once, as the store goes down.
//
// Only a store that has sent nothing since a read began is hung to that
// read. Per-object failures mark a store down too, and it goes on
// answering: in CI on 996a65d, MinIO cut short the bodies of two rotten
// fragments on one store (unexpected EOF, store faults), which marked it
// down, and ending its reads in flight ended a healthy fragment's read
// that verify then counted as damaged (TestHealScrubFindsRotAndLoss). So
// a read is ended only when no read of the store has ended with anything
// the store sent, and none in flight has had its first byte, since the
// read began.
func (h *Health) abandonStalledReads() {
	for rd := range h.reads {
		if rd.fb.Arrived() || h.replied.After(rd.start) {
			continue
		}
		sent := false
		for other := range h.reads {
			sent = sent || other.fb.ArrivedAfter(rd.start)
		}
		if !sent {
			rd.cancel(errAbandoned)
		}
	}
}

// storeReplied says err came from something the store sent: an answer,
// or an error that is not silence (the request timeout), our own stall,
// or the caller's cancellation.
func storeReplied(err error) bool {
	var silent noAnswer
	switch {
	case err == nil:
		return true
	case errors.As(err, &silent), errors.Is(err, ErrStalled), errors.Is(err, errAbandoned),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	}
	return true
}

// backgroundProbe asks a store marked down whether it is back; strike
// re-arms it while the store stays down.
func (h *Health) backgroundProbe() {
	h.mu.Lock()
	if !h.down || h.stopped {
		h.mu.Unlock()
		return
	}
	if h.probing {
		h.timer.Reset(h.opts.MinBackoff)
		h.mu.Unlock()
		return
	}
	h.probing = true
	h.mu.Unlock()
	h.runProbe(h.opts.ProbeTimeout)
}

// Stop ends the background probes of the store.
func (h *Health) Stop() {
	h.mu.Lock()
	h.stopped = true
	if h.timer != nil {
		h.timer.Stop()
	}
	h.mu.Unlock()
}

// Stalled reports whether a read through the wrapper that started at least
// age before now has not had its first byte yet.
func (h *Health) Stalled(now time.Time, age time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for rd := range h.reads {
		if !rd.fb.Arrived() && now.Sub(rd.start) >= age {
			return true
		}
	}
	return false
}

// Deadline is how long a read of n bytes may take before it is hedged:
// HedgeFactor × the store's recent p95 latency, at least HedgeFloor, plus n
// bytes at HedgeRate.
func (h *Health) Deadline(n int) time.Duration {
	h.mu.Lock()
	k := len(h.byLat)
	var p95 time.Duration
	if k >= 8 {
		p95 = h.byLat[k*95/100]
	}
	h.mu.Unlock()
	d := max(h.opts.HedgeFloor, time.Duration(h.opts.HedgeFactor*float64(p95)))
	return d + time.Duration(float64(n)/h.opts.HedgeRate*float64(time.Second))
}

// recordLatency puts d in the ring of recent latencies, and in their sorted
// copy in place of the one it evicts. Every decode asks each store's
// Deadline, and sorting the window there cost 7% of the CPU of a decode
// (profile of erasure's TestDecodeMatrix); keeping it sorted costs one
// binary search and a move of at most 64 values per answer. The caller
// holds mu.
func (h *Health) recordLatency(d time.Duration) {
	slot := h.n % len(h.lat)
	if h.n >= len(h.lat) {
		old := h.lat[slot]
		i, _ := slices.BinarySearch(h.byLat, old)
		h.byLat = slices.Delete(h.byLat, i, i+1)
	}
	h.lat[slot] = d
	h.n++
	i, _ := slices.BinarySearch(h.byLat, d)
	h.byLat = slices.Insert(h.byLat, i, d)
}

// ProbeTimeout bounds a last-resort read of n bytes from the store while it
// is marked down.
func (h *Health) ProbeTimeout(n int) time.Duration {
	return h.opts.ProbeTimeout + time.Duration(float64(n)/h.opts.HedgeRate*float64(time.Second))
}

// Suspect probes a store that was slower than its hedge deadline, unless a
// probe of it is already running. No answer within SuspectTimeout, to the
// probe or to any other read, marks it down at once; an answer of any kind
// clears it: slowness is not loss.
func (h *Health) Suspect() {
	h.mu.Lock()
	if h.probing {
		h.mu.Unlock()
		return
	}
	h.probing = true
	h.mu.Unlock()
	go h.runProbe(h.opts.SuspectTimeout)
}

// runProbe asks the store; the caller set probing.
//
// A probe with no answer in its timeout marks the store down only when
// the store had the whole timeout to answer and used none of it. The
// timeout is wall time, and on a busy machine it counts our own waits too:
// the probe's goroutine waiting to run, our HTTP client waiting for a core.
// So:
//   - a store that answered anything else through the wrapper in that time
//     (a read that ended, or a first byte of one still in flight) was
//     busy, not down (CI: a file:// store, which cannot hang, was "proven
//     down" that way, and a RS(4,2) read with two stores already out
//     failed with every store answering);
//   - a timeout in a span where this process stalled (stallWatch: some
//     goroutine waited a quarter of the timeout to run, or the probe came
//     back a quarter of it late) proves nothing,
//     and the store is asked again, up to maxStalledProbes times, then
//     left as it was (CI: the probe's deadline ran out before it asked a
//     file:// store at all, 17 µs after it started to wait for the answer,
//     and every healthy store of the set was marked down).
//
// A store that answers nothing while this process runs is still down
// within one timeout; on a machine that stalls, within a few.
func (h *Health) runProbe(timeout time.Duration) {
	defer func() {
		h.mu.Lock()
		h.probing = false
		h.mu.Unlock()
	}()
	for try := 1; ; try++ {
		stalls := watchStalls()
		start := stalls.start
		fb := &FirstByte{}
		ctx, cancel := context.WithTimeout(WithFirstByte(context.Background(), fb), timeout)
		if stall := probeAboutToAsk.Load(); stall != nil {
			(*stall)()
		}
		err := h.Store.ReadAt(ctx, h.probeKey, make([]byte, 1), 0)
		cancel()
		silent := errors.Is(err, context.DeadlineExceeded) && !fb.Arrived() && !h.answeredSince(start)
		switch {
		case err == nil || errors.Is(err, ErrNotExist) || errors.Is(err, ErrShortRead):
			h.answer(time.Since(start), true)
		case errors.Is(err, context.DeadlineExceeded) && !silent:
			// Busy, not down: no strike, and no latency sample either (the
			// probe's time says nothing about the store's).
		case silent && stalls.stalled(timeout):
			if try < maxStalledProbes {
				continue
			}
			// Still stalled: no verdict. The next read that loses a hedge
			// race, or the next backoff's probe, asks again.
		case silent || IsStoreFault(err):
			h.strike(h.opts.Strikes, true)
		}
		return
	}
}

// maxStalledProbes bounds the probes one verdict asks while this process
// stalls through each of them.
const maxStalledProbes = 4

// probeAboutToAsk, when set, runs between the start of a probe's timeout
// and its request: where a busy machine takes a goroutine off its core and
// the timeout runs on. Tests stall there on purpose.
var probeAboutToAsk atomic.Pointer[func()]

// answeredSince reports whether a read through the wrapper got an answer
// after t: it ended with one, or its first byte came while it is still in
// flight (a large read streams for a while after the store has answered).
func (h *Health) answeredSince(t time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.answered.After(t) {
		return true
	}
	for rd := range h.reads {
		if rd.fb.ArrivedAfter(t) {
			return true
		}
	}
	return false
}
