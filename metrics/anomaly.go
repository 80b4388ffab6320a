package metrics

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Anomaly detection: the daemon itself says, in plain words, what is wrong
// and what to do, in stats.json, shardfs stats, its log (once when a cause
// starts, once when it ends) and the gauge shardfs_anomaly{kind,subject}.
// Evaluate is called every few seconds over the last AnomalyWindow, or a
// store's last 512 answers if it gave more in that time: a cause shows,
// and clears, within seconds at a training job's read rates.
//
//   - slow_store: a store whose time to first byte, p90 over the window, is
//     at least SlowFactor times the median of the stores' p90s and at
//     least SlowFloor. The median of all stores, not the mean of the
//     others, so one slow store of three cannot raise the bar it is
//     measured against, and the floor keeps sub-millisecond noise on
//     loopback from counting. At least minFirstBytes answers of the store
//     in the window, so a handful of reads never decides: a slow store
//     that answers fewer (reads hedge around it) stays flagged until it
//     answers enough, and fast.
//   - store_down: a store marked down (it failed several reads in a row).
const (
	AnomalyWindow = 30 * time.Second
	SlowFactor    = 4
	SlowFloor     = 50 * time.Millisecond
	minFirstBytes = 20
)

// Anomaly is one cause that is active now.
type Anomaly struct {
	Kind    string    `json:"kind"`
	Subject string    `json:"subject"` // the store (or rank) it is about
	Since   time.Time `json:"since"`
	Reason  string    `json:"reason"`
	Fix     string    `json:"fix"`
}

// firstBytes keeps a store's recent times to first byte, with when they
// were observed.
type firstBytes struct {
	mu  sync.Mutex
	at  [512]time.Time
	d   [512]time.Duration
	pos int
}

func (f *firstBytes) add(now time.Time, d time.Duration) {
	f.mu.Lock()
	f.at[f.pos%len(f.at)], f.d[f.pos%len(f.d)] = now, d
	f.pos++
	f.mu.Unlock()
}

// since returns the times observed after t.
func (f *firstBytes) since(t time.Time) []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []time.Duration
	for i := range min(f.pos, len(f.at)) {
		if f.at[i].After(t) {
			out = append(out, f.d[i])
		}
	}
	return out
}

// quantile is the q-quantile of ds (sorted in place).
func quantile(ds []time.Duration, q float64) time.Duration {
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// anomalies is the detector's state.
type anomalies struct {
	mu     sync.Mutex
	active map[string]Anomaly // by kind + subject
	gauge  *prometheus.GaugeVec
	log    *slog.Logger
}

func newAnomalies() *anomalies {
	return &anomalies{active: map[string]Anomaly{}, log: slog.New(slog.DiscardHandler),
		gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "shardfs_anomaly",
			Help: "1 while the daemon sees the anomaly kind about subject (a store or a rank); see shardfs stats for the reason and the fix."}, []string{"kind", "subject"})}
}

// SetLogger makes the detector log each cause once when it starts and once
// when it ends.
func (m *Metrics) SetLogger(l *slog.Logger) {
	if l != nil {
		m.anomalies.log = l
	}
}

// Evaluate looks at the last AnomalyWindow and updates the active anomalies.
func (m *Metrics) Evaluate(now time.Time) {
	found := map[string]Anomaly{}
	add := func(a Anomaly) { found[a.Kind+"\x00"+a.Subject] = a }
	p90 := make([]time.Duration, len(m.stores))
	var measured []time.Duration
	for i, s := range m.stores {
		if s.State.Load() == StoreDown {
			add(Anomaly{Kind: "store_down", Subject: m.names[i],
				Reason: fmt.Sprintf("store %s failed several reads in a row and is marked down; reads decode around it from parity", m.names[i]),
				Fix:    "check the store's server, disk and network; shardfs probes it and takes it back by itself when it answers"})
		}
		ds := s.recent.since(now.Add(-AnomalyWindow))
		if len(ds) >= minFirstBytes {
			p90[i] = quantile(ds, 0.9)
			measured = append(measured, p90[i])
		} else {
			p90[i] = -1
		}
	}
	if len(measured) >= 2 {
		median := quantile(slices.Clone(measured), 0.5)
		for i, d := range p90 {
			if d >= SlowFloor && d >= SlowFactor*median {
				add(Anomaly{Kind: "slow_store", Subject: m.names[i],
					Reason: fmt.Sprintf("store %s answers in %v (p90 of its time to first byte over the last %v), %.1f times the median store's %v", m.names[i], d.Round(time.Millisecond), AnomalyWindow, float64(d)/float64(max(median, 1)), median.Round(time.Millisecond)),
					Fix:    "reads hedge around it, at the cost of parity decodes: check the store's load, disk and network path (shardfs_store_first_byte_seconds shows it)"})
			}
		}
	}
	a := m.anomalies
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, old := range a.active {
		if _, ok := found[k]; !ok && old.Kind == "slow_store" {
			if i := slices.Index(m.names, old.Subject); i >= 0 && p90[i] < 0 {
				found[k] = old // too few answers to clear it
			}
		}
	}
	for k, x := range found {
		if old, ok := a.active[k]; ok {
			x.Since = old.Since
		} else {
			x.Since = now
			a.log.Warn("anomaly", "kind", x.Kind, "subject", x.Subject, "reason", x.Reason, "fix", x.Fix)
			a.gauge.WithLabelValues(x.Kind, x.Subject).Set(1)
		}
		a.active[k] = x
	}
	for k, old := range a.active {
		if _, ok := found[k]; !ok {
			delete(a.active, k)
			a.log.Info("anomaly cleared", "kind", old.Kind, "subject", old.Subject, "after", now.Sub(old.Since).Round(time.Second))
			a.gauge.WithLabelValues(old.Kind, old.Subject).Set(0)
		}
	}
}

// Anomalies returns the active anomalies, oldest first.
func (m *Metrics) Anomalies() []Anomaly {
	a := m.anomalies
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Anomaly, 0, len(a.active))
	for _, x := range a.active {
		out = append(out, x)
	}
	slices.SortFunc(out, func(x, y Anomaly) int {
		return cmp.Or(x.Since.Compare(y.Since), cmp.Compare(x.Kind, y.Kind), cmp.Compare(x.Subject, y.Subject))
	})
	return out
}
