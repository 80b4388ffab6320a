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
		r := PartRef{Job: segmentJob(job), object: Object{k}}
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

// segmentJob is the distributed ingest that the part objects under id
// belong to: the job itself, or, for a part's segment (SliceSegmentID),
// the job of that part. A commit that drops the objects of its job then
// drops its segments' started marks too, where a commit stopped in its
// cleanup left some; else they would read as an ingest of their own
// that started and never finished.
func segmentJob(id string) string {
	job, digits, ok := cutLast(id, "-p")
	if !ok || len(digits) != 6 || strings.Trim(digits, "0123456789") != "" {
		return id
	}
	return job
}

// cutLast slices s around the last instance of sep.
func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
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
