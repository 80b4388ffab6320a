package repository

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/shardfs/shardfs/backend"
)

// Object is one object of a dataset on a store, named by its kind and the
// numbers that pick it out: code outside this package holds an Object and
// hands it back to Put, Stat, ReadAt and the rest, and never spells a key
// (TestOnlyRepositoryTouchesTheStores holds it to that). keys.go maps every
// kind to its key.
type Object struct {
	key string
}

// String is the object's key, for messages.
func (o Object) String() string { return o.key }

// FragmentObject is fragment frag of shard in ingest ingestID of dataset name.
func FragmentObject(name, ingestID string, shard, frag int) Object {
	return Object{FragmentKey(name, ingestID, shard, frag)}
}

// IndexObject is shard's index in ingest ingestID of dataset name (formats 2
// and 3): a copy on every store.
func IndexObject(name, ingestID string, shard int) Object {
	return Object{IndexKey(name, ingestID, shard)}
}

// GroupObject is group g's object in ingest ingestID of dataset name
// (format 3): a copy on every store.
func GroupObject(name, ingestID string, g int) Object {
	return Object{GroupKey(name, ingestID, g)}
}

// ManifestObject is the manifest of dataset name: its commit point, one
// copy per store (or, for a description plan writes, its root).
func ManifestObject(name string) Object { return Object{ManifestKey(name)} }

// VersionObject is the kept manifest of the version of dataset name that
// ingest ingestID committed (version.go).
func VersionObject(name, ingestID string) Object { return Object{VersionKey(name, ingestID)} }

// PartObject is the record of part i of n of distributed ingest id.
func PartObject(name, id string, i, n int) Object { return Object{PartKey(name, id, i, n)} }

// PartKeysObject is object piece of part i of n's sorted keys.
func PartKeysObject(name, id string, i, n, piece int) Object {
	return Object{PartKeysKey(name, id, i, n, piece)}
}

// PartStartedObject marks distributed ingest id as running.
func PartStartedObject(name, id string) Object { return Object{PartStartedKey(name, id)} }

// WriteFunc writes one object to one store: Put, or CreateOrSame.
type WriteFunc func(ctx context.Context, s backend.Store, o Object, data []byte) error

// Put writes or replaces o: how a single-process ingest writes, its objects
// named by an ingest id no other run shares.
func Put(ctx context.Context, s backend.Store, o Object, data []byte) error {
	return s.Put(ctx, o.key, data)
}

// ErrSourceChanged: a part found an object of its ingest already written
// with other bytes: the source changed since that ingest's parts ran (the
// ingest id names the listing's keys, sizes and labels, not the content).
var ErrSourceChanged = errors.New("the source's content differs from what was already written")

// ErrCommittedMissing: an object of a committed ingest is gone; repair
// restores it, and no part writes it.
var ErrCommittedMissing = errors.New("missing from the committed ingest (shardfs repair restores it)")

// CreateOrSame is how a part writes: objects of a distributed ingest are
// named by an id every rerun of its parts shares, so an object is created
// only where none is (a conditional PUT: of two racing writers one wins),
// and one already there must hold exactly these bytes. A part therefore
// never writes into an object a commit checked or committed.
func CreateOrSame(ctx context.Context, s backend.Store, o Object, data []byte) error {
	err := s.Create(ctx, o.key, data)
	if !errors.Is(err, backend.ErrExists) {
		return err
	}
	return Same(ctx, s, o, data)
}

// Same checks that s holds exactly data as o, writing nothing: how a part
// of an ingest that is already committed compares its work.
func Same(ctx context.Context, s backend.Store, o Object, data []byte) error {
	size, err := s.Stat(ctx, o.key)
	if err != nil {
		if errors.Is(err, backend.ErrNotExist) {
			return fmt.Errorf("%s: %s is missing: %w", s, o, ErrCommittedMissing)
		}
		return err
	}
	if size == int64(len(data)) {
		got := make([]byte, size)
		if err := s.ReadAt(ctx, o.key, got, 0); err != nil {
			return err
		}
		if bytes.Equal(got, data) {
			return nil
		}
	}
	return fmt.Errorf("%s: %s: %w", s, o, ErrSourceChanged)
}

// PutSome writes o to every store with write, and succeeds if at least
// need did. A store that holds other bytes as o (ErrSourceChanged) fails
// it whatever the others did.
func PutSome(ctx context.Context, stores []backend.Store, o Object, data []byte, need int, write WriteFunc) error {
	ok, errs := backend.Split(backend.OnEvery(stores, func(_ int, s backend.Store) error { return write(ctx, s, o, data) }))
	for _, err := range errs {
		if errors.Is(err, ErrSourceChanged) {
			return err
		}
	}
	if len(ok) < need {
		return fmt.Errorf("written to %d of %d stores, need %d: %w", len(ok), len(stores), need, errors.Join(errs...))
	}
	return nil
}

// PutChecked makes s hold exactly data as o, and reads it back: an object a
// previous run wrote is kept if it holds data (again is true), and written
// again if it does not. Migrate copies fragments so.
func PutChecked(ctx context.Context, s backend.Store, o Object, data []byte) (again bool, err error) {
	if holds(ctx, s, o.key, data) == nil {
		return true, nil
	}
	if err := s.Put(ctx, o.key, data); err != nil {
		return false, err
	}
	if err := holds(ctx, s, o.key, data); err != nil {
		return false, fmt.Errorf("read back after writing: %w", err)
	}
	return false, nil
}

// holds checks that s holds exactly data under key, reading it a MiB at a
// time, so that a check costs no second copy of the fragment.
func holds(ctx context.Context, s backend.Store, key string, data []byte) error {
	size, err := s.Stat(ctx, key)
	if err != nil {
		return err
	}
	if size != int64(len(data)) {
		return fmt.Errorf("%s: %s is %d bytes, want %d", s, key, size, len(data))
	}
	buf := make([]byte, min(len(data), 1<<20))
	for off := 0; off < len(data); off += len(buf) {
		n := min(len(buf), len(data)-off)
		if err := s.ReadAt(ctx, key, buf[:n], int64(off)); err != nil {
			return err
		}
		if !bytes.Equal(buf[:n], data[off:off+n]) {
			return fmt.Errorf("%s: %s differs from what was encoded at byte %d", s, key, off)
		}
	}
	return nil
}

// Stat is the size of o on s, or backend.ErrNotExist.
func Stat(ctx context.Context, s backend.Store, o Object) (int64, error) {
	return s.Stat(ctx, o.key)
}

// ReadAt fills p with o's bytes on s from off.
func ReadAt(ctx context.Context, s backend.Store, o Object, p []byte, off int64) error {
	return s.ReadAt(ctx, o.key, p, off)
}

// ReadWhole reads all of o from s.
func ReadWhole(ctx context.Context, s backend.Store, o Object) ([]byte, error) {
	b, _, _, err := readUpTo(ctx, s, o.key, math.MaxInt64)
	return b, err
}

// readUpTo reads key in one request: whole when it is at most max bytes,
// else its first max bytes, with its size.
func readUpTo(ctx context.Context, s backend.Store, key string, max int64) (b []byte, size int64, whole bool, err error) {
	size, whole, err = s.ReadWhole(ctx, key, max, func(n int64) []byte {
		b = make([]byte, n)
		return b
	})
	if err != nil {
		return nil, 0, false, err
	}
	return b, size, whole, nil
}

// readSmallObject reads key whole in one request when it is at most max
// bytes; a larger one gives nil bytes, and its size says why.
func readSmallObject(ctx context.Context, s backend.Store, key string, max int64) ([]byte, int64, error) {
	b, size, whole, err := readUpTo(ctx, s, key, max)
	if err != nil || !whole {
		return nil, size, err
	}
	return b, size, nil
}

// AnyHolds reports whether some store holds o.
func AnyHolds(ctx context.Context, stores []backend.Store, o Object) bool {
	return Copies(ctx, stores, o) > 0
}

// Copies counts the stores that hold o.
func Copies(ctx context.Context, stores []backend.Store, o Object) int {
	ok, _ := backend.Split(backend.OnEvery(stores, func(i int, s backend.Store) error {
		_, err := s.Stat(ctx, o.key)
		return err
	}))
	return len(ok)
}

// HoldsDataset reports whether s holds a store identity of a dataset
// called name: whether name is a dataset's namespace on s.
func HoldsDataset(ctx context.Context, s backend.Store, name string) bool {
	_, err := s.Stat(ctx, IdentityKey(name))
	return err == nil
}
