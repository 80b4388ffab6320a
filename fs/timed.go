package fs

import (
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// timedFS times the FUSE operations a training job's readers and tools
// send (the rest pass through untimed): the daemon's share of each op's
// latency, by op, where a slow one shows which part of the tree it is.
type timedFS struct {
	fuse.RawFileSystem
	lookup, getattr, open, read, release, opendir, readdir, readdirplus, releasedir, getxattr, listxattr, statfs func(time.Duration)
}

// timedOps are the ops timedFS times, as the op label names them.
var timedOps = []string{"lookup", "getattr", "open", "read", "release", "opendir", "readdir", "readdirplus", "releasedir", "getxattr", "listxattr", "statfs"}

func newTimedFS(raw fuse.RawFileSystem, observer func(op string) func(time.Duration)) *timedFS {
	t := &timedFS{RawFileSystem: raw}
	for op, f := range map[string]*func(time.Duration){"lookup": &t.lookup, "getattr": &t.getattr, "open": &t.open, "read": &t.read,
		"release": &t.release, "opendir": &t.opendir, "readdir": &t.readdir, "readdirplus": &t.readdirplus, "releasedir": &t.releasedir,
		"getxattr": &t.getxattr, "listxattr": &t.listxattr, "statfs": &t.statfs} {
		*f = observer(op)
	}
	return t
}

func since(obs func(time.Duration), start time.Time) { obs(time.Since(start)) }

func (t *timedFS) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	defer since(t.lookup, time.Now())
	return t.RawFileSystem.Lookup(cancel, h, name, out)
}

func (t *timedFS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer since(t.getattr, time.Now())
	return t.RawFileSystem.GetAttr(cancel, in, out)
}

func (t *timedFS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer since(t.open, time.Now())
	return t.RawFileSystem.Open(cancel, in, out)
}

func (t *timedFS) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	defer since(t.read, time.Now())
	return t.RawFileSystem.Read(cancel, in, buf)
}

func (t *timedFS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	defer since(t.release, time.Now())
	t.RawFileSystem.Release(cancel, in)
}

func (t *timedFS) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer since(t.opendir, time.Now())
	return t.RawFileSystem.OpenDir(cancel, in, out)
}

func (t *timedFS) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer since(t.readdir, time.Now())
	return t.RawFileSystem.ReadDir(cancel, in, out)
}

func (t *timedFS) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer since(t.readdirplus, time.Now())
	return t.RawFileSystem.ReadDirPlus(cancel, in, out)
}

func (t *timedFS) ReleaseDir(in *fuse.ReleaseIn) {
	defer since(t.releasedir, time.Now())
	t.RawFileSystem.ReleaseDir(in)
}

func (t *timedFS) GetXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	defer since(t.getxattr, time.Now())
	return t.RawFileSystem.GetXAttr(cancel, h, attr, dest)
}

func (t *timedFS) ListXAttr(cancel <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	defer since(t.listxattr, time.Now())
	return t.RawFileSystem.ListXAttr(cancel, h, dest)
}

func (t *timedFS) StatFs(cancel <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	defer since(t.statfs, time.Now())
	return t.RawFileSystem.StatFs(cancel, h, out)
}
