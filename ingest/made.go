package ingest

// madeRecords are a streamed JSONL corpus's records' bytes as its scan
// made them (their members back to back), by their line's offset, from
// the scan to the upload: the upload copies them instead of reading the
// line again and decoding it a second time, which was 40% of the CPU of
// an ingest of 1,000,000 short documents.
//
// The bytes lie in blocks of madeBlock bytes (a longer record in one of
// its own), and each record's place is one pointer-free word: a record per
// allocation, and a slice per map entry, cost 28 MB more peak RSS on those
// documents, and the collector a pointer per record to follow.
type madeRecords struct {
	at     map[int64]uint64 // line offset -> block<<40 | offset<<20 | size-1
	blocks [][]byte
}

// madeBlock is the size of a block of records' bytes; a longer record
// has a block of its own. Blocks of madeRecord, 1 MiB, left up to 1 MiB
// unused at the end of a chunk's records, and a chunk's few carried
// records took a fresh block of it (issue 59: peak memory).
const madeBlock = 64 << 10

func newMadeRecords() *madeRecords { return &madeRecords{at: map[int64]uint64{}} }

// add keeps the record at line offset line, whose members are bodies:
// of 1..madeRecord bytes in all; any other is made again at upload.
func (m *madeRecords) add(line int64, size int64, bodies [][]byte) {
	if size < 1 || size > madeRecord || len(m.blocks) >= 1<<24 {
		return
	}
	if len(m.blocks) == 0 || int64(cap(m.blocks[len(m.blocks)-1])-len(m.blocks[len(m.blocks)-1])) < size {
		m.blocks = append(m.blocks, make([]byte, 0, max(madeBlock, size)))
	}
	b := len(m.blocks) - 1
	start := len(m.blocks[b])
	for _, body := range bodies {
		m.blocks[b] = append(m.blocks[b], body...)
	}
	m.at[line] = uint64(b)<<40 | uint64(start)<<20 | uint64(size-1)
}

// get is the record at line offset line, if kept.
func (m *madeRecords) get(line int64) ([]byte, bool) {
	if m == nil {
		return nil, false
	}
	w, ok := m.at[line]
	if !ok {
		return nil, false
	}
	b, start, size := w>>40, w>>20&(1<<20-1), w&(1<<20-1)+1
	return m.blocks[b][start : start+size : start+size], true
}

// only is m holding only the records at the given line offsets (a
// chunk's carried records').
func (m *madeRecords) only(lines []int64) *madeRecords {
	// Room for as many as m holds: the next chunk's records join them.
	o := &madeRecords{at: make(map[int64]uint64, len(m.at))}
	for _, line := range lines {
		if b, ok := m.get(line); ok {
			o.add(line, int64(len(b)), [][]byte{b})
		}
	}
	return o
}
