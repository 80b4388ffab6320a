// Package heal owns the healer: a service that keeps a dataset at full
// redundancy with no person running repair. It scrubs the dataset a few
// shards at a time (dataset.VerifyShards), rebuilds every missing or
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
//     checksums (dataset.Repair), so it holds exactly the bytes its ingest
//     wrote, and replaces an object that is missing or failed its check.
//     An S3 PUT replaces atomically: a kill or a store failing mid-write
//     leaves the old (already lost) object or the right one. No fragment
//     that verified is written, and nothing is deleted. A gc that removed
//     the shard's version meanwhile leaves at worst an orphan fragment,
//     which no version reads.
//   - Metadata (manifest copies, identities, index and group objects, kept
//     versions) is written only under the dataset's ingest lock, taken
//     before the healer reads what is current and held until its last
//     write (dataset.RepairHolding): no commit, gc or repair can run in
//     between, so the copies it writes are the current version's. An
//     ingest that wants the lock meanwhile waits and says who holds it.
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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/dataset"
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
	Once    bool
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
}

// ReadState returns the newest state any store holds for name; nil when
// no healer has recorded one.
func ReadState(ctx context.Context, stores []backend.Store, name string) (*State, error) {
	var mu sync.Mutex
	var best *State
	errs := backend.OnEvery(stores, func(i int, s backend.Store) error {
		size, err := s.Stat(ctx, dataset.HealStateKey(name))
		if errors.Is(err, backend.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if size > 64<<10 {
			return fmt.Errorf("store %s: %s of %d bytes is not a heal state", s, dataset.HealStateKey(name), size)
		}
		b := make([]byte, size)
		if err := s.ReadAt(ctx, dataset.HealStateKey(name), b, 0); err != nil {
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
	if best == nil {
		if err := errors.Join(errs...); err != nil && len(errs) == len(stores) {
			return nil, err
		}
	}
	return best, nil
}

// healer is one run of Run.
type healer struct {
	cfg    Config
	raw    []backend.Store // for the lease: its heartbeats must not wait behind the scrub
	stores []backend.Store // rate-limited
	id     string
	log    *slog.Logger

	version string      // the version the losses are of
	parity  int         // its m
	losses  map[int]int // shard -> fragments missing, as last checked (only shards missing some)
	down    []int       // stores that did not answer in the last step
	nShards int
}

// Run heals cfg.Name until ctx ends (or, with Once, for one cycle). It
// waits for the healer lock while another healer holds it, and takes it
// over when that one's lease lapses.
func Run(ctx context.Context, cfg Config) error {
	cfg.fill()
	host, _ := os.Hostname()
	h := &healer{cfg: cfg, raw: cfg.Stores, stores: limitStores(cfg.Stores, cfg.Rates),
		id: fmt.Sprintf("heal-%s-%d", host, os.Getpid()), log: cfg.Logger.With("dataset", cfg.Name)}
	waiting := false
	for {
		lock, lctx, err := dataset.AcquireLock(ctx, h.raw, cfg.Name, h.id, dataset.LockOptions{
			Key: dataset.HealLockKey(cfg.Name), Stale: cfg.Lease, Heartbeat: cfg.Lease / 4, Logger: cfg.Logger})
		switch {
		case err == nil:
			h.log.Info("heal: holding the healer lock", "healer", h.id)
			waiting = false
			err = h.serve(lctx, lock)
			lock.Release(context.WithoutCancel(ctx))
			if ctx.Err() != nil {
				return nil
			}
			if cfg.Once || err == nil {
				return err
			}
			if errors.Is(context.Cause(lctx), dataset.ErrLockLost) {
				h.log.Warn("heal: lost the healer lock (another healer took over); standing by", "cause", context.Cause(lctx))
			} else {
				h.log.Error("heal: step failed; starting again", "err", err)
			}
		case errors.Is(err, dataset.ErrLocked) && cfg.Once:
			return err
		case errors.Is(err, dataset.ErrLocked):
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

// serve scrubs while this healer holds the lock (ctx ends when it is lost).
func (h *healer) serve(ctx context.Context, lock *dataset.Lock) error {
	ds, err := h.open(ctx)
	if err != nil {
		return err
	}
	next, cycle := 0, 0
	if st, _ := ReadState(ctx, h.stores, h.cfg.Name); st != nil && st.Version == ds.Current.IngestID && st.Next <= h.nShards {
		next, cycle = st.Next, st.Cycle
		h.log.Info("heal: resuming", "cycle", cycle+1, "shard", next, "of", h.nShards)
	}
	h.survey(ctx, ds)
	lastHints := time.Now()
	cycleStart, rebuilt := time.Now(), 0
	for {
		if err := ctx.Err(); err != nil {
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
		if next < h.nShards {
			shards := make([]int, 0, h.cfg.Batch)
			for si := next; si < min(next+h.cfg.Batch, h.nShards); si++ {
				shards = append(shards, si)
			}
			n, err := h.scrub(ctx, ds, shards)
			if err != nil {
				return err
			}
			rebuilt += n
			next = shards[len(shards)-1] + 1
			h.record(ctx, ds, cycle, next)
			continue
		}
		// The end of a cycle: the metadata, then the pause.
		if err := h.mendMetadata(ctx); err != nil {
			return err
		}
		cycle++
		h.record(ctx, ds, cycle, 0)
		h.log.Info("heal: cycle done", "cycle", cycle, "shards", h.nShards, "fragments_rebuilt", rebuilt,
			"took", time.Since(cycleStart).Round(time.Millisecond), "margin", h.margin(), "parity", h.parity)
		if h.cfg.Metrics != nil {
			h.cfg.Metrics.cycles.WithLabelValues(h.cfg.Name).Inc()
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
			if _, err := h.healHints(ctx, ds); err != nil {
				return err
			}
		}
		if ds, err = h.open(ctx); err != nil {
			return err
		}
		h.survey(ctx, ds)
		next, cycleStart, rebuilt = 0, time.Now(), 0
		lastHints = time.Now()
	}
}

// open opens the current version; a new version forgets the old one's losses.
func (h *healer) open(ctx context.Context) (*dataset.Dataset, error) {
	ds, err := dataset.Open(ctx, h.stores, h.cfg.Name, dataset.Options{Logger: h.cfg.Logger, LostIndexesOK: true})
	if err != nil {
		return nil, err
	}
	if ds.Current.IngestID != h.version {
		h.version, h.losses = ds.Current.IngestID, map[int]int{}
	}
	h.parity, h.nShards = ds.Manifest.Parity, len(ds.Manifest.Shards)
	return ds, nil
}

// scrub verifies shards and rebuilds what they miss. It returns the
// fragments written.
func (h *healer) scrub(ctx context.Context, ds *dataset.Dataset, shards []int) (int, error) {
	rep, err := ds.VerifyShards(ctx, shards, nil)
	if err != nil {
		return 0, err
	}
	if h.cfg.Metrics != nil {
		h.cfg.Metrics.shardsChecked.WithLabelValues(h.cfg.Name).Add(float64(len(shards)))
		h.cfg.Metrics.bytesChecked.WithLabelValues(h.cfg.Name).Add(float64(rep.Bytes))
	}
	h.down = rep.Unreachable
	missing := h.missing(ds, rep, shards)
	written := 0
	if len(rep.Damaged) > 0 {
		// rep holds only these shards' fragments, so Repair rebuilds
		// fragments and writes no metadata (see the package comment).
		n, err := ds.Repair(ctx, rep, false, nil)
		written = n
		switch {
		case ctx.Err() != nil:
			return n, ctx.Err()
		case err == nil:
			h.log.Info("heal: rebuilt fragments", "shards", damagedShards(rep), "written", n)
			// Rebuilt: what is missing now is only what sits on stores
			// that did not answer.
			missing = h.missing(ds, &dataset.Report{Unreachable: rep.Unreachable}, shards)
		case errors.Is(err, dataset.ErrIncomplete):
			h.log.Warn("heal: rebuilt what the answering stores allow", "shards", damagedShards(rep), "written", n, "detail", err)
			missing = h.missing(ds, &dataset.Report{Unreachable: rep.Unreachable}, shards)
		default:
			h.log.Error("heal: cannot rebuild", "shards", damagedShards(rep), "err", err)
		}
		if h.cfg.Metrics != nil {
			h.cfg.Metrics.rebuilt.WithLabelValues(h.cfg.Name).Add(float64(n))
		}
	}
	for _, si := range shards {
		if missing[si] > 0 {
			h.losses[si] = missing[si]
		} else {
			delete(h.losses, si)
		}
	}
	h.publish()
	return written, nil
}

// missing counts, per shard of shards, the fragments rep found damaged or
// could not check (their store did not answer).
func (h *healer) missing(ds *dataset.Dataset, rep *dataset.Report, shards []int) map[int]int {
	lost := map[int]map[int]bool{}
	mark := func(si, f int) {
		if lost[si] == nil {
			lost[si] = map[int]bool{}
		}
		lost[si][f] = true
	}
	for _, d := range rep.Damaged {
		mark(d.Shard, d.Frag)
	}
	codec := ds.Reader.Codec()
	total := ds.Manifest.Data + ds.Manifest.Parity
	for _, si := range shards {
		for f := 0; f < total; f++ {
			if slices.Contains(rep.Unreachable, codec.Placement(si, f)) {
				mark(si, f)
			}
		}
	}
	for _, si := range rep.Unrecoverable {
		mark(si, -1) // past m: counted as one more than m below
	}
	out := map[int]int{}
	for si, fs := range lost {
		out[si] = len(fs)
		if fs[-1] {
			out[si] = max(len(fs)-1, ds.Manifest.Parity+1)
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
func (h *healer) survey(ctx context.Context, ds *dataset.Dataset) {
	m := ds.Manifest
	total := m.Data + m.Parity
	present := make([]map[string]bool, len(h.stores))
	listed := make([]bool, len(h.stores))
	backend.OnEvery(h.stores, func(i int, s backend.Store) error {
		keys, err := s.List(ctx, dataset.DataPrefix(h.cfg.Name))
		if err != nil {
			return err
		}
		present[i], listed[i] = make(map[string]bool, len(keys)), true
		for _, k := range keys {
			present[i][k] = true
		}
		return nil
	})
	if ctx.Err() != nil {
		return
	}
	codec := ds.Reader.Codec()
	losses := map[int]int{}
	for si := range m.Shards {
		if slices.Contains(ds.LostIndexes, si) {
			losses[si] = m.Parity + 1 // its fragments can be neither checked nor read
			continue
		}
		for f := range total {
			st := codec.Placement(si, f)
			if !listed[st] || !present[st][dataset.FragmentKey(h.cfg.Name, m.ShardIngest(si), si, f)] {
				losses[si]++
			}
		}
	}
	h.losses = losses
	h.publish()
	if mg := h.margin(); mg < h.parity {
		h.log.Warn("heal: fragments are missing; rebuilding them as the scrub reaches them", "shards_missing_some", len(losses), "margin", mg, "parity", h.parity)
	}
}

// margin is m minus the most fragments a shard is known to miss.
func (h *healer) margin() int {
	worst := 0
	for _, n := range h.losses {
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
func (h *healer) record(ctx context.Context, ds *dataset.Dataset, cycle, next int) {
	st := State{Version: ds.Current.IngestID, Cycle: cycle, Next: next, Shards: h.nShards,
		Margin: h.margin(), Parity: h.parity, Updated: time.Now().Unix(), Healer: h.id}
	b, _ := json.Marshal(st)
	backend.OnEvery(h.stores, func(i int, s backend.Store) error {
		return s.Put(ctx, dataset.HealStateKey(h.cfg.Name), b)
	})
	if h.cfg.Metrics != nil {
		h.cfg.Metrics.position.WithLabelValues(h.cfg.Name).Set(float64(next))
	}
}

// mendMetadata checks the manifest copies, identities, indexes, groups
// and kept versions, and mends what is missing or wrong under the
// dataset's ingest lock (see the package comment).
func (h *healer) mendMetadata(ctx context.Context) error {
	ds, err := h.open(ctx)
	if err != nil {
		return err
	}
	rep, err := ds.VerifyMetadata(ctx)
	if err != nil {
		return err
	}
	if rep.Intact() && len(rep.Pending) == 0 {
		return nil
	}
	lock, lctx, err := dataset.AcquireLock(ctx, h.raw, h.cfg.Name, h.id, dataset.LockOptions{Logger: h.cfg.Logger})
	if errors.Is(err, dataset.ErrLocked) {
		h.log.Info("heal: the metadata needs mending, but an ingest, gc or repair holds the dataset's lock; mending it next cycle", "detail", err)
		return nil
	}
	if err != nil {
		return err
	}
	defer lock.Release(context.WithoutCancel(ctx))
	// Under the lock, read again what is current: a commit may have
	// landed between the check above and the lock.
	if ds, err = h.open(lctx); err != nil {
		return err
	}
	if rep, err = ds.VerifyMetadata(lctx); err != nil {
		return err
	}
	if rep.Intact() && len(rep.Pending) == 0 {
		return nil
	}
	n, err := ds.RepairHolding(lctx, rep, lock, nil)
	switch {
	case err == nil:
		h.log.Info("heal: mended metadata", "written", n)
	case errors.Is(err, dataset.ErrIncomplete):
		h.log.Warn("heal: mended the metadata the answering stores allow", "written", n, "detail", err)
	default:
		h.log.Error("heal: cannot mend the metadata", "written", n, "err", err)
	}
	if h.cfg.Metrics != nil {
		h.cfg.Metrics.rebuilt.WithLabelValues(h.cfg.Name).Add(float64(n))
	}
	return nil
}

// healHints heals the shards mounts read degraded, then removes their
// hints. It returns the fragments written.
func (h *healer) healHints(ctx context.Context, ds *dataset.Dataset) (int, error) {
	keys := map[string][]int{} // hint key -> stores holding it
	var mu sync.Mutex
	backend.OnEvery(h.stores, func(i int, s backend.Store) error {
		ks, err := s.List(ctx, dataset.HealHintPrefix(h.cfg.Name))
		mu.Lock()
		defer mu.Unlock()
		for _, k := range ks {
			keys[k] = append(keys[k], i)
		}
		return err
	})
	if len(keys) == 0 {
		return 0, nil
	}
	byIngest := map[string]map[int]bool{}
	for k := range keys {
		id, si, ok := parseHint(strings.TrimPrefix(k, dataset.HealHintPrefix(h.cfg.Name)))
		if !ok {
			continue
		}
		if byIngest[id] == nil {
			byIngest[id] = map[int]bool{}
		}
		byIngest[id][si] = true
	}
	var shards []int
	for si := range h.nShards {
		if byIngest[ds.Manifest.ShardIngest(si)][si] {
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
	for k, on := range keys {
		for _, i := range on {
			h.stores[i].Delete(ctx, k)
		}
	}
	return written, nil
}

// parseHint reads a hint's name: INGEST.SHARD.
func parseHint(s string) (string, int, bool) {
	dot := strings.LastIndexByte(s, '.')
	if dot <= 0 {
		return "", 0, false
	}
	si, err := strconv.Atoi(s[dot+1:])
	return s[:dot], si, err == nil && si >= 0
}

func damagedShards(rep *dataset.Report) []int {
	var out []int
	for _, d := range rep.Damaged {
		if !slices.Contains(out, d.Shard) {
			out = append(out, d.Shard)
		}
	}
	slices.SortFunc(out, cmp.Compare[int])
	return out
}
