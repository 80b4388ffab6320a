package backend

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// ErrChanged: an object read under a Versions' Pin was replaced or rewritten
// since the first read of it under that context, so a later read would
// return another version's bytes.
var ErrChanged = errors.New("changed while it was read")

// Versions holds reads to one version of each object: a context from Pin
// makes every store hold each read of an object (Stat, ReadWhole, ReadAt,
// ReadAtV) to the version of it that the first read under this Versions
// saw, and fail a read of another version with ErrChanged. S3 sends the
// first reply's ETag as If-Match; a file:// store compares the file's
// device, inode, size, mtime and ctime, before and after each read.
//
// A Put under the Pin of an object it has seen replaces only that
// version, in one step (S3's conditional PUT, If-Match; a file:// store
// compares and renames under a lock on the directory), and is ErrChanged
// when the object is another version, or gone. That is a compare-and-swap:
// of two writers that read one version, one replaces it and the other is
// told, as two takers of a dead holder's lock need. An S3 store that does
// no conditional PUT (it answers 501 Not Implemented) is written
// unconditionally, as a read then a write did before.
//
// One object read by many requests, a source shard scanned in pieces, is
// so read as one version or refused: between two ranged reads it could be
// replaced, and the bytes before and after the change, checksummed as
// read, would be committed as a record that no version of the source
// holds. The wrappers pass the context on as it is, so they need not know.
// Safe for concurrent use.
type Versions struct {
	mu   sync.Mutex
	seen map[[2]string]string // by store and key
}

// NewVersions is a Versions that has seen no object yet.
func NewVersions() *Versions { return &Versions{seen: map[[2]string]string{}} }

// Pin is ctx with its reads held to v's versions.
func (v *Versions) Pin(ctx context.Context) context.Context {
	if v == nil {
		return ctx
	}
	return context.WithValue(ctx, pinsKey{}, v)
}

type pinsKey struct{}

// pinsOf is ctx's Versions, nil when its reads are not pinned.
func pinsOf(ctx context.Context) *Versions {
	p, _ := ctx.Value(pinsKey{}).(*Versions)
	return p
}

// pinned is the version of store's key that reads must match, "" when
// none is pinned yet (or ctx pins nothing).
func (p *Versions) pinned(store, key string) string {
	if p == nil {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[[2]string{store, key}]
}

// see pins version v of store's key if none is, and is ErrChanged when
// another is.
func (p *Versions) see(store, key, v string) error {
	if p == nil || v == "" {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	k := [2]string{store, key}
	if was, ok := p.seen[k]; ok && was != v {
		return fmt.Errorf("%w (version %s, then %s)", ErrChanged, was, v)
	}
	p.seen[k] = v
	return nil
}

// replaced pins v as store's key's version after a write under the pin
// replaced the one pinned.
func (p *Versions) replaced(store, key, v string) {
	if p == nil || v == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen[[2]string{store, key}] = v
}

// fileVersion names the version of a file a file:// store holds: a file
// replaced (a new inode) or written in place (its mtime and ctime move)
// has another.
func fileVersion(st *unix.Stat_t) string {
	return fmt.Sprintf("dev %d inode %d size %d mtime %d.%09d ctime %d.%09d", st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
}
