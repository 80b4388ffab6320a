package repository

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/manifest"
)

// GC removes the versions of a dataset that no retention rule keeps, and
// the objects that no version kept needs. What it keeps, and why:
//   - the current version, always;
//   - the last KeepLast versions, and those committed within KeepWithin;
//   - every version a live mount's lease names (lease.go);
//   - every version a run's epoch record names (mount --follow, runlog.go):
//     the run may resume at that epoch;
//   - every object of an ingest in progress: it holds the ingest lock, so
//     no single-process ingest, append or rollback runs, and a distributed
//     ingest's parts (which take no lock) are left alone while their
//     records exist.
// It deletes in an order that a kill at any moment leaves safe: first a
// mark per version it removes (GCMarkKey), then the kept manifests of those
// versions (so that they show as removed and no new mount opens them),
// then, after reading the leases again, the objects of ingests that no
// kept or leased version reads, and last the marks. While a mark is there,
// verify does not call the version's missing manifest copies damage, and
// repair does not write them back.

// GCMarkPrefix is the prefix of the marks of versions a gc is removing.
func GCMarkPrefix(name string) string { return name + "/gc/" }

// GCMarkKey marks the version committed by ingest id as being removed by
// gc, from before its kept manifests are deleted until its objects are.
func GCMarkKey(name, ingestID string) string { return GCMarkPrefix(name) + ingestID }

// ErrNoRule: gc was asked to run without a retention rule.
var ErrNoRule = errors.New("no retention rule")

// GCOptions configure GC.
type GCOptions struct {
	KeepLast   int           // keep the last this many versions (the current one counts)
	KeepWithin time.Duration // keep the versions committed this recently
	// Delete deletes; without it GC only reports what it would delete.
	Delete bool
	// LeaseStale is how old a lease's heartbeat may be before it is not
	// honoured (LeaseStale).
	LeaseStale time.Duration
	Lock       LockOptions
	Logger     *slog.Logger
}

// GCReport is what GC kept and removed, or would.
type GCReport struct {
	Kept    []KeptVersion
	Removed []int // version numbers whose kept manifest goes
	// Objects and Bytes are what goes (or went): every store's objects of
	// the ingests no kept version reads, and the removed versions' kept
	// manifests.
	Objects int
	Bytes   int64
	// Ingests are the ingest ids whose objects go: removed versions' and
	// interrupted runs'.
	Ingests []string
	Deleted bool
}

// KeptVersion is a version GC keeps, and why.
type KeptVersion struct {
	Number int
	Why    string
}

// GC applies the retention rules of opts to dataset name; see the type's
// comment above. Its phases: read the current version and prove every
// store is this dataset's (gcCurrent); choose what stays and why
// (gcRetain); list and size what goes (gcPlan); then, with opts.Delete,
// delete in the order that a kill leaves safe (gcDelete).
func GC(ctx context.Context, stores []backend.Store, name string, opts GCOptions) (*GCReport, error) {
	if opts.KeepLast <= 0 && opts.KeepWithin <= 0 {
		return nil, fmt.Errorf("%w: gc %s: say which versions to keep, with --keep-last K and/or --keep-within DURATION (nothing was deleted)", ErrNoRule, name)
	}
	if opts.LeaseStale <= 0 {
		opts.LeaseStale = LeaseStale
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var b [4]byte
	crand.Read(b[:])
	txn, ctx, err := Begin(ctx, stores, name, "gc-"+hex.EncodeToString(b[:]), opts.Lock, log)
	if err != nil {
		return nil, fmt.Errorf("gc %s: %w", name, err)
	}
	defer txn.Release(context.WithoutCancel(ctx))

	cur, err := gcCurrent(ctx, stores, name, log)
	if err != nil {
		return nil, fmt.Errorf("gc %s: %w", name, err)
	}
	ret, err := gcRetain(ctx, stores, cur, opts)
	if err != nil {
		return nil, fmt.Errorf("gc %s: %w", name, err)
	}
	plan, err := gcPlan(ctx, stores, name, ret)
	if err != nil {
		return nil, fmt.Errorf("gc %s: %w (nothing was deleted)", name, err)
	}
	if !opts.Delete {
		return plan.rep, nil
	}
	if err := gcDelete(ctx, stores, name, txn, opts, plan); err != nil {
		return nil, fmt.Errorf("gc %s: %w", name, err)
	}
	plan.rep.Deleted = true
	return plan.rep, nil
}

// gcCurrent reads the dataset's current version, and refuses to go on
// when a store holds another dataset of this name: gc deletes nothing on
// stores it cannot prove are this dataset's.
func gcCurrent(ctx context.Context, stores []backend.Store, name string, log *slog.Logger) (*manifest.Manifest, error) {
	copies := readCopies(ctx, stores, name)
	cur, err := chooseManifest(copies, stores, name, log)
	if err != nil {
		return nil, err
	}
	places, err := checkPlaces(copies, stores, cur)
	if err != nil {
		return nil, err
	}
	for i, p := range places {
		if p.State == Foreign {
			return nil, fmt.Errorf("store %d (%s) holds %s: gc deletes nothing on stores it cannot prove are this dataset's (shardfs verify %s)", i, stores[i], p.Detail, name)
		}
	}
	return cur, nil
}

// gcRetention is what the retention rules and the leases keep.
type gcRetention struct {
	rep     *GCReport              // Kept filled in
	needed  map[string]bool        // ingest ids a kept or leased version reads
	keptIDs map[string]bool        // ingest ids of kept versions: their kept manifests stay
	removed []manifest.VersionInfo // versions no rule keeps
}

// gcRetain chooses the versions that stay, each with why (the current
// one, the rules of opts, a live mount's lease), and the ingests they
// read.
func gcRetain(ctx context.Context, stores []backend.Store, cur *manifest.Manifest, opts GCOptions) (*gcRetention, error) {
	name := cur.Name
	history := History(cur)
	leases, err := ReadLeases(ctx, stores, name, opts.LeaseStale)
	if err != nil {
		return nil, err
	}
	ret := &gcRetention{rep: &GCReport{}, needed: map[string]bool{}, keptIDs: map[string]bool{}}
	keep := map[int][]string{}
	keepWhy := func(n int, why string) { keep[n] = append(keep[n], why) }
	keepWhy(cur.VersionNumber(), "current")
	for i, v := range history {
		if opts.KeepLast > 0 && i >= len(history)-opts.KeepLast {
			keepWhy(v.Number, fmt.Sprintf("--keep-last %d", opts.KeepLast))
		}
		if opts.KeepWithin > 0 && time.Since(time.Unix(v.CreatedUnix, 0)) <= opts.KeepWithin {
			keepWhy(v.Number, fmt.Sprintf("--keep-within %v", opts.KeepWithin))
		}
	}
	for _, l := range leases {
		keepWhy(l.Version, "leased by "+l.Describe())
		for _, id := range l.IngestIDs {
			ret.needed[id] = true
		}
	}
	runs, err := RunVersions(ctx, stores, name)
	if err != nil {
		return nil, fmt.Errorf("%w (nothing was deleted)", err)
	}
	for v, whys := range runs {
		for _, why := range whys {
			keepWhy(v, why)
		}
	}
	for _, v := range history {
		whys, ok := keep[v.Number]
		if !ok {
			ret.removed = append(ret.removed, v)
			continue
		}
		ret.keptIDs[v.IngestID] = true
		m := cur
		if v.IngestID != cur.IngestID {
			if m, err = loadVersion(ctx, stores, cur, v.Number); errors.Is(err, ErrNoVersion) {
				continue // removed by an earlier gc: nothing of it to keep
			} else if err != nil {
				return nil, fmt.Errorf("version %d is kept, and its manifest cannot be read to tell what it reads: %w (nothing was deleted)", v.Number, err)
			}
		}
		for _, id := range LeaseIDs(m) {
			ret.needed[id] = true
		}
		ret.rep.Kept = append(ret.rep.Kept, KeptVersion{v.Number, strings.Join(whys, ", ")})
	}
	return ret, nil
}

// gcDeletion is what gc deletes: per store, the removed versions' kept
// manifests and the objects of ingests nothing kept reads.
type gcDeletion struct {
	rep                   *GCReport
	versionKeys, dataKeys [][]string
	ingests               map[string]bool // whose objects go
}

// gcPlan lists and sizes what goes.
func gcPlan(ctx context.Context, stores []backend.Store, name string, ret *gcRetention) (*gcDeletion, error) {
	versionKeys, dataKeys, err := gcCandidates(ctx, stores, name, ret.needed, ret.keptIDs)
	if err != nil {
		return nil, err
	}
	rep := ret.rep
	stillKept := map[string]bool{}
	for _, ks := range versionKeys {
		for _, k := range ks {
			stillKept[strings.TrimPrefix(k, VersionPrefix(name))] = true
		}
	}
	for _, v := range ret.removed {
		if stillKept[v.IngestID] {
			rep.Removed = append(rep.Removed, v.Number)
		}
	}
	ingests := map[string]bool{}
	for _, ks := range dataKeys {
		for _, k := range ks {
			ingests[objectIngest(name, k)] = true
		}
	}
	for id := range ingests {
		rep.Ingests = append(rep.Ingests, id)
	}
	slices.Sort(rep.Ingests)
	if rep.Objects, rep.Bytes, err = sizeOf(ctx, stores, versionKeys, dataKeys); err != nil {
		return nil, err
	}
	return &gcDeletion{rep: rep, versionKeys: versionKeys, dataKeys: dataKeys, ingests: ingests}, nil
}

// gcDelete deletes what plan lists. What is current stays whole whatever
// happens next: nothing the current version (or a kept or leased one)
// reads is in the plan, and the order makes every kill leave a state the
// tools read right. The marks go first, so that a kill from here on leaves
// the removal recognisable; then the removed versions' kept manifests:
// from here no new mount opens them, and a mount that did is in the leases
// read next; then the data, unless a mount leased it while gc ran; the
// marks last.
func gcDelete(ctx context.Context, stores []backend.Store, name string, txn *Txn, opts GCOptions, plan *gcDeletion) error {
	if err := markRemoving(ctx, stores, name, plan.versionKeys); err != nil {
		return fmt.Errorf("%w (nothing was deleted)", err)
	}
	if err := deleteAll(ctx, stores, plan.versionKeys); err != nil {
		return err
	}
	leases, err := ReadLeases(ctx, stores, name, opts.LeaseStale)
	if err != nil {
		return fmt.Errorf("%w (the removed versions' manifests were deleted, their data was not)", err)
	}
	for _, l := range leases {
		for _, id := range l.IngestIDs {
			if plan.ingests[id] {
				return fmt.Errorf("a mount leased version %d while gc ran (%s): its objects were left; run gc again when it ends", l.Version, l.Describe())
			}
		}
	}
	if err := txn.Refresh(ctx); err != nil {
		return err
	}
	if err := deleteAll(ctx, stores, plan.dataKeys); err != nil {
		return err
	}
	// Every mark goes, an earlier interrupted gc's too: what they marked is
	// now removed, or kept by this gc's rules (and then repair may restore
	// its manifest copies).
	marks, _, err := gcMarks(ctx, stores, name)
	if err == nil {
		err = deleteAll(ctx, stores, marks)
	}
	if err != nil {
		return fmt.Errorf("the removal is done, but its marks remain (run gc again): %w", err)
	}
	return nil
}

// gcCandidates lists, per store, the kept manifests of versions not in
// keptIDs and the fragments, indexes and group objects of ingests not in
// needed, leaving alone those of distributed ingests with part records.
func gcCandidates(ctx context.Context, stores []backend.Store, name string, needed, keptIDs map[string]bool) (versionKeys, dataKeys [][]string, err error) {
	versionKeys, dataKeys = make([][]string, len(stores)), make([][]string, len(stores))
	running := make([]map[string]bool, len(stores))
	_, errs := backend.Split(backend.OnEvery(stores, func(i int, s backend.Store) error {
		parts, err := s.List(ctx, PartPrefix(name))
		if err != nil {
			return fmt.Errorf("store %d: list distributed ingests: %w", i, err)
		}
		running[i] = map[string]bool{}
		for _, k := range parts {
			id, _, _ := strings.Cut(strings.TrimPrefix(k, PartPrefix(name)), "/")
			running[i][id] = true
		}
		vs, err := s.List(ctx, VersionPrefix(name))
		if err != nil {
			return fmt.Errorf("store %d: list kept versions: %w", i, err)
		}
		for _, k := range vs {
			if !keptIDs[strings.TrimPrefix(k, VersionPrefix(name))] {
				versionKeys[i] = append(versionKeys[i], k)
			}
		}
		for _, prefix := range []string{DataPrefix(name), IndexPrefix(name), GroupPrefix(name)} {
			ks, err := s.List(ctx, prefix)
			if err != nil {
				return fmt.Errorf("store %d: list %s: %w", i, prefix, err)
			}
			for _, k := range ks {
				if id := objectIngest(name, k); !needed[id] {
					dataKeys[i] = append(dataKeys[i], k)
				}
			}
		}
		return nil
	}))
	if len(errs) > 0 {
		return nil, nil, fmt.Errorf("every store must be listed to prove what no version needs: %w", errors.Join(errs...))
	}
	// A distributed ingest running on any store is running.
	for i := range stores {
		for j := range stores {
			dataKeys[i] = slices.DeleteFunc(dataKeys[i], func(k string) bool { return running[j][objectIngest(name, k)] })
		}
	}
	return versionKeys, dataKeys, nil
}

// markRemoving writes on every store a mark for each version whose kept
// manifest some store's versionKeys hold.
func markRemoving(ctx context.Context, stores []backend.Store, name string, versionKeys [][]string) error {
	ids := map[string]bool{}
	for _, ks := range versionKeys {
		for _, k := range ks {
			ids[strings.TrimPrefix(k, VersionPrefix(name))] = true
		}
	}
	if len(ids) == 0 {
		return nil
	}
	_, errs := backend.Split(backend.OnEvery(stores, func(i int, s backend.Store) error {
		for id := range ids {
			if err := s.Put(ctx, GCMarkKey(name, id), []byte("removing\n")); err != nil {
				return fmt.Errorf("store %d: mark version %s removed: %w", i, id, err)
			}
		}
		return nil
	}))
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return nil
}

// gcMarks lists every store's gc marks, and the ingest ids they
// mark on any store.
func gcMarks(ctx context.Context, stores []backend.Store, name string) (keys [][]string, ids map[string]bool, err error) {
	keys = make([][]string, len(stores))
	_, errs := backend.Split(backend.OnEvery(stores, func(i int, s backend.Store) error {
		ks, err := s.List(ctx, GCMarkPrefix(name))
		keys[i] = ks
		return err
	}))
	ids = map[string]bool{}
	for _, ks := range keys {
		for _, k := range ks {
			ids[strings.TrimPrefix(k, GCMarkPrefix(name))] = true
		}
	}
	return keys, ids, errors.Join(errs...)
}

// objectIngest is the ingest id in a data, index or group key of name.
func objectIngest(name, key string) string {
	rest := strings.TrimPrefix(key, name+"/")
	_, rest, _ = strings.Cut(rest, "/") // data/, index/ or group/
	id, _, _ := strings.Cut(rest, "/")
	return id
}

func sizeOf(ctx context.Context, stores []backend.Store, lists ...[][]string) (int, int64, error) {
	var objects, bytes atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, keys := range lists {
		for i, ks := range keys {
			for _, k := range ks {
				g.Go(func() error {
					n, err := stores[i].Stat(gctx, k)
					if errors.Is(err, backend.ErrNotExist) {
						return nil
					}
					if err != nil {
						return err
					}
					objects.Add(1)
					bytes.Add(n)
					return nil
				})
			}
		}
	}
	err := g.Wait()
	return int(objects.Load()), bytes.Load(), err
}

func deleteAll(ctx context.Context, stores []backend.Store, keys [][]string) error {
	var mu sync.Mutex
	var errs []error
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i, ks := range keys {
		for _, k := range ks {
			g.Go(func() error {
				if err := stores[i].Delete(gctx, k); err != nil && !errors.Is(err, backend.ErrNotExist) {
					mu.Lock()
					errs = append(errs, fmt.Errorf("store %d: delete %s: %w", i, k, err))
					mu.Unlock()
				}
				return nil
			})
		}
	}
	g.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("%d deletes failed (run gc again): %w", len(errs), errors.Join(errs[:min(len(errs), 5)]...))
	}
	return nil
}
