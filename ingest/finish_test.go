package ingest

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/repository"
)

// A kill during an append's commit, once the pending copies of version 2
// were on 2 of 3 stores (its commit point), leaves version 2 current with
// its manifest and identities under the pending keys, and store 2 holding
// version 1's. CI caught it in TestKillDuringAppend: the rerun of the
// append (--skip-existing) found nothing to add and left that state, so
// verify still exited 1 after it. A rerun must leave what an
// uninterrupted append leaves, and so must every command that takes the
// dataset's lock and finds nothing to do: an ingest refused because the
// name is committed, and a commit with no parts pending (each said so and
// left the state, verify still exiting 1).
func TestRerunFinishesAStoppedAppendCommit(t *testing.T) {
	ctx := context.Background()
	src1, src2 := tree(t, 100, 3, "", 1), tree(t, 60, 3, "b", 2)
	for _, rerun := range []struct {
		name string
		run  func(stores []backend.Store) error
		want error
	}{
		{"append --skip-existing", func(stores []backend.Store) error {
			_, err := Append(ctx, src2, Options{Name: "ds", Stores: stores, ShardSize: 64 << 10}, AppendOptions{SkipExisting: true})
			return err
		}, ErrNothingToDo},
		{"ingest", func(stores []backend.Store) error {
			_, err := Run(ctx, src1, Options{Name: "ds", Stores: stores, Data: 2, Parity: 1, ShardSize: 64 << 10, BlockSize: 4096})
			return err
		}, repository.ErrExists},
		{"commit", func(stores []backend.Store) error {
			_, err := Commit(ctx, CommitOptions{Name: "ds", Stores: stores})
			return err
		}, ErrAlreadyCommitted},
	} {
		t.Run(rerun.name, func(t *testing.T) {
			stores := stoppedAppend(t, src1, src2, []bool{true, true, false})
			rerunFinishes(t, stores, src1, src2, func() error { return rerun.run(stores) }, rerun.want)
		})
	}
}

func rerunFinishes(t *testing.T, stores []backend.Store, src1, src2 *Source, rerun func() error, want error) {
	ctx := context.Background()
	verify := func() *repository.Report {
		t.Helper()
		ds, err := repository.Open(ctx, stores, "ds", repository.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if v := ds.Manifest.VersionNumber(); v != 2 {
			t.Fatalf("version %d current, want 2 (pending on a quorum)", v)
		}
		rep, err := ds.Verify(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	// verify counts a pending copy of the current version as its copy: the
	// damage is store 2's copy (version 1's) and its identity.
	if rep := verify(); rep.Intact() || len(rep.BadManifests) != 1 || len(rep.NoIdentity) != 1 || len(rep.Pending) != 2 {
		t.Fatalf("the kill's state: %d bad manifest copies, %d without identity, %d pending; want 1, 1 and 2: %+v", len(rep.BadManifests), len(rep.NoIdentity), len(rep.Pending), rep)
	}
	// The rerun: nothing to do, and the commit finished.
	if err := rerun(); !errors.Is(err, want) {
		t.Fatalf("rerun: %v, want %v", err, want)
	}
	rep := verify()
	if !rep.Intact() || len(rep.BadManifests)+len(rep.NoIdentity)+len(rep.Pending) != 0 {
		t.Fatalf("after the rerun: %d bad manifest copies, %d without identity, %d pending; want none: %+v", len(rep.BadManifests), len(rep.NoIdentity), len(rep.Pending), rep)
	}
	for i := range stores {
		if _, err := stores[i].Stat(ctx, repository.PendingManifestKey("ds")); err == nil {
			t.Fatalf("store %d still holds the pending manifest", i)
		}
	}
	checkServes(t, stores, 0, src1, src2)
	checkServes(t, stores, 1, src1)
}

// stoppedAppend ingests src1 as version 1 of "ds" on 3 local stores and
// appends src2 as version 2, then puts the stores in the state a kill
// leaves past the commit point: version 2's manifest and identity only
// under the pending keys on the stores pending names (a quorum), nothing
// of it on the others, every real key version 1's.
func stoppedAppend(t *testing.T, src1, src2 *Source, pending []bool) []backend.Store {
	t.Helper()
	ctx := context.Background()
	stores := localStores(t, t.TempDir(), 3)
	if _, err := Run(ctx, src1, Options{Name: "ds", Stores: stores, Data: 2, Parity: 1, ShardSize: 64 << 10, BlockSize: 4096, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	read := func(i int, key string) []byte {
		n, err := stores[i].Stat(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, n)
		if err := stores[i].ReadAtV(ctx, key, [][]byte{b}, 0); err != nil {
			t.Fatal(err)
		}
		return b
	}
	put := func(i int, key string, b []byte) {
		if err := stores[i].Put(ctx, key, b); err != nil {
			t.Fatal(err)
		}
	}
	mk, idk := repository.ManifestKey("ds"), repository.IdentityKey("ds")
	var v1m, v1id [3][]byte
	for i := range stores {
		v1m[i], v1id[i] = read(i, mk), read(i, idk)
	}
	if _, err := Append(ctx, src2, Options{Name: "ds", Stores: stores, ShardSize: 64 << 10}, AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	// The state of the kill.
	for i := range stores {
		if pending[i] {
			put(i, repository.PendingManifestKey("ds"), read(i, mk))
			put(i, repository.PendingIdentityKey("ds"), read(i, idk))
		}
		put(i, mk, v1m[i])
		put(i, idk, v1id[i])
	}
	return stores
}

// stopping is a store whose writes and deletes fail once the shared
// budget of mutating calls is spent (a kill at that point: nothing more
// is written anywhere), or, for a failing store, on its n-th call.
type stopping struct {
	backend.Store
	budget *atomic.Int64 // mutating calls left before the "kill"; <0: none
	failAt int           // this store's call that fails (0: none)
	calls  atomic.Int64  // mutating calls so far (a commit writes to the stores at once)
}

// stoppingStores wraps base: every write after the first killAfter fails
// (a kill), and one store, picked at random (failing), fails its write
// 1 + a random number below failWithin as well.
func stoppingStores(base []backend.Store, rng *rand.Rand, killAfter, failWithin int) (stores []backend.Store, failing int) {
	budget := new(atomic.Int64)
	budget.Store(int64(killAfter))
	failing = rng.IntN(len(base))
	for i, s := range base {
		st := &stopping{Store: s, budget: budget}
		if i == failing {
			st.failAt = 1 + rng.IntN(failWithin)
		}
		stores = append(stores, st)
	}
	return stores, failing
}

func (s *stopping) mutate() error {
	if s.budget.Add(-1) < 0 || s.calls.Add(1) == int64(s.failAt) {
		return &backend.Error{Store: s.String(), Op: "write", Err: backend.ErrUnavailable}
	}
	return nil
}

func (s *stopping) Put(ctx context.Context, key string, b []byte) error {
	if err := s.mutate(); err != nil {
		return err
	}
	return s.Store.Put(ctx, key, b)
}

func (s *stopping) Create(ctx context.Context, key string, b []byte) error {
	if err := s.mutate(); err != nil {
		return err
	}
	return s.Store.Create(ctx, key, b)
}

func (s *stopping) Delete(ctx context.Context, key string) error {
	if err := s.mutate(); err != nil {
		return err
	}
	return s.Store.Delete(ctx, key)
}

// repository.FinishCommit replaces state (manifest copies, identities,
// pending keys), so it is tried with random kills (every write after a
// random one fails) and a random store failing a random write, over
// random stopped states (pending copies on 2 or 3 of 3 stores): after
// each stopped try, version 2 is current and every version serves its
// samples byte for byte; a try without faults then leaves verify with
// nothing to mend.
func TestFinishCommitUnderKillsAndStoreFailures(t *testing.T) {
	ctx := context.Background()
	src1, src2 := tree(t, 60, 3, "", 1), tree(t, 40, 3, "b", 2)
	rng := rand.New(rand.NewPCG(42, 1))
	trials := 12
	if testing.Short() {
		trials = 4
	}
	for trial := range trials {
		pending := []bool{true, true, true}
		if rng.IntN(3) > 0 {
			pending[rng.IntN(3)] = false // a quorum of 2
		}
		base := stoppedAppend(t, src1, src2, pending)
		killAfter := rng.IntN(13) // a finish writes and deletes up to 12 objects here
		stores, failing := stoppingStores(base, rng, killAfter, 3)
		ds, err := repository.Open(ctx, stores, "ds", repository.Options{})
		if err != nil || ds.Manifest.VersionNumber() != 2 {
			t.Fatalf("trial %d (pending %v): before: %v, version %d", trial, pending, err, ds.Manifest.VersionNumber())
		}
		n, err := repository.FinishCommit(ctx, ds)
		t.Logf("trial %d: pending on %v, killed after %d writes, store %d fails its write %d: %d written, %v", trial, pending, killAfter, failing, stores[failing].(*stopping).failAt, n, err)
		// Whatever stopped it, version 2 is current and whole, and
		// version 1 too.
		checkServes(t, base, 0, src1, src2)
		checkServes(t, base, 1, src1)
		// A rerun without faults finishes what is left.
		ds, err = repository.Open(ctx, base, "ds", repository.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := repository.FinishCommit(ctx, ds); err != nil {
			t.Fatalf("trial %d: finishing without faults: %v", trial, err)
		}
		rep, err := ds.Verify(ctx, nil)
		if err != nil || !rep.Intact() || len(rep.Pending) != 0 {
			t.Fatalf("trial %d: after finishing: %v %+v", trial, err, rep)
		}
	}
}
