package dataset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/manifest"
)

// The commit protocol, both halves: how an ingest makes a manifest the
// committed one (Commit), and how a reader finds the committed manifest
// among the stores' copies (readCopies, chooseManifest).

// Quorum is how many stores must hold a manifest copy of one ingest for it
// to count as committed: a majority of the k+m stores, but never more than
// k, so that losing m stores never hides a committed dataset.
func Quorum(k, m int) int { return min(k, (k+m)/2+1) }

// Commit makes ingest m of a dataset visible, after all its fragments (and
// index objects) are on the stores, in two steps. First every store gets the
// manifest enc and its identity under the pending keys; then every store
// gets them under their real keys, which is the commit; then the pending
// ones are deleted. Readers (readCopies, chooseManifest below) count pending
// copies only for an ingest some store holds a real copy of, so a commit
// killed at any point leaves the dataset invisible (no real copy yet, or
// fewer than the quorum) or whole (every store holds a copy, real or
// pending). A store that fails does not stop the others: every copy that
// can be written is, and the count decides. With at least Quorum real
// copies the ingest is committed (repair restores the rest; copyErrs says
// what failed); with fewer it is not, and the copies written are taken
// back. Only the holder of lock commits: it is checked right before the
// first write.
func Commit(ctx context.Context, stores []backend.Store, m *manifest.Manifest, enc []byte, lock *Lock, log *slog.Logger) (copies int, copyErrs []error, err error) {
	if err := lock.Refresh(ctx); err != nil {
		return 0, nil, err
	}
	name := m.Name
	q := Quorum(m.Data, m.Parity)
	uctx := context.WithoutCancel(ctx)
	takeBack := func(written []int, real bool) {
		for _, i := range written {
			if real {
				stores[i].Delete(uctx, ManifestKey(name))
				stores[i].Delete(uctx, IdentityKey(name))
			}
			stores[i].Delete(uctx, PendingManifestKey(name))
			stores[i].Delete(uctx, PendingIdentityKey(name))
		}
	}
	pending, perrs := backend.Split(backend.OnEvery(stores, func(i int, s backend.Store) error {
		if err := s.Put(ctx, PendingManifestKey(name), enc); err != nil {
			return fmt.Errorf("store %d: pending manifest: %w", i, err)
		}
		if err := WritePendingIdentity(ctx, s, m, i); err != nil {
			return fmt.Errorf("store %d: pending identity: %w", i, err)
		}
		return nil
	}))
	if len(pending) < q {
		takeBack(pending, false)
		return 0, perrs, fmt.Errorf("the manifest reached %d of %d stores, and a commit needs %d (%v); the copies written were taken back",
			len(pending), len(stores), q, errors.Join(perrs...))
	}
	written, errs := backend.Split(backend.OnEvery(stores, func(i int, s backend.Store) error {
		if err := s.Put(ctx, ManifestKey(name), enc); err != nil {
			return fmt.Errorf("store %d: manifest: %w", i, err)
		}
		if err := WriteIdentity(ctx, s, m, i); err != nil {
			log.Warn("could not write the store's identity; run shardfs repair to write it", "store", i, "err", err)
		}
		return nil
	}))
	if len(written) >= q {
		takeBack(written, false) // the pending copies of the stores that hold the real ones
		if len(errs) > 0 {
			log.Warn("committed, but some stores lack a manifest copy: run shardfs repair to write them",
				"dataset", name, "copies", len(written), "stores", len(stores), "err", errors.Join(errs...))
		}
		return len(written), errs, nil
	}
	// Not committed: take back the copies written, so no store shows a
	// dataset the others do not hold.
	takeBack(written, true)
	takeBack(pending, false)
	return len(written), errs, fmt.Errorf("the manifest reached %d of %d stores, and a commit needs %d (%v); the copies written were taken back",
		len(written), len(stores), q, errors.Join(errs...))
}

// storeCopy is what one store holds of a dataset: its manifest copy and
// identity, and those of a commit in progress (pm, pid).
type storeCopy struct {
	m       *manifest.Manifest
	err     error
	id      *Identity
	idErr   error
	pm      *manifest.Manifest
	pid     *Identity
	pending bool // m or id came from the pending keys (promotePending)
}

// promotePending counts the pending copy and identity of ingest as the
// store's own where its real ones are missing or of another ingest: the
// commit of ingest began (some store holds a real copy of it), and wrote
// the pending ones to every store first.
func promotePending(copies []storeCopy, ingest string) {
	for i := range copies {
		c := &copies[i]
		if c.pm != nil && c.pm.IngestID == ingest && (c.m == nil || c.m.IngestID != ingest) &&
			(c.err == nil || errors.Is(c.err, backend.ErrNotExist) || errors.Is(c.err, manifest.ErrCorrupt)) {
			c.m, c.err, c.pending = c.pm, nil, true
		}
		if c.pid != nil && c.pid.IngestID == ingest && (c.id == nil || c.id.IngestID != ingest) {
			c.id, c.idErr, c.pending = c.pid, nil, true
		}
	}
}

// readCopies reads every store's manifest copy and identity in parallel,
// except those of stores skip names (their copy reads as unavailable).
func readCopies(ctx context.Context, stores []backend.Store, name string, skip ...int) []storeCopy {
	out := make([]storeCopy, len(stores))
	backend.OnEvery(stores, func(i int, s backend.Store) error {
		c := &out[i]
		if slices.Contains(skip, i) {
			c.err = &backend.Error{Store: s.String(), Op: "read manifest", Err: fmt.Errorf("%w: did not answer earlier", backend.ErrUnavailable)}
			c.idErr = c.err
			return nil
		}
		c.m, c.err = readManifestKey(ctx, s, ManifestKey(name))
		if c.err == nil || errors.Is(c.err, backend.ErrNotExist) || errors.Is(c.err, manifest.ErrCorrupt) {
			c.id, c.idErr = readIdentityKey(ctx, s, name, IdentityKey(name))
			// A commit in progress, or one killed midway.
			c.pm, _ = readManifestKey(ctx, s, PendingManifestKey(name))
			c.pid, _ = readIdentityKey(ctx, s, name, PendingIdentityKey(name))
		} else {
			c.idErr = c.err // the store failed: do not wait on it twice
		}
		return nil
	})
	return out
}

// chooseManifest picks the ingest held by the most intact copies; if copies
// of other ingests exist, it must be held by at least Quorum stores. Other
// ingests' copies are reported as foreign.
func chooseManifest(copies []storeCopy, stores []backend.Store, name string, log *slog.Logger) (*manifest.Manifest, error) {
	held := map[string][]int{}
	var ids []string
	var errs []error
	missing := 0
	for i, c := range copies {
		switch {
		case c.err == nil:
			if held[c.m.IngestID] == nil {
				ids = append(ids, c.m.IngestID)
			}
			held[c.m.IngestID] = append(held[c.m.IngestID], i)
		case errors.Is(c.err, backend.ErrNotExist):
			missing++
		default:
			errs = append(errs, fmt.Errorf("store %d: %w", i, c.err))
		}
	}
	if len(ids) == 0 {
		if missing == len(stores) {
			return nil, fmt.Errorf("%w: no store holds %s: check the name and --stores (ingest first with shardfs ingest)", ErrNotFound, ManifestKey(name))
		}
		if len(errs) == 0 {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, ManifestKey(name))
		}
		if slices.ContainsFunc(copies, func(c storeCopy) bool { return c.err != nil && unavailable(c.err) }) {
			// Not a verdict on the data: stores that did not answer or
			// refused us may hold intact copies.
			var why []string
			for i, c := range copies {
				switch {
				case c.err == nil || !unavailable(c.err):
				case errors.Is(c.err, backend.ErrAccessDenied) || errors.Is(c.err, backend.ErrNoBucket):
					why = append(why, fmt.Sprintf("store %d (%s) %s", i, stores[i], storeProblem(c.err)))
				default:
					why = append(why, fmt.Sprintf("store %d (%s) did not answer in time (%v): retry when it answers, or raise --request-timeout on a busy machine", i, stores[i], c.err))
				}
			}
			return nil, fmt.Errorf("could not read a manifest of %s, and nothing is known to be lost: %s", name, strings.Join(why, "; "))
		}
		return nil, fmt.Errorf("no intact manifest of %s on any store: %w", name, errors.Join(errs...))
	}
	sort.SliceStable(ids, func(a, b int) bool { return len(held[ids[a]]) > len(held[ids[b]]) })
	best := ids[0]
	m := copies[held[best][0]].m
	describe := func() string {
		var parts []string
		for _, id := range ids {
			parts = append(parts, fmt.Sprintf("ingest %s on stores %v", id, held[id]))
		}
		return strings.Join(parts, "; ")
	}
	if len(ids) > 1 && len(held[ids[1]]) == len(held[best]) {
		return nil, fmt.Errorf("stores disagree on dataset %s and no ingest has the most copies: %s: pass the stores of one dataset, or re-ingest with --force", name, describe())
	}
	q := Quorum(m.Data, m.Parity)
	if len(ids) > 1 && len(held[best]) < q {
		return nil, fmt.Errorf("stores disagree on dataset %s and no ingest is held by the %d stores needed to trust it over the others (%s): bring the other stores back, pass the stores of one dataset, or re-ingest with --force%s",
			name, q, describe(), joinErrs(errs))
	}
	// Stores that answered "no such object" provably lack a copy; the ones
	// that did not answer, or hold a corrupt copy, may have one. If even
	// counting those the ingest's copies stay below the quorum, its commit
	// never completed (it was killed while writing them): not a dataset.
	if len(ids) == 1 && len(held[best])+len(errs) < q {
		return nil, fmt.Errorf("%w: ingest %s of %s wrote its manifest to %d of %d stores, fewer than the %d a commit needs, and the others answered that they hold none: it did not commit; rerun the ingest",
			ErrNotFound, best, name, len(held[best]), len(stores), q)
	}
	promotePending(copies, best)
	for _, id := range ids[1:] {
		for _, i := range held[id] {
			log.Warn("store holds a manifest of another ingest of this name; the agreeing stores win", "store", i, "name", stores[i].String(), "its_ingest", id, "chosen_ingest", best)
		}
	}
	for _, e := range errs {
		log.Warn("manifest copy unusable; using the agreeing stores' copy", "err", e)
	}
	return m, nil
}
