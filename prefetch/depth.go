package prefetch

import (
	"context"
	"math"
	"sync"
)

// depthGate bounds the prefetch GETs in flight by a limit that moves with
// the demand (depthFor). semaphore.Weighted cannot change its size, so this
// is the one limit of the reader that is not one.
type depthGate struct {
	mu          sync.Mutex
	limit, used int
	wake        chan struct{} // closed when a slot frees or the limit rises; nil while nobody waits
}

func newDepthGate(limit int) *depthGate { return &depthGate{limit: max(limit, 1)} }

// acquire takes a slot, waiting for one while every slot is in use.
func (g *depthGate) acquire(ctx context.Context) error {
	for {
		g.mu.Lock()
		if g.used < g.limit {
			g.used++
			g.mu.Unlock()
			return nil
		}
		if g.wake == nil {
			g.wake = make(chan struct{})
		}
		wake := g.wake
		g.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		}
	}
}

func (g *depthGate) release() {
	g.mu.Lock()
	g.used--
	g.signalLocked()
	g.mu.Unlock()
}

// setLimit changes the number of slots. Lowering it takes effect as GETs
// finish: none in flight is cancelled.
func (g *depthGate) setLimit(n int) {
	g.mu.Lock()
	if n = max(n, 1); n > g.limit {
		g.signalLocked()
	}
	g.limit = n
	g.mu.Unlock()
}

func (g *depthGate) signalLocked() {
	if g.wake != nil {
		close(g.wake)
		g.wake = nil
	}
}

// state is the limit and the slots in use.
func (g *depthGate) state() (limit, used int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.limit, g.used
}

// depthMargin is the factor over Little's law that depthFor asks. Above 1,
// it makes the depth grow when it is what holds the readers back: the rate
// the readers get is then depth ÷ latency, so the next depth is
// depthMargin × the last, until the readers take no more or the ceiling
// holds it.
const depthMargin = 2

// depthFor is how many prefetch GETs to keep in flight, by Little's law:
// the readers' demand in GETs per second (bytes per second over the mean
// GET's bytes) times the seconds a GET takes, with depthMargin, within
// [floor, ceiling]. Unmeasured (nothing read yet), it is floor.
func depthFor(rate, latency, bytesPerGET float64, floor, ceiling int) int {
	ceiling = max(ceiling, floor)
	if !(rate > 0 && latency > 0 && bytesPerGET > 0) {
		return floor
	}
	want := depthMargin * rate / bytesPerGET * latency
	if want >= float64(ceiling) || math.IsInf(want, 0) {
		return ceiling
	}
	return max(floor, int(math.Ceil(want)))
}
