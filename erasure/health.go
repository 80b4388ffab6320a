package erasure

import (
	"slices"
	"sync"
	"time"
)

// health tracks each store's recent latency and failures. A store that fails
// (or loses a hedge race) several times in a row is marked down for a
// backoff period and read around without paying a timeout; when the period
// ends, the next read probes it, and one success brings it back.
type health struct {
	mu     sync.Mutex // guards stores
	stores []storeHealth
	now    func() time.Time
	opts   HealthOptions
	report func(store int, down bool)
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
}

type storeHealth struct {
	strikes   int
	downUntil time.Time
	backoff   time.Duration
	down      bool
	lat       [64]time.Duration // ring of recent successful latencies
	n         int
}

func newHealth(n int, opts HealthOptions, report func(int, bool)) *health {
	opts.fill()
	return &health{stores: make([]storeHealth, n), now: time.Now, opts: opts, report: report}
}

// skip reports whether store is down and its backoff has not ended.
func (h *health) skip(store int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := &h.stores[store]
	return s.down && h.now().Before(s.downUntil)
}

// ok records a success: the store is healthy again.
func (h *health) ok(store int, d time.Duration) {
	h.mu.Lock()
	s := &h.stores[store]
	s.lat[s.n%len(s.lat)] = d
	s.n++
	s.strikes = 0
	wasDown := s.down
	s.down, s.backoff = false, 0
	h.mu.Unlock()
	if wasDown {
		h.report(store, false)
	}
}

// fail records a failure or a lost hedge race.
func (h *health) fail(store int) {
	h.mu.Lock()
	s := &h.stores[store]
	s.strikes++
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
