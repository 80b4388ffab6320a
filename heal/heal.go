// Package heal owns the healer: a service that keeps a dataset at full
// redundancy with no person running repair. It scrubs the dataset a few
// shards at a time (repository.VerifyShards), rebuilds every missing or
// corrupt fragment as soon as it finds it, heals first the shards that
// mounts read degraded (their hints), mends the metadata once a cycle,
// records where it is so that a healer that restarts resumes there, and
// reports the redundancy margin: how many more stores the dataset can lose.
// One healer of a dataset writes at a time (its own lock, a lease that
// lapses when the holder stops); its requests and bytes are rate-limited.
//
// What the healer writes, and why nothing current is ever put at risk:
//   - A fragment (an object of an ingest, never rewritten by a later one)
//     is rebuilt only from blocks that verified against the manifest's
//     checksums (repository.Repair), so it holds exactly the bytes its ingest
//     wrote, and replaces an object that is missing or failed its check.
//     An S3 PUT replaces atomically: a kill or a store failing mid-write
//     leaves the old (already lost) object or the right one. No fragment
//     that verified is written, and nothing is deleted. A gc that removed
//     the shard's version meanwhile leaves at worst an orphan fragment,
//     which no version reads.
//   - Metadata (manifest copies, identities, index and group objects, kept
//     versions) is written only under the dataset's ingest lock, taken
//     before the healer reads what is current and held until its last
//     write (repository.RepairHolding): no commit, gc or repair can run in
//     between, so the copies it writes are the current version's. It
//     holds that lock only while it mends (seconds, and only when some
//     metadata is damaged); an ingest started then is refused with the
//     healer named as the holder, and can be run again at once.
//   - The state object (where the scrub is) and hints are advisory: losing
//     or corrupting them only makes the healer start its cycle again.
package heal

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/repository"
)

// Config is one healer's dataset and pace.
type Config struct {
	Stores []backend.Store
	Name   string
	// Batch is how many shards one step verifies (default 4): the state
	// is recorded after each step, so a restart repeats at most one.
	Batch int
	// Pause is the wait between two cycles (default 10m); hints are
	// healed during it.
	Pause time.Duration
	// HintPoll is how often the healer looks for mounts' hints (default
	// 5s), between steps and during the pause.
	HintPoll time.Duration
	// Lease is how long a healer that stopped (killed, frozen, cut off)
	// keeps its lock before another healer takes over (default 2m).
	Lease time.Duration
	Rates Rates
	// Once runs one whole cycle (from the recorded position), then returns.
	Once bool
	// OnCycle, if set, is told of every cycle done.
	OnCycle func(Cycle)
	Logger  *slog.Logger
	Metrics *Metrics // nil: none
}

func (c *Config) fill() {
	if c.Batch <= 0 {
		c.Batch = 4
	}
	if c.Pause <= 0 {
		c.Pause = 10 * time.Minute
	}
	if c.HintPoll <= 0 {
		c.HintPoll = 5 * time.Second
	}
	if c.Lease <= 0 {
		c.Lease = 2 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Cycle is what one scrub cycle did.
type Cycle struct {
	Number  int           // cycles completed on this version, this one included
	Checked int           // shards checked (a resumed cycle: from where it resumed)
	Written int           // objects written: rebuilt fragments, mended metadata copies
	Took    time.Duration // from this healer's start of the cycle
	Margin  int           // as at its end (see State)
	Parity  int
}

// State is where a healer is in its scrub of a dataset, recorded on the
// stores after every step (HealStateKey).
type State struct {
	Version string `json:"version"`    // the ingest id of the version scrubbed
	Cycle   int    `json:"cycle"`      // cycles completed on it
	Next    int    `json:"next_shard"` // the first shard of the next step
	Shards  int    `json:"shards"`
	// Margin is how many more stores the dataset can lose: m minus the
	// most fragments any shard is missing, as last checked (negative:
	// some shard lost data). Parity is m.
	Margin  int    `json:"margin"`
	Parity  int    `json:"parity"`
	Updated int64  `json:"updated_unix"`
	Healer  string `json:"healer"`
	// Retry are shards the scrub found missing fragments it could not
	// rebuild then (too few stores answered): they are tried again when
	// a healer resumes and at the end of every cycle.
	Retry []int `json:"retry,omitempty"`
}

// ReadState returns the newest state any store holds for name; nil when
// no healer has recorded one.
func ReadState(ctx context.Context, stores []backend.Store, name string) (*State, error) {
	var mu sync.Mutex
	var best *State
	errs := backend.OnEvery(stores, func(i int, s backend.Store) error {
		b, err := repository.ReadHealState(ctx, s, name)
		if err != nil || b == nil {
			return err
		}
		var st State
		if json.Unmarshal(b, &st) != nil {
			return nil // advisory: a damaged copy is as good as none
		}
		mu.Lock()
		defer mu.Unlock()
		if best == nil || st.Updated > best.Updated || st.Updated == best.Updated && (st.Cycle > best.Cycle || st.Cycle == best.Cycle && st.Next > best.Next) {
			best = &st
		}
		return nil
	})
	// No state is an answer while any store answered; only when none did
	// is it unknown. (errs holds a result for every store, nil or not.)
	if ok, failed := backend.Split(errs); best == nil && len(ok) == 0 && len(failed) > 0 {
		return nil, errors.Join(failed...)
	}
	return best, nil
}

// healer is one run of Run.
type healer struct {
	cfg    Config
	stores []backend.Store // every request of the healer's goes through these, counted
	pacer  *pacer          // paid after each step: the healer's rates
	id     string
	log    *slog.Logger
	lock   *repository.Lock // the healer lock serve runs under

	version string // the version damaged is of
	parity  int    // its m
	// damaged are the fragments each shard was last found missing or
	// corrupt on stores that answered (only shards with some); down are
	// the stores that did not answer the last step. A shard's loss is
	// both: a store back up stops counting at once.
	damaged map[int][]int
	down    []int
	// placement is the store of fragment f of shard s, by the numbers
	// the dataset's objects are named and placed by (Header.ShardObject).
	placement func(s, f int) int
	total     int          // k+m
	surveyed  time.Time    // the last survey
	retry     map[int]bool // shards left missing fragments the scrub could not rebuild
	// cycle is the cycles completed, next the first shard of the next
	// step: what record writes.
	cycle, next int
	nShards     int
}

// Run heals cfg.Name until ctx ends (or, with Once, for one cycle). It
// waits for the healer lock while another healer holds it, and takes it
// over when that one's lease lapses.
func Run(ctx context.Context, cfg Config) error {
	cfg.fill()
	host, _ := os.Hostname()
	c := &counter{}
	h := &healer{cfg: cfg, stores: countStores(cfg.Stores, c), pacer: newPacer(cfg.Rates, c),
		id: fmt.Sprintf("heal-%s-%d", host, os.Getpid()), log: cfg.Logger.With("dataset", cfg.Name)}
	waiting := false
	for {
		lock, lctx, err := repository.AcquireHealLock(ctx, h.stores, cfg.Name, h.id, cfg.Lease, cfg.Logger)
		switch {
		case err == nil:
			h.log.Info("heal: holding the healer lock", "healer", h.id)
			waiting = false
			h.lock = lock
			err = h.serve(lctx)
			lock.Release(context.WithoutCancel(ctx))
			if ctx.Err() != nil {
				return nil
			}
			if cfg.Once || err == nil {
				return err
			}
			if errors.Is(context.Cause(lctx), repository.ErrLockLost) {
				h.log.Warn("heal: lost the healer lock (another healer took over); standing by", "cause", context.Cause(lctx))
			} else {
				h.log.Error("heal: step failed; starting again", "err", err)
			}
		case errors.Is(err, repository.ErrLocked) && cfg.Once:
			return err
		case errors.Is(err, repository.ErrLocked):
			if !waiting {
				h.log.Info("heal: another healer holds the lock; standing by", "detail", err)
				waiting = true
			}
		default:
			if cfg.Once {
				return err
			}
			h.log.Warn("heal: cannot take the healer lock; trying again", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(cfg.Lease / 4):
		}
	}
}

// errNewVersion: another version became current while the healer
// scrubbed one (an append, a rollback; gc may then remove the old one's
// objects, which must not read as damage).
var errNewVersion = errors.New("a new version is current")

// serve scrubs while this healer holds the lock (ctx ends when it is
// lost), the current version, then the next one that becomes current.
func (h *healer) serve(ctx context.Context) error {
	for {
		err := h.serveVersion(ctx)
		if !errors.Is(err, errNewVersion) {
			return err
		}
		h.log.Info("heal: a new version is current; scrubbing it from its first shard")
	}
}

// serveVersion scrubs the version current when it starts, until another
// one is (errNewVersion).
func (h *healer) serveVersion(ctx context.Context) error {
	ds, err := h.open(ctx)
	if err != nil {
		return err
	}
	h.next, h.cycle = 0, 0
	if st, _ := ReadState(ctx, h.stores, h.cfg.Name); st != nil && st.Version == ds.Current.IngestID && st.Next <= h.nShards {
		h.next, h.cycle = st.Next, st.Cycle
		h.log.Info("heal: resuming", "cycle", h.cycle+1, "shard", h.next, "of", h.nShards, "retry", len(st.Retry))
		for _, si := range st.Retry {
			if si >= 0 && si < h.nShards {
				h.retry[si] = true
			}
		}
	}
	h.survey(ctx, ds)
	if _, err := h.retryPending(ctx, ds); err != nil {
		return err
	}
	lastHints := time.Now()
	cycleStart, rebuilt, checked := time.Now(), 0, 0
	for {
		if err := h.stillHolds(ctx); err != nil {
			return err
		}
		if time.Since(lastHints) >= h.cfg.HintPoll {
			n, err := h.healHints(ctx, ds)
			if err != nil {
				return err
			}
			rebuilt += n
			lastHints = time.Now()
		}
		if h.next < h.nShards {
			shards := make([]int, 0, h.cfg.Batch)
			for si := h.next; si < min(h.next+h.cfg.Batch, h.nShards); si++ {
				shards = append(shards, si)
			}
			// The state scrub records once the step is done says the
			// next step starts after it.
			h.next = shards[len(shards)-1] + 1
			n, err := h.scrub(ctx, ds, shards)
			if err != nil {
				return err
			}
			rebuilt += n
			checked += len(shards)
			continue
		}
		// The end of a cycle: what could not be rebuilt, the metadata,
		// then the pause.
		n, err := h.retryPending(ctx, ds)
		if err != nil {
			return err
		}
		rebuilt += n
		mended, err := h.mendMetadata(ctx)
		if err != nil {
			return err
		}
		h.cycle, h.next = h.cycle+1, 0
		if err := h.record(ctx, ds); err != nil {
			return err
		}
		took := time.Since(cycleStart)
		h.log.Info("heal: cycle done", "cycle", h.cycle, "shards", h.nShards, "checked", checked, "fragments_rebuilt", rebuilt,
			"metadata_written", mended, "took", took.Round(time.Millisecond), "margin", h.margin(), "parity", h.parity)
		if h.cfg.Metrics != nil {
			h.cfg.Metrics.cycles.WithLabelValues(h.cfg.Name).Inc()
		}
		if h.cfg.OnCycle != nil {
			h.cfg.OnCycle(Cycle{Number: h.cycle, Checked: checked, Written: rebuilt + mended, Took: took, Margin: h.margin(), Parity: h.parity})
		}
		if h.cfg.Once {
			return nil
		}
		pauseEnd := time.Now().Add(h.cfg.Pause)
		for time.Now().Before(pauseEnd) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(min(h.cfg.HintPoll, time.Until(pauseEnd))):
			}
			if err := h.stillHolds(ctx); err != nil {
				return err
			}
			if _, err := h.healHints(ctx, ds); err != nil {
				return err
			}
		}
		if ds, err = h.open(ctx); err != nil {
			return err
		}
		h.survey(ctx, ds)
		cycleStart, rebuilt, checked = time.Now(), 0, 0
		lastHints = time.Now()
	}
}

// stillHolds runs before each step: the heartbeat renews the lock every
// quarter lease, but a healer that was frozen (SIGSTOP, a paused VM) for
// longer than the lease may have been taken over without knowing, so when
// the last renewal is older than half a lease it proves it holds the lock
// before it writes anything more.
func (h *healer) stillHolds(ctx context.Context) error {
	if err := h.pacer.pay(ctx); err != nil {
		return err
	}
	return h.holdsLease(ctx)
}

// holdsLease runs at each step's start (stillHolds) and again right
// before each write of a step (rebuilt fragments, the state): a healer frozen
// inside the step, reading, for longer than the lease may have been taken
// over while frozen, and must write nothing more (CI caught a healer
// SIGSTOPped mid-scrub writing its state after the other had taken over).
// Taken over, its last renewal is older than the lease less the second the
// lock's heartbeat is kept to, so older than half a lease: Refresh then
// finds the other holder. The state's writes run it again right before
// each store's write (WriteHealState), so a freeze among them is caught.
// What stays open is a freeze between the check and the request leaving,
// and within the lock's own renewal, which reads the lock and then writes
// it (Lock.Refresh): the stores offer no write conditional on another
// object.
func (h *healer) holdsLease(ctx context.Context) error {
	if time.Since(h.lock.Renewed()) > h.cfg.Lease/2 {
		return h.lock.Refresh(ctx)
	}
	return nil
}

// open opens the current version; a new version forgets the old one's losses.
func (h *healer) open(ctx context.Context) (*repository.Dataset, error) {
	ds, err := repository.Open(ctx, h.stores, h.cfg.Name, repository.Options{Logger: h.cfg.Logger, LostIndexesOK: true})
	if err != nil {
		return nil, err
	}
	if ds.Current.IngestID != h.version {
		h.version, h.damaged, h.retry = ds.Current.IngestID, map[int][]int{}, map[int]bool{}
	}
	h.parity, h.nShards = ds.Manifest.Parity, len(ds.Manifest.Shards)
	h.placement, h.total = ds.Reader.Placement, ds.Manifest.Data+ds.Manifest.Parity
	return ds, nil
}

// scrub verifies shards and rebuilds what they miss. It returns the
// fragments written.
func (h *healer) scrub(ctx context.Context, ds *repository.Dataset, shards []int) (int, error) {
	rep, err := ds.VerifyShards(ctx, shards, nil)
	if err != nil {
		return 0, err
	}
	if h.cfg.Metrics != nil {
		h.cfg.Metrics.shardsChecked.WithLabelValues(h.cfg.Name).Add(float64(len(shards)))
		h.cfg.Metrics.bytesChecked.WithLabelValues(h.cfg.Name).Add(float64(rep.Bytes))
	}
	h.down = rep.Unreachable
	found := damagedOf(rep, ds.Manifest.Parity)
	damaged := found
	written := 0
	if len(rep.Damaged) > 0 {
		// Damage is a version's objects gone; first make sure the
		// version is still current (gc removes what no kept version reads).
		if errors.Is(ds.Replaced(ctx), repository.ErrReplaced) {
			return 0, errNewVersion
		}
		if err := h.holdsLease(ctx); err != nil {
			return 0, err
		}
		// rep holds only these shards' fragments, so Repair rebuilds
		// fragments and writes no metadata (see the package comment).
		n, err := ds.Repair(ctx, rep, false, nil)
		written = n
		switch {
		case ctx.Err() != nil:
			return n, ctx.Err()
		case err == nil:
			h.log.Info("heal: rebuilt fragments", "shards", damagedShards(rep), "written", n)
			damaged = nil // every damaged fragment was rebuilt
		case errors.Is(err, repository.ErrIncomplete):
			// Which shards had too few survivors is not told apart:
			// they stay damaged (the margin errs low) until retried.
			h.log.Warn("heal: rebuilt what the answering stores allow", "shards", damagedShards(rep), "written", n, "detail", err)
		default:
			h.log.Error("heal: cannot rebuild", "shards", damagedShards(rep), "err", err)
		}
		if h.cfg.Metrics != nil {
			h.cfg.Metrics.rebuilt.WithLabelValues(h.cfg.Name).Add(float64(n))
		}
	}
	// Damage the last survey did not show (a store wiped or replaced
	// since) is likely on shards the scrub has not reached: survey
	// again, so the margin says so now, not when the scrub gets there.
	surprise := false
	for si, frags := range found {
		for _, f := range frags {
			surprise = surprise || !slices.Contains(h.damaged[si], f)
		}
	}
	for _, si := range shards {
		if len(damaged[si]) > 0 {
			h.damaged[si] = damaged[si]
		} else {
			delete(h.damaged, si)
		}
		if len(damaged[si]) > 0 && len(h.retry) < maxRetry {
			h.retry[si] = true
		} else {
			delete(h.retry, si)
		}
	}
	if surprise && time.Since(h.surveyed) > resurveyAfter {
		h.survey(ctx, ds)
	}
	h.publish()
	if err := h.record(ctx, ds); err != nil {
		return written, err
	}
	return written, h.pacer.pay(ctx)
}

// resurveyAfter bounds how often damage the scrub did not expect makes
// the healer list the stores again.
const resurveyAfter = 10 * time.Second

// maxRetry bounds the shards a state carries to retry; past it, the next
// cycle finds the rest.
const maxRetry = 10_000

// retryPending scrubs again the shards left missing fragments; it
// returns the fragments written.
func (h *healer) retryPending(ctx context.Context, ds *repository.Dataset) (int, error) {
	if len(h.retry) == 0 {
		return 0, nil
	}
	var shards []int
	for si := range h.retry {
		shards = append(shards, si)
	}
	slices.Sort(shards)
	h.log.Info("heal: trying again the shards left missing fragments", "shards", len(shards))
	written := 0
	for chunk := range slices.Chunk(shards, h.cfg.Batch) {
		n, err := h.scrub(ctx, ds, chunk)
		if err != nil {
			return written, err
		}
		written += n
	}
	return written, nil
}

// damagedOf lists, per shard, the fragments rep found missing or
// corrupt; a shard past repair (more than m lost in a stripe) counts m+1.
func damagedOf(rep *repository.Report, parity int) map[int][]int {
	out := map[int][]int{}
	for _, d := range rep.Damaged {
		if !slices.Contains(out[d.Shard], d.Frag) {
			out[d.Shard] = append(out[d.Shard], d.Frag)
		}
	}
	for _, si := range rep.Unrecoverable {
		for f := len(out[si]); f <= parity; f++ {
			out[si] = append(out[si], -1-f) // past m: as many as it takes
		}
	}
	return out
}

// survey lists every store's fragments, at the start of each cycle, and
// takes as each shard's losses the fragments missing from where they
// belong (a store that cannot list counts as missing all of its): a store
// wiped or replaced shows in the margin at once, not shard by shard as the
// scrub reaches it. The scrub then checks the bytes, and each step's
// findings replace the survey's for its shards.
func (h *healer) survey(ctx context.Context, ds *repository.Dataset) {
	m := ds.Manifest
	total := m.Data + m.Parity
	present := make([]repository.Fragments, len(h.stores))
	listed := make([]bool, len(h.stores))
	backend.OnEvery(h.stores, func(i int, s backend.Store) (err error) {
		present[i], err = repository.ListFragments(ctx, s, h.cfg.Name)
		listed[i] = err == nil
		return err
	})
	if ctx.Err() != nil {
		return
	}
	damaged := map[int][]int{}
	var down []int
	for i := range h.stores {
		if !listed[i] {
			down = append(down, i)
		}
	}
	for si := range m.Shards {
		if slices.Contains(ds.LostIndexes, si) {
			for f := 0; f <= m.Parity; f++ {
				damaged[si] = append(damaged[si], -1-f) // its fragments can be neither checked nor read
			}
			continue
		}
		for f := range total {
			st := h.placement(si, f)
			if listed[st] && !present[st].Holds(h.cfg.Name, &m.Header, si, f) {
				damaged[si] = append(damaged[si], f)
			}
		}
	}
	// What the scrub found corrupt but could not rebuild does not show
	// in a listing: keep it.
	for si := range h.retry {
		for _, f := range h.damaged[si] {
			if !slices.Contains(damaged[si], f) {
				damaged[si] = append(damaged[si], f)
			}
		}
	}
	h.damaged, h.down, h.surveyed = damaged, down, time.Now()
	h.publish()
	if mg := h.margin(); mg < h.parity {
		h.log.Warn("heal: fragments are missing or their stores do not answer; rebuilding them as the scrub reaches them", "shards_missing_some", len(damaged), "stores_down", down, "margin", mg, "parity", h.parity)
	}
}

// margin is m minus the most fragments a shard is known to miss: those
// found damaged, and those on stores that do not answer now (every shard
// has one fragment on each of the k+m stores).
func (h *healer) margin() int {
	worst := len(h.down)
	for si, frags := range h.damaged {
		n := len(frags)
		for _, st := range h.down {
			for f := range h.total {
				if h.placement(si, f) == st && !slices.Contains(frags, f) {
					n++
				}
			}
		}
		worst = max(worst, n)
	}
	return h.parity - worst
}

func (h *healer) publish() {
	if h.cfg.Metrics != nil {
		h.cfg.Metrics.margin.WithLabelValues(h.cfg.Name).Set(float64(h.margin()))
		h.cfg.Metrics.parity.WithLabelValues(h.cfg.Name).Set(float64(h.parity))
	}
}

// record writes where the scrub is to every store (advisory; see State).
func (h *healer) record(ctx context.Context, ds *repository.Dataset) error {
	if err := h.holdsLease(ctx); err != nil {
		return err
	}
	st := State{Version: ds.Current.IngestID, Cycle: h.cycle, Next: h.next, Shards: h.nShards,
		Margin: h.margin(), Parity: h.parity, Updated: time.Now().Unix(), Healer: h.id}
	for si := range h.retry {
		st.Retry = append(st.Retry, si)
	}
	slices.Sort(st.Retry)
	b, _ := json.Marshal(st)
	repository.WriteHealState(ctx, h.stores, h.cfg.Name, b, h.holdsLease)
	if h.cfg.Metrics != nil {
		h.cfg.Metrics.position.WithLabelValues(h.cfg.Name).Set(float64(h.next))
	}
	return nil
}

// mendMetadata checks the manifest copies, identities, indexes, groups
// and kept versions, and mends what is missing or wrong under the
// dataset's ingest lock (see the package comment).
func (h *healer) mendMetadata(ctx context.Context) (int, error) {
	ds, err := h.open(ctx)
	if err != nil {
		return 0, err
	}
	rep, err := ds.VerifyMetadata(ctx)
	if err != nil {
		return 0, err
	}
	if rep.Intact() && len(rep.Pending) == 0 {
		return 0, nil
	}
	txn, lctx, err := repository.Begin(ctx, h.stores, h.cfg.Name, h.id, repository.LockOptions{Logger: h.cfg.Logger}, h.cfg.Logger)
	if errors.Is(err, repository.ErrLocked) {
		h.log.Info("heal: the metadata needs mending, but an ingest, gc or repair holds the dataset's lock; mending it next cycle", "detail", err)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer txn.Release(context.WithoutCancel(ctx))
	// Under the lock, read again what is current: a commit may have
	// landed between the check above and the lock.
	if ds, err = h.open(lctx); err != nil {
		return 0, err
	}
	if rep, err = ds.VerifyMetadata(lctx); err != nil {
		return 0, err
	}
	if rep.Intact() && len(rep.Pending) == 0 {
		return 0, nil
	}
	n, err := ds.RepairHolding(lctx, rep, txn.Held(), nil)
	switch {
	case err == nil:
		h.log.Info("heal: mended metadata", "written", n)
	case errors.Is(err, repository.ErrIncomplete):
		h.log.Warn("heal: mended the metadata the answering stores allow", "written", n, "detail", err)
	default:
		h.log.Error("heal: cannot mend the metadata", "written", n, "err", err)
	}
	if h.cfg.Metrics != nil {
		h.cfg.Metrics.rebuilt.WithLabelValues(h.cfg.Name).Add(float64(n))
	}
	return n, nil
}

// healHints heals the shards mounts read degraded, then removes their
// hints. It returns the fragments written.
func (h *healer) healHints(ctx context.Context, ds *repository.Dataset) (int, error) {
	hints := repository.ListHints(ctx, h.stores, h.cfg.Name)
	if hints.Empty() {
		return 0, nil
	}
	byIngest := hints.Shards
	var shards []int
	for si := range h.nShards {
		if id, n := ds.Manifest.ShardObject(si); byIngest[id][n] {
			shards = append(shards, si)
		}
	}
	written := 0
	if len(shards) > 0 {
		h.log.Info("heal: healing shards mounts read degraded", "shards", shards)
		for chunk := range slices.Chunk(shards, h.cfg.Batch) {
			n, err := h.scrub(ctx, ds, chunk)
			if err != nil {
				return written, err
			}
			written += n
		}
	}
	hints.Delete(ctx, h.stores)
	return written, nil
}

func damagedShards(rep *repository.Report) []int {
	var out []int
	for _, d := range rep.Damaged {
		if !slices.Contains(out, d.Shard) {
			out = append(out, d.Shard)
		}
	}
	slices.SortFunc(out, cmp.Compare[int])
	return out
}
