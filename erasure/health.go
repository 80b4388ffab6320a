package erasure

import (
	"time"

	"github.com/shardfs/shardfs/backend"
)

// HealthOptions tune store health and hedging (backend.Health). Zero fields
// take defaults.
type HealthOptions = backend.HealthOptions

// lagging reports whether a read from store that started at start and has
// not answered is slow compared with the rest of the set: at least need
// other stores (those a hedge would ask) have no unanswered read in flight
// for half its age or longer. When the whole set is that slow together, the
// machine or an endpoint the stores share is overloaded: a hedge would add
// need more requests to the same queue and make every read slower still.
func (r *Reader) lagging(store int, start time.Time, need int) bool {
	now := time.Now()
	half := now.Sub(start) / 2
	keepingUp := 0
	for i, s := range r.stores {
		if i == store || r.excluded[i] || s.MarkedDown() {
			continue
		}
		if !s.Stalled(now, half) {
			keepingUp++
		}
	}
	return keepingUp >= need
}

// maxDeadline is the longest hedge deadline of any store for n bytes: how
// long a decode waits on what is in flight before asking one more fragment.
func (r *Reader) maxDeadline(n int) time.Duration {
	var d time.Duration
	for _, s := range r.stores {
		d = max(d, s.Deadline(n))
	}
	return d
}
