package fs

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"testing"
)

// Issue 9 item 19: one failing cause logs once, not once per read offset.
func TestToErrnoLogsOncePerCause(t *testing.T) {
	var buf bytes.Buffer
	root := NewRoot(Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))}).(*rootDir)
	cause := errors.New("shard 3: too few intact fragments to decode: stores 1, 2, 4 unavailable")
	for off := 0; off < 100; off++ {
		err := fmt.Errorf("batch-%06d.tar at %d: %w", off%7, off<<20, cause)
		if got := root.t.toErrno(err); got != syscall.EIO {
			t.Fatalf("toErrno = %v, want EIO", got)
		}
	}
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("100 reads failing for one cause logged %d lines, want 1:\n%s", n, buf.String())
	}
	other := errors.New("shard 9: checksum mismatch")
	root.t.toErrno(fmt.Errorf("batch-000001.tar at 0: %w", other))
	if n := strings.Count(buf.String(), "\n"); n != 2 {
		t.Fatalf("a second cause must be logged too: %d lines:\n%s", n, buf.String())
	}
}
