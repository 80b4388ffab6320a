package backend

import (
	"errors"
	"fmt"
	"io"
)

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
