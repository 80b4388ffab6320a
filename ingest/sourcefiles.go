package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/repository"
)

// The files a source of records is read from: local files, or the objects
// of a store (a WebDataset set on S3, read with ranged GETs, never copied
// to local disk). Paths are file names, or the store's keys.

// sourceFiles opens a source's files for reading at offsets.
type sourceFiles interface {
	open(ctx context.Context, name string) (io.ReaderAt, int64, error)
	close()
}

// localFiles opens local files, each once; safe for concurrent use. A
// compressed shard (.tar.gz, .tgz) opens as its decompressed bytes.
type localFiles struct {
	mu    sync.Mutex
	open_ map[string]*oneVersion
	gz    *gzSizes
}

func (l *localFiles) open(ctx context.Context, name string) (io.ReaderAt, int64, error) {
	f, size, err := l.openRaw(ctx, name)
	if err != nil || !compressedShard(name) {
		return f, size, err
	}
	g, err := openGzShard(name, f, size, l.gz)
	if err != nil {
		return nil, 0, err
	}
	return g, g.size, nil
}

func (l *localFiles) openRaw(_ context.Context, name string) (io.ReaderAt, int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if f, ok := l.open_[name]; ok {
		return f, f.at.size, f.unchanged()
	}
	f, err := openOneVersion(name)
	if err != nil {
		return nil, 0, err
	}
	if l.open_ == nil {
		l.open_ = map[string]*oneVersion{}
	}
	l.open_[name] = f
	return f, f.at.size, nil
}

// forget closes name, opened once before; a later open opens it again. A
// stream's scan forgets each source shard once it has read it (Stream.
// readShards): the upload reads its records from memory, or through
// files of its own, each record's checksum against the scan's. Kept open
// to the stream's end, a source of 100 shards held 100 descriptors, and
// one of a million shards would run out of them.
func (l *localFiles) forget(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if f, ok := l.open_[name]; ok {
		f.Close()
		delete(l.open_, name)
	}
}

func (l *localFiles) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.open_ {
		f.Close()
	}
}

// storeFiles reads a store's objects; a compressed shard's decompressed.
// Every read of an object is held to the version the ingest's first read
// of it saw (backend.Versions): read by many requests, it is read as one
// version, or refused.
type storeFiles struct {
	st       backend.Store
	gz       *gzSizes
	versions *backend.Versions
}

func (s storeFiles) open(ctx context.Context, key string) (io.ReaderAt, int64, error) {
	ctx = s.versions.Pin(ctx)
	size, err := s.st.Stat(ctx, key)
	if err != nil {
		return nil, 0, changedSource(err)
	}
	raw := storeObject{ctx, s.st, key, size}
	if !compressedShard(key) {
		return raw, size, nil
	}
	g, err := openGzShard(key, raw, size, s.gz)
	if err != nil {
		return nil, 0, err
	}
	return g, g.size, nil
}

func (storeFiles) close() {}

// wholeFiles are source files that read a file whole, or say it is too
// large, in one request: a store's objects, where a Stat and a read were
// two requests, and the size and the bytes could be two versions'.
type wholeFiles interface {
	// readWhole reads name into into's buffer: whole when it is at most
	// max bytes (whole), else its first max bytes; f reads name either
	// way, and a larger name's f serves those first bytes from the
	// buffer, which it then holds until a read passes them.
	readWhole(ctx context.Context, name string, max int64, into func(size int64) []byte) (f io.ReaderAt, size int64, whole bool, err error)
}

func (s storeFiles) readWhole(ctx context.Context, key string, max int64, into func(size int64) []byte) (io.ReaderAt, int64, bool, error) {
	ctx = s.versions.Pin(ctx)
	var head []byte
	size, whole, err := s.st.ReadWhole(ctx, key, max, func(n int64) []byte {
		head = into(n)
		return head
	})
	if err != nil {
		return nil, 0, false, changedSource(err)
	}
	o := storeObject{ctx, s.st, key, size}
	if whole || len(head) == 0 {
		return o, size, whole, nil
	}
	h := &headedObject{storeObject: o}
	h.head.Store(&head)
	return h, size, false, nil
}

// headedObject is a store object whose first bytes were read already, by
// the request that found it too large to read whole: a scan of it asks
// the store only for the bytes after them, so no byte is read twice
// (issue 59). It lets go of them once a read begins past them: a scan
// reads front to back, and a second scan (archive/tar's, after a header
// the plain reader declines) reads them from the store again.
type headedObject struct {
	storeObject
	head atomic.Pointer[[]byte]
}

func (o *headedObject) ReadAt(p []byte, off int64) (int, error) {
	hp := o.head.Load()
	if hp == nil || off >= int64(len(*hp)) {
		if hp != nil {
			o.head.CompareAndSwap(hp, nil)
		}
		return o.storeObject.ReadAt(p, off)
	}
	// The head is shorter than the object, so these bytes end before it.
	n := copy(p, (*hp)[off:])
	if n == len(p) {
		return n, nil
	}
	m, err := o.storeObject.ReadAt(p[n:], off+int64(n))
	return n + m, err
}

// changedSource says what to do about a source object that changed while
// the ingest read it (backend.ErrChanged); other errors it returns as
// they are.
func changedSource(err error) error {
	if errors.Is(err, backend.ErrChanged) {
		return fmt.Errorf("%w; %s", err, rerunUnchanged)
	}
	return err
}

// storeObject is an object of a store as an io.ReaderAt.
type storeObject struct {
	ctx  context.Context
	st   backend.Store
	key  string
	size int64
}

func (o storeObject) ReadAt(p []byte, off int64) (int, error) {
	if off >= o.size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), o.size-off)
	if err := o.st.ReadAt(o.ctx, o.key, p[:n], off); err != nil {
		return 0, changedSource(err)
	}
	if n < int64(len(p)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

// filesOf is how src's files are read.
// It writes nothing to s: readers of a window's shards call it at once.
func (s *Source) filesOf() sourceFiles {
	if s.openFiles != nil {
		return s.openFiles()
	}
	gz := s.gz
	if gz == nil {
		gz = &gzSizes{} // a source the scan did not read as tar shards
	}
	if s.store != nil {
		return storeFiles{s.store, gz, s.versions}
	}
	return &localFiles{gz: gz}
}

// checkApart refuses a source (a store's objects, or a local directory)
// that lies in a dataset's namespace on one of the stores name is
// ingested into, where purge and gc delete what no version needs: the
// namespace of name itself, of any dataset the store holds, or the whole
// store (issue 55: ingest --force from NAME/data/ committed, then its
// purge deleted the source objects). A source elsewhere in a store's
// bucket or directory is fine: shardfs touches nothing outside the
// namespaces of its datasets.
func (s *Source) checkApart(ctx context.Context, stores []backend.Store, name string) error {
	for i, st := range stores {
		var rel string
		var in bool
		switch {
		case s.store != nil:
			rel, in = backend.PathIn(s.store, st)
		case s.Root != "":
			rel, in = backend.DirIn(s.Root, st)
		}
		if !in {
			continue
		}
		where := s.Root
		if s.store != nil {
			where = s.store.String()
		}
		first, _, _ := strings.Cut(rel, "/")
		if first == "" {
			return fmt.Errorf("source %s is store %d (%s) itself, which holds the namespaces of its datasets, where shardfs deletes what no version needs: keep the source outside the stores' datasets", where, i, st)
		}
		if first == name {
			return fmt.Errorf("source %s lies in dataset %s's own namespace on store %d (%s), where shardfs deletes what no version needs (the purge after an ingest, gc): keep the source outside the stores' datasets", where, name, i, st)
		}
		if repository.HoldsDataset(ctx, st, first) {
			return fmt.Errorf("source %s lies in dataset %s's namespace on store %d (%s), where shardfs deletes what no version of %s needs (gc): keep the source outside the stores' datasets", where, first, i, st, first)
		}
	}
	return nil
}

// StoreShards lists the WebDataset shards of a store: its objects whose
// keys end in .tar, .tar.gz or .tgz, sorted.
func StoreShards(ctx context.Context, st backend.Store) ([]string, error) {
	keys, err := st.List(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("source %s: %w", st, err)
	}
	keys = slices.DeleteFunc(keys, func(k string) bool { return !isShardName(k) })
	if len(keys) == 0 {
		return nil, fmt.Errorf("source %s: %w: the store holds no .tar, .tar.gz or .tgz shards", st, ErrEmpty)
	}
	return keys, nil
}
