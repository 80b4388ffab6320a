package ingest

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/repository"
)

// jobObjects lists what the stores hold of distributed ingest job: its
// part objects, and its fragments, indexes and group objects (its own and
// its parts' segments').
func jobObjects(t *testing.T, stores []backend.Store, job string) []string {
	t.Helper()
	var left []string
	for _, s := range stores {
		for _, prefix := range []string{repository.PartPrefix("ds"), repository.DataPrefix("ds"), repository.IndexPrefix("ds"), repository.GroupPrefix("ds")} {
			keys, err := s.List(context.Background(), prefix)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				id, _, _ := strings.Cut(strings.TrimPrefix(k, prefix), "/")
				if repository.PartJob(id) == job {
					left = append(left, s.String()+" "+k)
				}
			}
		}
	}
	return left
}

// An abandon of a distributed ingest (whole-scan parts replacing a
// committed dataset, or slice parts of a fresh name) is stopped at every
// kind of moment: a kill (every write after a random one fails) and a
// random store failing a random write. After each stopped try the
// committed dataset serves every sample byte for byte and no commit can
// take the job for a whole one unless all of it is still there; a rerun
// without faults leaves nothing of the job on any store, and the
// dataset still serves and verifies. The committed ingest itself is
// refused, with nothing deleted.
func TestAbandonUnderKillsAndStoreFailures(t *testing.T) {
	ctx := context.Background()
	old, fresh := tree(t, 50, 3, "", 1), tree(t, 70, 3, "b", 2)
	dir := t.TempDir()
	writeShards(t, dir, 8, 20)
	rng := rand.New(rand.NewPCG(59, 11))
	trials := 16
	if testing.Short() {
		trials = 6
	}
	// setup writes, on base, the committed dataset (whole-scan parts) or
	// nothing (slice parts), then the parts of the job to abandon.
	setup := func(trial int, base []backend.Store, slices bool) (job string) {
		if slices {
			if _, err := sliceParts(t, dir, base, 4, 3); err != nil {
				t.Fatal(err)
			}
			refs, err := repository.ListParts(ctx, base, "ds")
			if err != nil || len(refs) == 0 {
				t.Fatalf("trial %d: parts: %v %v", trial, refs, err)
			}
			return refs[0].Job
		}
		opts := Options{Name: "ds", Stores: base, Data: 2, Parity: 1, ShardSize: 64 << 10, BlockSize: 4096, Seed: 5, Format: 2}
		if _, err := Run(ctx, old, opts); err != nil {
			t.Fatal(err)
		}
		ds, err := repository.Open(ctx, base, "ds", repository.Options{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = Abandon(ctx, CommitOptions{Name: "ds", Stores: base, IngestID: ds.Manifest.IngestID})
		if !errors.Is(err, repository.ErrCommittedJob) {
			t.Fatalf("trial %d: abandon of the committed ingest: %v", trial, err)
		}
		checkServes(t, base, 0, old)
		opts.Force = true
		for i := range 3 {
			res, err := RunPart(ctx, fresh, opts, Part{i, 3}, "job")
			if err != nil {
				t.Fatalf("trial %d: part %d: %v", trial, i, err)
			}
			job = res.IngestID
		}
		return job
	}
	// The writes of an abandon without faults bound the kills.
	var writes [2]int
	for k, slices := range []bool{false, true} {
		counting, failing := stoppingStores(localStores(t, t.TempDir(), 3), rng, 1<<30, 1)
		counting[failing].(*stopping).failAt = 0
		job := setup(-1, counting, slices)
		counting[0].(*stopping).budget.Store(1 << 30)
		if _, err := Abandon(ctx, CommitOptions{Name: "ds", Stores: counting, IngestID: job}); err != nil {
			t.Fatal(err)
		}
		writes[k] = 1<<30 - int(counting[0].(*stopping).budget.Load())
	}
	for trial := range trials {
		base := localStores(t, t.TempDir(), 3)
		slices := trial%2 == 1
		job := setup(trial, base, slices)
		if len(jobObjects(t, base, job)) == 0 {
			t.Fatalf("trial %d: the parts left nothing to abandon", trial)
		}
		all := writes[trial%2]
		killAfter := rng.IntN(all + 1)
		stores, failing := stoppingStores(base, rng, killAfter, all)
		_, err := Abandon(ctx, CommitOptions{Name: "ds", Stores: stores, IngestID: job})
		t.Logf("trial %d (slices %v): killed after %d of %d writes, store %d fails its write %d: %v", trial, slices, killAfter, all, failing, stores[failing].(*stopping).failAt, err)
		if !slices {
			checkServes(t, base, 0, old)
		}
		// A commit now either refuses, or (the abandon stopped before it
		// deleted anything) commits the whole job.
		for _, s := range base {
			s.Delete(ctx, repository.LockKey("ds")) // the stopped abandon's, as a kill lets it go
		}
		if !slices {
			if _, cerr := Commit(ctx, CommitOptions{Name: "ds", Stores: base, Force: true}); cerr == nil {
				if err == nil {
					t.Fatalf("trial %d: the abandon said it was done, and then the job committed", trial)
				}
				checkServes(t, base, 0, fresh)
				continue
			}
			checkServes(t, base, 0, old)
		}
		if _, err := Abandon(ctx, CommitOptions{Name: "ds", Stores: base, IngestID: job}); err != nil && !errors.Is(err, repository.ErrNothingToAbandon) {
			t.Fatalf("trial %d: the abandon again, without faults: %v", trial, err)
		}
		if left := jobObjects(t, base, job); len(left) != 0 {
			t.Fatalf("trial %d: after the abandon, the stores hold %d objects of it: %v", trial, len(left), left[:min(5, len(left))])
		}
		if _, err := Abandon(ctx, CommitOptions{Name: "ds", Stores: base, IngestID: job}); !errors.Is(err, repository.ErrNothingToAbandon) {
			t.Fatalf("trial %d: an abandon of what is gone: %v", trial, err)
		}
		if !slices {
			ds := checkServes(t, base, 0, old)
			if rep, err := ds.Verify(ctx, nil); err != nil || !rep.Intact() {
				t.Fatalf("trial %d: after the abandon: %v %+v", trial, err, rep)
			}
		}
	}
}
