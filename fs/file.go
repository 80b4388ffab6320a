package fs

import (
	"context"
	"fmt"
	"io"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/prefetch"
)

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
	if f.directIO() {
		return f.t.Reader.Open(f.fm), fuse.FOPEN_DIRECT_IO, 0
	}
	return f.t.Reader.Open(f.fm), fuse.FOPEN_KEEP_CACHE, 0
}

// directIO is whether f is opened past the page cache.
func (f *virtFile) directIO() bool { return f.t.DirectIO || f.fm.Members().HasLost() }

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
		// Past the page cache, a short read reaches the reader as it is,
		// and its next read, at the failure, gets the error: the file
		// reads up to its first lost member or row, as docs/tutorial.md says (health and repair).
		// Through the page cache a short read would be taken for the end
		// of the file, so there the read fails whole.
		if n > 0 && f.directIO() {
			return fuse.ReadResultData(dest[:n]), 0
		}
		return nil, f.t.toErrno(fmt.Errorf("%s at %d: %w", f.fm.Name(), off, err))
	}
	return fuse.ReadResultData(dest[:n]), 0
}
