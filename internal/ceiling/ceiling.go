// Package ceiling is the FUSE ceiling of the benchmarks: one file served by
// go-fuse with shardfs's node settings, doing the least a daemon can do for
// a read. From memory, it copies; from a file, it reads the file into the
// kernel's buffer and checksums it there, the disk tier's least work. Only
// the test build of the shardfs binary (build tag shardfs_testhooks) mounts
// it.
package ceiling

import (
	"context"
	"os"
	"sync/atomic"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/shardfs/shardfs/verify"
)

const fileMode = fuse.S_IFREG | 0o444

// Options choose what the ceiling's one file costs the daemon.
type Options struct {
	// DirectIO opens the file FOPEN_DIRECT_IO, as shardfs mount
	// --direct-io does, so every read reaches the daemon.
	DirectIO bool
	// From, when set, is a file whose bytes are served instead of memory:
	// each read is one pread into the kernel's buffer, then CRC32C over it.
	From *os.File
}

// NewRoot is the FUSE ceiling for benchmarks: a root holding one file
// "data" of size bytes, served with the same node settings (KEEP_CACHE,
// attributes, read path shape) as the real tree, so a run of both under
// Mount measures what the kernel and go-fuse cost by themselves.
func NewRoot(size int64, o Options) gofs.InodeEmbedder {
	f := &ceilingFile{size: size, o: o}
	if o.From == nil {
		f.data = make([]byte, size)
		for i := range f.data {
			f.data[i] = byte(i * 7)
		}
	}
	return &ceilingRoot{file: f}
}

type ceilingRoot struct {
	gofs.Inode
	file *ceilingFile
}

var _ = (gofs.NodeOnAdder)((*ceilingRoot)(nil))

func (r *ceilingRoot) OnAdd(ctx context.Context) {
	r.AddChild("data", r.NewPersistentInode(ctx, r.file, gofs.StableAttr{Mode: fuse.S_IFREG, Ino: 2}), false)
}

type ceilingFile struct {
	gofs.Inode
	size int64
	data []byte
	o    Options
	// sums keeps the checksums computed, so that the compiler cannot drop them.
	sums atomic.Uint32
}

var (
	_ = (gofs.NodeOpener)((*ceilingFile)(nil))
	_ = (gofs.NodeReader)((*ceilingFile)(nil))
	_ = (gofs.NodeGetattrer)((*ceilingFile)(nil))
)

func (f *ceilingFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = fileMode
	out.Size = uint64(f.size)
	out.Blksize = 1 << 20
	return 0
}

func (f *ceilingFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if f.o.DirectIO {
		return nil, fuse.FOPEN_DIRECT_IO, 0
	}
	return nil, fuse.FOPEN_KEEP_CACHE, 0
}

func (f *ceilingFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= f.size {
		return fuse.ReadResultData(nil), 0
	}
	end := min(f.size, off+int64(len(dest)))
	if f.o.From == nil {
		n := copy(dest, f.data[off:end])
		return fuse.ReadResultData(dest[:n]), 0
	}
	n, err := f.o.From.ReadAt(dest[:end-off], off)
	if n < int(end-off) {
		return nil, gofs.ToErrno(err)
	}
	f.sums.Add(verify.Sum(dest[:n]))
	return fuse.ReadResultData(dest[:n]), 0
}
