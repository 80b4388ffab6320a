package fs

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/prefetch"
)

// TreeCatalog is what the tree needs to know about samples.
type TreeCatalog interface {
	layout.SampleCatalog
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
	Pin(ctx context.Context, samples layout.Positions) (TreeCatalog, layout.Positions, error)
	// PinStratum fetches the rows of stratum c's samples, and lists them.
	PinStratum(ctx context.Context, c int) (TreeCatalog, layout.Positions, error)
}

// pinTimeout bounds fetching the rows of one rank-epoch or directory: one
// index per shard, many in parallel.
const pinTimeout = 10 * time.Minute

// Options describe the tree.
type Options struct {
	Catalog TreeCatalog
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
	// SourceAt, if set, gives the read path an epoch is served from (mount
	// --follow: each epoch from its own dataset version); a nil Source
	// means the tree's own. It may wait, and is asked once per epoch.
	SourceAt func(epoch int) (*Source, error)
}

// Source is the read path of the epochs one dataset version serves: what
// Options holds for the tree's own.
type Source struct {
	Catalog TreeCatalog
	Pinner  Pinner
	Input   *layout.Input
	Reader  *prefetch.Reader
	// ParamsAt, if set, replaces the tree's: the order's parameters bound
	// to this version (time weights over its own time buckets).
	ParamsAt func(epoch, rank int) (layout.Params, error)
}

// tree is shared by every node.
type tree struct {
	Options
	log *slog.Logger

	samplesOnce sync.Once
	byStratum   []layout.Positions // per stratum, sample indexes sorted by path below the stratum dir

	pinMu  sync.Mutex      // guards pinned, ahead, primed
	pinned []weakPinnedDir // with a Pinner: per stratum, its sorted samples while a directory uses them
	ahead  map[[2]int]*aheadPin
	primed map[[2]int]*primedRank // Prime's member tables, until their directory's lookup takes them

	errMu  sync.Mutex // guards causes
	causes map[string]*causeLog

	maxEpoch atomic.Int64 // highest epoch opened, for the open-ended listing

	srcMu    sync.Mutex // guards bySource
	bySource map[*Source]*tree
}

// forEpoch is the tree epoch e's directories are served by: t itself, or
// one over the Source SourceAt gives (one tree per Source, sharing t's
// settings).
func (t *tree) forEpoch(e int) (*tree, error) {
	if t.SourceAt == nil {
		return t, nil
	}
	src, err := t.SourceAt(e)
	if err != nil || src == nil {
		return t, err
	}
	t.srcMu.Lock()
	defer t.srcMu.Unlock()
	if u := t.bySource[src]; u != nil {
		return u, nil
	}
	o := t.Options
	o.Catalog, o.Pinner, o.Input, o.Reader, o.SourceAt = src.Catalog, src.Pinner, src.Input, src.Reader, nil
	if src.ParamsAt != nil {
		o.ParamsAt = src.ParamsAt
	}
	u := &tree{Options: o, log: t.log, causes: map[string]*causeLog{}}
	if t.bySource == nil {
		t.bySource = map[*Source]*tree{}
	}
	t.bySource[src] = u
	return u, nil
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
