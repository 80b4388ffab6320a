package prefetch

import (
	"time"

	"github.com/shardfs/shardfs/layout"
)

// Prime fetches f's rank-epoch ahead of a reader that has not opened it
// yet: a mount knows where its job starts (the first batch of its first
// epoch), and a trainer opens that file seconds after the mount is up,
// once its model is built. Priming spends those seconds on the first
// batches, so the trainer's first batch does not wait a round of GETs
// (issue 57: 883–1,774 ms against tmpfs's 263–321).
//
// The primer is a handle at f's first member that reads nothing: the
// stream keeps the usual lead ahead of it (MinLead before any rate is
// measured, shared with the other streams), within the same budgets as
// a reader's. It does not count as a reader's position for the frontier,
// so a job that starts elsewhere leaves no member "still to be read"
// behind it. It ends when a reader opens any file of the same rank (the
// job has started, here or where it chose), or after hold, whichever is
// first; the bytes it fetched stay cached as any prefetch's do.
func (r *Reader) Prime(f *layout.FileMap, hold time.Duration) {
	if r.cfg.Disabled || f.Kind() == layout.IndexCSV {
		return
	}
	h := r.open(f, true)
	r.mu.Lock()
	if r.ctx.Err() != nil {
		r.mu.Unlock()
		h.Close()
		return
	}
	r.primers[h] = struct{}{}
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTimer(hold)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.ctx.Done():
		case <-h.ended:
		}
		r.endPrime(h)
	}()
}

// endPrime closes primer h. Only h's goroutine in Prime calls it, once.
// The handle is closed before h leaves r.primers, so Primed counts a
// primer until its position is gone from its stream: once Primed says
// none, no member is anyone's next use because of a primer.
func (r *Reader) endPrime(h *Handle) {
	h.Close()
	r.mu.Lock()
	delete(r.primers, h)
	r.mu.Unlock()
}

// endPrimesOf ends the primers of rank: a reader of it has opened a file.
// Caller holds r.mu.
func (r *Reader) endPrimesOfLocked(rank int) {
	for h := range r.primers {
		if h.f.Members().Order().Params.Rank == rank {
			select {
			case h.ended <- struct{}{}:
			default:
			}
		}
	}
}

// Primed is how many primers are open: rank-epochs fetched ahead of a
// reader that has not come yet.
func (r *Reader) Primed() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.primers)
}
