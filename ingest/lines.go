package ingest

import (
	"bytes"
	"fmt"
	"io"
)

// lineBound reads r, failing with a *LineTooLongError as soon as a line
// (the bytes between two newlines) passes max bytes: whatever reads lines
// above it (bufio's ReadBytes, csv.Reader) then never holds more of one
// line than max, however long the line in the file is. A 1 GiB JSONL line
// was read whole, and decoded, before --max-record-size refused it: 5.2 GB
// of RSS (issue 55 item 5).
type lineBound struct {
	r    io.Reader
	max  int64
	run  int64 // bytes of the current line read so far
	line int   // the current line's number, from 1
	at   int64 // the current line's offset in r
	err  error // the line too long, once found: every later read returns it
}

func newLineBound(r io.Reader, max int64) *lineBound {
	return &lineBound{r: r, max: max, line: 1}
}

// LineTooLongError is a line longer than a reader allows.
type LineTooLongError struct {
	Line int
	At   int64 // the line's offset in what was read
	Max  int64
}

func (e *LineTooLongError) Error() string {
	return fmt.Sprintf("line %d is longer than %d bytes", e.Line, e.Max)
}

func (l *lineBound) Read(p []byte) (int, error) {
	if l.err != nil {
		return 0, l.err
	}
	n, err := l.r.Read(p)
	rest := p[:n]
	for {
		nl := bytes.IndexByte(rest, '\n')
		seg := nl
		if nl < 0 {
			seg = len(rest)
		}
		if l.run+int64(seg) > l.max {
			// Nothing of this read is given: the caller stops at the
			// error, and the line it names is the long one.
			l.err = &LineTooLongError{Line: l.line, At: l.at, Max: l.max}
			return 0, l.err
		}
		if nl < 0 {
			l.run += int64(len(rest))
			return n, err
		}
		l.at += l.run + int64(nl) + 1
		l.run = 0
		l.line++
		rest = rest[nl+1:]
	}
}
