package ingest

import (
	"fmt"
	"os"
	"syscall"

	"github.com/shardfs/shardfs/backend"
)

// oneVersion is a local source file (a tar shard, a JSONL corpus, a
// Parquet file) read as the version its open found. A file is read by
// many reads: a shard in pieces, a corpus a buffer at a time, the windows
// again later. Rewritten in place between two of them, it was read as a
// mix of two versions, and the record at the change as bytes neither
// version holds, checksummed as read and committed. Each read is now
// followed by an fstat: a file whose size, mtime or ctime moved since its
// open fails the read with backend.ErrChanged, so nothing read after the
// change is used. A file replaced by a rename is not seen: the open file
// is still the old one, whole.
type oneVersion struct {
	*os.File
	at fileState
}

// fileState is what a write to a file moves.
type fileState struct {
	dev, ino     uint64
	size         int64
	mtime, ctime syscall.Timespec
}

func stateOf(f *os.File) (fileState, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return fileState{}, fmt.Errorf("%s: %w", f.Name(), err)
	}
	return fileState{uint64(st.Dev), st.Ino, st.Size, st.Mtim, st.Ctim}, nil
}

// openOneVersion opens name to be read as one version.
func openOneVersion(name string) (*oneVersion, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	at, err := stateOf(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &oneVersion{File: f, at: at}, nil
}

func (f *oneVersion) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	if cerr := f.unchanged(); cerr != nil {
		return 0, cerr
	}
	return n, err
}

// unchanged is nil while the file is the version its open found.
func (f *oneVersion) unchanged() error {
	now, err := stateOf(f.File)
	if err != nil {
		return err
	}
	if now != f.at {
		return changedFileError{fmt.Errorf("%s: %w (written after the ingest opened it: %s); %s", f.Name(), backend.ErrChanged, f.at.moved(now), rerunUnchanged)}
	}
	return nil
}

// changedFileError is backend.ErrChanged of a local file, named.
type changedFileError struct{ error }

func (e changedFileError) Unwrap() error { return e.error }

// moved says what moved from s to now.
func (s fileState) moved(now fileState) string {
	switch {
	case s.dev != now.dev || s.ino != now.ino:
		return "another file"
	case s.size != now.size:
		return fmt.Sprintf("%d bytes, then %d", s.size, now.size)
	case s.mtime != now.mtime:
		return "its mtime moved"
	}
	return "its ctime moved"
}

// rerunUnchanged is what to do about a source that changed while it was
// read (nothing of the ingest is committed): the words the refusal of a
// record whose checksum moved since the scan uses too.
const rerunUnchanged = "the source changed since the scan read it: rerun the ingest once nothing writes to the source"
