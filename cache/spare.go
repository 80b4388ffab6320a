package cache

import "math/bits"

// sizeClass is the capacity a chunk buffer of n bytes is made with: n
// rounded up to a sixteenth of its power of two (at most 1/16 more), so
// that the buffers of evicted chunks fit the next chunks of about their
// size.
func sizeClass(n int) int {
	if n <= 64 {
		return max(n, 0)
	}
	step := 1 << (bits.Len(uint(n)) - 5)
	return (n + step - 1) / step * step
}

// spares keeps evicted chunks' buffers by capacity, for reuse. Not safe
// for concurrent use: the cache guards it.
type spares struct {
	byCap map[int][][]byte
	bytes int64
}

func (s *spares) put(b []byte) {
	if s.byCap == nil {
		s.byCap = map[int][][]byte{}
	}
	s.byCap[cap(b)] = append(s.byCap[cap(b)], b[:0])
	s.bytes += int64(cap(b))
}

// takeClasses is how many size classes from n's up a spare buffer for n
// is looked for in: at most about a fifth more than n.
const takeClasses = 4

// take returns a spare buffer of n bytes, of n's size class or one of the
// next few, or nil.
func (s *spares) take(n int) []byte {
	c := sizeClass(n)
	for range takeClasses {
		if l := s.byCap[c]; len(l) > 0 {
			b := l[len(l)-1]
			l[len(l)-1] = nil
			s.byCap[c] = l[:len(l)-1]
			s.bytes -= int64(c)
			return b[:n]
		}
		c = sizeClass(c + 1)
	}
	return nil
}

// trim drops spare buffers until they take at most limit bytes.
func (s *spares) trim(limit int64) {
	for c, l := range s.byCap {
		for len(l) > 0 && s.bytes > max(limit, 0) {
			l[len(l)-1] = nil
			l = l[:len(l)-1]
			s.bytes -= int64(c)
		}
		s.byCap[c] = l
		if s.bytes <= max(limit, 0) {
			return
		}
	}
}
