package fs

import (
	"context"
	"slices"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/shardfs/shardfs/layout"
)

// epochsDir is epochs/: one directory per epoch, to --epochs or open-ended.
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
		name := layout.EpochName(e)
		return fuse.DirEntry{Name: name, Mode: fuse.S_IFDIR, Ino: ino("epochs/" + name)}
	}}, 0
}

func (d *epochsDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	e, ok := layout.ParseEpochName(name)
	if !ok || d.t.Epochs > 0 && e >= d.t.Epochs {
		return nil, syscall.ENOENT
	}
	for cur := d.t.maxEpoch.Load(); int64(e) > cur && !d.t.maxEpoch.CompareAndSwap(cur, int64(e)); cur = d.t.maxEpoch.Load() {
	}
	t, err := d.t.forEpoch(e)
	if err != nil {
		return nil, d.t.toErrno(err)
	}
	d.t.setAttr(&out.Attr, dirMode, 0)
	return d.NewInode(ctx, &epochDir{dir: dir{t: t}, epoch: e}, gofs.StableAttr{Mode: fuse.S_IFDIR, Ino: ino("epochs/" + name)}), 0
}

// epochDir is epochs/<EEEE>/: one directory per rank shown.
type epochDir struct {
	dir
	epoch int
}

var (
	_ = (gofs.NodeLookuper)((*epochDir)(nil))
	_ = (gofs.NodeReaddirer)((*epochDir)(nil))
)

func (d *epochDir) path(rank int) string {
	return "epochs/" + layout.EpochName(d.epoch) + "/" + layout.RankName(rank)
}

func (d *epochDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	var es []fuse.DirEntry
	for _, r := range d.t.Ranks {
		es = append(es, fuse.DirEntry{Name: layout.RankName(r), Mode: fuse.S_IFDIR, Ino: ino(d.path(r))})
	}
	return gofs.NewListDirStream(es), 0
}

func (d *epochDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	r, ok := layout.ParseRankName(name)
	if !ok || !slices.Contains(d.t.Ranks, r) {
		return nil, syscall.ENOENT
	}
	p, err := d.t.rankParams(d.epoch, r)
	if err != nil {
		return nil, d.t.toErrno(err)
	}
	d.t.setAttr(&out.Attr, dirMode, 0)
	return d.NewInode(ctx, &rankDir{dir: dir{t: d.t}, params: p, path: d.path(r)}, gofs.StableAttr{Mode: fuse.S_IFDIR, Ino: ino(d.path(r))}), 0
}

// rankParams is the order of rank r's epoch e.
func (t *tree) rankParams(e, r int) (layout.Params, error) {
	if t.ParamsAt != nil {
		return t.ParamsAt(e, r)
	}
	p := t.Order
	p.Epoch, p.Rank = e, r
	return p, nil
}
