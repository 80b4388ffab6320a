package erasure

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/shardfs/shardfs/backend"
)

// health tracks each store's recent latency and failures. A store that fails
// several times in a row is marked down and read around without paying a
// timeout. It stays down until something it answers proves it back: when
// its backoff period ends, one small probe (at most one at a time) asks it,
// and a last-resort read that succeeds counts too. No read ever waits on a
// store marked down beyond ProbeTimeout.
//
// Slowness is not failure: a read that loses a hedge race only makes the
// store a suspect, and one small probe request (at most one per store at a
// time) decides. A store that cannot answer the probe within SuspectTimeout
// is down; one that answers was merely busy.
type health struct {
	mu      sync.Mutex // guards stores and probing
	stores  []storeHealth
	probing []bool
	now     func() time.Time
	opts    HealthOptions
	report  func(store int, down bool)
	// probe asks store one small question; an answer of any kind, even "no
	// such object", proves it is up. nil: a store is back when its backoff ends.
	probe func(ctx context.Context, store int) error
	// excluded stores are never read; set once, before use.
	excluded []bool
}

// HealthOptions tune health tracking and hedging. Zero fields take defaults.
type HealthOptions struct {
	Strikes      int           // consecutive failures that mark a store down (3)
	MinBackoff   time.Duration // first down period (1s)
	MaxBackoff   time.Duration // longest down period (10s)
	HedgeFloor   time.Duration // smallest hedge deadline (150ms)
	HedgeFactor  float64       // deadline = factor × recent p95 latency (3)
	HedgeRate    float64       // plus bytes / this many bytes per second (100 MB/s)
	DisableHedge bool
	// SuspectTimeout bounds the probe of a store that lost a hedge race (2s).
	SuspectTimeout time.Duration
	// ProbeTimeout bounds a last-resort read from a store marked down (1s),
	// so reads fail fast while more than m stores stay down.
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

type storeHealth struct {
	strikes   int
	corrupt   int // checksum failures since its last read that verified
	downUntil time.Time
	backoff   time.Duration
	down      bool
	lat       [64]time.Duration // ring of recent successful latencies
	n         int
	reads     map[*pendingRead]struct{} // reads in flight
}

// pendingRead is a read in flight on a store, for lagging.
type pendingRead struct {
	start time.Time
	fb    *backend.FirstByte
}

func newHealth(n int, opts HealthOptions, report func(int, bool)) *health {
	opts.fill()
	return &health{stores: make([]storeHealth, n), probing: make([]bool, n), excluded: make([]bool, n),
		now: time.Now, opts: opts, report: report}
}

// skip reports whether store is down. Past its backoff, it starts a probe
// that can bring the store back, and still says down until then.
func (h *health) skip(store int) bool {
	h.mu.Lock()
	s := &h.stores[store]
	switch {
	case !s.down:
		h.mu.Unlock()
		return false
	case h.probe == nil:
		down := h.now().Before(s.downUntil)
		h.mu.Unlock()
		return down
	case h.now().Before(s.downUntil) || h.probing[store]:
		h.mu.Unlock()
		return true
	}
	h.probing[store] = true
	h.mu.Unlock()
	go h.runProbe(store, h.opts.ProbeTimeout)
	return true
}

// ok records a success: the store is healthy again.
func (h *health) ok(store int, d time.Duration) {
	h.mu.Lock()
	s := &h.stores[store]
	s.lat[s.n%len(s.lat)] = d
	s.n++
	s.strikes = 0
	wasDown := s.down
	s.down = false
	if s.corrupt == 0 {
		// A store that served wrong bytes keeps its backoff until a read
		// from it verifies: its next checksum failure sends it down for
		// longer, not for the first period again.
		s.backoff = 0
	}
	h.mu.Unlock()
	if wasDown {
		h.report(store, false)
	}
}

// fail records a failure: the store did not answer or refused.
func (h *health) fail(store int) { h.strike(store, 1) }

// corrupted records a read whose bytes failed their checksums: the store
// answers, with wrong bytes. Strikes of this kind are cleared only by a
// read that verifies (verified), not by a probe or an answer alone, so a
// store that keeps serving flipped bytes stays down, for ever longer
// periods, and reads stop going to it first.
func (h *health) corrupted(store int) {
	h.mu.Lock()
	h.stores[store].corrupt++
	n := h.stores[store].corrupt
	h.mu.Unlock()
	if n >= h.opts.Strikes {
		h.strike(store, h.opts.Strikes)
	}
}

// verified records a read from store whose bytes passed their checksums.
func (h *health) verified(store int) {
	h.mu.Lock()
	h.stores[store].corrupt = 0
	h.mu.Unlock()
}

// strike adds n strikes.
func (h *health) strike(store, n int) {
	h.mu.Lock()
	s := &h.stores[store]
	s.strikes += n
	mark := false
	if s.strikes >= h.opts.Strikes && (!s.down || !h.now().Before(s.downUntil)) {
		if s.backoff == 0 {
			s.backoff = h.opts.MinBackoff
		} else {
			s.backoff = min(2*s.backoff, h.opts.MaxBackoff)
		}
		s.downUntil = h.now().Add(s.backoff)
		mark = !s.down
		s.down = true
	}
	h.mu.Unlock()
	if mark {
		h.report(store, true)
	}
}

// begin registers a read from store that starts now; the caller calls end
// with the result when the read returns.
func (h *health) begin(store int, fb *backend.FirstByte) *pendingRead {
	rd := &pendingRead{start: h.now(), fb: fb}
	h.mu.Lock()
	s := &h.stores[store]
	if s.reads == nil {
		s.reads = map[*pendingRead]struct{}{}
	}
	s.reads[rd] = struct{}{}
	h.mu.Unlock()
	return rd
}

func (h *health) end(store int, rd *pendingRead) {
	h.mu.Lock()
	delete(h.stores[store].reads, rd)
	h.mu.Unlock()
}

// lagging reports whether a read from store that started at start and has
// not answered is slow compared with the rest of the set: at least need
// other stores (those a hedge would ask) have no unanswered read in flight
// for half its age or longer. When the whole set is that slow together, the
// machine or an endpoint the stores share is overloaded: a hedge would add
// need more requests to the same queue and make every read slower still.
func (h *health) lagging(store int, start time.Time, need int) bool {
	now := h.now()
	half := now.Sub(start) / 2
	h.mu.Lock()
	defer h.mu.Unlock()
	keepingUp := 0
	for i := range h.stores {
		s := &h.stores[i]
		if i == store || h.excluded[i] || s.down {
			continue
		}
		behind := false
		for rd := range s.reads {
			if !rd.fb.Arrived() && now.Sub(rd.start) >= half {
				behind = true
				break
			}
		}
		if !behind {
			keepingUp++
		}
	}
	return keepingUp >= need
}

// deadline is how long a read of n bytes from store may take before it is hedged.
func (h *health) deadline(store int, n int) time.Duration {
	h.mu.Lock()
	s := &h.stores[store]
	k := min(s.n, len(s.lat))
	lat := slices.Clone(s.lat[:k])
	h.mu.Unlock()
	d := h.opts.HedgeFloor
	if k >= 8 {
		slices.Sort(lat)
		p95 := lat[k*95/100]
		d = max(d, time.Duration(h.opts.HedgeFactor*float64(p95)))
	}
	return d + time.Duration(float64(n)/h.opts.HedgeRate*float64(time.Second))
}

// streamAllowance is how much longer than its hedge deadline a read may
// take once its store has answered: its bytes may share our bandwidth with
// many other reads, but a store that stalls mid-body is still hedged
// around, after three more deadlines plus n bytes at 5 MB/s.
func (h *health) streamAllowance(deadline time.Duration, n int) time.Duration {
	return 3*deadline + time.Duration(float64(n)/5e6*float64(time.Second))
}

// suspect probes a store that was slower than its hedge deadline, unless a
// probe of it is already running. No answer within SuspectTimeout marks it
// down at once; an answer of any kind clears it: slowness is not loss.
func (h *health) suspect(store int) {
	h.mu.Lock()
	if h.probe == nil || h.probing[store] {
		h.mu.Unlock()
		return
	}
	h.probing[store] = true
	h.mu.Unlock()
	go h.runProbe(store, h.opts.SuspectTimeout)
}

// runProbe asks the store once; probing[store] is set by the caller.
func (h *health) runProbe(store int, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	start := time.Now()
	err := h.probe(ctx, store)
	cancel()
	switch {
	case err == nil || errors.Is(err, backend.ErrNotExist) || errors.Is(err, backend.ErrShortRead):
		h.ok(store, time.Since(start))
	case errors.Is(err, context.DeadlineExceeded) || storeFault(err):
		h.strike(store, h.opts.Strikes)
	}
	h.mu.Lock()
	h.probing[store] = false
	h.mu.Unlock()
}

// probeTimeout bounds a last-resort read of n bytes from a store marked down.
func (h *health) probeTimeout(n int) time.Duration {
	return h.opts.ProbeTimeout + time.Duration(float64(n)/h.opts.HedgeRate*float64(time.Second))
}

// maxDeadline is the longest hedge deadline of any store for n bytes: how
// long a decode waits on what is in flight before asking one more fragment.
func (h *health) maxDeadline(n int) time.Duration {
	var d time.Duration
	for i := range h.stores {
		d = max(d, h.deadline(i, n))
	}
	return d
}
