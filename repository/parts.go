package repository

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/shardfs/shardfs/backend"
)

// PartRef is one object of a distributed ingest's parts on the stores
// (PartPrefix): the record of part Index of Count of job Job, or, with
// Count 0, another object of the job: its started mark, a piece of a
// part's sorted keys, or the started mark of one of its parts' segments
// (SliceSegmentID), which belongs to the job as well.
type PartRef struct {
	Job          string
	Index, Count int
	object       Object
}

// ListParts lists the part objects of dataset name on every store, each
// once, in key order. It fails only when no store can be listed.
func ListParts(ctx context.Context, stores []backend.Store, name string) ([]PartRef, error) {
	seen := map[string]bool{}
	var errs []error
	for _, s := range stores {
		keys, err := s.List(ctx, PartPrefix(name))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, k := range keys {
			seen[k] = true
		}
	}
	if len(errs) == len(stores) {
		return nil, fmt.Errorf("list the parts of %s: %w", name, errors.Join(errs...))
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var refs []PartRef
	for _, k := range keys {
		job, file, ok := strings.Cut(strings.TrimPrefix(k, PartPrefix(name)), "/")
		if !ok {
			continue
		}
		r := PartRef{Job: PartJob(job), object: Object{k}}
		var i, n int
		if _, err := fmt.Sscanf(file, "part-%06d-of-%06d", &i, &n); err == nil && n > 0 {
			r.Index, r.Count = i, n
		}
		refs = append(refs, r)
	}
	return refs, nil
}

// SliceSegmentID is the ingest id that part i of distributed ingest job
// stores its shards under, when each part reads only its slice of the
// source and writes a segment of its own.
func SliceSegmentID(job string, i int) string { return fmt.Sprintf("%s-p%06d", job, i) }

// PartJob is the distributed ingest that the objects stored under ingest
// id belong to: id itself, or, for a part's segment (SliceSegmentID), the
// job of that part. A commit that drops the objects of its job so drops
// its segments' started marks too, where a commit stopped in its cleanup
// left some; else they would read as an ingest of their own that started
// and never finished.
func PartJob(id string) string {
	i := strings.LastIndex(id, "-p")
	if i < 0 || len(id)-i-2 != 6 || strings.Trim(id[i+2:], "0123456789") != "" {
		return id
	}
	return id[:i]
}

// DropParts deletes the part objects of job from every store (the parts of
// an ingest that is committed) and returns refs without them.
func DropParts(ctx context.Context, stores []backend.Store, name, job string, refs []PartRef, log *slog.Logger) []PartRef {
	var rest []PartRef
	for _, r := range refs {
		if r.Job != job {
			rest = append(rest, r)
			continue
		}
		log.Info("removing a part object of the committed ingest", "dataset", name, "key", r.object.key)
		for _, s := range stores {
			s.Delete(ctx, r.object.key)
		}
	}
	return rest
}

// DeleteParts deletes the records of parts 0..n-1 of job and its started
// mark from every store: a commit's last step, once the parts' work is in
// the manifest.
func DeleteParts(ctx context.Context, stores []backend.Store, name, job string, n int) {
	for _, s := range stores {
		for i := 0; i < n; i++ {
			s.Delete(ctx, PartKey(name, job, i, n))
		}
		s.Delete(ctx, PartStartedKey(name, job))
	}
}

// DeleteSlicePart deletes what part i of n of job, a part that read only
// its slice, leaves beside its record: the pieces of its sorted keys and
// its segment's started mark. A commit's last step, as DeleteParts.
func DeleteSlicePart(ctx context.Context, stores []backend.Store, name, job string, i, n, pieces int, segment string) {
	for _, s := range stores {
		for p := range pieces {
			s.Delete(ctx, PartKeysKey(name, job, i, n, p))
		}
		s.Delete(ctx, PartStartedKey(name, segment))
	}
}

// ErrCommittedJob: the distributed ingest to abandon is committed.
var ErrCommittedJob = errors.New("the ingest is committed")

// ErrNothingToAbandon: the stores hold no object of the distributed
// ingest to abandon.
var ErrNothingToAbandon = errors.New("nothing of the ingest is on these stores")

// AbandonReport says what AbandonJob deleted.
type AbandonReport struct {
	PartObjects int // part records, pieces of sorted keys, started marks
	DataObjects int // fragments, shard indexes and group objects
}

// AbandonJob deletes distributed ingest job, one that will not be
// committed (its parts refused, or it is not wanted): its part records,
// its parts' sorted keys, its fragments, shard indexes and group objects
// (under job and under its parts' segments), and last its started marks.
// It fails with ErrCommittedJob, deleting nothing, when the dataset's
// history names job; with ErrNothingToAbandon when the stores hold
// nothing of it; and with the first store that could not list or delete,
// having deleted what it could (a rerun deletes the rest).
//
// Why it deletes nothing current: the Txn holds the ingest lock, so no
// commit runs until it ends; under it, the header read here is what is
// committed, and no version in its history (historyIDs: every version's
// ingest and every segment) is job or a segment of job. Readers read
// manifests, indexes and fragments of those versions only, never part
// objects. So each object deleted is one no kept version reads.
//
// Why a kill or a store failing at any moment leaves what a rerun
// finishes: the part records go first, so that no commit can take the
// job for a whole one (one with a record gone refuses, naming the parts
// to rerun); then its keys and its data; the started marks go last, and
// only once everything before went from every store: while a mark stays,
// a rerun finds the job, and Purge and gc leave its data alone. A part of
// job still running writes again what it writes (stop the parts first);
// a commit of such a job finds fragments missing and refuses.
func (t *Txn) AbandonJob(ctx context.Context, job string) (AbandonReport, error) {
	var rep AbandonReport
	committed := map[string]bool{}
	m, err := LoadHeader(ctx, t.Stores, t.Name, t.log)
	switch {
	case err == nil:
		for id := range historyIDs(m) {
			committed[PartJob(id)] = true // a segment's job too, as below
			if id == job || PartJob(id) == job {
				return rep, fmt.Errorf("abandon ingest %s of %s: %w (its data is read by a version of the dataset); nothing was deleted", job, t.Name, ErrCommittedJob)
			}
		}
	case !errors.Is(err, ErrNotFound):
		return rep, fmt.Errorf("abandon ingest %s of %s: read what is committed first: %w; nothing was deleted", job, t.Name, err)
	}
	refs, err := ListParts(ctx, t.Stores, t.Name)
	if err != nil {
		return rep, err
	}
	var records, others, marks []string
	for _, r := range refs {
		switch {
		case r.Job != job:
		case r.Count > 0:
			records = append(records, r.object.key)
		case strings.HasSuffix(r.object.key, "/started"):
			marks = append(marks, r.object.key)
		default:
			others = append(others, r.object.key)
		}
	}
	var firstErr error
	deleteAll := func(keys []string) int {
		n := 0
		for _, k := range keys {
			gone := false
			for _, s := range t.Stores {
				if err := s.Delete(ctx, k); err != nil {
					firstErr = cmpErr(firstErr, fmt.Errorf("store %s: delete %s: %w", s, k, err))
					continue
				}
				gone = true
			}
			if gone {
				n++
			}
		}
		return n
	}
	rep.PartObjects += deleteAll(records)
	rep.PartObjects += deleteAll(others)
	// job's own objects and its segments' (job-pNNNNNN/).
	n, err := t.deleteIngestObjects(ctx, job, func(id string) bool { return PartJob(id) == job })
	rep.DataObjects += n
	firstErr = cmpErr(firstErr, err)
	if firstErr != nil {
		return rep, fmt.Errorf("abandon ingest %s of %s: %w; its started marks are kept, so its data stays its own: run the same command again", job, t.Name, firstErr)
	}
	rep.PartObjects += deleteAll(marks)
	if firstErr != nil {
		return rep, fmt.Errorf("abandon ingest %s of %s: %w: run the same command again", job, t.Name, firstErr)
	}
	if rep.PartObjects+rep.DataObjects == 0 {
		return rep, fmt.Errorf("abandon ingest %s of %s: %w%s", job, t.Name, ErrNothingToAbandon, heldJobs(refs, committed))
	}
	return rep, nil
}

// heldJobs says which distributed ingests, none of them committed, have
// parts on the stores (refs), for a refusal to abandon an id they do not
// hold: most likely a mistyped one.
func heldJobs(refs []PartRef, committed map[string]bool) string {
	var jobs []string
	for _, r := range refs {
		if !committed[r.Job] && !slices.Contains(jobs, r.Job) {
			jobs = append(jobs, r.Job)
		}
	}
	switch len(jobs) {
	case 0:
		return "; they hold the parts of no ingest"
	case 1:
		return fmt.Sprintf("; they hold the parts of ingest %s, not committed: check the id", jobs[0])
	}
	return fmt.Sprintf("; they hold the parts of ingests %s, none committed: check the id", strings.Join(jobs, ", "))
}
