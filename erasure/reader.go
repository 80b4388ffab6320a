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

func (e *TooFewError) Unwrap() error { return ErrTooFewShards }

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
	// BackendRead reports one ranged GET on store.
	BackendRead(store int, bytes int, d time.Duration, err error)
	// ChecksumFailure reports a fragment range that failed its checksum.
	ChecksumFailure(store int)
	// DegradedRead reports a range decoded from survivors.
	DegradedRead()
	// HedgedRead reports a slow read raced against a parity decode.
	HedgedRead()
	// StoreState reports a store marked down (true) or healthy again (false).
	StoreState(store int, down bool)
}

type nopMetrics struct{}

func (nopMetrics) BackendRead(int, int, time.Duration, error) {}
func (nopMetrics) ChecksumFailure(int)                        {}
func (nopMetrics) DegradedRead()                              {}
func (nopMetrics) HedgedRead()                                {}
func (nopMetrics) StoreState(int, bool)                       {}

// KeyFunc names the object of fragment frag of shard.
type KeyFunc func(shard, frag int) string

// Reader reads verified byte ranges of shards from the stores.
type Reader struct {
	codec   *Codec
	stores  []backend.Store
	key     KeyFunc
	metrics Metrics
	log     *slog.Logger
	health  *health
}

// ReaderOptions are optional parts of a Reader; zero values are fine.
type ReaderOptions struct {
	Metrics Metrics
	Logger  *slog.Logger
	Health  HealthOptions
}

// ErrStoreDown: the store is marked down after repeated failures and is
// being read around until its backoff ends.
var ErrStoreDown = errors.New("store marked down after repeated failures")

// errSlow: a read passed its hedge deadline. The fragment is not lost: a
// decode tries the others first and asks it again only as a last resort.
var errSlow = errors.New("slower than its hedge deadline")

// NewReader returns a reader over stores, which must number k+m, in placement order.
func NewReader(c *Codec, stores []backend.Store, key KeyFunc, opts ReaderOptions) (*Reader, error) {
	if len(stores) != c.Total() {
		return nil, fmt.Errorf("%d stores given, the dataset needs k+m = %d", len(stores), c.Total())
	}
	r := &Reader{codec: c, stores: stores, key: key, metrics: opts.Metrics, log: opts.Logger}
	if r.metrics == nil {
		r.metrics = nopMetrics{}
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.health = newHealth(len(stores), opts.Health, func(store int, down bool) {
		r.metrics.StoreState(store, down)
		if down {
			r.log.Warn("store marked down; reading around it", "store", store, "name", stores[store].String())
		} else {
			r.log.Info("store healthy again", "store", store, "name", stores[store].String())
		}
	})
	return r, nil
}

// StoreDown reports whether store is currently marked down.
func (r *Reader) StoreDown(store int) bool { return r.health.skip(store) }

// Codec returns the reader's codec.
func (r *Reader) Codec() *Codec { return r.codec }

// fetch reads and verifies fragment frag's bytes [a,b), with a block-aligned.
// A store marked down is not asked, unless force is set.
func (r *Reader) fetch(ctx context.Context, sh *Shard, frag int, a, b int64) ([]byte, *FragmentError) {
	return r.fetchForce(ctx, sh, frag, a, b, false)
}

func (r *Reader) fetchForce(ctx context.Context, sh *Shard, frag int, a, b int64, force bool) ([]byte, *FragmentError) {
	store := r.codec.Placement(sh.ID, frag)
	fail := func(err error) *FragmentError {
		return &FragmentError{Shard: sh.ID, Frag: frag, Store: store, StoreName: r.stores[store].String(), Err: err}
	}
	if !force && r.health.skip(store) {
		return nil, fail(ErrStoreDown)
	}
	p := make([]byte, b-a)
	start := time.Now()
	err := r.stores[store].ReadAt(ctx, r.key(sh.ID, frag), p, a)
	d := time.Since(start)
	r.metrics.BackendRead(store, len(p), d, err)
	if err != nil {
		if storeFault(ctx, err) {
			r.health.fail(store)
		}
		return nil, fail(err)
	}
	r.health.ok(store, d)
	if blk, ok := r.codec.verify(sh, frag, a, p); !ok {
		r.metrics.ChecksumFailure(store)
		return nil, fail(fmt.Errorf("%w in block %d", ErrChecksum, blk))
	}
	return p, nil
}

// ReadRange returns bytes [off, off+n) of the shard's data, every byte
// verified against its block checksum, decoding from parity where needed.
func (r *Reader) ReadRange(ctx context.Context, sh *Shard, off, n int64) ([]byte, error) {
	out := make([]byte, n)
	if err := r.ReadRangeInto(ctx, sh, out, off); err != nil {
		return nil, err
	}
	return out, nil
}

// ReadRangeInto fills p with the shard's bytes at off. See ReadRange.
func (r *Reader) ReadRangeInto(ctx context.Context, sh *Shard, p []byte, off int64) error {
	return r.readRangeInto(ctx, sh, p, off, nil)
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
			errs[i] = r.readFragmentRange(ctx, sh, pt.frag, pt.a, pt.b, pt.dst, slow[r.codec.Placement(sh.ID, pt.frag)])
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// readFragmentRange fills dst with data fragment frag's bytes [a,b). When
// the read outlives its store's hedge deadline, a decode from the other
// fragments is started too, and the first good answer wins.
func (r *Reader) readFragmentRange(ctx context.Context, sh *Shard, frag int, a, b int64, dst []byte, slow bool) error {
	bs := int64(r.codec.BlockSize)
	A, B := a/bs*bs, min(sh.FragSize, (b+bs-1)/bs*bs)
	store := r.codec.Placement(sh.ID, frag)
	degraded := func(ctx context.Context, ferr *FragmentError) ([]byte, error) {
		frags, err := r.decodeRange(ctx, sh, A, B, map[int]*FragmentError{frag: ferr}, false)
		if err != nil {
			return nil, err
		}
		return frags[frag], nil
	}
	if slow && r.codec.Parity > 0 {
		data, err := degraded(ctx, &FragmentError{Shard: sh.ID, Frag: frag, Store: store,
			StoreName: r.stores[store].String(), Err: errSlow})
		if err == nil {
			copy(dst, data[a-A:b-A])
		}
		return err
	}
	type result struct {
		data   []byte
		ferr   *FragmentError
		err    error
		hedged bool
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan result, 2)
	go func() {
		data, ferr := r.fetch(pctx, sh, frag, A, B)
		results <- result{data: data, ferr: ferr}
	}()
	var timer <-chan time.Time
	if r.codec.Parity > 0 && !r.health.opts.DisableHedge {
		t := time.NewTimer(r.health.deadline(store, int(B-A)))
		defer t.Stop()
		timer = t.C
	}
	pending, hedging := 1, false
	var lastErr error
	for pending > 0 {
		select {
		case <-timer:
			timer = nil
			hedging = true
			pending++
			r.metrics.HedgedRead()
			go func() {
				data, err := degraded(pctx, &FragmentError{Shard: sh.ID, Frag: frag, Store: store,
					StoreName: r.stores[store].String(), Err: errSlow})
				results <- result{data: data, err: err, hedged: true}
			}()
		case res := <-results:
			pending--
			switch {
			case res.data != nil:
				if hedging && res.hedged {
					r.health.fail(store) // the primary lost the race: a strike
				}
				copy(dst, res.data[a-A:b-A])
				return nil
			case res.ferr != nil && !hedging:
				// The primary failed before its deadline: decode now.
				timer = nil
				if ctx.Err() != nil {
					return ctx.Err()
				}
				data, err := degraded(ctx, res.ferr)
				if err != nil {
					return err
				}
				copy(dst, data[a-A:b-A])
				return nil
			case res.ferr != nil:
				lastErr = res.ferr
			default:
				lastErr = res.err
			}
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return lastErr
}

// decodeRange reads block-aligned range [A,B) from k intact fragments, never
// reading those in failed, and decodes the missing data (and, if all, parity) fragments.
func (r *Reader) decodeRange(ctx context.Context, sh *Shard, A, B int64, failed map[int]*FragmentError, all bool) ([][]byte, error) {
	k, total := r.codec.Data, r.codec.Total()
	frags := make([][]byte, total)
	var (
		mu   sync.Mutex // guards frags, failed, got
		got  int
		next int
	)
	// Candidates: fragments on healthy stores, data before parity (data
	// needs no decoding); then, as a last resort, those on stores marked
	// down or that failed before, forced: a store that came back is found
	// at once, and a range is never refused while k fragments may exist.
	var cands []int
	forced := map[int]bool{}
	for f := 0; f < total; f++ {
		if failed[f] == nil && !r.health.skip(r.codec.Placement(sh.ID, f)) {
			cands = append(cands, f)
		}
	}
	for f := 0; f < total; f++ {
		if failed[f] == nil && r.health.skip(r.codec.Placement(sh.ID, f)) {
			cands = append(cands, f)
			forced[f] = true
		} else if ferr := failed[f]; ferr != nil && (errors.Is(ferr.Err, ErrStoreDown) || errors.Is(ferr.Err, errSlow)) {
			delete(failed, f)
			cands = append(cands, f)
			forced[f] = true
		}
	}
	// Start k fetches; replace each failure with the next candidate.
	results := make(chan struct{}, total)
	var fetch func(f int)
	fetch = func(f int) {
		data, ferr := r.fetchForce(ctx, sh, f, A, B, forced[f])
		mu.Lock()
		if ferr != nil {
			failed[f] = ferr
		} else {
			frags[f] = data
			got++
		}
		mu.Unlock()
		results <- struct{}{}
	}
	running := 0
	mu.Lock()
	for running < k && next < len(cands) {
		go fetch(cands[next])
		next++
		running++
	}
	mu.Unlock()
	for running > 0 {
		<-results
		running--
		mu.Lock()
		if got+running < k && next < len(cands) {
			go fetch(cands[next])
			next++
			running++
		}
		mu.Unlock()
	}
	if got < k {
		return nil, r.tooFew(sh, failed)
	}
	r.metrics.DegradedRead()
	var err error
	if all {
		err = r.codec.Reconstruct(frags)
	} else {
		err = r.codec.reconstruct(frags)
	}
	if err != nil {
		return nil, fmt.Errorf("shard %d: decode: %w", sh.ID, err)
	}
	return frags, nil
}

func (r *Reader) tooFew(sh *Shard, failed map[int]*FragmentError) error {
	e := &TooFewError{Shard: sh.ID}
	for _, f := range failed {
		e.Failed = append(e.Failed, f)
	}
	sort.Slice(e.Failed, func(i, j int) bool { return e.Failed[i].Frag < e.Failed[j].Frag })
	return e
}

// ReadExact reads exactly [off, off+n) of the shard's data fragments — no
// widening to checksum blocks — and accepts the bytes only if verify does
// (the caller checks checksums it knows, such as per-sample CRCs). On any
// error or a failed verify it falls back to ReadRange, which finds the bad
// fragment by its block checksums and decodes around it.
func (r *Reader) ReadExact(ctx context.Context, sh *Shard, off, n int64, verify func([]byte) bool) ([]byte, error) {
	F := sh.FragSize
	if off < 0 || n < 0 || off+n > F*int64(r.codec.Data) {
		return nil, fmt.Errorf("shard %d: range [%d,%d) outside its %d bytes", sh.ID, off, off+n, F*int64(r.codec.Data))
	}
	out := make([]byte, n)
	var wg sync.WaitGroup
	var mu sync.Mutex // guards firstErr and slow
	var firstErr error
	slow := map[int]bool{}
	// Past the slowest store's hedge deadline, stop waiting and take the
	// block path, which hedges per fragment.
	var deadline time.Duration
	for pos := off; pos < off+n; pos = (pos/F + 1) * F {
		store := r.codec.Placement(sh.ID, int(pos/F))
		if r.health.skip(store) {
			return r.ReadRange(ctx, sh, off, n)
		}
		deadline = max(deadline, r.health.deadline(store, int(n)))
	}
	ectx := ctx
	if r.codec.Parity > 0 && !r.health.opts.DisableHedge {
		var cancel context.CancelFunc
		ectx, cancel = context.WithTimeout(ctx, deadline)
		defer cancel()
	}
	for pos := off; pos < off+n; {
		frag := int(pos / F)
		a := pos - int64(frag)*F
		b := min(F, a+off+n-pos)
		dst := out[pos-off : pos-off+(b-a)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			store := r.codec.Placement(sh.ID, frag)
			start := time.Now()
			err := r.stores[store].ReadAt(ectx, r.key(sh.ID, frag), dst, a)
			d := time.Since(start)
			r.metrics.BackendRead(store, len(dst), d, err)
			if err == nil {
				r.health.ok(store, d)
			} else if storeFault(ctx, err) {
				r.health.fail(store)
			}
			if err != nil {
				mu.Lock()
				firstErr = cmp.Or(firstErr, err)
				if ectx.Err() != nil && ctx.Err() == nil {
					slow[store] = true
				}
				mu.Unlock()
			}
		}()
		pos += b - a
	}
	wg.Wait()
	if firstErr == nil && verify(out) {
		return out, nil
	}
	if ectx.Err() != nil && ctx.Err() == nil {
		r.metrics.HedgedRead()
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if firstErr == nil {
		// Bytes arrived but are wrong: a corrupt fragment. The block
		// checksums find which; the failure is counted there.
		r.log.Debug("exact read failed its checksum; reading verified blocks", "shard", sh.ID, "off", off, "len", n)
	}
	out = make([]byte, n)
	if err := r.readRangeInto(ctx, sh, out, off, slow); err != nil {
		return nil, err
	}
	return out, nil
}

// storeFault reports whether err says the store itself is sick (unreachable,
// failing, too slow, refusing our credentials), as opposed to one object being
// missing or damaged, or the caller giving up.
func storeFault(ctx context.Context, err error) bool {
	if ctx.Err() != nil && !errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	return errors.Is(err, backend.ErrUnavailable) || errors.Is(err, backend.ErrAccessDenied) ||
		errors.Is(err, backend.ErrNoBucket) || errors.Is(err, context.DeadlineExceeded)
}
