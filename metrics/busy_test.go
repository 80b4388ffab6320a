package metrics

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// busyStores simulates the times to first byte of identical stores seen
// from a daemon on a node whose cores are all busy: a few milliseconds
// each, a scheduler stall of 20-300 ms now and then (4% of answers), and
// now and then a whole burst of one store's answers stalled together (its
// GETs went out as the daemon lost the CPU). slow(s, tick) adds latency to
// store s's answers at that tick. It feeds perTick answers per store per
// 5-second tick and evaluates after each, and returns the slow_store
// anomalies raised per store.
func busyStores(t *testing.T, seed uint64, ticks, perTick int, slow func(s, tick int, rng *rand.Rand) time.Duration) (raised map[string]int, m *Metrics) {
	t.Helper()
	names := []string{"s0", "s1", "s2", "s3", "s4", "s5"}
	m = started(New(names))
	rng := rand.New(rand.NewPCG(seed, 7))
	start := time.Now()
	raised = map[string]int{}
	stall := func() time.Duration { return time.Duration(20+rng.IntN(280)) * time.Millisecond }
	for tick := range ticks {
		now := start.Add(time.Duration(tick) * 5 * time.Second)
		for s := range names {
			burst := rng.Float64() < 0.03
			for k := range perTick {
				d := time.Duration(float64(3*time.Millisecond) * math.Exp(0.5*rng.NormFloat64()))
				if burst && k < perTick/2 || rng.Float64() < 0.04 {
					d += stall()
				}
				if slow != nil {
					d += slow(s, tick, rng)
				}
				m.stores[s].recent.add(now.Add(time.Duration(k)*5*time.Second/time.Duration(perTick)), d)
			}
		}
		before := map[string]bool{}
		for _, a := range m.Anomalies() {
			before[a.Subject] = true
		}
		m.Evaluate(now.Add(5 * time.Second))
		for _, a := range m.Anomalies() {
			if a.Kind == "slow_store" && !before[a.Subject] {
				raised[a.Subject]++
			}
		}
	}
	return raised, m
}

// Issue 40 item 13: six identical loopback stores were named slow_store in
// turn during one cold read on a busy machine. A p90 over a window's few
// dozen answers is the tail, and a busy node's stalls land in one store's
// tail or another's by chance: the rule must not take that for a slow
// store. Over 10 simulated hours of such noise nothing is raised; a store
// that answers most reads 150 ms late is still named within the window.
func TestNoSlowStoreFromABusyNodesStalls(t *testing.T) {
	for seed := range uint64(10) {
		raised, _ := busyStores(t, seed, 720, 12, nil)
		if len(raised) > 0 {
			t.Fatalf("seed %d: identical stores on a busy node raised slow_store %v over 1 hour", seed, raised)
		}
	}
	// The control: from tick 100, store s3 answers 60% of reads 150 ms late.
	raised, m := busyStores(t, 3, 110, 12, func(s, tick int, rng *rand.Rand) time.Duration {
		if s == 3 && tick >= 100 && rng.Float64() < 0.6 {
			return 150 * time.Millisecond
		}
		return 0
	})
	if raised["s3"] != 1 || len(raised) != 1 {
		t.Fatalf("a store answering 60%% of reads 150 ms late: raised %v, want s3 once; active %v", raised, fmt.Sprint(kinds(m)))
	}
}
