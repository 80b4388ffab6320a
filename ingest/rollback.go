package ingest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/shardfs/shardfs/manifest"
	"github.com/shardfs/shardfs/repository"
)

// ErrNothingToDo: the version asked for is current already.
var ErrNothingToDo = errors.New("nothing to do")

// Rollback makes version `to` of dataset opts.Name current again, as a new
// version whose content is `to`'s: its shards and rows, under the objects
// `to` reads. Nothing is uploaded or rewritten but the metadata every
// version has of its own (the manifest, and in format 3 the group
// objects), so a rollback is cheap and can itself be rolled back.
func Rollback(ctx context.Context, opts Options, to int) (*AppendResult, error) {
	start := time.Now()
	log := opts.logger()
	if err := repository.CheckName(opts.Name); err != nil {
		return nil, err
	}
	ingestID := newIngestID()
	opts.Lock.Logger = log
	txn, ctx, err := repository.Begin(ctx, opts.Stores, opts.Name, ingestID, opts.Lock, log)
	if err != nil {
		return nil, fmt.Errorf("rollback %s: %w", opts.Name, err)
	}
	defer txn.Release(context.WithoutCancel(ctx))
	ds, err := repository.Open(ctx, opts.Stores, opts.Name, repository.Options{Logger: log, Version: to})
	if err != nil {
		return nil, fmt.Errorf("rollback %s to version %d: %w", opts.Name, to, err)
	}
	cur := &manifest.Manifest{Header: ds.Current}
	if to == cur.VersionNumber() {
		return nil, fmt.Errorf("%w: version %d of %s is current already", ErrNothingToDo, to, opts.Name)
	}
	target := ds.Manifest
	now := time.Now().Unix()
	h := target.Header
	h.IngestID, h.CreatedUnix, h.Stores = ingestID, now, storeNames(opts.Stores)
	h.Segments = slices.Clone(target.SegmentsOr(len(target.Shards)))
	samples, bytes := repository.Totals(target)
	h.Versions = append(slices.Clone(cur.Versions), manifest.VersionInfo{
		Number: cur.VersionNumber() + 1, IngestID: ingestID, Parent: cur.VersionNumber(), CreatedUnix: now,
		Samples: samples, Bytes: bytes, Change: fmt.Sprintf("rollback to %d", to),
	})
	m := *target
	m.Header, m.Root = h, nil
	if target.Top != nil {
		top := *target.Top
		top.Header = h
		m.Top = &top
		opts.Data, opts.Parity = h.Data, h.Parity
		if target.Root != nil {
			if m.Root, err = writeGroups(ctx, opts, m.Top, repository.Put); err != nil {
				return nil, fmt.Errorf("rollback %s not committed: %w (rerun it)", opts.Name, err)
			}
		}
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	res := &AppendResult{Result: Result{Manifest: &m, Samples: int(samples), Bytes: bytes}, Version: m.VersionNumber(), Parent: cur.VersionNumber()}
	if err := commitReplacing(ctx, opts, txn, &m, cur, &res.Result); err != nil {
		return nil, err
	}
	res.Elapsed = time.Since(start)
	return res, nil
}
