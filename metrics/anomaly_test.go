package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// feed records n GETs of each store with the given times to first byte.
func feed(m *Metrics, n int, ttfb ...time.Duration) {
	for range n {
		for s, d := range ttfb {
			m.BackendRead(s, 0, 1000, 2*d, d, nil)
		}
	}
}

// One store of three answering 20 times slower is named, with the reason
// and the fix; the gauge says so; it clears once its slow answers age out
// of the window. Healthy stores with ordinary spread raise nothing.
func TestSlowStoreAnomaly(t *testing.T) {
	m := New([]string{"s0", "s1", "s2"})
	reg := prometheus.NewRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	feed(m, 40, 5*time.Millisecond, 9*time.Millisecond, 12*time.Millisecond)
	m.Evaluate(now)
	if a := m.Anomalies(); len(a) != 0 {
		t.Fatalf("healthy stores raised %+v", a)
	}
	feed(m, 40, 5*time.Millisecond, 200*time.Millisecond, 6*time.Millisecond)
	m.Evaluate(now)
	a := m.Anomalies()
	if len(a) != 1 || a[0].Kind != "slow_store" || a[0].Subject != "s1" || !strings.Contains(a[0].Reason, "s1 answers in") || a[0].Fix == "" {
		t.Fatalf("anomalies %+v, want slow_store on s1", a)
	}
	if g := testutil.ToFloat64(m.anomalies.gauge.WithLabelValues("slow_store", "s1")); g != 1 {
		t.Fatalf("gauge %v, want 1", g)
	}
	if s := m.Snapshot(); len(s.Anomalies) != 1 {
		t.Fatalf("stats.json anomalies %+v", s.Anomalies)
	}
	// Its answers age out of the window: too few to decide, it stays
	// flagged (reads that hedge around a slow store ask it less).
	m.Evaluate(now.Add(AnomalyWindow + time.Second))
	if a := m.Anomalies(); len(a) != 1 {
		t.Fatalf("with no answers in the window the anomaly cleared: %+v", a)
	}
	// It answers enough, and fast (more answers than a store's ring keeps,
	// so its slow ones are gone): cleared.
	feed(m, 600, 5*time.Millisecond, 6*time.Millisecond, 6*time.Millisecond)
	m.Evaluate(time.Now())
	if a := m.Anomalies(); len(a) != 0 || testutil.ToFloat64(m.anomalies.gauge.WithLabelValues("slow_store", "s1")) != 0 {
		t.Fatalf("after the store answered fast the anomaly is still active: %+v", a)
	}
	// Slow but under the floor: sub-millisecond noise never counts.
	m2 := New([]string{"a", "b", "c"})
	feed(m2, 40, 100*time.Microsecond, 2*time.Millisecond, 100*time.Microsecond)
	m2.Evaluate(time.Now())
	if a := m2.Anomalies(); len(a) != 0 {
		t.Fatalf("a 2 ms store raised %+v", a)
	}
	// Too few answers decide nothing.
	m3 := New([]string{"a", "b", "c"})
	feed(m3, minFirstBytes-1, time.Millisecond, time.Second, time.Millisecond)
	m3.Evaluate(time.Now())
	if a := m3.Anomalies(); len(a) != 0 {
		t.Fatalf("%d answers raised %+v", minFirstBytes-1, a)
	}
}

// A store marked down is an anomaly until it is healthy again.
func TestStoreDownAnomaly(t *testing.T) {
	m := New([]string{"s0", "s1"})
	m.StoreState(1, true)
	m.Evaluate(time.Now())
	if a := m.Anomalies(); len(a) != 1 || a[0].Kind != "store_down" || a[0].Subject != "s1" {
		t.Fatalf("anomalies %+v, want store_down on s1", a)
	}
	m.StoreState(1, false)
	m.Evaluate(time.Now())
	if a := m.Anomalies(); len(a) != 0 {
		t.Fatalf("after the store came back: %+v", a)
	}
}
