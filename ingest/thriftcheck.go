package ingest

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// checkThriftLengths walks a Thrift compact-protocol struct (a Parquet
// footer, FileMetaData) without decoding it, and checks every length it
// states against the bytes left: a list, set or map of n elements needs
// at least n bytes (2n for a map), a string or binary of n bytes needs n.
// The Parquet reader allocates what those lengths claim before it reads
// the elements: a 48-byte file whose footer claimed a list of 2³¹−1
// structs ended ingest with "fatal error: runtime: out of memory" (issue
// 55 item 6). After this check, what the reader allocates is bounded by
// the footer's size, itself bounded by the file's (checkFooter).
func checkThriftLengths(b []byte) error {
	w := thriftWalker{b: b}
	if err := w.value(thriftStruct, 0); err != nil {
		return fmt.Errorf("the footer (%d bytes) at byte %d: %w", len(b), w.at, err)
	}
	return nil
}

// Compact-protocol types.
const (
	thriftTrue   = 1
	thriftFalse  = 2
	thriftByte   = 3
	thriftI16    = 4
	thriftI32    = 5
	thriftI64    = 6
	thriftDouble = 7
	thriftBinary = 8
	thriftList   = 9
	thriftSet    = 10
	thriftMap    = 11
	thriftStruct = 12
)

// maxThriftDepth bounds nesting (Parquet's metadata nests a few levels).
const maxThriftDepth = 64

type thriftWalker struct {
	b  []byte
	at int
}

var errThriftShort = errors.New("cut short")

func (w *thriftWalker) left() int { return len(w.b) - w.at }

func (w *thriftWalker) byte1() (byte, error) {
	if w.at >= len(w.b) {
		return 0, errThriftShort
	}
	c := w.b[w.at]
	w.at++
	return c, nil
}

func (w *thriftWalker) varint() (uint64, error) {
	v, n := binary.Uvarint(w.b[w.at:])
	if n <= 0 {
		return 0, errors.New("a bad variable-length integer")
	}
	w.at += n
	return v, nil
}

// count reads a length and checks that n elements of at least per bytes
// each fit in what is left.
func (w *thriftWalker) count(what string, n uint64, per int) (int, error) {
	if n > uint64(w.left()/per) {
		return 0, fmt.Errorf("a %s of %d elements, in the %d bytes left", what, n, w.left())
	}
	return int(n), nil
}

func (w *thriftWalker) value(typ byte, depth int) error {
	if depth > maxThriftDepth {
		return fmt.Errorf("nested more than %d deep", maxThriftDepth)
	}
	switch typ {
	case thriftTrue, thriftFalse:
		return nil // a field's boolean is in its header (a list's: walked as a byte)
	case thriftByte:
		_, err := w.byte1()
		return err
	case thriftI16, thriftI32, thriftI64:
		_, err := w.varint()
		return err
	case thriftDouble:
		if w.left() < 8 {
			return errThriftShort
		}
		w.at += 8
		return nil
	case thriftBinary:
		n, err := w.varint()
		if err != nil {
			return err
		}
		if n > uint64(w.left()) {
			return fmt.Errorf("a string of %d bytes, in the %d bytes left", n, w.left())
		}
		w.at += int(n)
		return nil
	case thriftList, thriftSet:
		h, err := w.byte1()
		if err != nil {
			return err
		}
		n, elem := uint64(h>>4), h&0x0f
		if n == 15 {
			if n, err = w.varint(); err != nil {
				return err
			}
		}
		k, err := w.count("list", n, 1)
		if err != nil {
			return err
		}
		if elem == thriftTrue || elem == thriftFalse {
			elem = thriftByte // a list's booleans take a byte each
		}
		for range k {
			if err := w.value(elem, depth+1); err != nil {
				return err
			}
		}
		return nil
	case thriftMap:
		n, err := w.varint()
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		k, err := w.count("map", n, 2)
		if err != nil {
			return err
		}
		kv, err := w.byte1()
		if err != nil {
			return err
		}
		kt, vt := kv>>4, kv&0x0f
		for _, t := range []*byte{&kt, &vt} {
			if *t == thriftTrue || *t == thriftFalse {
				*t = thriftByte
			}
		}
		for range k {
			if err := w.value(kt, depth+1); err != nil {
				return err
			}
			if err := w.value(vt, depth+1); err != nil {
				return err
			}
		}
		return nil
	case thriftStruct:
		for {
			h, err := w.byte1()
			if err != nil {
				return err
			}
			if h == 0 {
				return nil // stop
			}
			if h>>4 == 0 { // a field id that is not a small delta follows
				if _, err := w.varint(); err != nil {
					return err
				}
			}
			if err := w.value(h&0x0f, depth+1); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("an unknown type %d", typ)
	}
}
