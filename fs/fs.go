package fs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"weak"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/prefetch"
)

// Catalog is what the tree needs to know about samples.
type Catalog interface {
	layout.Catalog
	KeyBytes(i int) []byte
	NumStrata() int
}

// Pinner fetches the sample rows of a catalog that does not hold them all
// (a dataset in metadata format 2): the tree pins the rows a rank-epoch or
// a samples/ directory needs before it uses them, and keeps the pinned
// catalog for as long as it does. Options.Pinner says whether there is one.
type Pinner interface {
	// Pin fetches the rows of samples, a rank-epoch's order, and gives
	// them back as the catalog numbers them: the order's own numbering may
	// differ (a format-3 dataset's order numbers samples group by group).
	Pin(ctx context.Context, samples layout.Positions) (Catalog, layout.Positions, error)
	// PinStratum fetches the rows of stratum c's samples, and lists them.
	PinStratum(ctx context.Context, c int) (Catalog, layout.Positions, error)
}

// pinTimeout bounds fetching the rows of one rank-epoch or directory: one
// index per shard, many in parallel.
const pinTimeout = 10 * time.Minute

// Options describe the tree.
type Options struct {
	Catalog Catalog
	// Pinner, if set, fetches the rows Catalog does not hold (format 2);
	// nil: Catalog holds every row.
	Pinner Pinner
	Input  *layout.Input
	Reader *prefetch.Reader
	Order  layout.Params // Epoch and Rank are set per directory
	// ParamsAt, if set, gives the order of one rank-epoch instead (an
	// elastic resume changes one epoch's parameters).
	ParamsAt func(epoch, rank int) (layout.Params, error)
	Epochs   int // 0: open-ended, any epoch opens and the listing shows the next few
	Ranks    []int
	Info     []byte        // content of .shardfs/info.json
	Stats    func() []byte // content of .shardfs/stats.json
	Created  time.Time
	Logger   *slog.Logger
	// DirectIO serves batch and epoch files past the kernel's page cache:
	// each read reaches the daemon, no page is kept.
	DirectIO bool
}

// tree is shared by every node.
type tree struct {
	Options
	log *slog.Logger

	samplesOnce sync.Once
	byStratum   []layout.Positions // per stratum, sample indexes sorted by path below the stratum dir

	pinMu  sync.Mutex      // guards pinned, ahead
	pinned []weakPinnedDir // with a Pinner: per stratum, its sorted samples while a directory uses them
	ahead  map[[2]int]*aheadPin

	errMu  sync.Mutex // guards causes
	causes map[string]*causeLog

	maxEpoch atomic.Int64 // highest epoch opened, for the open-ended listing
}

// causeLog rate-limits the log of one cause of failed reads.
type causeLog struct {
	last       time.Time
	suppressed int
}

// errLogEvery is how often one cause of failed reads is logged again.
const errLogEvery = 30 * time.Second

// NewRoot returns the root node of the tree.
func NewRoot(o Options) gofs.InodeEmbedder {
	t := &tree{Options: o, log: o.Logger, causes: map[string]*causeLog{}}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	return &rootDir{dir: dir{t: t}}
}

// ino is a stable inode number for a path.
func ino(path string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(path))
	return h.Sum64() | 1<<63
}

const (
	dirMode  = fuse.S_IFDIR | 0o555
	fileMode = fuse.S_IFREG | 0o444
)

func (t *tree) setAttr(a *fuse.Attr, mode uint32, size int64) {
	a.Mode = mode
	a.Size = uint64(size)
	a.Blocks = (uint64(size) + 511) / 512
	a.Blksize = 1 << 20
	sec := uint64(t.Created.Unix())
	a.Mtime, a.Ctime, a.Atime = sec, sec, sec
	a.Nlink = 1
}

// toErrno is the one place errors become errno: missing things are ENOENT,
// a cancelled request EINTR; anything else becomes EIO, logged with its
// cause once per cause and then at most every 30 s with a count, so a
// failing store is one line, not one per read. No byte is served on error.
func (t *tree) toErrno(err error) syscall.Errno {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	case errors.Is(err, syscall.ENOENT):
		return syscall.ENOENT
	}
	key := rootCause(err).Error()
	// Too few fragments: the cause is which stores failed, not which shard.
	var lost interface{ Stores() []int }
	if errors.As(err, &lost) {
		key = fmt.Sprintf("too few fragments; failed stores %v", lost.Stores())
	}
	now := time.Now()
	t.errMu.Lock()
	c := t.causes[key]
	if c == nil {
		if len(t.causes) >= 1000 {
			clear(t.causes) // bounded: a new flood starts a new count
		}
		c = &causeLog{}
		t.causes[key] = c
	}
	logIt := c.last.IsZero() || now.Sub(c.last) >= errLogEvery
	suppressed := c.suppressed
	if logIt {
		c.last, c.suppressed = now, 0
	} else {
		c.suppressed++
	}
	t.errMu.Unlock()
	if logIt {
		t.log.Error("read failed; returning EIO", "err", err, "same_cause_since_last_line", suppressed)
	}
	return syscall.EIO
}

// rootCause unwraps err to the error that says why, without the file and
// offset its wrappers add.
func rootCause(err error) error {
	for {
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			next := u.Unwrap()
			if next == nil {
				return err
			}
			err = next
		default:
			return err // a leaf, or a join of several causes (such as TooFewError)
		}
	}
}

// dir is the base of every directory node: read-only directory attributes.
type dir struct {
	gofs.Inode
	t *tree
}

var _ = (gofs.NodeGetattrer)((*dir)(nil))

func (d *dir) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.t.setAttr(&out.Attr, dirMode, 0)
	return 0
}

// ---- root and .shardfs ----

type rootDir struct {
	dir
}

var _ = (gofs.NodeOnAdder)((*rootDir)(nil))

func (r *rootDir) OnAdd(ctx context.Context) {
	meta := r.NewPersistentInode(ctx, &staticDir{dir: dir{t: r.t}}, gofs.StableAttr{Mode: fuse.S_IFDIR, Ino: 2})
	r.AddChild(".shardfs", meta, false)
	meta.AddChild("info.json", r.NewPersistentInode(ctx, &bytesFile{t: r.t, data: func() []byte { return r.t.Info }, static: true},
		gofs.StableAttr{Mode: fuse.S_IFREG, Ino: 3}), false)
	meta.AddChild("stats.json", r.NewPersistentInode(ctx, &bytesFile{t: r.t, data: r.t.Stats},
		gofs.StableAttr{Mode: fuse.S_IFREG, Ino: 4}), false)
	r.AddChild("samples", r.NewPersistentInode(ctx, &samplesRoot{dir: dir{t: r.t}}, gofs.StableAttr{Mode: fuse.S_IFDIR, Ino: 5}), false)
	r.AddChild("epochs", r.NewPersistentInode(ctx, &epochsDir{dir: dir{t: r.t}}, gofs.StableAttr{Mode: fuse.S_IFDIR, Ino: 6}), false)
}

type staticDir struct {
	dir
}

// bytesFile serves generated bytes: info.json (static) or stats.json
// (snapshotted at open, served with direct I/O so its size may change).
type bytesFile struct {
	gofs.Inode
	t      *tree
	data   func() []byte
	static bool
}

var (
	_ = (gofs.NodeOpener)((*bytesFile)(nil))
	_ = (gofs.NodeReader)((*bytesFile)(nil))
	_ = (gofs.NodeGetattrer)((*bytesFile)(nil))
)

type snapshot struct{ data []byte }

func (f *bytesFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if f.static {
		return &snapshot{f.data()}, fuse.FOPEN_KEEP_CACHE, 0
	}
	return &snapshot{f.data()}, fuse.FOPEN_DIRECT_IO, 0
}

func (f *bytesFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	size := 0
	if f.static {
		size = len(f.data())
	}
	f.t.setAttr(&out.Attr, fileMode, int64(size))
	if !f.static {
		out.SetTimeout(0)
	}
	return 0
}

func (f *bytesFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	data := f.data()
	if s, ok := fh.(*snapshot); ok {
		data = s.data
	}
	if off >= int64(len(data)) {
		return fuse.ReadResultData(nil), 0
	}
	return fuse.ReadResultData(data[off:min(int64(len(data)), off+int64(len(dest)))]), 0
}

// ---- epochs ----

type epochsDir struct {
	dir
}

var (
	_ = (gofs.NodeLookuper)((*epochsDir)(nil))
	_ = (gofs.NodeReaddirer)((*epochsDir)(nil))
)

// maxOpenEndedListing bounds the listing of open-ended epochs, whatever
// epoch number was looked up: a lookup of epochs/99999999 must not make the
// next listing hold a hundred million entries.
const maxOpenEndedListing = 10_000

func (d *epochsDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	n := d.t.Epochs
	if n == 0 {
		// Open-ended: the epochs up to the highest opened and the next few.
		n = int(min(d.t.maxEpoch.Load()+5, maxOpenEndedListing))
	}
	return &countedStream{n: n, entry: func(e int) fuse.DirEntry {
		name := fmt.Sprintf("%04d", e)
		return fuse.DirEntry{Name: name, Mode: fuse.S_IFDIR, Ino: ino("epochs/" + name)}
	}}, 0
}

// parseNumbered parses name as prefix + a number formatted with at least
// width digits + suffix, accepting only the exact spelling the listing uses.
func parseNumbered(name, prefix string, width int, suffix string) (int, bool) {
	digits, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0, false
	}
	if digits, ok = strings.CutSuffix(digits, suffix); !ok {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n < 0 || fmt.Sprintf("%0*d", width, n) != digits {
		return 0, false
	}
	return n, true
}

func (d *epochsDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	e, ok := parseNumbered(name, "", 4, "")
	if !ok || d.t.Epochs > 0 && e >= d.t.Epochs {
		return nil, syscall.ENOENT
	}
	for cur := d.t.maxEpoch.Load(); int64(e) > cur && !d.t.maxEpoch.CompareAndSwap(cur, int64(e)); cur = d.t.maxEpoch.Load() {
	}
	d.t.setAttr(&out.Attr, dirMode, 0)
	return d.NewInode(ctx, &epochDir{dir: dir{t: d.t}, epoch: e}, gofs.StableAttr{Mode: fuse.S_IFDIR, Ino: ino("epochs/" + name)}), 0
}

type epochDir struct {
	dir
	epoch int
}

var (
	_ = (gofs.NodeLookuper)((*epochDir)(nil))
	_ = (gofs.NodeReaddirer)((*epochDir)(nil))
)

func (d *epochDir) path(rank int) string { return fmt.Sprintf("epochs/%04d/rank-%03d", d.epoch, rank) }

func (d *epochDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	var es []fuse.DirEntry
	for _, r := range d.t.Ranks {
		es = append(es, fuse.DirEntry{Name: fmt.Sprintf("rank-%03d", r), Mode: fuse.S_IFDIR, Ino: ino(d.path(r))})
	}
	return gofs.NewListDirStream(es), 0
}

func (d *epochDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	r, ok := parseNumbered(name, "rank-", 3, "")
	if !ok || !slices.Contains(d.t.Ranks, r) {
		return nil, syscall.ENOENT
	}
	p := d.t.Order
	p.Epoch, p.Rank = d.epoch, r
	if d.t.ParamsAt != nil {
		var err error
		if p, err = d.t.ParamsAt(d.epoch, r); err != nil {
			return nil, d.t.toErrno(err)
		}
	}
	d.t.setAttr(&out.Attr, dirMode, 0)
	return d.NewInode(ctx, &rankDir{dir: dir{t: d.t}, params: p, path: d.path(r)}, gofs.StableAttr{Mode: fuse.S_IFDIR, Ino: ino(d.path(r))}), 0
}

// rankDir holds one rank-epoch; its order is computed on first use.
type rankDir struct {
	dir
	params layout.Params
	path   string

	mu      sync.Mutex // guards members; a failed load is tried again
	members *layout.Members
}

var (
	_ = (gofs.NodeLookuper)((*rankDir)(nil))
	_ = (gofs.NodeReaddirer)((*rankDir)(nil))
)

func (d *rankDir) load(ctx context.Context) (*layout.Members, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.members != nil {
		return d.members, nil
	}
	p := d.t.Pinner
	if p == nil {
		o, err := layout.Order(d.t.Input, d.params)
		if err != nil {
			return nil, err
		}
		d.members = layout.NewMembers(o, d.t.Catalog)
		return d.members, nil
	}
	// The member table keeps the pinned rows: they live as long as it does.
	// The next epoch's are fetched meanwhile, so that its first read does
	// not wait for them.
	a := d.t.pinAhead(p, d.params.Epoch, d.params.Rank, d.params)
	select {
	case <-a.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	d.t.dropAhead(d.params.Epoch, d.params.Rank, a)
	if a.err != nil {
		return nil, fmt.Errorf("%s: %w", d.path, a.err)
	}
	d.members = layout.NewMembers(a.order, a.cat)
	d.t.pinAhead(p, d.params.Epoch+1, d.params.Rank, layout.Params{})
	return d.members, nil
}

// aheadPin is the order and pinned rows of one rank-epoch, being fetched.
type aheadPin struct {
	done  chan struct{}
	order *layout.RankOrder
	cat   layout.Catalog
	err   error
}

// pinAhead starts (or finds) the pin of rank's epoch e, with params p, or
// the params the tree gives that rank-epoch when p is zero. Nothing is
// fetched past the last epoch.
func (t *tree) pinAhead(pn Pinner, e, rank int, p layout.Params) *aheadPin {
	t.pinMu.Lock()
	defer t.pinMu.Unlock()
	key := [2]int{e, rank}
	if a := t.ahead[key]; a != nil {
		return a
	}
	a := &aheadPin{done: make(chan struct{})}
	ahead := p.Batch == 0
	if ahead && t.Epochs > 0 && e >= t.Epochs {
		a.err = fmt.Errorf("epoch %d is past the last", e)
		close(a.done)
		return a
	}
	if t.ahead == nil {
		t.ahead = map[[2]int]*aheadPin{}
	}
	t.ahead[key] = a
	go func() {
		defer close(a.done)
		if ahead {
			p = t.Order
			p.Epoch, p.Rank = e, rank
			if t.ParamsAt != nil {
				if p, a.err = t.ParamsAt(e, rank); a.err != nil {
					return
				}
			}
		}
		if a.order, a.err = layout.Order(t.Input, p); a.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), pinTimeout)
		defer cancel()
		a.cat, a.order.Samples, a.err = pn.Pin(ctx, a.order.Samples)
		if a.err != nil && ahead {
			t.log.Warn("fetching the next epoch's shard indexes ahead failed; its first read fetches them", "epoch", e, "rank", rank, "err", a.err)
		}
	}()
	return a
}

// dropAhead forgets a (used, or failed so that it is tried again).
func (t *tree) dropAhead(e, rank int, a *aheadPin) {
	t.pinMu.Lock()
	defer t.pinMu.Unlock()
	if t.ahead[[2]int{e, rank}] == a {
		delete(t.ahead, [2]int{e, rank})
	}
}

func (d *rankDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	steps, err := layout.Steps(d.t.Input, d.params)
	if err != nil {
		return nil, d.t.toErrno(err)
	}
	return &countedStream{n: steps + 2, entry: func(i int) fuse.DirEntry {
		var name string
		switch i - steps {
		case 0:
			name = "epoch.tar"
		case 1:
			name = "index.csv"
		default:
			name = fmt.Sprintf("batch-%06d.tar", i)
		}
		return fuse.DirEntry{Name: name, Mode: fuse.S_IFREG, Ino: ino(d.path + "/" + name)}
	}}, 0
}

func (d *rankDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	m, err := d.load(ctx)
	if err != nil {
		return nil, d.t.toErrno(err)
	}
	var fm *layout.FileMap
	switch name {
	case "epoch.tar":
		fm = m.Epoch()
	case "index.csv":
		fm = m.Index()
	default:
		b, ok := parseNumbered(name, "batch-", 6, ".tar")
		if !ok || b >= m.Order().Batches {
			return nil, syscall.ENOENT
		}
		fm = m.Batch(b)
	}
	d.t.setAttr(&out.Attr, fileMode, fm.Size())
	return d.NewInode(ctx, &virtFile{t: d.t, fm: fm}, gofs.StableAttr{Mode: fuse.S_IFREG, Ino: ino(d.path + "/" + name)}), 0
}

// virtFile is a batch tar, epoch tar or index.csv.
type virtFile struct {
	gofs.Inode
	t  *tree
	fm *layout.FileMap
}

var (
	_ = (gofs.NodeOpener)((*virtFile)(nil))
	_ = (gofs.NodeReader)((*virtFile)(nil))
	_ = (gofs.NodeGetattrer)((*virtFile)(nil))
	_ = (gofs.NodeReleaser)((*virtFile)(nil))
)

func (f *virtFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	f.t.setAttr(&out.Attr, fileMode, f.fm.Size())
	return 0
}

func (f *virtFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR) != 0 {
		return nil, 0, syscall.EROFS
	}
	// A rank-epoch holding lost samples is read past the page cache too:
	// the kernel would widen a read to its readahead window, and fail the
	// reads of good bytes near a lost member with it.
	if f.t.DirectIO || f.fm.Members().HasLost() {
		return f.t.Reader.Open(f.fm), fuse.FOPEN_DIRECT_IO, 0
	}
	return f.t.Reader.Open(f.fm), fuse.FOPEN_KEEP_CACHE, 0
}

func (f *virtFile) Release(ctx context.Context, fh gofs.FileHandle) syscall.Errno {
	if h, ok := fh.(*prefetch.Handle); ok {
		h.Close()
	}
	return 0
}

func (f *virtFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h, ok := fh.(*prefetch.Handle)
	if !ok {
		return nil, syscall.EBADF
	}
	n, err := h.ReadAt(ctx, dest, off)
	if err != nil && err != io.EOF {
		return nil, f.t.toErrno(fmt.Errorf("%s at %d: %w", f.fm.Name(), off, err))
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// ---- samples ----

// sampleIndex groups samples by stratum, each group sorted by the path
// below the stratum directory (the key without a leading "<stratum>/").
func (t *tree) sampleIndex() []layout.Positions {
	t.samplesOnce.Do(func() {
		groups := make([]layout.Positions, t.Catalog.NumStrata())
		n := len(t.Input.Stratum)
		for i := 0; i < n; i++ {
			c := t.Catalog.Stratum(i)
			groups[c].Append(int64(i))
		}
		for c, g := range groups {
			prefix := []byte(t.Catalog.StratumName(c) + "/")
			g.SortFunc(func(a, b int64) int {
				return bytes.Compare(relPath(t.Catalog.KeyBytes(int(a)), prefix), relPath(t.Catalog.KeyBytes(int(b)), prefix))
			})
		}
		t.byStratum = groups
	})
	return t.byStratum
}

// classDir is one stratum's samples sorted as sampleIndex sorts them, and
// the catalog that answers for them (holding their rows, with a Pinner).
type classDir struct {
	cat     Catalog
	entries layout.Positions
}

type weakPinnedDir = weak.Pointer[classDir]

// class returns stratum c's sorted samples. With a Pinner their rows are
// fetched on first use and kept while a directory or file below uses them.
func (t *tree) class(ctx context.Context, c int) (*classDir, error) {
	p := t.Pinner
	if p == nil {
		return &classDir{cat: t.Catalog, entries: t.sampleIndex()[c]}, nil
	}
	t.pinMu.Lock()
	defer t.pinMu.Unlock()
	if t.pinned == nil {
		t.pinned = make([]weakPinnedDir, t.Catalog.NumStrata())
	}
	if d := t.pinned[c].Value(); d != nil {
		return d, nil
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pinTimeout)
	defer cancel()
	cat, samples, err := p.PinStratum(pctx, c)
	if err != nil {
		return nil, fmt.Errorf("samples/%s: %w", t.Catalog.StratumName(c), err)
	}
	prefix := []byte(t.Catalog.StratumName(c) + "/")
	samples.SortFunc(func(a, b int64) int {
		return bytes.Compare(relPath(cat.KeyBytes(int(a)), prefix), relPath(cat.KeyBytes(int(b)), prefix))
	})
	d := &classDir{cat: cat, entries: samples}
	t.pinned[c] = weak.Make(d)
	return d, nil
}

// relPath is key without a leading "<stratum>/": ImageFolder keys already
// start with their class directory.
func relPath(key, stratumPrefix []byte) []byte {
	if bytes.HasPrefix(key, stratumPrefix) {
		return key[len(stratumPrefix):]
	}
	return key
}

// samplesRoot is samples/, or with mixed datasets samples/<dataset>/: it
// lists the next path component of the stratum names below prefix.
type samplesRoot struct {
	dir
	prefix string // "" or "<dataset>/"
}

var (
	_ = (gofs.NodeLookuper)((*samplesRoot)(nil))
	_ = (gofs.NodeReaddirer)((*samplesRoot)(nil))
)

func (d *samplesRoot) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	var es []fuse.DirEntry
	seen := map[string]bool{}
	for c := 0; c < d.t.Catalog.NumStrata(); c++ {
		rest, ok := strings.CutPrefix(d.t.Catalog.StratumName(c), d.prefix)
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(rest, "/")
		if !seen[name] {
			seen[name] = true
			es = append(es, fuse.DirEntry{Name: name, Mode: fuse.S_IFDIR, Ino: ino("samples/" + d.prefix + name)})
		}
	}
	return gofs.NewListDirStream(es), 0
}

func (d *samplesRoot) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	path := d.prefix + name
	for c := 0; c < d.t.Catalog.NumStrata(); c++ {
		sn := d.t.Catalog.StratumName(c)
		switch {
		case sn == path:
			cd, err := d.t.class(ctx, c)
			if err != nil {
				return nil, d.t.toErrno(err)
			}
			d.t.setAttr(&out.Attr, dirMode, 0)
			return d.NewInode(ctx, &sampleDir{dir: dir{t: d.t}, class: cd, stratum: c, prefix: "", entries: cd.entries},
				gofs.StableAttr{Mode: fuse.S_IFDIR, Ino: ino("samples/" + path)}), 0
		case strings.HasPrefix(sn, path+"/"):
			d.t.setAttr(&out.Attr, dirMode, 0)
			return d.NewInode(ctx, &samplesRoot{dir: dir{t: d.t}, prefix: path + "/"},
				gofs.StableAttr{Mode: fuse.S_IFDIR, Ino: ino("samples/" + path)}), 0
		}
	}
	return nil, syscall.ENOENT
}

// sampleDir is a directory below samples/<stratum>: the sorted entries
// whose relative path starts with prefix.
type sampleDir struct {
	dir
	class   *classDir // holds the rows of entries
	stratum int
	prefix  string // "" or "a/b/"
	entries layout.Positions
}

var (
	_ = (gofs.NodeLookuper)((*sampleDir)(nil))
	_ = (gofs.NodeReaddirer)((*sampleDir)(nil))
)

func (d *sampleDir) rel(i int) string {
	return string(relPath(d.class.cat.KeyBytes(int(d.entries.At(i))), []byte(d.t.Catalog.StratumName(d.stratum)+"/")))
}

func (d *sampleDir) dirPath() string {
	return "samples/" + d.t.Catalog.StratumName(d.stratum) + "/" + d.prefix
}

func (d *sampleDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	var es []fuse.DirEntry
	last := ""
	var members []layout.Member
	for i := range d.entries.Len() {
		rest := strings.TrimPrefix(d.rel(i), d.prefix)
		name, _, isDir := strings.Cut(rest, "/")
		if name == last {
			continue
		}
		last = name
		mode := uint32(fuse.S_IFREG)
		if isDir {
			mode = fuse.S_IFDIR
		} else if rc, ok := d.class.cat.(layout.RecordCatalog); ok {
			// A record: one file per member, <key>.<member>.
			members = rc.Record(members[:0], int(d.entries.At(i)))
			for _, m := range members {
				es = append(es, fuse.DirEntry{Name: name + "." + m.Name, Mode: mode, Ino: ino(d.dirPath() + name + "." + m.Name)})
			}
			continue
		}
		es = append(es, fuse.DirEntry{Name: name, Mode: mode, Ino: ino(d.dirPath() + name)})
	}
	return gofs.NewListDirStream(es), 0
}

func (d *sampleDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if rc, ok := d.class.cat.(layout.RecordCatalog); ok {
		if key, member, ok := strings.Cut(name, "."); ok {
			if n, errno := d.lookupMember(ctx, rc, key, member, out); errno != syscall.ENOENT {
				return n, errno
			}
		}
	}
	target := d.prefix + name
	lo := sort.Search(d.entries.Len(), func(i int) bool { return d.rel(i) >= target })
	if lo == d.entries.Len() {
		return nil, syscall.ENOENT
	}
	if d.rel(lo) == target {
		s := int(d.entries.At(lo))
		d.t.setAttr(&out.Attr, fileMode, d.class.cat.Size(s))
		return d.NewInode(ctx, &sampleFile{t: d.t, cat: d.class.cat, sample: s}, gofs.StableAttr{Mode: fuse.S_IFREG, Ino: ino(d.dirPath() + name)}), 0
	}
	sub := target + "/"
	if !strings.HasPrefix(d.rel(lo), sub) {
		return nil, syscall.ENOENT
	}
	hi := lo + sort.Search(d.entries.Len()-lo, func(i int) bool { return !strings.HasPrefix(d.rel(lo+i), sub) })
	d.t.setAttr(&out.Attr, dirMode, 0)
	return d.NewInode(ctx, &sampleDir{dir: dir{t: d.t}, class: d.class, stratum: d.stratum, prefix: sub, entries: d.entries.Slice(lo, hi)},
		gofs.StableAttr{Mode: fuse.S_IFDIR, Ino: ino(d.dirPath() + name)}), 0
}

// lookupMember finds <key>.<member>, a member of a record below d.
func (d *sampleDir) lookupMember(ctx context.Context, rc layout.RecordCatalog, key, member string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	target := d.prefix + key
	i := sort.Search(d.entries.Len(), func(i int) bool { return d.rel(i) >= target })
	if i == d.entries.Len() || d.rel(i) != target {
		return nil, syscall.ENOENT
	}
	s := int(d.entries.At(i))
	var off int64
	for _, m := range rc.Record(nil, s) {
		if m.Name == member {
			d.t.setAttr(&out.Attr, fileMode, m.Size)
			f := &sampleFile{t: d.t, cat: d.class.cat, sample: s, off: off, size: m.Size, member: true}
			return d.NewInode(ctx, f, gofs.StableAttr{Mode: fuse.S_IFREG, Ino: ino(d.dirPath() + key + "." + member)}), 0
		}
		off += m.Size
	}
	return nil, syscall.ENOENT
}

type sampleFile struct {
	gofs.Inode
	t      *tree
	cat    Catalog // holds the sample's row
	sample int
	// A record's member: its place in the record's bytes; size 0 and off 0
	// with member false: the whole sample.
	off, size int64
	member    bool
}

var (
	_ = (gofs.NodeOpener)((*sampleFile)(nil))
	_ = (gofs.NodeReader)((*sampleFile)(nil))
	_ = (gofs.NodeGetattrer)((*sampleFile)(nil))
	_ = (gofs.NodeGetxattrer)((*sampleFile)(nil))
	_ = (gofs.NodeListxattrer)((*sampleFile)(nil))
)

// fieldXattr prefixes a field's name to form its extended attribute.
const fieldXattr = "user.shardfs."

// fields returns the sample's listing fields, names and values.
func (f *sampleFile) fields() (names, values []string) {
	fc, ok := f.cat.(layout.FieldCatalog)
	if !ok || len(fc.FieldNames()) == 0 {
		return nil, nil
	}
	return fc.FieldNames(), fc.Fields(f.sample)
}

// Getxattr serves a listing field as user.shardfs.<field>.
func (f *sampleFile) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	names, values := f.fields()
	i := slices.Index(names, strings.TrimPrefix(attr, fieldXattr))
	if i < 0 || !strings.HasPrefix(attr, fieldXattr) || i >= len(values) {
		return 0, syscall.ENODATA
	}
	if len(dest) < len(values[i]) {
		return uint32(len(values[i])), syscall.ERANGE
	}
	return uint32(copy(dest, values[i])), 0
}

// Listxattr lists user.shardfs.<field> for every field.
func (f *sampleFile) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	names, _ := f.fields()
	var b []byte
	for _, n := range names {
		b = append(append(b, fieldXattr+n...), 0)
	}
	if len(dest) < len(b) {
		return uint32(len(b)), syscall.ERANGE
	}
	return uint32(copy(dest, b)), 0
}

// length is the file's size: the member's, or the sample's.
func (f *sampleFile) length() int64 {
	if f.member {
		return f.size
	}
	return f.cat.Size(f.sample)
}

func (f *sampleFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	f.t.setAttr(&out.Attr, fileMode, f.length())
	return 0
}

func (f *sampleFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR) != 0 {
		return nil, 0, syscall.EROFS
	}
	return nil, fuse.FOPEN_KEEP_CACHE, 0
}

func (f *sampleFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if f.member {
		if off >= f.size {
			return fuse.ReadResultData(nil), 0
		}
		dest = dest[:min(int64(len(dest)), f.size-off)]
		off += f.off
	}
	n, err := f.t.Reader.ReadSample(ctx, f.sample, dest, off)
	if err != nil && err != io.EOF {
		return nil, f.t.toErrno(fmt.Errorf("sample %q at %d: %w", f.cat.Key(f.sample), off, err))
	}
	return fuse.ReadResultData(dest[:n]), 0
}
