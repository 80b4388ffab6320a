package dataset

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
// comment above.
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
	lock, ctx, err := AcquireLock(ctx, stores, name, "gc-"+hex.EncodeToString(b[:]), opts.Lock)
	if err != nil {
		return nil, fmt.Errorf("gc %s: %w", name, err)
	}
	defer lock.Release(context.WithoutCancel(ctx))

	copies := readCopies(ctx, stores, name)
	cur, err := chooseManifest(copies, stores, name, log)
	if err != nil {
		return nil, fmt.Errorf("gc %s: %w", name, err)
	}
	places, err := checkPlaces(copies, stores, cur)
	if err != nil {
		return nil, fmt.Errorf("gc %s: %w", name, err)
	}
	for i, p := range places {
		if p.State == Foreign {
			return nil, fmt.Errorf("gc %s: store %d (%s) holds %s: gc deletes nothing on stores it cannot prove are this dataset's (shardfs verify %s)", name, i, stores[i], p.Detail, name)
		}
	}
	history := History(cur)
	leases, err := ReadLeases(ctx, stores, name, opts.LeaseStale)
	if err != nil {
		return nil, fmt.Errorf("gc %s: %w", name, err)
	}
	rep := &GCReport{}
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
	needed := map[string]bool{}
	for _, l := range leases {
		keepWhy(l.Version, "leased by "+l.Describe())
		for _, id := range l.IngestIDs {
			needed[id] = true
		}
	}
	keptIDs := map[string]bool{} // ingest ids of kept versions: their kept manifests stay
	var removed []manifest.VersionInfo
	for _, v := range history {
		whys, ok := keep[v.Number]
		if !ok {
			removed = append(removed, v)
			continue
		}
		keptIDs[v.IngestID] = true
		m := cur
		if v.IngestID != cur.IngestID {
			if m, err = loadVersion(ctx, stores, cur, v.Number); errors.Is(err, ErrNoVersion) {
				continue // removed by an earlier gc: nothing of it to keep
			} else if err != nil {
				return nil, fmt.Errorf("gc %s: version %d is kept, and its manifest cannot be read to tell what it reads: %w (nothing was deleted)", name, v.Number, err)
			}
		}
		for _, id := range LeaseIDs(m) {
			needed[id] = true
		}
		rep.Kept = append(rep.Kept, KeptVersion{v.Number, strings.Join(whys, ", ")})
	}

	versionKeys, dataKeys, err := gcCandidates(ctx, stores, name, needed, keptIDs)
	if err != nil {
		return nil, fmt.Errorf("gc %s: %w (nothing was deleted)", name, err)
	}
	stillKept := map[string]bool{}
	for _, ks := range versionKeys {
		for _, k := range ks {
			stillKept[strings.TrimPrefix(k, VersionPrefix(name))] = true
		}
	}
	for _, v := range removed {
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
		return nil, fmt.Errorf("gc %s: %w (nothing was deleted)", name, err)
	}
	if !opts.Delete {
		return rep, nil
	}

	// The marks first, so that a kill from here on leaves the removal
	// recognisable; then the removed versions' kept manifests: from here no
	// new mount opens them, and a mount that did is in the leases read next.
	if err := markRemoving(ctx, stores, name, versionKeys); err != nil {
		return nil, fmt.Errorf("gc %s: %w (nothing was deleted)", name, err)
	}
	if err := deleteAll(ctx, stores, versionKeys); err != nil {
		return nil, fmt.Errorf("gc %s: %w", name, err)
	}
	if leases, err = ReadLeases(ctx, stores, name, opts.LeaseStale); err != nil {
		return nil, fmt.Errorf("gc %s: %w (the removed versions' manifests were deleted, their data was not)", name, err)
	}
	for _, l := range leases {
		for _, id := range l.IngestIDs {
			if ingests[id] {
				return nil, fmt.Errorf("gc %s: a mount leased version %d while gc ran (%s): its objects were left; run gc again when it ends", name, l.Version, l.Describe())
			}
		}
	}
	if err := lock.Refresh(ctx); err != nil {
		return nil, fmt.Errorf("gc %s: %w", name, err)
	}
	if err := deleteAll(ctx, stores, dataKeys); err != nil {
		return nil, fmt.Errorf("gc %s: %w", name, err)
	}
	// Every mark goes, an earlier interrupted gc's too: what they marked is
	// now removed, or kept by this gc's rules (and then repair may restore
	// its manifest copies).
	marks, _, err := gcMarks(ctx, stores, name)
	if err == nil {
		err = deleteAll(ctx, stores, marks)
	}
	if err != nil {
		return nil, fmt.Errorf("gc %s: the removal is done, but its marks remain (run gc again): %w", name, err)
	}
	rep.Deleted = true
	return rep, nil
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
