package prefetch

import (
	"math"
	"time"

	"github.com/shardfs/shardfs/metrics"
)

// measure updates the consumption-rate estimate once a second, from the
// bytes this reader served (its own count: the lead follows what its
// readers consume, not a metric that reports it).
func (r *Reader) measure() {
	defer r.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last, lastT := r.served.Load(), time.Now()
	for {
		select {
		case <-r.ctx.Done():
			return
		case now := <-t.C:
			served := r.served.Load()
			inst := float64(served-last) / now.Sub(lastT).Seconds()
			last, lastT = served, now
			r.mu.Lock()
			r.rate = 0.5*r.rate + 0.5*inst
			r.mu.Unlock()
			r.retune()
		}
	}
}

func (r *Reader) observeLatency(d time.Duration) {
	r.mu.Lock()
	if r.latency == 0 {
		r.latency = d.Seconds()
	} else {
		r.latency = 0.8*r.latency + 0.2*d.Seconds()
	}
	r.mu.Unlock()
}

// observeSpan records the bytes of a prefetch GET, for the depth.
func (r *Reader) observeSpan(n int64) {
	r.mu.Lock()
	if r.spanLen == 0 {
		r.spanLen = float64(n)
	} else {
		r.spanLen = 0.8*r.spanLen + 0.2*float64(n)
	}
	r.mu.Unlock()
}

// retune sets the prefetch GETs in flight from the demand (depthFor), and
// publishes the depth with what it was computed from.
func (r *Reader) retune() {
	r.mu.Lock()
	rate, lat, span := r.rate, r.latency, r.spanLen
	r.mu.Unlock()
	depth := depthFor(rate, lat, span, r.cfg.PrefetchGET, r.cfg.MaxPrefetchGET)
	r.prefGets.setLimit(depth)
	_, used := r.prefGets.state()
	d := metrics.Depth{Slots: int64(depth), InFlight: int64(used), Ceiling: int64(r.cfg.MaxPrefetchGET), LatencySeconds: lat, DemandBytesPerSecond: rate}
	if span > 0 {
		d.DemandGETsPerSecond = rate / span
	}
	r.m.SetDepth(d)
}

// lead is the bytes to keep ahead of the slowest reader.
func (r *Reader) lead() int64 {
	r.mu.Lock()
	rate, lat := r.rate, r.latency
	r.mu.Unlock()
	want := rate * (lat + r.cfg.Margin.Seconds())
	if math.IsNaN(want) {
		want = 0
	}
	return min(r.cfg.Budget, max(r.cfg.MinLead, int64(want)))
}

func (r *Reader) currentRate() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rate
}

// maxLeadSeconds caps the seconds of reading a lead is said to cover: an
// idle reader's rate decays toward zero, and bytes over a vanishing rate
// gave leads of 10^25 seconds (issue 40). An hour is "not short of bytes".
const maxLeadSeconds = 3600

// leadSeconds is how long ahead bytes last at rate bytes per second.
func leadSeconds(ahead int64, rate float64) float64 {
	if ahead <= 0 {
		return 0
	}
	if rate <= 0 || float64(ahead)/rate > maxLeadSeconds {
		return maxLeadSeconds
	}
	return float64(ahead) / rate
}
