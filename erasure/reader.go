package erasure

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardfs/shardfs/backend"
)

// ErrTooFewShards: more than m fragments of a range are lost; nothing is returned.
var ErrTooFewShards = errors.New("too few intact fragments to decode")

// ErrChecksum: a fragment's bytes do not match the checksum written at ingest.
var ErrChecksum = errors.New("checksum mismatch")

// FragmentError is the failure of one fragment read.
type FragmentError struct {
	Shard, Frag, Store int
	StoreName          string
	Err                error
	// BadBlocks, from CheckFragment, lists the fragment's blocks that failed
	// their checksums when the others are good; nil means the whole fragment.
	BadBlocks []int
}

func (e *FragmentError) Error() string {
	return fmt.Sprintf("shard %d fragment %d on store %d (%s): %v", e.Shard, e.Frag, e.Store, e.StoreName, e.Err)
}

func (e *FragmentError) Unwrap() error { return e.Err }

// TooFewError reports an unrecoverable range: it lists every failed fragment.
type TooFewError struct {
	Shard  int
	Failed []*FragmentError
}

func (e *TooFewError) Error() string {
	var names []string
	for _, f := range e.Failed {
		names = append(names, fmt.Sprintf("%d (%s): %v", f.Store, f.StoreName, f.Err))
	}
	return fmt.Sprintf("shard %d: %v: %d fragments lost, stores %s", e.Shard, ErrTooFewShards, len(e.Failed), strings.Join(names, "; "))
}

// Unwrap lets errors.Is see both ErrTooFewShards and each fragment's cause,
// such as backend.ErrNotExist when the objects are gone.
func (e *TooFewError) Unwrap() []error {
	errs := []error{ErrTooFewShards}
	for _, f := range e.Failed {
		errs = append(errs, f)
	}
	return errs
}

// Stores returns the indexes of the failed stores.
func (e *TooFewError) Stores() []int {
	var s []int
	for _, f := range e.Failed {
		s = append(s, f.Store)
	}
	return s
}

// Metrics receives read events. Implementations must be safe for concurrent use.
type Metrics interface {
	// BackendRead reports one ranged GET: its time, its time to first byte (0:
	// not reported by the store), why it was made, and its outcome.
	BackendRead(store, shard int, bytes int, d, firstByte time.Duration, kind ReadKind, err error)
	// ChecksumFailure reports a fragment range that failed its checksum.
	ChecksumFailure(store int)
	// DegradedRead reports a range decoded from survivors, with the stores
	// whose fragments were rebuilt (missing, late or bad there).
	DegradedRead(stores []int)
	// HedgedRead reports a slow read raced against a parity decode, and why
	// (HedgeNoFirstByte, HedgeStalled).
	HedgedRead(reason string)
	// StoreState reports a store marked down (true) or healthy again (false).
	StoreState(store int, down bool)
}

type nopMetrics struct{}

// NopMetrics is a Metrics that records nothing.
func NopMetrics() Metrics { return nopMetrics{} }

func (nopMetrics) BackendRead(int, int, int, time.Duration, time.Duration, ReadKind, error) {}
func (nopMetrics) ChecksumFailure(int)                                                      {}
func (nopMetrics) DegradedRead([]int)                                                       {}
func (nopMetrics) HedgedRead(string)                                                        {}
func (nopMetrics) StoreState(int, bool)                                                     {}

// stateLog rate-limits one store's health log lines: a change is logged at
// once, then at most one line a minute, which gives the state at its end
// and how many changes it stands for. (The metrics see every change.)
type stateLog struct {
	mu         sync.Mutex // guards the fields below
	last       time.Time
	suppressed int
	down       bool // the latest state reported
	pending    bool // a summary line is scheduled
}

const stateLogEvery = time.Minute

func (l *stateLog) report(log *slog.Logger, store int, name string, down bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = down
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < stateLogEvery {
		l.suppressed++
		if !l.pending {
			l.pending = true
			time.AfterFunc(l.last.Add(stateLogEvery).Sub(now), func() {
				l.mu.Lock()
				defer l.mu.Unlock()
				l.pending = false
				l.line(log, store, name)
			})
		}
		return
	}
	l.line(log, store, name)
}

// line logs the latest state; the caller holds mu.
func (l *stateLog) line(log *slog.Logger, store int, name string) {
	n := l.suppressed
	l.last, l.suppressed = time.Now(), 0
	if l.down {
		log.Warn("store marked down; reading around it", "store", store, "name", name, "changes_since_last_line", n)
	} else {
		log.Info("store healthy again", "store", store, "name", name, "changes_since_last_line", n)
	}
}

// Close stops the background probes of the stores marked down.
func (r *Reader) Close() {
	for _, s := range r.stores {
		s.Stop()
	}
}

// KeyFunc names the object of fragment frag of shard.
type KeyFunc func(shard, frag int) string

// Reader reads verified byte ranges of shards from the stores.
type Reader struct {
	codec    *Codec
	stores   []*backend.Health // each store, observed
	excluded []bool            // stores never read; set once, by NewReader
	hedge    bool
	key      KeyFunc
	number   func(shard int) int // ReaderOptions.Number
	metrics  Metrics
	log      *slog.Logger
}

// ReaderOptions are optional parts of a Reader; zero values are fine.
type ReaderOptions struct {
	Metrics Metrics
	Logger  *slog.Logger
	Health  HealthOptions
	// Exclude lists stores that are never read, such as a store that holds
	// another dataset of the same name: reads decode around them.
	Exclude []int
	// Number is the number by which shard's fragments were placed on the
	// stores (Params.Placement): nil, or the shard's own, but for a shard
	// numbered within its segment (manifest.Segment.Local).
	Number func(shard int) int
}

// ErrStoreDown: the store is marked down after repeated failures and is
// being read around until its backoff ends.
var ErrStoreDown = errors.New("store marked down after repeated failures")

// ErrExcluded: the store is not this dataset's (see ReaderOptions.Exclude).
var ErrExcluded = errors.New("store excluded: it holds another dataset or ingest")

// errNotAsked: a fragment left unread because the stores that answer
// cannot make a stripe with it.
var errNotAsked = errors.New("not asked: the stores that answer are too few to decode")

// errSlow: a read passed its hedge deadline. The fragment is not lost: a
// decode tries the others first and asks it again only as a last resort.
var errSlow = errors.New("slower than its hedge deadline")

// Placement is the store that holds fragment frag of shard.
func (r *Reader) Placement(shard, frag int) int {
	if r.number != nil {
		shard = r.number(shard)
	}
	return r.codec.Placement(shard, frag)
}

// NewReader returns a reader over stores, which must number k+m, in placement order.
func NewReader(c *Codec, stores []backend.Store, key KeyFunc, opts ReaderOptions) (*Reader, error) {
	if len(stores) != c.Total() {
		return nil, fmt.Errorf("%d stores given, the dataset needs k+m = %d", len(stores), c.Total())
	}
	r := &Reader{codec: c, key: key, number: opts.Number, metrics: opts.Metrics, log: opts.Logger, hedge: !opts.Health.DisableHedge,
		excluded: make([]bool, len(stores))}
	if r.metrics == nil {
		r.metrics = nopMetrics{}
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	for i, s := range stores {
		// A probe reads one byte of the store's fragment of shard 0; the
		// store need not hold it: any answer proves the store is up.
		logs := &stateLog{}
		r.stores = append(r.stores, backend.WithHealth(s, key(0, i), opts.Health, func(down bool) {
			r.metrics.StoreState(i, down)
			logs.report(r.log, i, s.String(), down)
		}))
	}
	for _, i := range opts.Exclude {
		if i >= 0 && i < len(stores) {
			r.excluded[i] = true
		}
	}
	return r, nil
}

// StoreDown reports whether store is currently marked down.
func (r *Reader) StoreDown(store int) bool { return r.stores[store].Down() }

// Codec returns the reader's codec.
func (r *Reader) Codec() *Codec { return r.codec }

// fragRead is fragment bytes [A,B) as read: the bytes, and which of their
// blocks failed their checksums; or why nothing usable came back.
type fragRead struct {
	data []byte
	bad  []bool // per block of [A,B); nil when every block verified
	err  *FragmentError
}

// usable reports whether block blk of the range can be trusted.
func (fr *fragRead) usable(blk int) bool { return fr.data != nil && (fr.bad == nil || !fr.bad[blk]) }

// whole reports whether every block verified.
func (fr *fragRead) whole() bool { return fr.data != nil && fr.bad == nil }

// readFrag reads fragment frag's bytes [A,B), A block-aligned, and checks
// every block. A store marked down is not asked unless force is set; an
// excluded store never is.
func (r *Reader) readFrag(ctx context.Context, sh *Shard, frag int, A, B int64, force bool, fb *backend.FirstByte) fragRead {
	store := r.Placement(sh.ID, frag)
	fail := func(err error) *FragmentError {
		return &FragmentError{Shard: sh.ID, Frag: frag, Store: store, StoreName: r.stores[store].String(), Err: err}
	}
	if r.excluded[store] {
		return fragRead{err: fail(ErrExcluded)}
	}
	if !force && r.stores[store].Down() {
		return fragRead{err: fail(ErrStoreDown)}
	}
	p := make([]byte, B-A)
	if fb == nil {
		fb = &backend.FirstByte{}
	}
	start := time.Now()
	err := r.stores[store].ReadAt(backend.WithFirstByte(ctx, fb), r.key(sh.ID, frag), p, A)
	ttfb, _ := fb.Since(start)
	r.metrics.BackendRead(store, sh.ID, len(p), time.Since(start), ttfb, readKindOf(ctx), err)
	if err != nil {
		if errors.Is(err, backend.ErrNotExist) || errors.Is(err, backend.ErrShortRead) {
			lostIn(ctx, store)
		}
		return fragRead{err: fail(err)}
	}
	bad, first, n := r.codec.badBlocks(sh, frag, A, p)
	if n == 0 {
		r.stores[store].Verified()
		return fragRead{data: p}
	}
	r.metrics.ChecksumFailure(store)
	lostIn(ctx, store)
	r.stores[store].Corrupted()
	fr := fragRead{err: fail(fmt.Errorf("%w in block %d (%d of %d blocks bad)", ErrChecksum, first, n, len(bad)))}
	if n < len(bad) {
		fr.data, fr.bad = p, bad // the good blocks still count, stripe by stripe
	}
	return fr
}

// ReadRange returns bytes [off, off+n) of the shard's data, every byte
// verified against its block checksum, decoding from parity where needed.
// A *HealNeeded error comes with every byte: see Heal.
func (r *Reader) ReadRange(ctx context.Context, sh *Shard, off, n int64) ([]byte, error) {
	out := make([]byte, n)
	err := r.ReadRangeInto(ctx, sh, out, off)
	if err != nil && Heal(err) == nil {
		return nil, err
	}
	return out, err
}

// ReadRangeInto fills p with the shard's bytes at off. See ReadRange.
func (r *Reader) ReadRangeInto(ctx context.Context, sh *Shard, p []byte, off int64) error {
	return healing(ctx, sh, func(ctx context.Context) error { return r.readRangeInto(ctx, sh, p, off, nil) })
}

// readRangeInto is ReadRangeInto; data fragments on stores in slow are not
// asked again but decoded straight away: they just missed a deadline.
func (r *Reader) readRangeInto(ctx context.Context, sh *Shard, p []byte, off int64, slow map[int]bool) error {
	F, k := sh.FragSize, int64(r.codec.Data)
	if off < 0 || off+int64(len(p)) > F*k {
		return fmt.Errorf("shard %d: range [%d,%d) outside its %d bytes", sh.ID, off, off+int64(len(p)), F*k)
	}
	if len(p) == 0 {
		return nil
	}
	type part struct {
		frag int
		a, b int64 // fragment-local, unaligned
		dst  []byte
	}
	var parts []part
	for pos := off; pos < off+int64(len(p)); {
		frag := int(pos / F)
		a := pos - int64(frag)*F
		b := min(F, a+off+int64(len(p))-pos)
		parts = append(parts, part{frag, a, b, p[pos-off : pos-off+(b-a)]})
		pos += b - a
	}
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for i, pt := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.readFragmentRange(ctx, sh, pt.frag, pt.a, pt.b, pt.dst, slow[r.Placement(sh.ID, pt.frag)])
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// readFragmentRange fills dst with data fragment frag's bytes [a,b). When
// the read outlives its store's hedge deadline, a decode from the other
// fragments is started too, and the first good answer wins. Losing the race
// is not a failure of the store: slowness is not loss. The store is probed
// instead, and only a probe that gets no answer marks it down.
func (r *Reader) readFragmentRange(ctx context.Context, sh *Shard, frag int, a, b int64, dst []byte, slow bool) error {
	bs := int64(r.codec.BlockSize)
	A, B := a/bs*bs, min(sh.FragSize, (b+bs-1)/bs*bs)
	store := r.Placement(sh.ID, frag)
	slowRead := fragRead{err: &FragmentError{Shard: sh.ID, Frag: frag, Store: store, StoreName: r.stores[store].String(), Err: errSlow}}
	decode := func(ctx context.Context, known fragRead, kind ReadKind) error {
		frags, err := r.decode(WithReadKind(ctx, kind), sh, A, B, map[int]fragRead{frag: known}, false, false)
		if err == nil {
			copy(dst, frags[frag][a-A:b-A])
		}
		return err
	}
	if r.codec.Parity > 0 && (slow || r.excluded[store] || r.stores[store].Down()) {
		if slow {
			return decode(ctx, slowRead, ReadHedge)
		}
		return decode(ctx, r.readFrag(ctx, sh, frag, A, B, false, nil), ReadDegraded)
	}
	type result struct {
		fr     fragRead
		err    error
		hedged bool
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan result, 2)
	fb := &backend.FirstByte{}
	launched := time.Now()
	go func() { results <- result{fr: r.readFrag(pctx, sh, frag, A, B, false, fb)} }()
	var timer <-chan time.Time
	var hg *hedger
	if r.codec.Parity > 0 && r.hedge {
		hg = newHedger(ctx, r.stores[store].Deadline(int(B-A)), int(B-A))
		defer hg.stop()
		timer = hg.C()
	}
	pending, hedging := 1, false
	var lastErr error
	for pending > 0 {
		select {
		case <-timer:
			if !hg.late(r.streaming(fb, store, launched, r.codec.Data)) {
				continue // streaming: it gets its allowance
			}
			timer = nil
			hedging = true
			pending++
			r.metrics.HedgedRead(hg.reason())
			r.stores[store].Suspect()
			go func() {
				frags, err := r.decode(WithReadKind(pctx, ReadHedge), sh, A, B, map[int]fragRead{frag: slowRead}, false, false)
				res := result{err: err, hedged: true}
				if err == nil {
					res.fr.data = frags[frag]
				}
				results <- res
			}()
		case res := <-results:
			pending--
			switch {
			case res.fr.whole() || res.hedged && res.err == nil:
				copy(dst, res.fr.data[a-A:b-A])
				return nil
			case !res.hedged && !hedging:
				// The primary failed, or came back with bad blocks, before
				// its deadline: decode now, using whatever blocks it got.
				timer = nil
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return decode(ctx, res.fr, ReadDegraded)
			case !res.hedged:
				lastErr = res.fr.err
			default:
				lastErr = res.err
				if r.stores[store].Unreachable() {
					// The decode failed and the primary's store is proven
					// not to answer: its read will not come back either.
					// (A store marked down for wrong bytes answers: its
					// read is waited for, and its checksums decide.)
					return lastErr
				}
			}
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return lastErr
}

func (r *Reader) tooFew(sh *Shard, failed map[int]*FragmentError) error {
	e := &TooFewError{Shard: sh.ID}
	for _, f := range failed {
		e.Failed = append(e.Failed, f)
	}
	sort.Slice(e.Failed, func(i, j int) bool { return e.Failed[i].Frag < e.Failed[j].Frag })
	return e
}

// ReadExactV reads the range [off, off+len(bufs)) into bufs, which its
// bytes fill in turn, straight from the stores' responses, and accepts it
// when verified says so (the caller's own checksums over exactly these
// bytes); otherwise it reads the range again through the block-verified,
// degraded-capable path. A *HealNeeded error comes with every byte: see Heal.
func (r *Reader) ReadExactV(ctx context.Context, sh *Shard, off int64, bufs [][]byte, verified func([][]byte) bool) error {
	return healing(ctx, sh, func(ctx context.Context) error { return r.readExactV(ctx, sh, off, bufs, verified) })
}

func (r *Reader) readExactV(ctx context.Context, sh *Shard, off int64, bufs [][]byte, verified func([][]byte) bool) error {
	F := sh.FragSize
	n := int64(backend.VecLen(bufs))
	if off < 0 || off+n > F*int64(r.codec.Data) {
		return fmt.Errorf("shard %d: range [%d,%d) outside its %d bytes", sh.ID, off, off+n, F*int64(r.codec.Data))
	}
	var wg sync.WaitGroup
	var mu sync.Mutex // guards firstErr and slow
	var firstErr error
	slow := map[int]bool{}
	// Past the slowest store's hedge deadline, stop waiting and take the
	// block path, which hedges per fragment.
	var deadline time.Duration
	for pos := off; pos < off+n; pos = (pos/F + 1) * F {
		store := r.Placement(sh.ID, int(pos/F))
		if r.stores[store].Down() || r.excluded[store] {
			return r.readRangeV(ctx, sh, off, n, bufs, nil)
		}
		deadline = max(deadline, r.stores[store].Deadline(int(n)))
	}
	ectx, cancel := context.WithCancel(ctx)
	defer cancel()
	var answered []*backend.FirstByte
	var pieceStores []int
	var hedged atomic.Bool
	hedgeReason := ""
	for pos := off; pos < off+n; {
		frag := int(pos / F)
		a := pos - int64(frag)*F
		b := min(F, a+off+n-pos)
		dst := subVec(bufs, pos-off, pos-off+(b-a))
		fb := &backend.FirstByte{}
		store := r.Placement(sh.ID, frag)
		answered = append(answered, fb)
		pieceStores = append(pieceStores, store)
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			err := r.stores[store].ReadAtV(backend.WithFirstByte(ectx, fb), r.key(sh.ID, frag), dst, a)
			ttfb, _ := fb.Since(start)
			r.metrics.BackendRead(store, sh.ID, int(b-a), time.Since(start), ttfb, readKindOf(ctx), err)
			if err != nil {
				mu.Lock()
				firstErr = cmp.Or(firstErr, err)
				if hedged.Load() && ctx.Err() == nil {
					slow[store] = true // cancelled by the hedge: late, not lost
				}
				mu.Unlock()
			}
		}()
		pos += b - a
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	if r.codec.Parity > 0 && r.hedge {
		// Past the deadline, a store that has not answered at all is slow;
		// one whose bytes are streaming only shares our bandwidth, and gets
		// an allowance to finish: a stall mid-body is hedged after it.
		hg := newHedger(ctx, deadline, int(n))
		defer hg.stop()
		launched := time.Now()
	wait:
		for {
			select {
			case <-finished:
				break wait
			case <-hg.C():
				select {
				case <-finished:
					break wait
				default:
				}
				streaming := true
				for i, fb := range answered {
					streaming = streaming && r.streaming(fb, pieceStores[i], launched, r.codec.Data)
				}
				if hg.late(streaming) {
					hedgeReason = hg.reason()
					hedged.Store(true)
					cancel()
					<-finished
					break wait
				}
			}
		}
	} else {
		<-finished
	}
	if firstErr == nil && verified(bufs) {
		return nil
	}
	if hedged.Load() && ctx.Err() == nil {
		r.metrics.HedgedRead(hedgeReason)
		for store := range slow {
			r.stores[store].Suspect()
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if firstErr == nil {
		// Bytes arrived but are wrong: a corrupt fragment. The block
		// checksums find which; the failure is counted there.
		r.log.Debug("exact read failed its checksum; reading verified blocks", "shard", sh.ID, "off", off, "len", n)
	}
	// What is read again now is read because of the hedge or the failure.
	kind := ReadDegraded
	if hedged.Load() {
		kind = ReadHedge
	}
	return r.readRangeV(WithReadKind(ctx, kind), sh, off, n, bufs, slow)
}

// ReadRangeV is ReadRangeInto for a range that fills bufs in turn.
func (r *Reader) ReadRangeV(ctx context.Context, sh *Shard, off int64, bufs [][]byte) error {
	return healing(ctx, sh, func(ctx context.Context) error {
		return r.readRangeV(ctx, sh, off, int64(backend.VecLen(bufs)), bufs, nil)
	})
}

// readRangeV is readRangeInto for a range that fills bufs in turn. The
// block-verified path reads into one buffer: several are filled from it.
func (r *Reader) readRangeV(ctx context.Context, sh *Shard, off, n int64, bufs [][]byte, slow map[int]bool) error {
	if len(bufs) == 1 {
		return r.readRangeInto(ctx, sh, bufs[0], off, slow)
	}
	out := make([]byte, n)
	if err := r.readRangeInto(ctx, sh, out, off, slow); err != nil {
		return err
	}
	backend.Scatter(out, bufs)
	return nil
}

// subVec is bytes [from, to) of the concatenation of bufs, as slices of them.
func subVec(bufs [][]byte, from, to int64) [][]byte {
	var out [][]byte
	var pos int64
	for _, b := range bufs {
		end := pos + int64(len(b))
		if end > from && pos < to {
			out = append(out, b[max(from, pos)-pos:min(to, end)-pos])
		}
		if end >= to {
			break
		}
		pos = end
	}
	return out
}
