package repository

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/manifest"
)

// Txn is one replacing or creating write of a dataset, and the one way any
// is made (ingest, append, rollback, a distributed ingest's commit,
// migrate, and the healer's mend of the metadata):
//
//  1. Begin takes the dataset's lock (lock.go): no other commit, gc or
//     repair of it runs until Release.
//  2. RefuseCommitted refuses to replace a committed dataset unasked.
//  3. Commit keeps the current version (the parent) under its version key,
//     then commits the new manifest (commit.go's protocol).
//  4. Purge deletes what interrupted or replaced runs left.
//
// Why what is current stays whole whatever happens next: before Commit's
// commit point every write goes to objects no committed version reads (the
// new ingest's own ids, the parent's version key, pending copies), so a
// kill or a store failing leaves the current version as it was; past it,
// the new version is current and FinishCommit completes its copies (see
// commit.go). Purge runs only after this Txn committed, under the lock,
// and deletes only the objects of ingests no version of the committed
// history names and no running distributed ingest has marked (see Purge).
type Txn struct {
	Stores []backend.Store
	Name   string
	lock   *Lock
	log    *slog.Logger
}

// Begin takes dataset name's lock on stores for the run id, and returns
// the Txn and a context that is cancelled if the lock is lost. log is
// where the Txn's own steps report (the lock's go to opts.Logger).
func Begin(ctx context.Context, stores []backend.Store, name, id string, opts LockOptions, log *slog.Logger) (*Txn, context.Context, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	lock, ctx, err := AcquireLock(ctx, stores, name, id, opts)
	if err != nil {
		return nil, ctx, err
	}
	return &Txn{Stores: stores, Name: name, lock: lock, log: log}, ctx, nil
}

// Release gives the lock back.
func (t *Txn) Release(ctx context.Context) { t.lock.Release(ctx) }

// Refresh proves the lock still held (Lock.Refresh).
func (t *Txn) Refresh(ctx context.Context) error { return t.lock.Refresh(ctx) }

// Held is the lock, for the repairs that write under it (RepairHolding).
func (t *Txn) Held() *Lock { return t.lock }

// ErrExists: the dataset name is taken and --force was not given.
var ErrExists = errors.New("dataset already exists")

// ErrAlreadyCommitted: the distributed ingest a part or commit belongs to
// is the committed one: there is nothing left to do.
var ErrAlreadyCommitted = errors.New("already committed")

// RefuseCommitted is the package's RefuseCommitted under the lock.
func (t *Txn) RefuseCommitted(ctx context.Context, force bool, id string) error {
	return RefuseCommitted(ctx, t.Stores, t.Name, force, id, t.log)
}

// RefuseCommitted refuses to go on when name is committed (or has manifest
// copies that cannot be used), unless force; and when the committed ingest
// is ingest id (a distributed ingest's parts or commit run again), it says
// there is nothing to do. It reads the manifest's header only, once. The
// parts of a distributed ingest call it without the lock: they write
// nothing a reader sees.
func RefuseCommitted(ctx context.Context, stores []backend.Store, name string, force bool, id string, log *slog.Logger) error {
	if force && id == "" {
		return nil
	}
	m, err := LoadHeader(ctx, stores, name, log)
	switch {
	case err == nil && id != "" && m.IngestID == id:
		return fmt.Errorf("%w: %s was committed from these parts (ingest %s): nothing to do", ErrAlreadyCommitted, name, id)
	case force:
		return nil
	case errors.Is(err, ErrNotFound):
		// No current manifest, but kept versions: a dataset whose current
		// copies are lost or unreadable, not an empty name. A fresh ingest
		// would purge their fragments.
		if kept := keptVersionKeys(ctx, stores, name); len(kept) > 0 {
			return fmt.Errorf("%w: %s has no current manifest on these stores, but they keep %d earlier versions of it (%s): nothing was written; run shardfs verify %s to see what is lost, and bring back the stores that held it",
				ErrExists, name, len(kept), VersionPrefix(name)+"…", name)
		}
		return nil
	case err == nil:
		return fmt.Errorf("%w: %s is already committed on these stores: pass --force to replace it", ErrExists, name)
	}
	return fmt.Errorf("%w: %s has manifest copies that cannot be used (%v): nothing was written; shardfs verify %s names each store's copy", ErrExists, name, err, name)
}

// keptVersionKeys lists the kept version manifests on any store.
func keptVersionKeys(ctx context.Context, stores []backend.Store, name string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range stores {
		keys, err := s.List(ctx, VersionPrefix(name))
		if err != nil {
			continue
		}
		for _, k := range keys {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	return out
}

// NotKeptError: Commit could not keep the parent version, so it wrote no
// manifest: the parent stays current, unchanged.
type NotKeptError struct{ Err error }

func (e *NotKeptError) Error() string { return e.Err.Error() }
func (e *NotKeptError) Unwrap() error { return e.Err }

// Commit makes m current. With a parent (the version m replaces, whose
// history m carries), it first keeps the parent's manifest, as committed,
// under its version key on every store, so that the parent can be read
// and rolled back to after m is current; a failure there is a
// *NotKeptError, and nothing else was written. It returns how many stores
// hold m's manifest, and why the others do not.
func (t *Txn) Commit(ctx context.Context, m, parent *manifest.Manifest) (copies int, copyErrs []error, err error) {
	if parent != nil {
		raw, err := RawManifest(ctx, t.Stores, t.Name, parent.IngestID)
		if err != nil {
			return 0, nil, &NotKeptError{err}
		}
		if err := KeepVersion(ctx, t.Stores, t.Name, parent.IngestID, raw, parent.Data, parent.Parity); err != nil {
			return 0, nil, &NotKeptError{err}
		}
	}
	enc, err := manifest.EncodeStored(m)
	if err != nil {
		return 0, nil, err
	}
	return Commit(ctx, t.Stores, m, enc, t.lock, t.log)
}

// FinishCommit finishes the commit of the dataset's current version where
// one stopped past its commit point (the package's FinishCommit), and
// returns how many objects it wrote.
func (t *Txn) FinishCommit(ctx context.Context) (*Dataset, int, error) {
	ds, err := Open(ctx, t.Stores, t.Name, Options{Logger: t.log})
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", t.Name, err)
	}
	n, err := FinishCommit(ctx, ds)
	return ds, n, err
}

// historyIDs are the ingest ids of every version in m's history: what a
// purge of interrupted runs must leave alone (gc removes versions).
func historyIDs(m *manifest.Manifest) map[string]bool {
	keep := map[string]bool{m.IngestID: true}
	for _, v := range m.Versions {
		keep[v.IngestID] = true
	}
	for _, id := range m.SegmentIDs() {
		keep[id] = true
	}
	return keep
}

// Purge deletes fragments, indexes and group objects of the ingests of the
// dataset that m's history (historyIDs), just committed by this Txn, does
// not name: leftovers of interrupted runs, or of a dataset replaced by an
// ingest that could not read its history. It returns how many it deleted.
//
// Why it deletes nothing current: it runs only under the lock, right after
// this Txn committed m, so every other single-process ingest id is
// provably dead: none can be running (it would need the lock), and none
// is committed (the stores agree on m). A distributed ingest's parts take
// no lock, so its fragments are left alone while it has part objects: its
// own commit, or a rerun of its parts, finishes it. A store that cannot
// list the part objects stops the purge: nothing is deleted then.
func (t *Txn) Purge(ctx context.Context, m *manifest.Manifest) int {
	keep := historyIDs(m)
	name, log := t.Name, t.log
	running := map[string]bool{}
	for _, s := range t.Stores {
		keys, err := s.List(ctx, PartPrefix(name))
		if err != nil {
			log.Warn("could not list distributed ingests; old fragments are kept", "store", s.String(), "err", err)
			return 0
		}
		for _, k := range keys {
			id, _, _ := strings.Cut(strings.TrimPrefix(k, PartPrefix(name)), "/")
			running[id] = true
		}
	}
	n := 0
	for _, s := range t.Stores {
		var keys []string
		var errs []error
		prefixes := []string{DataPrefix(name), IndexPrefix(name), GroupPrefix(name)}
		for _, prefix := range prefixes {
			ks, err := s.List(ctx, prefix)
			errs = append(errs, err)
			keys = append(keys, ks...)
		}
		if err := errors.Join(errs...); err != nil {
			log.Warn("could not list old fragments and indexes", "store", s.String(), "err", err)
			continue
		}
		for _, k := range keys {
			rest := k
			for _, prefix := range prefixes {
				rest = strings.TrimPrefix(rest, prefix)
			}
			id, _, _ := strings.Cut(rest, "/")
			if keep[id] || running[id] {
				continue
			}
			if err := s.Delete(ctx, k); err != nil {
				log.Warn("could not delete old fragment", "store", s.String(), "key", k, "err", err)
				continue
			}
			n++
		}
	}
	if n > 0 {
		log.Info("removed fragments of interrupted or replaced ingests", "objects", n)
	}
	return n
}

// Abandon deletes every object of ingest id, which this Txn ran and did
// not commit: its fragments, shard indexes and group objects. A streaming
// ingest refused part way (a bad record, two records with one key) calls
// it, so that the stores are left as it found them. It returns how many
// objects it deleted, and the first store that could not list or delete
// (what is left, gc or the next ingest's Purge removes).
//
// Why it deletes nothing current: id is this run's own, made fresh when
// it began (no other run writes under it), and the run has not reached
// Commit's commit point, so no manifest on any store, committed or
// pending, names id. The lock is held, so no commit of another run can
// name it either. A kill part way leaves some of id's objects: orphans
// no version reads, which the next Purge or gc removes.
func (t *Txn) Abandon(ctx context.Context, id string) (int, error) {
	return t.deleteIngestObjects(ctx, id+"/", func(x string) bool { return x == id })
}

// deleteIngestObjects deletes from every store the fragments, shard
// indexes and group objects whose keys start with the ingest id prefix
// idPrefix and whose ingest id is one of ids. It returns how many it
// deleted, and the first store that could not list or delete.
func (t *Txn) deleteIngestObjects(ctx context.Context, idPrefix string, ids func(id string) bool) (int, error) {
	n := 0
	var firstErr error
	for _, s := range t.Stores {
		for _, prefix := range []string{DataPrefix(t.Name), IndexPrefix(t.Name), GroupPrefix(t.Name)} {
			keys, err := s.List(ctx, prefix+idPrefix)
			if err != nil {
				firstErr = cmpErr(firstErr, fmt.Errorf("store %s: list %s: %w", s, prefix+idPrefix, err))
				continue
			}
			for _, k := range keys {
				if !ids(objectIngest(t.Name, k)) {
					continue
				}
				if err := s.Delete(ctx, k); err != nil {
					firstErr = cmpErr(firstErr, fmt.Errorf("store %s: delete %s: %w", s, k, err))
					continue
				}
				n++
			}
		}
	}
	return n, firstErr
}

// cmpErr keeps the first error.
func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}
