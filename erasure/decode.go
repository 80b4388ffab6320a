package erasure

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/shardfs/shardfs/backend"
)

// decode returns fragments' bytes [A,B) (block-aligned), decoded
// stripe by stripe: each block stripe needs k fragments whose block there
// verified, so blocks lost in different fragments at different stripes do
// not add up. known holds reads already made (a failed or partly bad primary;
// errSlow for one that is merely late). It returns the data fragments, or
// every fragment when all is set; readAll reads every fragment first (repair
// uses the good blocks of damaged fragments too).
//
// Candidates are asked data first, then parity, then stores marked down,
// which are probed with a short timeout rather than waited for. A fetch that
// outlives the hedge deadline is not cancelled: another candidate is asked
// beside it, so no single hung store can hold a decode.
//
// Its steps: choose the candidates (newDecoding), fail at once when the
// stores that answer cannot make a stripe (tooFewToTry), ask until every
// stripe has k usable blocks, hedging what is late (gather), and
// reconstruct stripe by stripe (reconstruct).
func (r *Reader) decode(ctx context.Context, sh *Shard, A, B int64, known map[int]fragRead, all, readAll bool) ([][]byte, error) {
	d := r.newDecoding(ctx, sh, A, B, known)
	if !readAll {
		if err := d.tooFewToTry(); err != nil {
			return nil, err
		}
	}
	d.cands = append(d.cands, d.lastResort...)
	if err := d.gather(ctx, readAll); err != nil {
		return nil, err
	}
	return d.reconstruct(all)
}

// The state of one fragment in a decode.
const (
	fragUntried = iota
	fragPending
	fragDone
)

// decoding is one decode's fragments: which are asked, in what order, and
// what each read gave.
type decoding struct {
	r       *Reader
	sh      *Shard
	A, B    int64
	L, nblk int // the range's length and blocks
	state   []int
	reads   []fragRead
	// forced fragments are on stores marked down: asked with a probe's
	// timeout, as a last resort.
	forced []bool
	// cands are the fragments to ask, in order, from next on; the first
	// healthy of them are on stores not marked down. lastResort are
	// appended to them once tooFewToTry has counted them.
	cands, lastResort []int
	healthy, next     int
	inFlight          int
	// answered and launched time each read in flight, for the hedge.
	answered []backend.FirstByte
	launched []time.Time
}

// newDecoding sorts the fragments into those known (read already), those
// to ask, and the last resorts: late, or on stores marked down.
func (r *Reader) newDecoding(ctx context.Context, sh *Shard, A, B int64, known map[int]fragRead) *decoding {
	total := r.codec.Total()
	bs := int64(r.codec.BlockSize)
	d := &decoding{r: r, sh: sh, A: A, B: B, L: int(B - A), nblk: int((B - A + bs - 1) / bs),
		state: make([]int, total), reads: make([]fragRead, total), forced: make([]bool, total),
		answered: make([]backend.FirstByte, total), launched: make([]time.Time, total)}
	for f := 0; f < total; f++ {
		store := r.Placement(sh.ID, f)
		fr, isKnown := known[f]
		switch {
		case r.excluded[store]:
			d.state[f], d.reads[f] = fragDone, r.readFrag(ctx, sh, f, A, B, false, nil) // fails at once, naming why
		case isKnown && fr.err != nil && (errors.Is(fr.err.Err, errSlow) || errors.Is(fr.err.Err, ErrStoreDown)):
			// Late, or on a store marked down: not lost. Asked again only
			// as a last resort, a store marked down only briefly.
			d.lastResort = append(d.lastResort, f)
			d.reads[f] = fr
			d.forced[f] = errors.Is(fr.err.Err, ErrStoreDown) || r.stores[store].Down()
		case isKnown:
			d.state[f], d.reads[f] = fragDone, fr
		case r.stores[store].Down():
			d.lastResort = append(d.lastResort, f)
			d.forced[f] = true
		default:
			d.cands = append(d.cands, f)
		}
	}
	d.healthy = len(d.cands)
	return d
}

// tooFewToTry fails at once when the stores that answer cannot make a
// stripe: asking the ones marked down for not answering would cost each
// read their probe timeout, on every read, while they stay down. Their
// background probes (backend.Health) bring them back.
func (d *decoding) tooFewToTry() error {
	r, sh, total := d.r, d.sh, d.r.codec.Total()
	possible := d.healthy
	for _, f := range d.lastResort {
		if !r.stores[r.Placement(sh.ID, f)].Unreachable() {
			possible++ // late, or down for wrong bytes: worth asking again
		}
	}
	for f := 0; f < total; f++ {
		if d.state[f] == fragDone && d.reads[f].err == nil {
			possible++
		}
	}
	if possible >= r.codec.Data {
		return nil
	}
	failed := map[int]*FragmentError{}
	for f := 0; f < total; f++ {
		store := r.Placement(sh.ID, f)
		switch {
		case d.reads[f].err != nil:
			failed[f] = d.reads[f].err
		case r.stores[store].Unreachable():
			failed[f] = &FragmentError{Shard: sh.ID, Frag: f, Store: store, StoreName: r.stores[store].String(), Err: ErrStoreDown}
		case d.state[f] != fragDone:
			failed[f] = &FragmentError{Shard: sh.ID, Frag: f, Store: store, StoreName: r.stores[store].String(), Err: errNotAsked}
		}
	}
	return r.tooFew(sh, failed)
}

// usable is how many fragments read so far can be trusted at block blk.
func (d *decoding) usable(blk int) int {
	n := 0
	for f := range d.state {
		if d.state[f] == fragDone && d.reads[f].usable(blk) {
			n++
		}
	}
	return n
}

// shortfall is how many more usable fragments the worst stripe needs.
func (d *decoding) shortfall() int {
	total := len(d.state)
	worst := total
	for b := 0; b < d.nblk && worst > 0; b++ {
		worst = min(worst, d.usable(b))
	}
	return d.r.codec.Data - worst
}

// fragResult is one fragment's read, as it comes back.
type fragResult struct {
	f  int
	fr fragRead
}

// launch asks the next candidate, if any is left, its answer to results.
func (d *decoding) launch(pctx context.Context, results chan<- fragResult) bool {
	r, sh, cands, next := d.r, d.sh, d.cands, d.next
	if next >= len(cands) {
		return false
	}
	// Ask a store that is not queueing before one that is (backend.Limit):
	// a hedge never piles onto a store already behind while another can answer.
	if next < d.healthy && backend.Queueing(r.stores[r.Placement(sh.ID, cands[next])]) {
		for i := next + 1; i < d.healthy; i++ {
			if !backend.Queueing(r.stores[r.Placement(sh.ID, cands[i])]) {
				c := cands[i]
				copy(cands[next+1:i+1], cands[next:i])
				cands[next] = c
				break
			}
		}
	}
	f := cands[next]
	d.next++
	d.state[f] = fragPending
	d.launched[f] = time.Now()
	d.inFlight++
	go func() {
		c := pctx
		if d.forced[f] {
			var cancel context.CancelFunc
			c, cancel = context.WithTimeout(pctx, r.stores[r.Placement(sh.ID, f)].ProbeTimeout(d.L))
			defer cancel()
		}
		results <- fragResult{f, r.readFrag(c, sh, f, d.A, d.B, d.forced[f], &d.answered[f])}
	}()
	return true
}

// gather asks fragments until every stripe has k usable blocks (readAll:
// every fragment), hedging the reads that are late: at the hedge deadline
// one more fragment is asked beside them, and with none left, their
// stores are probed; once every read in flight is on a store proven down,
// it stops waiting. It fails when a stripe stays short.
func (d *decoding) gather(ctx context.Context, readAll bool) error {
	r, sh, total := d.r, d.sh, len(d.state)
	results := make(chan fragResult, total)
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hg := newHedger(ctx, r.maxDeadline(d.L), d.L)
	defer hg.stop()
wait:
	for {
		if readAll {
			for d.launch(pctx, results) {
			}
		} else {
			for d.inFlight < d.shortfall() && d.launch(pctx, results) {
			}
		}
		if d.inFlight == 0 || !readAll && d.shortfall() <= 0 {
			break
		}
		select {
		case res := <-results:
			d.inFlight--
			d.state[res.f], d.reads[res.f] = fragDone, res.fr
			if e := res.fr.err; e != nil && errors.Is(e.Err, ErrStoreDown) && !d.forced[res.f] {
				// Marked down since this decode began (another fragment of
				// it failed its checksums there): its blocks may still be
				// the ones a stripe needs, so it is asked as a last resort.
				d.forced[res.f], d.state[res.f] = true, fragUntried
				d.cands = append(d.cands, res.f)
			}
		case <-hg.C():
			streaming := true
			for f := 0; f < total; f++ {
				streaming = streaming && (d.state[f] != fragPending || r.streaming(&d.answered[f], r.Placement(sh.ID, f), d.launched[f], 1))
			}
			if !hg.late(streaming) {
				continue // every store asked is streaming: load, not slowness
			}
			// What is in flight is late: ask one more fragment beside it.
			// With none left to ask, probe the late stores: once every
			// fetch in flight is on a store proven not to answer, waiting
			// longer cannot help, so fail now instead of at the caller's
			// deadline. A store marked down for wrong bytes is not that:
			// it answers, and on a busy machine after the deadline; a read
			// asked of it as a last resort is bounded by its probe timeout
			// (launch), so it is waited for.
			if !d.launch(pctx, results) {
				allUnreachable := true
				for f := 0; f < total; f++ {
					if d.state[f] != fragPending {
						continue
					}
					store := r.Placement(sh.ID, f)
					r.stores[store].Suspect()
					allUnreachable = allUnreachable && r.stores[store].Unreachable()
				}
				if allUnreachable {
					d.inFlight = 0
					break wait
				}
			}
			hg.again()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if d.shortfall() <= 0 {
		return nil
	}
	failed := map[int]*FragmentError{}
	for f := 0; f < total; f++ {
		switch {
		case d.reads[f].err != nil:
			failed[f] = d.reads[f].err
		case d.state[f] != fragDone:
			store := r.Placement(sh.ID, f)
			failed[f] = &FragmentError{Shard: sh.ID, Frag: f, Store: store, StoreName: r.stores[store].String(), Err: errSlow}
		}
	}
	return r.tooFew(sh, failed)
}

// reconstruct decodes the range stripe by stripe from the fragments whose
// blocks verified: the data fragments, or every fragment when all is set.
// Runs of blocks with the same usable fragments are decoded in one call.
func (d *decoding) reconstruct(all bool) ([][]byte, error) {
	r, sh, total, L := d.r, d.sh, len(d.state), d.L
	bs := r.codec.BlockSize
	want := r.codec.Data
	if all {
		want = total
	}
	out := make([][]byte, total)
	for f := 0; f < want; f++ {
		if d.reads[f].whole() {
			out[f] = d.reads[f].data
		} else {
			out[f] = make([]byte, L)
		}
	}
	var rebuilt []int // stores whose fragments were decoded
	set := make([]bool, total)
	setOf := func(b int) {
		for f := range set {
			set[f] = d.state[f] == fragDone && d.reads[f].usable(b)
		}
	}
	for b0 := 0; b0 < d.nblk; {
		setOf(b0)
		first := slices.Clone(set)
		b1 := b0 + 1
		for ; b1 < d.nblk; b1++ {
			setOf(b1)
			if !slices.Equal(set, first) {
				break
			}
		}
		lo, hi := b0*bs, min(L, b1*bs)
		shards := make([][]byte, total)
		missing := false
		for f := 0; f < total; f++ {
			switch {
			case first[f]:
				shards[f] = d.reads[f].data[lo:hi]
				if out[f] != nil && !d.reads[f].whole() {
					copy(out[f][lo:hi], d.reads[f].data[lo:hi])
				}
			case out[f] != nil:
				shards[f] = out[f][lo:hi][:0] // reconstructed in place
				missing = true
				if s := r.Placement(sh.ID, f); !slices.Contains(rebuilt, s) {
					rebuilt = append(rebuilt, s)
				}
			}
		}
		if missing {
			var err error
			if all {
				err = r.codec.Reconstruct(shards)
			} else {
				err = r.codec.reconstruct(shards)
			}
			if err != nil {
				return nil, fmt.Errorf("shard %d: decode: %w", sh.ID, err)
			}
		}
		b0 = b1
	}
	if len(rebuilt) > 0 {
		slices.Sort(rebuilt)
		r.metrics.DegradedRead(rebuilt)
	}
	return out, nil
}
