package fs

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// countedStream lists n entries, each made when the kernel asks for it, so
// a listing costs the daemon the same memory however long it is (an epoch
// of batch size 1 lists a million batches).
type countedStream struct {
	next, n int
	entry   func(i int) fuse.DirEntry
}

var (
	_ = (gofs.DirStream)((*countedStream)(nil))
	_ = (gofs.FileSeekdirer)((*countedStream)(nil))
)

func (s *countedStream) HasNext() bool { return s.next < s.n }

func (s *countedStream) Next() (fuse.DirEntry, syscall.Errno) {
	e := s.entry(s.next)
	s.next++
	e.Off = uint64(s.next)
	return e, 0
}

// Seekdir goes back to entry off, as a telldir/seekdir pair or a listing
// resumed after a short getdents buffer asks.
func (s *countedStream) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if off > uint64(s.n) {
		return syscall.EINVAL
	}
	s.next = int(off)
	return 0
}

func (s *countedStream) Close() {}
