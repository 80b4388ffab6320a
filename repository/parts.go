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
// Count 0, another object of the job (its started mark).
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
		r := PartRef{Job: job, object: Object{k}}
		var i, n int
		if _, err := fmt.Sscanf(file, "part-%06d-of-%06d", &i, &n); err == nil && n > 0 {
			r.Index, r.Count = i, n
		}
		refs = append(refs, r)
	}
	return refs, nil
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
