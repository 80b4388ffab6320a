package repository

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
// index objects) are on the stores. It never overwrites or deletes what
// makes the current version current until the new one is committed.
//
// The protocol, in three steps:
//  1. Every store gets m's manifest enc and its identity under the pending
//     keys. The real keys, which hold the current version, are not touched.
//  2. Only when the pending copies reached Quorum stores, every store gets
//     them under the real keys.
//  3. The pending copies of the stores that took the real ones are deleted.
//
// The reader's rule (chooseManifest) counts an ingest's copies, real or
// pending, as its support, and:
//   - R1: of two versions one of which names the other in its history, the
//     newer wins if some store holds a real copy of it;
//   - R2: a newer version held only as pending copies wins if its support
//     reaches Quorum;
//   - R3: an ingest that replaces nothing (a first ingest, or --force over
//     a dataset it could not read) counts only with a real copy.
//
// The commit point is therefore: for a new version of a dataset, step 1
// reaching Quorum (R2), for a kill after it; for a first ingest, the first
// real copy (R3). A commit that runs on reports success only once a store
// confirmed a real copy.
//
// Proof that the current version P stays whole, or m becomes current and
// whole, whatever happens next (a kill, a store failing mid-write):
//   - Before the commit point only pending keys are written. P's real copies
//     are as they were, and m's pending copies are on fewer than Quorum
//     stores (or m replaces nothing and has no real copy), so readers pick
//     P. A failure here takes the pending copies back; one that stays
//     behind is still below the quorum, and so still ignored.
//   - After it, m's support is at least Quorum, and stays so: a store's
//     pending copy is deleted only once it holds the real one (step 3, and
//     repair), and no step deletes a real copy. A real copy of m is written
//     only after step 1 reached Quorum. So readers pick m (R1 or R2), and
//     its manifest survives the loss of any m stores.
//   - One exception, when no store confirms a real copy in step 2 (every
//     store failed at once): the pending copies are taken back and the
//     commit reported as not made. P's copies are as they were, so P is
//     current and whole; or a real copy of m landed unseen, and m is
//     current (R1) and whole: its fragments were written before step 1.
//   - P's manifest was kept under its version key before the commit
//     (KeepVersion), and nothing here deletes it or P's fragments: P stays
//     readable as a version whichever is current.
//   - So a commit that stops part-way is finished by repair (the pending
//     copies become real), never undone, and never leaves neither version.
//
// A store that fails does not stop the others: every copy that can be
// written is, and copyErrs says what failed. Only the holder of lock
// commits: it is checked right before the first write.
func Commit(ctx context.Context, stores []backend.Store, m *manifest.Manifest, enc []byte, lock *Lock, log *slog.Logger) (copies int, copyErrs []error, err error) {
	if err := lock.Refresh(ctx); err != nil {
		return 0, nil, err
	}
	name := m.Name
	q := Quorum(m.Data, m.Parity)
	uctx := context.WithoutCancel(ctx)
	takeBackPending := func(on []int) {
		for _, i := range on {
			stores[i].Delete(uctx, PendingManifestKey(name))
			stores[i].Delete(uctx, PendingIdentityKey(name))
		}
	}
	every := make([]int, len(stores))
	for i := range every {
		every[i] = i
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
		// Before the commit point: take back every pending copy, also
		// where a write failed (it may have landed).
		takeBackPending(every)
		return 0, perrs, fmt.Errorf("%w: the manifest reached %d of %d stores, and a commit needs %d (%v); nothing the current version needs was touched",
			ErrNotCommitted, len(pending), len(stores), q, errors.Join(perrs...))
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
	if len(written) == 0 {
		// No real copy confirmed (every store failed at once): report the
		// commit as not made, and take the pending copies back, so that
		// readers agree (R2 would otherwise make a new version current).
		// A real copy that landed unseen still wins (R1, or R3 for a first
		// ingest): whole, with one manifest copy, which repair copies on.
		takeBackPending(every)
		return 0, errs, fmt.Errorf("%w: no store confirmed the manifest (%v); its pending copies were taken back, so what was current stays current, unless a store stored the manifest without confirming it: shardfs versions %s tells",
			ErrNotCommitted, errors.Join(errs...), name)
	}
	takeBackPending(written) // those stores hold the real copies now
	if len(errs) > 0 {
		log.Warn("committed: the other stores hold the new manifest as a pending copy, which readers count; run shardfs repair to make those copies real",
			"dataset", name, "real_copies", len(written), "pending_copies", len(pending), "stores", len(stores), "err", errors.Join(errs...))
	}
	return max(len(written), len(pending)), errs, nil
}

// ErrNotCommitted: a commit stopped before its commit point; the version
// that was current stays current.
var ErrNotCommitted = errors.New("not committed")

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
		if c.pm != nil && c.pm.IngestID == ingest && c.m != nil && c.m.IngestID == ingest {
			c.pending = true // a leftover beside the real copy: repair deletes it
		}
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

// supersedes reports whether newer names older's ingest in its history:
// newer was committed as a later version of the dataset older was.
func supersedes(newer *manifest.Manifest, older string) bool {
	if newer.IngestID == older {
		return false
	}
	return slices.ContainsFunc(newer.Versions, func(v manifest.VersionInfo) bool { return v.IngestID == older })
}

// candidate is one ingest that some store holds a real manifest copy of.
type candidate struct {
	id      string
	m       *manifest.Manifest
	real    []int // stores with a real copy
	support []int // stores with a real or a pending copy
}

func (c *candidate) quorum() int { return Quorum(c.m.Data, c.m.Parity) }

// chooseManifest picks the current version from every store's copies, by
// the rules Commit's protocol is proven against:
//   - an ingest counts if some store holds a real copy of it; its support
//     is the stores holding a real or a pending copy;
//   - R1: of two versions one of which names the other in its history, the
//     newer wins if some store holds a real copy of it;
//   - R2: a newer version held only as pending copies wins once they are on
//     Quorum stores; below it, if stores that did not answer could make up
//     the difference, it refuses rather than guess;
//   - R3: an ingest that replaces nothing counts only with a real copy;
//   - unrelated ingests (another dataset of this name) are weighed by
//     support: the winner needs Quorum, and a tie is refused.
//
// Copies of the winner's earlier versions are reported as stale (repair
// rewrites them); other ingests' copies as foreign.
func chooseManifest(copies []storeCopy, stores []backend.Store, name string, log *slog.Logger) (*manifest.Manifest, error) {
	byID := map[string]*candidate{}
	var cands []*candidate
	var errs []error
	var unknown []int // stores whose copy could not be read: they may hold anything
	missing := 0
	for i, c := range copies {
		switch {
		case c.err == nil:
			cd := byID[c.m.IngestID]
			if cd == nil {
				cd = &candidate{id: c.m.IngestID, m: c.m}
				byID[cd.id] = cd
				cands = append(cands, cd)
			}
			cd.real = append(cd.real, i)
		case errors.Is(c.err, backend.ErrNotExist):
			missing++
		default:
			errs = append(errs, fmt.Errorf("store %d: %w", i, c.err))
			unknown = append(unknown, i)
		}
	}
	if len(cands) == 0 {
		return nil, noManifest(copies, stores, name, missing, errs)
	}
	for i, c := range copies {
		for _, cd := range cands {
			if slices.Contains(cd.real, i) || c.pm != nil && c.pm.IngestID == cd.id {
				cd.support = append(cd.support, i)
			}
		}
	}
	// Settle each pair of versions one of which names the other in its
	// history. A real copy of the newer one exists only once its commit
	// passed the commit point (Commit), so it wins.
	dropped := map[string]bool{}
	for _, newer := range cands {
		for _, older := range cands {
			if supersedes(newer.m, older.id) {
				dropped[older.id] = true
			}
		}
	}
	// A successor held only as pending copies: committed if they are on a
	// quorum (a replacing commit's commit point). Below it, stores that did
	// not answer may hold the rest, or a real copy: then refuse to guess.
	pending := map[string]*candidate{}
	var pendingIDs []string
	for i, c := range copies {
		if c.pm == nil || byID[c.pm.IngestID] != nil {
			continue
		}
		p := pending[c.pm.IngestID]
		if p == nil {
			p = &candidate{id: c.pm.IngestID, m: c.pm}
			pending[p.id] = p
			pendingIDs = append(pendingIDs, p.id)
		}
		p.support = append(p.support, i)
	}
	var successor *candidate
	for _, id := range pendingIDs {
		p := pending[id]
		if !slices.ContainsFunc(cands, func(cd *candidate) bool { return !dropped[cd.id] && supersedes(p.m, cd.id) }) {
			continue // a first ingest's, or another lineage's: counts only with a real copy
		}
		switch {
		case len(p.support) >= p.quorum():
			if successor == nil || supersedes(p.m, successor.id) {
				successor = p
			}
		case len(unknown) > 0 && len(p.support)+len(unknown) >= p.quorum():
			return nil, undecided(name, p.m, p.support, unknown, errs)
		}
	}
	if successor != nil {
		for _, cd := range cands {
			if supersedes(successor.m, cd.id) {
				dropped[cd.id] = true
			}
		}
		cands = append(cands, successor)
	}
	var left []*candidate
	for _, cd := range cands {
		if !dropped[cd.id] {
			left = append(left, cd)
		}
	}
	if len(left) == 0 {
		// Only possible with copies whose histories name each other: every
		// commit has an ingest id of its own, so not from a commit.
		return nil, fmt.Errorf("%w: the stores' manifest copies of %s name each other as earlier versions: %s", manifest.ErrCorrupt, name, describe(cands))
	}
	sort.SliceStable(left, func(a, b int) bool { return len(left[a].support) > len(left[b].support) })
	best := left[0]
	if len(left) > 1 && len(left[1].support) == len(best.support) {
		return nil, fmt.Errorf("stores disagree on dataset %s and no ingest has the most copies: %s: pass the stores of one dataset; shardfs verify %s names each store's ingest", name, describe(cands), name)
	}
	q := best.quorum()
	if len(left) > 1 && len(best.support) < q {
		return nil, fmt.Errorf("stores disagree on dataset %s and no ingest is held by the %d stores needed to trust it over the others (%s): bring the other stores back, or pass the stores of one dataset%s",
			name, q, describe(cands), joinErrs(errs))
	}
	// Stores that answered "no such object" provably lack a copy; the ones
	// that did not answer, or hold a corrupt copy, may have one. If even
	// counting those the ingest's copies stay below the quorum, its commit
	// never completed (it was killed while writing them): not a dataset.
	if len(cands) == 1 && len(best.support)+len(errs) < q {
		advice := "rerun the ingest"
		if len(best.m.Versions) > 1 {
			// Never advise a fresh ingest where earlier versions may be
			// kept: it would replace them.
			advice = fmt.Sprintf("its earlier versions are not current on the stores: run shardfs verify %s, and bring back the stores that held them", name)
		}
		return nil, fmt.Errorf("%w: ingest %s of %s wrote its manifest to %d of %d stores, fewer than the %d a commit needs, and the others answered that they hold none: it did not commit; %s",
			ErrNotFound, best.id, name, len(best.support), len(stores), q, advice)
	}
	promotePending(copies, best.id)
	for _, cd := range cands {
		if cd == best {
			continue
		}
		for _, i := range cd.real {
			switch {
			case supersedes(best.m, cd.id):
				log.Warn("store holds an earlier version's manifest; repair rewrites it", "store", i, "name", stores[i].String(), "its_ingest", cd.id, "chosen_ingest", best.id)
			default:
				log.Warn("store holds a manifest of another ingest of this name; the agreeing stores win", "store", i, "name", stores[i].String(), "its_ingest", cd.id, "chosen_ingest", best.id)
			}
		}
	}
	for _, e := range errs {
		log.Warn("manifest copy unusable; using the agreeing stores' copy", "err", e)
	}
	return best.m, nil
}

// describe lists which stores hold which ingest's copies.
func describe(cands []*candidate) string {
	var parts []string
	for _, cd := range cands {
		parts = append(parts, fmt.Sprintf("ingest %s (version %d) on stores %v", cd.id, cd.m.VersionNumber(), cd.real))
	}
	return strings.Join(parts, "; ")
}

// undecided is the refusal when stores that did not answer decide whether
// version m committed.
func undecided(name string, m *manifest.Manifest, on, unknown []int, errs []error) error {
	return fmt.Errorf("cannot tell whether version %d of %s (ingest %s) committed: stores %v hold its copies, %d are needed, and stores %v did not answer or hold unreadable copies: retry when they answer (nothing was read or written)%s",
		m.VersionNumber(), name, m.IngestID, on, Quorum(m.Data, m.Parity), unknown, joinErrs(errs))
}

// noManifest is chooseManifest's answer when no store holds a readable
// real copy.
func noManifest(copies []storeCopy, stores []backend.Store, name string, missing int, errs []error) error {
	if missing == len(stores) {
		return fmt.Errorf("%w: no store holds %s: check the name and --stores (ingest first with shardfs ingest)", ErrNotFound, ManifestKey(name))
	}
	if len(errs) == 0 {
		return fmt.Errorf("%w: %s", ErrNotFound, ManifestKey(name))
	}
	if slices.ContainsFunc(copies, func(c storeCopy) bool { return c.err != nil && unavailable(c.err) }) {
		// Not a verdict on the data: stores that did not answer or
		// refused us may hold intact copies.
		names := make([]string, len(stores))
		errs := make([]error, len(stores))
		var denied error
		for i, c := range copies {
			names[i] = fmt.Sprintf("store %d (%s)", i, stores[i])
			if c.err != nil && unavailable(c.err) {
				errs[i] = c.err
				if errors.Is(c.err, backend.ErrAccessDenied) {
					denied = backend.ErrAccessDenied
				}
				if !errors.Is(c.err, backend.ErrAccessDenied) && !errors.Is(c.err, backend.ErrNoBucket) {
					errs[i] = fmt.Errorf("did not answer in time (%w): retry when it answers, or raise --request-timeout on a busy machine", c.err)
				}
			}
		}
		// A refusal of our credentials stays visible to errors.Is: the
		// CSI plugin answers it UNAUTHENTICATED.
		return &causeError{msg: fmt.Sprintf("could not read a manifest of %s, and nothing is known to be lost: %s", name, strings.Join(backend.Causes(names, errs), "; ")), cause: denied}
	}
	return fmt.Errorf("no intact manifest of %s on any store: %w", name, errors.Join(errs...))
}

// FinishCommit writes what a commit of ds's current version left
// unwritten when it stopped past its commit point (a kill, or stores that
// failed after the pending copies reached a quorum): on every store that
// answers and is this dataset's, the current manifest copy and the
// store's identity where they are missing, pending or of an earlier
// version; then it removes the store's pending keys. A rerun of the
// stopped command calls it, so the rerun leaves what an uninterrupted run
// leaves. It returns how many objects it wrote.
//
// What is current stays whole whatever happens next. ds is current by the
// reader's rules (R1-R3 above), which already count its pending copies on
// a quorum as committed. This writes only ds's own manifest and
// identities, under the real keys, never on a store that holds another
// dataset (Foreign), and deletes a store's pending keys only after its
// real copy is written. A kill at any point leaves each store holding the
// pending copy, the real one, or both, all of ds: the same current
// version. Nothing of an earlier version is touched but the stale
// manifest copy that the rules out-vote already (kept versions live under
// their version keys), and no other ingest's pending keys. A store
// failing mid-write keeps what it held, which was out-voted before the
// write and still is.
func FinishCommit(ctx context.Context, ds *Dataset) (int, error) {
	current := ds.Current.IngestID
	if current == "" {
		current = ds.Manifest.IngestID
	}
	if ds.Manifest.IngestID != current {
		return 0, fmt.Errorf("finish the commit of %s: opened version %d, not the current one", ds.Name, ds.Manifest.VersionNumber())
	}
	enc, err := manifest.EncodeStored(ds.Manifest)
	if err != nil {
		return 0, err
	}
	copies := readCopies(ctx, ds.Stores, ds.Name) // the real keys and the pending ones, apart
	written := make([]int, len(ds.Stores))
	errs := backend.OnEvery(ds.Stores, func(i int, s backend.Store) error {
		c := copies[i]
		if ds.Places[i].State == Foreign || c.err != nil && unavailable(c.err) {
			return nil // not this dataset's, or it did not answer: repair's to mend
		}
		if c.err != nil || c.m.IngestID != current {
			if err := s.Put(ctx, ManifestKey(ds.Name), enc); err != nil {
				return err
			}
			written[i]++
		}
		if c.id == nil || c.id.IngestID != current || c.id.Position != i {
			if err := WriteIdentity(ctx, s, ds.Manifest, i); err != nil {
				return err
			}
			written[i]++
		}
		// Only this version's pending keys: another ingest's (one that
		// never reached its commit point) are repair's to judge.
		if c.pm != nil && c.pm.IngestID == current {
			if err := s.Delete(ctx, PendingManifestKey(ds.Name)); err != nil {
				return err
			}
		}
		if c.pid != nil && c.pid.IngestID == current {
			return s.Delete(ctx, PendingIdentityKey(ds.Name))
		}
		return nil
	})
	n := 0
	for _, w := range written {
		n += w
	}
	if _, failed := backend.Split(errs); len(failed) > 0 {
		return n, fmt.Errorf("finish the commit of %s: %w (the version is committed; shardfs repair %s writes the rest)", ds.Name, failed[0], ds.Name)
	}
	return n, nil
}

// causeError is a message that says its cause in its own words, with the
// cause kept for errors.Is (nil: none).
type causeError struct {
	msg   string
	cause error
}

func (e *causeError) Error() string { return e.msg }
func (e *causeError) Unwrap() error { return e.cause }
