package repository

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/erasure"
	"github.com/shardfs/shardfs/manifest"
	"github.com/shardfs/shardfs/verify"
)

// Damage is one missing or corrupt fragment.
type Damage struct {
	Shard, Frag, Store int
	StoreName          string
	Err                error
	// BadBlocks lists the corrupt blocks when the rest of the fragment is
	// good; nil means the whole fragment is lost.
	BadBlocks []int
}

// Report is the result of Verify.
type Report struct {
	Shards, Fragments int
	Bytes             int64 // fragment bytes read
	Damaged           []Damage
	Unrecoverable     []int    // shards with a block stripe that lost more than m blocks
	BadSamples        []string // samples whose decoded bytes fail their own checksum
	BadManifests      []int    // stores whose manifest copy is missing, corrupt or stale
	// BadIndexes lists the shard index copies (format 2) that are missing
	// or corrupt; repair copies an intact one over them.
	BadIndexes []IndexCopy
	// BadGroups lists the group object copies (format 3) that are missing
	// or corrupt; repair copies an intact one over them. A group with no
	// intact copy on any store keeps the dataset from opening at all.
	BadGroups []GroupCopy
	// BadVersions lists the copies of kept versions' manifests (those the
	// history names that some store still holds) that are missing or
	// corrupt; repair copies an intact one over them. A version no store
	// holds was removed by gc, and is not damage.
	BadVersions []VersionCopy
	// LostVersions lists the kept versions with no intact copy of their
	// manifest on any store checked: they can no longer be mounted or
	// rolled back to.
	LostVersions []int
	// Removing lists the versions an interrupted gc was removing (its
	// marks remain): their missing manifest copies are not damage, and
	// repair does not restore them; gc, run again, finishes.
	Removing   []int
	NoIdentity []int // stores without this dataset's identity (new or replaced stores)
	Foreign    []int // stores that hold another dataset or ingest of this name
	// StaleManifests says, for a store of BadManifests whose copy is
	// intact but of another version (a commit that stopped part-way, or an
	// earlier version of this dataset), which version it holds.
	StaleManifests map[int]int
	// LostGroups lists the format-3 groups whose object no store holds
	// intact: their shards (in LostIndexes too) can be neither checked nor
	// served.
	LostGroups []int
	// Unreadable says what of the manifest cannot be read back, so that no
	// mount or plan can use the dataset (strata whose time buckets do not
	// parse, from a version ingested before ingest refused them).
	Unreadable []string
	// Pending lists stores that hold this ingest's manifest or identity
	// under the pending keys, in place of the real copy or beside it: its
	// commit passed its commit point and stopped before it finished (see
	// Commit). The dataset is whole; repair moves them to their keys.
	Pending []int
	// Unreachable lists stores that did not answer, or refused us (wrong
	// credentials, no bucket): their fragments were not checked, so the
	// report cannot say the dataset is intact or not. Causes holds each
	// one's first error.
	Unreachable []int
	Causes      map[int]error
	Unchecked   int // fragments not checked because their store did not answer
	// LostIndexes lists the shards (format 2) with no intact copy of their
	// index on any store: their samples' rows and block checksums are gone,
	// so the shard can be neither checked nor served.
	LostIndexes []int
}

// StoreProblem says in words what kept store i from being checked.
func (r *Report) StoreProblem(i int) string { return storeProblem(r.Causes[i]) }

// storeProblem says in words what a store's error means for its objects:
// it did not answer, it refused our credentials, or its bucket is gone.
func storeProblem(err error) string {
	switch {
	case err == nil:
		return "did not answer"
	case errors.Is(err, backend.ErrAccessDenied):
		return fmt.Sprintf("refused our credentials (%v)", err)
	case errors.Is(err, backend.ErrNoBucket):
		return fmt.Sprintf("has no such bucket (%v): check the bucket name in its URL first; if the store was replaced by an empty one, create the bucket, then run repair to refill it", err)
	}
	return fmt.Sprintf("did not answer (%v)", err)
}

// IndexCopy is one store's copy of one shard's index.
type IndexCopy struct {
	Store, Shard int
	Err          error
}

// GroupCopy is one store's copy of one group object (format 3).
type GroupCopy struct {
	Store, Group int
	Err          error
}

// VersionCopy is one store's copy of one kept version's manifest.
type VersionCopy struct {
	Store, Version int
	IngestID       string
	Err            error
}

// Intact reports whether everything was checked and nothing is wrong.
func (r *Report) Intact() bool {
	return len(r.Damaged) == 0 && len(r.BadSamples) == 0 && len(r.BadManifests) == 0 && len(r.BadIndexes) == 0 && len(r.BadGroups) == 0 &&
		len(r.BadVersions) == 0 && len(r.NoIdentity) == 0 && len(r.Foreign) == 0 && r.Complete()
}

// Complete reports whether every store answered, so the report is a verdict.
func (r *Report) Complete() bool { return len(r.Unreachable) == 0 }

// Recoverable reports whether repair can fix everything found.
func (r *Report) Recoverable() bool {
	return len(r.Unrecoverable) == 0 && len(r.BadSamples) == 0 && len(r.LostIndexes) == 0 && len(r.LostVersions) == 0 && len(r.Unreadable) == 0 && len(r.LostGroups) == 0
}

// unavailable reports whether err means the store did not answer or
// refused us, as opposed to answering that an object is missing or wrong.
func unavailable(err error) bool {
	return errors.Is(err, backend.ErrUnavailable) || errors.Is(err, backend.ErrStalled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, backend.ErrAccessDenied) || errors.Is(err, backend.ErrNoBucket)
}

// storeAnswers asks store i for the dataset's manifest: an answer, even
// "no such object", means the store is up and lets us in, so an error it
// gave for one object is that object's, not the store's.
func (d *Dataset) storeAnswers(ctx context.Context, i int) bool {
	_, err := d.Stores[i].Stat(ctx, ManifestKey(d.Name))
	return err == nil || errors.Is(err, backend.ErrNotExist)
}

// storeFaults records, per store, the first error that kept it from being checked.
type storeFaults struct {
	down  []atomic.Bool
	mu    sync.Mutex // guards cause
	cause map[int]error
}

func newStoreFaults(n int) *storeFaults {
	return &storeFaults{down: make([]atomic.Bool, n), cause: map[int]error{}}
}

func (f *storeFaults) mark(i int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.cause[i]; !ok {
		f.cause[i] = err
	}
	f.down[i].Store(true)
}

// Verify reads every fragment of every shard, also from stores the read path
// has marked down, checks every block checksum, then decodes every shard and
// checks every sample checksum. A store that does not answer is asked once,
// not once per fragment: its fragments are reported as unchecked. progress,
// if not nil, receives fragment bytes as they are checked.
func (d *Dataset) Verify(ctx context.Context, progress func(bytes int64)) (*Report, error) {
	m := d.Manifest
	rep := &Report{LostIndexes: slices.Clone(d.LostIndexes), LostGroups: slices.Clone(d.LostGroups)}
	faults := newStoreFaults(len(d.Stores))
	all := make([]int, len(m.Shards))
	for i := range all {
		all[i] = i
	}
	if err := d.checkShards(ctx, rep, all, faults, progress); err != nil {
		return nil, err
	}
	if err := d.checkMetadata(ctx, rep, faults); err != nil {
		return nil, err
	}
	return rep, nil
}

// VerifyShards is Verify of the given shards' fragments and samples
// alone, the part of a scrub that reads data: the healer checks a dataset
// a few shards at a time, and the rest (VerifyMetadata) once a cycle. Its
// report names the stores that did not answer (Unreachable, Causes).
func (d *Dataset) VerifyShards(ctx context.Context, shards []int, progress func(bytes int64)) (*Report, error) {
	rep := &Report{}
	for _, si := range shards {
		if slices.Contains(d.LostIndexes, si) {
			rep.LostIndexes = append(rep.LostIndexes, si)
		}
	}
	faults := newStoreFaults(len(d.Stores))
	if err := d.checkShards(ctx, rep, shards, faults, progress); err != nil {
		return nil, err
	}
	for i := range d.Stores {
		if faults.down[i].Load() {
			rep.Unreachable = append(rep.Unreachable, i)
		}
	}
	rep.Causes = faults.cause
	return rep, nil
}

// VerifyMetadata is Verify of everything but the fragments: the manifest
// copies, identities, index and group objects and kept versions' manifests.
func (d *Dataset) VerifyMetadata(ctx context.Context) (*Report, error) {
	rep := &Report{LostIndexes: slices.Clone(d.LostIndexes), LostGroups: slices.Clone(d.LostGroups)}
	if err := d.checkMetadata(ctx, rep, newStoreFaults(len(d.Stores))); err != nil {
		return nil, err
	}
	return rep, nil
}

// checkShards is the fragment and sample half of Verify, over shards.
func (d *Dataset) checkShards(ctx context.Context, rep *Report, shards []int, faults *storeFaults, progress func(bytes int64)) error {
	m := d.Manifest
	rep.Shards += len(shards)
	rep.Fragments += len(shards) * (m.Data + m.Parity)
	var mu sync.Mutex // guards rep
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(2) // each shard in flight holds up to one shard of data
	for _, i := range shards {
		if slices.Contains(d.LostIndexes, i) {
			continue // nothing to check its fragments against
		}
		g.Go(func() error {
			sh := d.Shard(i)
			damaged, unchecked := d.checkShard(gctx, sh, faults)
			if err := gctx.Err(); err != nil {
				return err
			}
			fragBytes := sh.FragSize * int64(m.Data+m.Parity)
			if progress != nil {
				progress(fragBytes)
			}
			var badSamples []string
			unrecoverable := d.stripeLoss(sh, damaged) > m.Parity
			if !unrecoverable {
				data, err := d.Reader.ReadRange(gctx, sh, 0, m.Shards[i].Size)
				if erasure.Heal(err) != nil {
					err = nil // read whole; checkShard has found the fragments
				}
				switch {
				case gctx.Err() != nil:
					return gctx.Err()
				case err != nil && unchecked > 0:
					// Not readable now, but the stores that did not answer may hold what is missing.
				case err != nil:
					unrecoverable = true
				default:
					first := m.Shards[i].FirstSample
					for j := first; j < first+m.Shards[i].NumSamples; j++ {
						off, size := m.Samples.Offset[j], m.Samples.Size[j]
						if !verify.Bytes(data[off:off+size], m.Samples.Sum[j]) {
							badSamples = append(badSamples, m.Samples.Key(j))
						}
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			rep.Bytes += fragBytes
			rep.Damaged = append(rep.Damaged, damaged...)
			rep.BadSamples = append(rep.BadSamples, badSamples...)
			rep.Unchecked += unchecked
			if unrecoverable {
				rep.Unrecoverable = append(rep.Unrecoverable, i)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	sort.Slice(rep.Damaged, func(i, j int) bool {
		a, b := rep.Damaged[i], rep.Damaged[j]
		return a.Shard < b.Shard || a.Shard == b.Shard && a.Frag < b.Frag
	})
	sort.Ints(rep.Unrecoverable)
	return nil
}

// checkMetadata is the rest of Verify: the manifest copies, identities,
// indexes, groups and kept versions, on the stores faults has not marked
// down (those are reported unreachable).
func (d *Dataset) checkMetadata(ctx context.Context, rep *Report, faults *storeFaults) error {
	m := d.Manifest
	unreachable := faults.down
	if slices.ContainsFunc(m.Derived, func(dv manifest.Derived) bool { return dv.Width > 0 }) {
		if _, err := manifest.StratumTimes(&m.Header); err != nil {
			rep.Unreadable = append(rep.Unreadable, fmt.Sprintf("the strata: %v", err))
		}
	}
	var silent []int
	for i := range unreachable {
		if unreachable[i].Load() {
			silent = append(silent, i)
		}
	}
	copies := readCopies(ctx, d.Stores, d.Name, silent...)
	if err := ctx.Err(); err != nil {
		return err
	}
	// The manifest copies and identities name the current version, which
	// an older one opened (Options.Version) is not.
	current := d.Current.IngestID
	if current == "" {
		current = m.IngestID // a Dataset not made by Open
	}
	promotePending(copies, current)
	for i := range d.Stores {
		c := copies[i]
		if !unreachable[i].Load() && c.err != nil && unavailable(c.err) {
			faults.mark(i, c.err)
		}
		switch {
		case unreachable[i].Load():
			rep.Unreachable = append(rep.Unreachable, i)
			continue
		case d.Places[i].State == Foreign:
			rep.Foreign = append(rep.Foreign, i)
			continue
		}
		if c.err != nil || c.m.IngestID != current {
			rep.BadManifests = append(rep.BadManifests, i)
			if c.err == nil {
				if rep.StaleManifests == nil {
					rep.StaleManifests = map[int]int{}
				}
				rep.StaleManifests[i] = c.m.VersionNumber()
			}
		}
		if c.pending {
			rep.Pending = append(rep.Pending, i)
		}
		if c.id == nil || c.id.IngestID != current || c.id.Position != i {
			rep.NoIdentity = append(rep.NoIdentity, i)
		}
	}
	if err := d.checkIndexes(ctx, rep, faults); err != nil {
		return err
	}
	if err := d.checkGroups(ctx, rep, faults); err != nil {
		return err
	}
	if err := d.checkVersions(ctx, rep, faults); err != nil {
		return err
	}
	rep.Causes = faults.cause
	return nil
}

// checkIndexes reads every store's copy of every shard index (format 2)
// and reports those missing or not matching the top-level manifest's
// checksum. A store that stops answering is reported unreachable.
func (d *Dataset) checkIndexes(ctx context.Context, rep *Report, faults *storeFaults) error {
	t := d.Manifest.Top
	if t == nil {
		return nil
	}
	err := d.checkCopies(ctx, rep, faults, len(t.Shards),
		func(si int) bool { return slices.Contains(rep.LostIndexes, si) }, // reported as lost, every copy bad
		func(ctx context.Context, s backend.Store, si int) error {
			_, err := ReadIndexBytes(ctx, s, t, si)
			return err
		},
		func(store, si int, err error) {
			rep.BadIndexes = append(rep.BadIndexes, IndexCopy{Store: store, Shard: si, Err: err})
		})
	sort.Slice(rep.BadIndexes, func(a, b int) bool {
		x, y := rep.BadIndexes[a], rep.BadIndexes[b]
		return x.Store < y.Store || x.Store == y.Store && x.Shard < y.Shard
	})
	return err
}

// checkGroups is checkIndexes for the group objects of format 3.
func (d *Dataset) checkGroups(ctx context.Context, rep *Report, faults *storeFaults) error {
	r := d.Manifest.Root
	if r == nil {
		return nil
	}
	err := d.checkCopies(ctx, rep, faults, len(r.Groups), func(g int) bool { return slices.Contains(d.LostGroups, g) }, // reported lost, every copy bad
		func(ctx context.Context, s backend.Store, g int) error {
			_, err := ReadGroupBytes(ctx, s, r, g)
			return err
		},
		func(store, g int, err error) {
			rep.BadGroups = append(rep.BadGroups, GroupCopy{Store: store, Group: g, Err: err})
		})
	sort.Slice(rep.BadGroups, func(a, b int) bool {
		x, y := rep.BadGroups[a], rep.BadGroups[b]
		return x.Store < y.Store || x.Store == y.Store && x.Group < y.Group
	})
	return err
}

// answering are the stores verify checked: neither unreachable nor
// foreign. Reads of metadata that every store holds ask only them, so a
// hung store costs its timeout once, in the fragment checks.
func (r *Report) answering(stores []backend.Store) []backend.Store {
	var out []backend.Store
	for i, s := range stores {
		if !slices.Contains(r.Unreachable, i) && !slices.Contains(r.Foreign, i) {
			out = append(out, s)
		}
	}
	return out
}

// keptVersions are the versions other than the current one that the
// current manifest's history names.
func (d *Dataset) keptVersions() []manifest.VersionInfo {
	var out []manifest.VersionInfo
	for _, v := range d.Current.Versions {
		if v.IngestID != d.Current.IngestID {
			out = append(out, v)
		}
	}
	return out
}

// readVersion reads store s's copy of version v's manifest, and checks
// that it decodes (its checksum holds) and is that version's.
func (d *Dataset) readVersion(ctx context.Context, s backend.Store, v manifest.VersionInfo) ([]byte, error) {
	key := VersionKey(d.Name, v.IngestID)
	b, m, err := readManifestBytes(ctx, s, key)
	if err == nil && m.IngestID != v.IngestID {
		err = fmt.Errorf("%w: %s holds ingest %s", manifest.ErrCorrupt, key, m.IngestID)
	}
	return b, err
}

// checkVersions is checkIndexes for the kept versions' manifests. A
// version whose every checked copy is missing was removed by gc (which
// deletes a version's manifests before its data), and is not reported.
func (d *Dataset) checkVersions(ctx context.Context, rep *Report, faults *storeFaults) error {
	kept := d.keptVersions()
	if len(kept) == 0 {
		return nil
	}
	// The marks of the stores that answered: gc writes every mark on
	// every store.
	_, removing, _ := gcMarks(ctx, rep.answering(d.Stores), d.Name)
	for _, v := range kept {
		if removing[v.IngestID] {
			rep.Removing = append(rep.Removing, v.Number)
		}
	}
	var bad []VersionCopy
	err := d.checkCopies(ctx, rep, faults, len(kept), func(int) bool { return false },
		func(ctx context.Context, s backend.Store, i int) error {
			_, err := d.readVersion(ctx, s, kept[i])
			return err
		},
		func(store, i int, err error) {
			bad = append(bad, VersionCopy{Store: store, Version: kept[i].Number, IngestID: kept[i].IngestID, Err: err})
		})
	checked := len(d.Stores) - len(rep.Unreachable) - len(rep.Foreign)
	missing, failed := map[int]int{}, map[int]int{}
	bad = slices.DeleteFunc(bad, func(vc VersionCopy) bool { return removing[vc.IngestID] })
	for _, vc := range bad {
		failed[vc.Version]++
		if errors.Is(vc.Err, backend.ErrNotExist) {
			missing[vc.Version]++
		}
	}
	for _, vc := range bad {
		if missing[vc.Version] < checked {
			rep.BadVersions = append(rep.BadVersions, vc)
		}
	}
	for v, n := range failed {
		if n == checked && missing[v] < checked {
			rep.LostVersions = append(rep.LostVersions, v)
		}
	}
	slices.Sort(rep.LostVersions)
	sort.Slice(rep.BadVersions, func(a, b int) bool {
		x, y := rep.BadVersions[a], rep.BadVersions[b]
		return x.Version < y.Version || x.Version == y.Version && x.Store < y.Store
	})
	return err
}

// checkCopies reads every checked store's copy of each of n metadata
// objects with read, and reports through bad (called under a lock) each
// copy missing or not matching. A store that stops answering is reported
// unreachable instead.
func (d *Dataset) checkCopies(ctx context.Context, rep *Report, faults *storeFaults, n int, skip func(i int) bool,
	read func(ctx context.Context, s backend.Store, i int) error, bad func(store, i int, err error)) error {
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for st, s := range d.Stores {
		if slices.Contains(rep.Unreachable, st) || slices.Contains(rep.Foreign, st) {
			continue
		}
		for i := range n {
			if skip(i) {
				continue
			}
			g.Go(func() error {
				err := read(gctx, s, i)
				if err == nil || gctx.Err() != nil {
					return gctx.Err()
				}
				if unavailable(err) && !d.storeAnswers(gctx, st) {
					faults.mark(st, err)
					mu.Lock()
					defer mu.Unlock()
					if !slices.Contains(rep.Unreachable, st) {
						rep.Unreachable = append(rep.Unreachable, st)
					}
					return nil
				}
				mu.Lock()
				defer mu.Unlock()
				bad(st, i, err)
				return nil
			})
		}
	}
	err := g.Wait()
	sort.Ints(rep.Unreachable)
	return err
}

// stripeLoss is the most blocks any one block stripe of sh lost.
func (d *Dataset) stripeLoss(sh *erasure.Shard, damaged []Damage) int {
	nblk := d.Reader.Codec().Blocks(sh.FragSize)
	if nblk == 0 {
		return len(damaged)
	}
	lost := make([]int, nblk)
	for _, dm := range damaged {
		if dm.BadBlocks == nil {
			for b := range lost {
				lost[b]++
			}
			continue
		}
		for _, b := range dm.BadBlocks {
			if b < nblk {
				lost[b]++
			}
		}
	}
	worst := 0
	for _, n := range lost {
		worst = max(worst, n)
	}
	return worst
}

// checkShard checks all fragments of a shard in parallel. Fragments on
// stores that did not answer (now, or earlier in this run) are counted as
// unchecked, not damaged.
//
// A fragment the store fails to serve while the store answers other
// requests is damaged, not unchecked: MinIO answers 503 SlowDownRead for an
// object whose on-disk copy fails its own bit-rot check.
func (d *Dataset) checkShard(ctx context.Context, sh *erasure.Shard, faults *storeFaults) (damaged []Damage, unchecked int) {
	unreachable := faults.down
	n := d.Manifest.Data + d.Manifest.Parity
	errs := make([]*erasure.FragmentError, n)
	skipped := make([]bool, n)
	var wg sync.WaitGroup
	for f := 0; f < n; f++ {
		store := d.Reader.Placement(sh.ID, f)
		if unreachable[store].Load() {
			skipped[f] = true
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[f] = d.Reader.CheckFragment(ctx, sh, f)
			if errs[f] != nil && ctx.Err() == nil && unavailable(errs[f].Err) {
				if !d.storeAnswers(ctx, store) {
					faults.mark(store, errs[f].Err)
					skipped[f] = true
					return
				}
				errs[f].Err = fmt.Errorf("the store answers, but not for this fragment (MinIO does so when its own copy fails its bit-rot check): %w", errs[f].Err)
				errs[f].BadBlocks = nil
			}
		}()
	}
	wg.Wait()
	for f, e := range errs {
		switch {
		case skipped[f]:
			unchecked++
		case e != nil:
			damaged = append(damaged, Damage{Shard: e.Shard, Frag: e.Frag, Store: e.Store, StoreName: e.StoreName, Err: e.Err, BadBlocks: e.BadBlocks})
		}
	}
	return damaged, unchecked
}

// ErrUnrecoverable: some shard lost more than m blocks of one stripe; repair writes nothing.
var ErrUnrecoverable = errors.New("dataset is unrecoverable")

// ErrForeignStore: repair would have to write into a store that holds
// another dataset or ingest of this name.
var ErrForeignStore = errors.New("store holds another dataset of this name")

// ErrIncomplete: some store did not answer or refused us, so what it holds
// was neither checked nor repaired.
var ErrIncomplete = errors.New("some stores did not answer")

// Repair rebuilds every damaged fragment in rep from the survivors, writes it
// back, and rewrites bad manifest copies and missing identities, on the
// stores that answered. Every write is proven safe first: a rebuilt
// fragment is decoded from verified blocks, and nothing is written to a
// store that did not answer or holds another dataset of this name (unless
// force: with a foreign store and no force, nothing at all is written, nor
// when some decoded sample failed its checksum). Shards that cannot be
// repaired (a stripe lost more than m blocks, or the index is lost) are
// left as they are and everything else is mended; the error then names
// them (ErrUnrecoverable), or the stores not checked (ErrIncomplete). It
// returns the number of objects written.
func (d *Dataset) Repair(ctx context.Context, rep *Report, force bool, progress func(bytes int64)) (int, error) {
	return d.repairWith(ctx, rep, force, nil, progress)
}

// RepairHolding is Repair (without force) by a caller that holds the
// dataset's ingest lock already (lock, from AcquireLock with the default
// key): the healer, which must hold it from before it reads what is
// current until its last metadata write, so that no commit lands between.
func (d *Dataset) RepairHolding(ctx context.Context, rep *Report, lock *Lock, progress func(bytes int64)) (int, error) {
	return d.repairWith(ctx, rep, false, lock, progress)
}

func (d *Dataset) repairWith(ctx context.Context, rep *Report, force bool, held *Lock, progress func(bytes int64)) (int, error) {
	if len(rep.BadSamples) > 0 {
		return 0, fmt.Errorf("%w: samples %v decode to bytes that fail their own checksum although every block verified; nothing was written",
			ErrUnrecoverable, rep.BadSamples)
	}
	if len(rep.Foreign) > 0 && !force {
		var names []string
		for _, i := range rep.Foreign {
			names = append(names, fmt.Sprintf("store %d (%s) holds %s", i, d.Stores[i], d.Places[i].Detail))
		}
		return 0, fmt.Errorf("%w %s: %v; nothing was written: fix --stores (--force would overwrite those stores with this dataset, and what they hold would be lost)", ErrForeignStore, d.Name, names)
	}
	rp := &repair{d: d, rep: rep, skip: map[int]bool{}, progress: progress, held: held}
	for _, si := range append(slices.Clone(rep.Unrecoverable), rep.LostIndexes...) {
		rp.skip[si] = true // left as they are
	}
	indexes := rp.indexSources(ctx)
	groups := rp.groupSources(ctx)
	versions := rp.versionSources(ctx)
	if err := rp.rebuildFragments(ctx); err != nil {
		return int(rp.written.Load()), err
	}
	if err := rp.rewriteMetadata(ctx, indexes, groups, versions); err != nil {
		return int(rp.written.Load()), err
	}
	return int(rp.written.Load()), rp.verdict()
}

// repair is one run of Repair.
type repair struct {
	d        *Dataset
	rep      *Report
	skip     map[int]bool // shards left as they are
	progress func(bytes int64)
	held     *Lock // the ingest lock, held by the caller; nil: take it where needed
	written  atomic.Int64

	mu     sync.Mutex // guards failed
	failed []string   // what could not be mended, in words
}

func (rp *repair) fail(why string) {
	rp.mu.Lock()
	rp.failed = append(rp.failed, why)
	rp.mu.Unlock()
}

// indexSources finds, before anything is written, an intact copy for every
// index copy to rewrite; a shard with none is left as it is.
func (rp *repair) indexSources(ctx context.Context) map[IndexCopy][]byte {
	d := rp.d
	candidates := slices.Clone(rp.rep.BadIndexes)
	if t := d.Manifest.Top; t != nil {
		// A foreign store overwritten (force) gets every index copy too:
		// verify does not read its copies, which are the other dataset's.
		for _, i := range rp.rep.Foreign {
			for si := range t.Shards {
				candidates = append(candidates, IndexCopy{Store: i, Shard: si})
			}
		}
	}
	intact := map[int][]byte{}
	out := map[IndexCopy][]byte{}
	for _, ic := range candidates {
		if rp.skip[ic.Shard] {
			continue
		}
		if intact[ic.Shard] == nil {
			b, err := d.intactIndex(ctx, ic.Shard)
			if err != nil {
				rp.skip[ic.Shard] = true
				rp.fail(err.Error())
				continue
			}
			intact[ic.Shard] = b
		}
		out[IndexCopy{Store: ic.Store, Shard: ic.Shard}] = intact[ic.Shard]
	}
	return out
}

// groupSources finds, before anything is written, an intact copy for every
// group object copy to rewrite (format 3). Every group has one: the
// dataset opened.
func (rp *repair) groupSources(ctx context.Context) map[GroupCopy][]byte {
	d := rp.d
	r := d.Manifest.Root
	if r == nil {
		return nil
	}
	candidates := slices.Clone(rp.rep.BadGroups)
	for _, i := range rp.rep.Foreign {
		for g := range r.Groups {
			candidates = append(candidates, GroupCopy{Store: i, Group: g})
		}
	}
	intact := map[int][]byte{}
	out := map[GroupCopy][]byte{}
	for _, gc := range candidates {
		if intact[gc.Group] == nil {
			b, err := firstIntact(ctx, d.Stores, 0, func(s backend.Store) ([]byte, error) { return ReadGroupBytes(ctx, s, r, gc.Group) })
			if err != nil {
				rp.fail(fmt.Sprintf("group %d's object: no intact copy to repair from (%v)", gc.Group, err))
				continue
			}
			intact[gc.Group] = b
		}
		out[GroupCopy{Store: gc.Store, Group: gc.Group}] = intact[gc.Group]
	}
	return out
}

// versionSources finds, before anything is written, an intact copy of
// the manifest of every kept version with a copy to rewrite: those verify
// found bad, and on a foreign store overwritten (force) every kept version
// some store holds. A version with no intact copy is left as it is.
func (rp *repair) versionSources(ctx context.Context) map[VersionCopy][]byte {
	d := rp.d
	candidates := slices.Clone(rp.rep.BadVersions)
	if len(rp.rep.Foreign) > 0 {
		for _, v := range d.keptVersions() {
			for _, i := range rp.rep.Foreign {
				candidates = append(candidates, VersionCopy{Store: i, Version: v.Number, IngestID: v.IngestID})
			}
		}
	}
	lost := map[int]bool{}
	for _, v := range rp.rep.LostVersions {
		lost[v] = true
	}
	intact := map[int][]byte{}
	out := map[VersionCopy][]byte{}
	for k, vc := range candidates {
		if lost[vc.Version] {
			continue // named by verdict
		}
		if intact[vc.Version] == nil {
			v := manifest.VersionInfo{Number: vc.Version, IngestID: vc.IngestID}
			b, err := firstIntact(ctx, rp.rep.answering(d.Stores), 0, func(s backend.Store) ([]byte, error) { return d.readVersion(ctx, s, v) })
			if err != nil {
				if k >= len(rp.rep.BadVersions) {
					continue // a foreign store's: no store keeps this version (gc removed it)
				}
				lost[vc.Version] = true
				rp.fail(fmt.Sprintf("version %d's manifest: no intact copy to repair from (%v)", vc.Version, err))
				continue
			}
			intact[vc.Version] = b
		}
		out[VersionCopy{Store: vc.Store, Version: vc.Version, IngestID: vc.IngestID}] = intact[vc.Version]
	}
	return out
}

// rebuildFragments decodes every damaged fragment of the shards not left
// as they are from verified blocks of the others, and writes it back. A
// shard too few survivors answer for now is named; the others are mended.
func (rp *repair) rebuildFragments(ctx context.Context) error {
	d := rp.d
	byShard := map[int][]int{}
	for _, dm := range rp.rep.Damaged {
		if !rp.skip[dm.Shard] {
			byShard[dm.Shard] = append(byShard[dm.Shard], dm.Frag)
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(2)
	for shard, frags := range byShard {
		g.Go(func() error {
			rebuilt, err := d.Reader.Rebuild(gctx, d.Shard(shard), frags)
			if err != nil && gctx.Err() == nil {
				rp.fail(fmt.Sprintf("rebuild shard %d: %v", shard, err))
				return nil
			}
			if err != nil {
				return err
			}
			for f, b := range rebuilt {
				store := d.Reader.Placement(shard, f)
				if err := d.Stores[store].Put(gctx, ShardFragmentKey(d.Name, &d.Manifest.Header, shard, f), b); err != nil {
					return fmt.Errorf("write rebuilt shard %d fragment %d: %w", shard, f, err)
				}
				rp.written.Add(1)
				if rp.progress != nil {
					rp.progress(int64(len(b)))
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// rewriteMetadata writes the index and group object copies (an intact
// copy's bytes, checked against the top-level manifest's or the root's
// checksum, never a re-encoding), the
// manifest copies and the identities that are missing or wrong, and then
// removes the pending keys of a finished commit.
func (rp *repair) rewriteMetadata(ctx context.Context, indexes map[IndexCopy][]byte, groups map[GroupCopy][]byte, versions map[VersionCopy][]byte) error {
	d, rep := rp.d, rp.rep
	enc, err := manifest.EncodeStored(d.Manifest)
	if err != nil {
		return err
	}
	for ic, b := range indexes {
		if err := d.Stores[ic.Store].Put(ctx, ShardIndexKey(d.Name, &d.Manifest.Header, ic.Shard), b); err != nil {
			return fmt.Errorf("rewrite shard %d's index on store %d: %w", ic.Shard, ic.Store, err)
		}
		rp.written.Add(1)
	}
	for gc, b := range groups {
		if err := d.Stores[gc.Store].Put(ctx, GroupKey(d.Name, d.Manifest.IngestID, gc.Group), b); err != nil {
			return fmt.Errorf("rewrite group %d's object on store %d: %w", gc.Group, gc.Store, err)
		}
		rp.written.Add(1)
	}
	if err := rp.rewriteVersions(ctx, versions); err != nil {
		return err
	}
	manifests := map[int]bool{}
	for _, i := range append(slices.Clone(rep.BadManifests), rep.Foreign...) {
		manifests[i] = true
	}
	identities := map[int]bool{}
	for _, i := range append(slices.Clone(rep.NoIdentity), rep.Foreign...) {
		identities[i] = true
	}
	for _, i := range rep.Pending {
		manifests[i], identities[i] = true, true
	}
	for i := range d.Stores {
		if manifests[i] {
			if err := d.Stores[i].Put(ctx, ManifestKey(d.Name), enc); err != nil {
				return fmt.Errorf("rewrite manifest copy: %w", err)
			}
			rp.written.Add(1)
		}
		if identities[i] {
			if err := WriteIdentity(ctx, d.Stores[i], d.Manifest, i); err != nil {
				return fmt.Errorf("write identity of store %d: %w", i, err)
			}
			rp.written.Add(1)
		}
	}
	for _, i := range rep.Pending {
		d.Stores[i].Delete(ctx, PendingManifestKey(d.Name))
		d.Stores[i].Delete(ctx, PendingIdentityKey(d.Name))
	}
	return nil
}

// rewriteVersions writes the kept versions' manifest copies under the
// dataset's lock, which gc holds while it deletes versions: each version
// is checked to be still kept (no gc mark, an intact copy on some store)
// with the lock held, so a copy is never written back after gc began to
// remove its version. With the lock held by a running ingest or gc, nothing is
// written, and the repair says to run again.
func (rp *repair) rewriteVersions(ctx context.Context, versions map[VersionCopy][]byte) error {
	if len(versions) == 0 {
		return nil
	}
	d := rp.d
	lctx := ctx
	if rp.held != nil {
		if err := rp.held.Refresh(ctx); err != nil {
			return err
		}
	} else {
		txn, c, err := Begin(ctx, d.Stores, d.Name, "repair-"+d.Current.IngestID, LockOptions{}, d.log)
		if errors.Is(err, ErrLocked) {
			rp.fail(fmt.Sprintf("kept versions' manifests not rewritten: %v; run repair again when it ends", err))
			return nil
		}
		if err != nil {
			return err
		}
		defer txn.Release(context.WithoutCancel(ctx))
		lctx = c
	}
	answering := rp.rep.answering(d.Stores)
	_, removing, err := gcMarks(lctx, answering, d.Name)
	if err != nil {
		rp.fail(fmt.Sprintf("kept versions' manifests not rewritten: %v", err))
		return nil
	}
	kept := map[int]bool{}
	for vc := range versions {
		if _, ok := kept[vc.Version]; ok {
			continue
		}
		if removing[vc.IngestID] {
			kept[vc.Version] = false // a gc began removing it since verify ran
			continue
		}
		v := manifest.VersionInfo{Number: vc.Version, IngestID: vc.IngestID}
		_, err := firstIntact(lctx, answering, 0, func(s backend.Store) ([]byte, error) { return d.readVersion(lctx, s, v) })
		kept[vc.Version] = err == nil
	}
	for vc, b := range versions {
		if !kept[vc.Version] {
			continue // gc removed it since verify read it
		}
		if err := d.Stores[vc.Store].Put(lctx, VersionKey(d.Name, vc.IngestID), b); err != nil {
			return fmt.Errorf("rewrite version %d's manifest on store %d: %w", vc.Version, vc.Store, err)
		}
		rp.written.Add(1)
	}
	return nil
}

// verdict names what the repair left: shards that cannot be mended
// (ErrUnrecoverable), or stores whose objects were neither checked nor
// mended (ErrIncomplete).
func (rp *repair) verdict() error {
	d, rep := rp.d, rp.rep
	slices.Sort(rp.failed)
	switch {
	case len(rep.LostIndexes) > 0 || len(rep.Unrecoverable) > 0 || len(rep.LostVersions) > 0 || len(rp.failed) > 0 && rep.Complete():
		var why []string
		if len(rep.Unrecoverable) > 0 {
			why = append(why, fmt.Sprintf("shards %v lost more than m=%d blocks of one stripe", rep.Unrecoverable, d.Manifest.Parity))
		}
		inGroups := shardsOfGroups(d.Manifest.Root, rep.LostGroups)
		for _, g := range rep.LostGroups {
			r := d.Manifest.Root
			why = append(why, fmt.Sprintf("group %d lost every copy of its object (shards %d-%d: their samples can be neither checked nor served)", g, r.FirstShard(g), r.FirstShard(g)+r.Groups[g].Shards-1))
		}
		if idx := slices.DeleteFunc(slices.Clone(rep.LostIndexes), func(s int) bool { return slices.Contains(inGroups, s) }); len(idx) > 0 {
			why = append(why, fmt.Sprintf("shards %v lost every copy of their index", idx))
		}
		if len(rep.LostVersions) > 0 {
			why = append(why, fmt.Sprintf("versions %v have no intact copy of their manifest left (they can no longer be mounted or rolled back to)", rep.LostVersions))
		}
		why = append(why, rp.failed...)
		return fmt.Errorf("%w: %s; everything else that verify found was repaired", ErrUnrecoverable, strings.Join(why, "; "))
	case !rep.Complete():
		var why []string
		for _, i := range rep.Unreachable {
			why = append(why, fmt.Sprintf("store %d (%s) %s", i, d.Stores[i], rep.StoreProblem(i)))
		}
		why = append(why, rp.failed...) // with those stores back, these may be rebuilt
		return fmt.Errorf("%w: %s: what they hold was not checked or repaired; the rest of the damage found was repaired", ErrIncomplete, strings.Join(why, "; "))
	}
	return nil
}

// intactIndex is shard si's index object from the first store whose copy
// matches the top-level manifest.
func (d *Dataset) intactIndex(ctx context.Context, si int) ([]byte, error) {
	b, err := firstIntact(ctx, d.Stores, 0, func(s backend.Store) ([]byte, error) { return ReadIndexBytes(ctx, s, d.Manifest.Top, si) })
	if err != nil {
		return nil, fmt.Errorf("shard %d's index: no intact copy to repair from (%w)", si, err)
	}
	return b, nil
}
