// Package ceiling is the FUSE ceiling of the benchmarks: one in-memory
// file served by go-fuse with shardfs's node settings. Only the test build
// of the shardfs binary (build tag shardfs_testhooks) mounts it.
package ceiling

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

const fileMode = fuse.S_IFREG | 0o444

// NewRoot is the FUSE ceiling for benchmarks: a root holding one
// in-memory file "data" of size bytes, served with the same node settings
// (KEEP_CACHE, attributes, read path shape) as the real tree, so a run of
// both under Mount measures what the kernel and go-fuse cost by themselves.
func NewRoot(size int64) gofs.InodeEmbedder {
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7)
	}
	return &ceilingRoot{data: data}
}

type ceilingRoot struct {
	gofs.Inode
	data []byte
}

var _ = (gofs.NodeOnAdder)((*ceilingRoot)(nil))

func (r *ceilingRoot) OnAdd(ctx context.Context) {
	r.AddChild("data", r.NewPersistentInode(ctx, &ceilingFile{data: r.data}, gofs.StableAttr{Mode: fuse.S_IFREG, Ino: 2}), false)
}

type ceilingFile struct {
	gofs.Inode
	data []byte
}

var (
	_ = (gofs.NodeOpener)((*ceilingFile)(nil))
	_ = (gofs.NodeReader)((*ceilingFile)(nil))
	_ = (gofs.NodeGetattrer)((*ceilingFile)(nil))
)

func (f *ceilingFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = fileMode
	out.Size = uint64(len(f.data))
	out.Blksize = 1 << 20
	return 0
}

func (f *ceilingFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	return nil, fuse.FOPEN_KEEP_CACHE, 0
}

func (f *ceilingFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= int64(len(f.data)) {
		return fuse.ReadResultData(nil), 0
	}
	end := min(int64(len(f.data)), off+int64(len(dest)))
	n := copy(dest, f.data[off:end])
	return fuse.ReadResultData(dest[:n]), 0
}
