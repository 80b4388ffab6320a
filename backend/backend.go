// Package backend owns the storage boundary of shardfs: the small Store
// interface every object store implements, the file:// and S3
// implementations, the decorators that wrap a Store with one concern each
// (Limit, Retry, Timeout, Health), each with Unwrap, the one place they are
// stacked (Stack, OpenStack), the one fan-out over a set of stores
// (OnEvery), and Versions, which holds every read of an object to one
// version of it. The fault-injecting store for tests lives outside, in
// internal/faultstore.
//
// Nothing above this package sees a minio-go type: S3 errors are converted
// here into the sentinels below, so callers test them with errors.Is.
package backend

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Stores wrap them in *Error so messages name the store.
var (
	// ErrNotExist: the object (or the bucket's object) does not exist.
	ErrNotExist = errors.New("object does not exist")
	// ErrShortRead: the object is shorter than the requested range.
	ErrShortRead = errors.New("object shorter than requested range")
	// ErrAccessDenied: the credentials were rejected.
	ErrAccessDenied = errors.New("access denied")
	// ErrNoBucket: the bucket named in the store URL does not exist.
	ErrNoBucket = errors.New("bucket does not exist")
	// ErrUnavailable: the store could not be reached or failed (5xx, refused, timeout).
	ErrUnavailable = errors.New("store unavailable")
	// ErrStalled: a request's time bound ran out while this process could
	// not run (a busy machine): no verdict on the store, and not a store
	// fault.
	ErrStalled = errors.New("timed out while this process stalled")
	// ErrThrottled: the store refused a request for load (S3's 503
	// SlowDown, 500 InternalError, 429), which a retry may pass; it comes
	// wrapped with ErrUnavailable. See Retry.
	ErrThrottled = errors.New("throttled")
	// ErrBadKey: a key is not a clean relative path.
	ErrBadKey = errors.New("invalid object key")
	// ErrExists: Create found the key already present.
	ErrExists = errors.New("object already exists")
)

// Store is a flat namespace of objects. Keys are slash-separated
// relative paths without "." or ".." elements. All methods are safe for
// concurrent use.
type Store interface {
	// ReadAt fills p with the bytes of key starting at off. It returns nil
	// only when all len(p) bytes were read. A missing object is ErrNotExist;
	// an object that ends before off+len(p) is ErrShortRead.
	ReadAt(ctx context.Context, key string, p []byte, off int64) error
	// ReadAtV is ReadAt into several buffers: the bytes of key from off
	// fill bufs[0], then bufs[1], and so on, so a coalesced GET lands in
	// the buffers its callers keep, with no copy. Its errors are ReadAt's.
	// Every store and every wrapper implements it, so no wrapper can hide
	// the path production reads by.
	ReadAtV(ctx context.Context, key string, bufs [][]byte, off int64) error
	// Put stores data under key, replacing any previous object atomically:
	// a concurrent or later reader sees the old object or the new one, never a mix.
	Put(ctx context.Context, key string, data []byte) error
	// Create stores data under key only if no object has that key: of two
	// concurrent Creates of one key, exactly one succeeds and the other gets
	// ErrExists. This is S3's conditional PUT (If-None-Match: *); shardfs uses
	// it to arbitrate ingests without trusting clocks or check-then-write.
	Create(ctx context.Context, key string, data []byte) error
	// ReadWhole reads key's first max bytes (all of it when it is at most
	// max bytes: whole) into the buffer into returns, called once, for
	// n = min(size, max) bytes (len(into(n)) == n); it returns key's size
	// and whether it read it whole. One request, where a Stat and a
	// ReadAt were two, and the size and the bytes are one version's; it
	// asks the store for no byte it does not read, so a larger object's
	// first bytes are read once, for its caller to use. A missing object
	// is ErrNotExist.
	ReadWhole(ctx context.Context, key string, max int64, into func(size int64) []byte) (size int64, whole bool, err error)
	// Stat returns the size of key, or ErrNotExist.
	Stat(ctx context.Context, key string) (int64, error)
	// List returns every key that starts with prefix, sorted.
	List(ctx context.Context, prefix string) ([]string, error)
	// Delete removes key. Deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// String names the store for messages. It never contains a secret.
	String() string
}

// Error names the store, the operation and the key of a failure.
type Error struct {
	Store string
	Op    string
	Key   string
	Err   error
}

func (e *Error) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("store %s: %s: %v", e.Store, e.Op, e.Err)
	}
	return fmt.Sprintf("store %s: %s %s: %v", e.Store, e.Op, e.Key, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// CheckKey reports whether key is a clean relative object key.
func CheckKey(key string) error {
	if key == "" || strings.HasPrefix(key, "/") || strings.ContainsRune(key, 0) || strings.Contains(key, "\\") {
		return fmt.Errorf("%w %q: keys are relative slash-separated paths", ErrBadKey, key)
	}
	for _, el := range strings.Split(key, "/") {
		if el == "" || el == "." || el == ".." {
			return fmt.Errorf("%w %q: empty, \".\" or \"..\" path element", ErrBadKey, key)
		}
	}
	return nil
}
