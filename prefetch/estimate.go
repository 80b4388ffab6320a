package prefetch

import (
	"math"
	"time"
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
