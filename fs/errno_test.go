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
	// Shards failing on the same stores are one cause, whatever the shard.
	for shard := 0; shard < 50; shard++ {
		root.t.toErrno(fmt.Errorf("epoch.tar at %d: %w", shard, &lostOn{shard: shard, stores: []int{1, 2, 4}}))
	}
	if n := strings.Count(buf.String(), "\n"); n != 2 {
		t.Fatalf("50 shards lost on the same stores logged %d more lines, want 1:\n%s", n-1, buf.String())
	}
	other := errors.New("shard 9: checksum mismatch")
	root.t.toErrno(fmt.Errorf("batch-000001.tar at 0: %w", other))
	if n := strings.Count(buf.String(), "\n"); n != 3 {
		t.Fatalf("a third cause must be logged too: %d lines:\n%s", n, buf.String())
	}
}

// lostOn is shaped like erasure.TooFewError: a shard lost on some stores.
type lostOn struct {
	shard  int
	stores []int
}

func (e *lostOn) Error() string {
	return fmt.Sprintf("shard %d: too few intact fragments: stores %v", e.shard, e.stores)
}
func (e *lostOn) Stores() []int { return e.stores }
