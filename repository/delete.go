package repository

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/shardfs/shardfs/backend"
)

// Delete removes a dataset whole: every version, and every object under
// NAME/ on every store (fragments, indexes, groups, manifests, the kept
// versions, part records, run logs, leases, heal state and hints, gc
// marks, the identity, the locks). It refuses while a mount holds a lease
// on the dataset, while an ingest, append, rollback or gc holds its lock,
// and while a healer holds the heal lock; and it deletes nothing on stores
// it cannot prove are this dataset's.
//
// Why a kill or a failing store at any moment leaves every other dataset
// whole, and this one either whole or recognisably being deleted:
//   - Only keys under NAME/ are listed and deleted, and a dataset name
//     holds no '/' (CheckName), so no other dataset's key starts with
//     NAME/; nothing outside a dataset's namespace is listed at all.
//   - Every store must answer the listing before anything is deleted, and
//     the confirmation comes before the first delete: a refusal deletes
//     nothing.
//   - The manifest copies go first, on every store, their bytes read
//     before. Until every copy is gone, no data object has been deleted.
//     A store failing among those deletes leaves the dataset whole: the
//     copies deleted are put back, and a second delete starts again (CI:
//     a store cut after 5 of 6 copies went left one copy, which no read
//     trusts alone, so the dataset did not open, while the error said it
//     was whole). A kill there can leave fewer copies than a commit
//     needs: the dataset then does not open (list shows it unreadable),
//     every data object is still there, and a second delete finishes.
//     Once every copy is gone, no mount can open the dataset, and the
//     leases are read again: a mount that opened it meanwhile holds a
//     lease, and the data stays until it ends.
//   - The identity and the locks go last: a kill after the manifests leaves
//     objects under NAME/ only, which a second delete lists and removes (it
//     takes over the lock of a delete that died, as an ingest's).
//
// A store that fails mid-delete leaves its objects; the error names it,
// and a second delete removes them when it answers.

// DeleteOptions configure Delete.
type DeleteOptions struct {
	// Confirm is asked, with what would be deleted, while the locks are
	// held and before anything is deleted; an error stops the delete with
	// nothing deleted. nil deletes without asking.
	Confirm func(*DeleteReport) error
	// LeaseStale is how old a mount's lease may be before it is not
	// honoured (LeaseStale).
	LeaseStale time.Duration
	Lock       LockOptions
	Logger     *slog.Logger
}

// DeleteReport is what Delete found, and did.
type DeleteReport struct {
	Name string
	// Version and IngestID are the current version's; Version is 0 when no
	// store holds a manifest (Leftovers).
	Version  int
	IngestID string
	Versions int   // versions committed
	Samples  int   // the current version's
	Bytes    int64 // the current version's samples' bytes
	// Objects are the objects under NAME/ on all stores together, the
	// delete's own locks left out.
	Objects int
	// Leftovers: no store holds a manifest of the dataset, only objects
	// under its name: what a killed delete, or an ingest that never
	// committed, left.
	Leftovers bool
	Deleted   bool
}

// Delete deletes dataset name from stores; see the comment above.
func Delete(ctx context.Context, stores []backend.Store, name string, opts DeleteOptions) (*DeleteReport, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	if opts.LeaseStale <= 0 {
		opts.LeaseStale = LeaseStale
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	opts.Lock.Logger = opts.Logger
	// Last, whatever happened: a file:// store's directories of the name
	// that hold nothing now (the locks' own, after a refusal) go, as a
	// prefix does from an object store.
	defer func() {
		for _, s := range stores {
			backend.RemoveEmptyDirs(s, name+"/")
		}
	}()
	var b [4]byte
	crand.Read(b[:])
	id := "delete-" + hex.EncodeToString(b[:])
	txn, ctx, err := Begin(ctx, stores, name, id, opts.Lock, opts.Logger)
	if err != nil {
		return nil, fmt.Errorf("delete %s: %w (nothing was deleted)", name, err)
	}
	defer txn.Release(context.WithoutCancel(ctx))
	healOpts := opts.Lock
	healOpts.Key = HealLockKey(name)
	healLock, ctx, err := AcquireLock(ctx, stores, name, id, healOpts)
	if err != nil {
		return nil, fmt.Errorf("delete %s: a healer of it runs (stop it first): %w (nothing was deleted)", name, err)
	}
	defer healLock.Release(context.WithoutCancel(ctx))

	rep := &DeleteReport{Name: name}
	copies := readCopies(ctx, stores, name)
	cur, err := chooseManifest(copies, stores, name, opts.Logger)
	switch {
	case errors.Is(err, ErrNotFound):
		rep.Leftovers = true
	case err != nil:
		return nil, fmt.Errorf("delete %s: %w (nothing was deleted)", name, err)
	default:
		places, err := checkPlaces(copies, stores, cur)
		if err != nil {
			return nil, fmt.Errorf("delete %s: %w (nothing was deleted)", name, err)
		}
		for i, p := range places {
			if p.State == Foreign {
				return nil, fmt.Errorf("delete %s: store %d (%s) holds %s: delete removes nothing from stores it cannot prove are this dataset's; check --stores (nothing was deleted)", name, i, stores[i], p.Detail)
			}
		}
		rep.Version, rep.IngestID, rep.Versions = cur.VersionNumber(), cur.IngestID, max(len(cur.Versions), 1)
		for _, st := range cur.Strata {
			rep.Samples += st.Count
		}
		rep.Bytes = cur.TotalBytes()
	}
	if err := refuseLeased(ctx, stores, name, opts.LeaseStale, "nothing was deleted"); err != nil {
		return nil, err
	}
	keys := make([][]string, len(stores))
	if _, errs := backend.Split(backend.OnEvery(stores, func(i int, s backend.Store) (err error) {
		keys[i], err = s.List(ctx, name+"/")
		return err
	})); len(errs) > 0 {
		return nil, fmt.Errorf("delete %s: list its objects: every store must answer, or objects would be left behind: %w (nothing was deleted)", name, errors.Join(errs...))
	}
	mine := []string{LockKey(name), HealLockKey(name)}
	for i := range keys {
		keys[i] = slices.DeleteFunc(keys[i], func(k string) bool { return slices.Contains(mine, k) })
		rep.Objects += len(keys[i])
	}
	if rep.Objects == 0 {
		return nil, fmt.Errorf("delete %s: %w: no store holds an object of it: check the name and --stores", name, ErrNotFound)
	}
	if opts.Confirm != nil {
		if err := opts.Confirm(rep); err != nil {
			return nil, fmt.Errorf("delete %s: %w (nothing was deleted)", name, err)
		}
	}

	// The manifest copies, on every store, first. Their bytes are read
	// before any goes, so that a store failing among their deletes leaves
	// the dataset whole: the copies that went are put back.
	first := []string{ManifestKey(name), PendingManifestKey(name)}
	manifests := splitKeys(keys, func(k string) bool { return slices.Contains(first, k) })
	saved, err := readObjects(ctx, stores, manifests)
	if err != nil {
		return nil, fmt.Errorf("delete %s: read its manifest copies, to put back should a delete of one fail: %w (nothing was deleted)", name, err)
	}
	if err := deleteAll(ctx, stores, manifests); err != nil {
		if rerr := putBack(context.WithoutCancel(ctx), stores, saved); rerr != nil {
			return nil, fmt.Errorf("delete %s: %w; putting back the manifest copies deleted failed too: %w: it may not open now, and no data object was deleted: run delete again to finish", name, err, rerr)
		}
		return nil, fmt.Errorf("delete %s: %w: the manifest copies deleted are back, and nothing else was deleted: the dataset is whole (run delete again)", name, err)
	}
	if err := refuseLeased(ctx, stores, name, opts.LeaseStale, "its manifests are deleted, so no new mount opens it; its data stays until that mount ends: run delete again then"); err != nil {
		return nil, err
	}
	if err := txn.Refresh(ctx); err != nil {
		return nil, fmt.Errorf("delete %s: %w", name, err)
	}
	last := []string{IdentityKey(name), PendingIdentityKey(name)}
	if err := deleteAll(ctx, stores, splitKeys(keys, func(k string) bool { return !slices.Contains(last, k) })); err != nil {
		return nil, fmt.Errorf("delete %s: %w: its manifests are deleted, so no mount opens it; run delete again to remove the rest", name, err)
	}
	if err := deleteAll(ctx, stores, keys); err != nil {
		return nil, fmt.Errorf("delete %s: %w: run delete again to remove the rest", name, err)
	}
	rep.Deleted = true
	return rep, nil
}

// storedObject is one object's bytes on one store.
type storedObject struct {
	store int
	key   string
	data  []byte
}

// readObjects reads every object keys names, per store.
func readObjects(ctx context.Context, stores []backend.Store, keys [][]string) ([]storedObject, error) {
	var out []storedObject
	for i, ks := range keys {
		for _, k := range ks {
			size, err := stores[i].Stat(ctx, k)
			if err != nil {
				return nil, fmt.Errorf("store %d: %w", i, err)
			}
			b := make([]byte, size)
			if err := stores[i].ReadAt(ctx, k, b, 0); err != nil {
				return nil, fmt.Errorf("store %d: %w", i, err)
			}
			out = append(out, storedObject{i, k, b})
		}
	}
	return out, nil
}

// putBack writes back each object that is no longer on its store.
func putBack(ctx context.Context, stores []backend.Store, objs []storedObject) error {
	var errs []error
	for _, o := range objs {
		_, err := stores[o.store].Stat(ctx, o.key)
		switch {
		case err == nil:
		case errors.Is(err, backend.ErrNotExist):
			if err := stores[o.store].Put(ctx, o.key, o.data); err != nil {
				errs = append(errs, fmt.Errorf("store %d: put back %s: %w", o.store, o.key, err))
			}
		default:
			errs = append(errs, fmt.Errorf("store %d: %s: %w", o.store, o.key, err))
		}
	}
	return errors.Join(errs...)
}

// splitKeys takes out of keys, per store, the keys take reports, and
// returns them.
func splitKeys(keys [][]string, take func(string) bool) [][]string {
	out := make([][]string, len(keys))
	for i, ks := range keys {
		var rest []string
		for _, k := range ks {
			if take(k) {
				out[i] = append(out[i], k)
			} else {
				rest = append(rest, k)
			}
		}
		keys[i] = rest
	}
	return out
}

// refuseLeased fails when a live mount holds a lease on dataset name;
// state says what the failure leaves.
func refuseLeased(ctx context.Context, stores []backend.Store, name string, stale time.Duration, state string) error {
	leases, err := ReadLeases(ctx, stores, name, stale)
	if err != nil {
		return fmt.Errorf("delete %s: %w (%s)", name, err, state)
	}
	if len(leases) > 0 {
		return fmt.Errorf("delete %s: it is mounted: %s holds a lease on version %d; unmount it first (a mount that died on another host lets its lease go %v after its last heartbeat) (%s)",
			name, leases[0].Describe(), leases[0].Version, stale, state)
	}
	return nil
}
