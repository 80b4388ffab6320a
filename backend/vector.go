package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// VectorReader is a Store that reads a range straight into several buffers:
// the bytes of key from off fill bufs[0], then bufs[1], and so on, so a
// coalesced GET lands in the buffers its callers keep, with no copy.
type VectorReader interface {
	ReadAtV(ctx context.Context, key string, bufs [][]byte, off int64) error
}

// ReadAtV fills bufs, in turn, with the bytes of key from off: with the
// store's own ReadAtV where it has one, else with one ReadAt and a copy.
// Errors are those of ReadAt.
func ReadAtV(ctx context.Context, s Store, key string, bufs [][]byte, off int64) error {
	if len(bufs) == 1 {
		return s.ReadAt(ctx, key, bufs[0], off)
	}
	if v, ok := s.(VectorReader); ok {
		return v.ReadAtV(ctx, key, bufs, off)
	}
	p := make([]byte, VecLen(bufs))
	if err := s.ReadAt(ctx, key, p, off); err != nil {
		return err
	}
	Scatter(p, bufs)
	return nil
}

// Scatter copies p into bufs in turn.
func Scatter(p []byte, bufs [][]byte) {
	for _, b := range bufs {
		p = p[copy(b, p):]
	}
}

// VecLen is the bytes bufs hold together.
func VecLen(bufs [][]byte) int {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	return n
}

// readFullV reads r to fill bufs in turn. It returns how many bytes it read
// and io.ErrUnexpectedEOF (or io.EOF when nothing came) if r ended first.
func readFullV(r io.Reader, bufs [][]byte) (int, error) {
	total := 0
	for _, b := range bufs {
		n, err := io.ReadFull(r, b)
		total += n
		if err != nil {
			if errors.Is(err, io.EOF) && total > 0 {
				err = io.ErrUnexpectedEOF
			}
			return total, err
		}
	}
	return total, nil
}

func shortRead(n, want int, off int64) error {
	return fmt.Errorf("%w: got %d of %d bytes at offset %d", ErrShortRead, n, want, off)
}
