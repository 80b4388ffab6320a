package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// tmpPrefix marks in-progress writes; List never returns them.
const tmpPrefix = ".shardfs-tmp-"

// Local is a Store in a local directory (file:// URLs). Each key is a file
// below the root; writes go to a temporary file that is fsynced and renamed.
type Local struct {
	root string
	name string
	// made is the outermost directory NewLocal created for the root
	// ("" when the root was there): what RemoveIfEmpty may take back.
	made string
}

var _ Store = (*Local)(nil)

// NewLocal returns a store rooted at dir, creating the directory if needed.
func NewLocal(dir string) (*Local, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	made := ""
	for d := abs; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || d == filepath.Dir(d) {
			break
		}
		made = d
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, &Error{Store: "file://" + abs, Op: "create directory", Err: err}
	}
	return &Local{root: abs, name: "file://" + abs, made: made}, nil
}

// removeIfEmpty removes the directories NewLocal made for the root, and
// the directories below it, when no file is left in them. It removes only
// directories, each only when empty (os.Remove refuses any other), and
// none of a root that was there before: a file, or a directory someone
// else made, is never touched.
func (l *Local) removeIfEmpty() (bool, error) {
	if l.made == "" {
		return false, nil
	}
	removeEmptyTree(l.root)
	for d := filepath.Dir(l.root); len(d) >= len(l.made); d = filepath.Dir(d) {
		os.Remove(d)
	}
	_, err := os.Lstat(l.made)
	return errors.Is(err, fs.ErrNotExist), nil
}

func (l *Local) String() string { return l.name }

func (l *Local) path(key string) (string, error) {
	if err := CheckKey(key); err != nil {
		return "", &Error{Store: l.name, Op: "check key", Err: err}
	}
	return filepath.Join(l.root, filepath.FromSlash(key)), nil
}

func (l *Local) wrap(op, key string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		err = ErrNotExist
	}
	return &Error{Store: l.name, Op: op, Key: key, Err: err}
}

func (l *Local) ReadAt(ctx context.Context, key string, p []byte, off int64) error {
	return l.ReadAtV(ctx, key, [][]byte{p}, off)
}

// ReadAtV reads the file's bytes from off into bufs in turn.
//
// It opens the file with open(2) and reads with preadv(2), not os.Open and
// File.ReadAt: os.File registers every file with the runtime's poller,
// which a regular file refuses, and those extra fcntl and epoll_ctl calls
// were a sixth of the CPU of a read from a file store (profile of
// erasure's TestDecodeMatrix, where every fragment read opens a file).
func (l *Local) ReadAtV(ctx context.Context, key string, bufs [][]byte, off int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	name, err := l.path(key)
	if err != nil {
		return err
	}
	fd, err := retryEINTR(func() (int, error) { return unix.Open(name, unix.O_RDONLY|unix.O_CLOEXEC, 0) })
	if err != nil {
		return l.wrap("read", key, &fs.PathError{Op: "open", Path: name, Err: err})
	}
	defer unix.Close(fd)
	pins := pinsOf(ctx)
	var before unix.Stat_t
	if pins != nil {
		if err := unix.Fstat(fd, &before); err != nil {
			return l.wrap("read", key, &fs.PathError{Op: "fstat", Path: name, Err: err})
		}
	}
	total, want := 0, VecLen(bufs)
	for {
		for len(bufs) > 0 && len(bufs[0]) == 0 {
			bufs = bufs[1:]
		}
		if len(bufs) == 0 {
			return l.samePinned(pins, key, name, fd, &before)
		}
		n, err := retryEINTR(func() (int, error) { return unix.Preadv(fd, bufs[:min(len(bufs), maxIovecs)], off+int64(total)) })
		if err != nil {
			return l.wrap("read", key, &fs.PathError{Op: "read", Path: name, Err: err})
		}
		if n == 0 {
			return l.wrap("read", key, shortRead(total, want, off))
		}
		total += n
		for len(bufs) > 0 && n >= len(bufs[0]) { // drop what is filled
			n -= len(bufs[0])
			bufs = bufs[1:]
		}
		if n > 0 { // a short read: the rest, in a list of our own, not the caller's
			bufs = append([][]byte{bufs[0][n:]}, bufs[1:]...)
		}
	}
}

// samePinned holds a read under a Versions' Pin to one version of the file:
// the open file's before and after the read must be equal (no write
// during it), and the pinned one (ErrChanged otherwise).
func (l *Local) samePinned(pins *Versions, key, name string, fd int, before *unix.Stat_t) error {
	if pins == nil {
		return nil
	}
	var after unix.Stat_t
	if err := unix.Fstat(fd, &after); err != nil {
		return l.wrap("read", key, &fs.PathError{Op: "fstat", Path: name, Err: err})
	}
	v := fileVersion(&after)
	if was := fileVersion(before); was != v {
		return l.wrap("read", key, fmt.Errorf("%w (written during the read: version %s, then %s)", ErrChanged, was, v))
	}
	if err := pins.see(l.name, key, v); err != nil {
		return l.wrap("read", key, err)
	}
	return nil
}

// maxIovecs is the most buffers one preadv(2) takes (IOV_MAX on Linux).
const maxIovecs = 1024

// retryEINTR calls f again while a signal interrupts it.
func retryEINTR(f func() (int, error)) (int, error) {
	for {
		n, err := f()
		if err != unix.EINTR {
			return n, err
		}
	}
}

func (l *Local) Put(ctx context.Context, key string, data []byte) error {
	return l.write(ctx, key, data, false)
}

// Create links a complete temporary file to its name: link(2) fails when
// the name exists, so of two Creates exactly one wins, and a reader never
// sees a partial object.
func (l *Local) Create(ctx context.Context, key string, data []byte) error {
	return l.write(ctx, key, data, true)
}

func (l *Local) write(ctx context.Context, key string, data []byte, exclusive bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	name, err := l.path(key)
	if err != nil {
		return err
	}
	dir := filepath.Dir(name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return l.wrap("write", key, err)
	}
	tmp, err := os.CreateTemp(dir, tmpPrefix+"*")
	if err != nil {
		return l.wrap("write", key, err)
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return l.wrap("write", key, err)
	}
	if err := tmp.Sync(); err != nil {
		return l.wrap("fsync", key, err)
	}
	if err := tmp.Close(); err != nil {
		return l.wrap("write", key, err)
	}
	// Every change of a name takes its directory's lock: shared, or alone
	// for a Put that replaces a pinned version, whose check and rename
	// are then one step to every other writer.
	pins := pinsOf(ctx)
	was := ""
	if !exclusive {
		was = pins.pinned(l.name, key)
	}
	unlock, err := lockDir(dir, was != "")
	if err != nil {
		return l.wrap("write", key, err)
	}
	defer unlock()
	if was != "" {
		var st unix.Stat_t
		now := "none"
		if err := unix.Stat(name, &st); err == nil {
			now = fileVersion(&st)
		}
		if now != was {
			return l.wrap("write", key, fmt.Errorf("%w (version %s, now %s)", ErrChanged, was, now))
		}
	}
	if exclusive {
		err := os.Link(tmp.Name(), name)
		os.Remove(tmp.Name())
		if errors.Is(err, fs.ErrExist) {
			ok = true
			return &Error{Store: l.name, Op: "create", Key: key, Err: ErrExists}
		}
		if err != nil {
			return l.wrap("create", key, err)
		}
	} else if err := os.Rename(tmp.Name(), name); err != nil {
		return l.wrap("rename", key, err)
	}
	ok = true
	if was != "" {
		var st unix.Stat_t
		if err := unix.Stat(name, &st); err == nil {
			pins.replaced(l.name, key, fileVersion(&st))
		}
	}
	// The rename is durable only once the directory entry is synced.
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// ReadWhole reads the file, or its first max bytes, through one open
// file, so the size and the bytes are one file's.
func (l *Local) ReadWhole(ctx context.Context, key string, max int64, into func(size int64) []byte) (int64, bool, error) {
	if err := ctx.Err(); err != nil {
		return 0, false, err
	}
	name, err := l.path(key)
	if err != nil {
		return 0, false, err
	}
	f, err := os.Open(name)
	if err != nil {
		return 0, false, l.wrap("read", key, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, false, l.wrap("read", key, err)
	}
	if fi.IsDir() {
		return 0, false, l.wrap("read", key, ErrNotExist)
	}
	n := fi.Size()
	if n > max {
		n = 0
		if max > 0 {
			n = max
		}
	}
	pins := pinsOf(ctx)
	var before unix.Stat_t
	if pins != nil {
		if err := unix.Fstat(int(f.Fd()), &before); err != nil {
			return 0, false, l.wrap("read", key, err)
		}
	}
	p := into(n)
	if n, err := io.ReadFull(f, p); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			err = shortRead(n, len(p), 0)
		}
		return 0, false, l.wrap("read", key, err)
	}
	if err := l.samePinned(pins, key, name, int(f.Fd()), &before); err != nil {
		return 0, false, err
	}
	return fi.Size(), fi.Size() <= max, nil
}

func (l *Local) Stat(ctx context.Context, key string) (int64, error) {
	name, err := l.path(key)
	if err != nil {
		return 0, err
	}
	fi, err := os.Stat(name)
	if err != nil {
		return 0, l.wrap("stat", key, err)
	}
	if fi.IsDir() {
		return 0, l.wrap("stat", key, ErrNotExist)
	}
	if pins := pinsOf(ctx); pins != nil {
		var st unix.Stat_t
		if err := unix.Stat(name, &st); err != nil {
			return 0, l.wrap("stat", key, &fs.PathError{Op: "stat", Path: name, Err: err})
		}
		if err := pins.see(l.name, key, fileVersion(&st)); err != nil {
			return 0, l.wrap("stat", key, err)
		}
		return st.Size, nil
	}
	return fi.Size(), nil
}

func (l *Local) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	err := filepath.WalkDir(l.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, _ := filepath.Rel(l.root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			// Skip subtrees that cannot hold a key with this prefix.
			if rel != "." && !strings.HasPrefix(rel+"/", prefix) && !strings.HasPrefix(prefix, rel+"/") {
				return fs.SkipDir
			}
			return nil
		}
		if strings.HasPrefix(d.Name(), tmpPrefix) || !strings.HasPrefix(rel, prefix) {
			return nil
		}
		keys = append(keys, rel)
		return nil
	})
	if err != nil {
		return nil, l.wrap("list", prefix, err)
	}
	sort.Strings(keys)
	return keys, nil
}

func (l *Local) Delete(ctx context.Context, key string) error {
	name, err := l.path(key)
	if err != nil {
		return err
	}
	unlock, err := lockDir(filepath.Dir(name), false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no directory, no object
	}
	if err != nil {
		return l.wrap("delete", key, err)
	}
	defer unlock()
	if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return l.wrap("delete", key, err)
	}
	return nil
}

// lockDir takes dir's lock (flock(2) of the directory itself, so no file
// is added to the store): alone, or shared with other writers.
func lockDir(dir string, alone bool) (unlock func(), err error) {
	fd, err := retryEINTR(func() (int, error) { return unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0) })
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	how := unix.LOCK_SH
	if alone {
		how = unix.LOCK_EX
	}
	if _, err := retryEINTR(func() (int, error) { return 0, unix.Flock(fd, how) }); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "flock", Path: dir, Err: err}
	}
	return func() { unix.Close(fd) }, nil
}

// RemoveEmptyDirs removes the empty directories under prefix of a file://
// store, prefix's own included, deepest first, as an object store forgets
// a prefix once its last object is deleted: so that a deleted dataset
// leaves no name behind. Only empty directories go (os.Remove refuses
// any other). Other stores have nothing to remove.
func RemoveEmptyDirs(s Store, prefix string) {
	l, ok := below[*Local](s)
	if !ok {
		return
	}
	top, err := l.path(strings.TrimSuffix(prefix, "/"))
	if err != nil {
		return
	}
	removeEmptyTree(top)
}

// removeEmptyTree removes the empty directories under top, top's own
// included, deepest first (WalkDir lists a directory before its
// children); os.Remove refuses a directory that holds anything.
func removeEmptyTree(top string) {
	var dirs []string
	filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		os.Remove(dirs[i])
	}
}
