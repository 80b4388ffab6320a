package ingest

import (
	"bytes"
	"testing"
)

// madeRecords gives back each record's bytes as added, across blocks, at
// the sizes its word packs (1 byte, and madeRecord), and keeps none of 0
// bytes or over madeRecord; only keeps the records named.
func TestMadeRecordsGivesBackWhatItTook(t *testing.T) {
	m := newMadeRecords()
	want := map[int64][]byte{}
	sizes := []int{1, 7, madeRecord, 3, madeRecord - 2, 100000, 1, madeRecord}
	for i, n := range sizes {
		b := bytes.Repeat([]byte{byte('a' + i)}, n)
		line := int64(i) * 1000
		m.add(line, int64(n), [][]byte{b[:n/2], b[n/2:]})
		want[line] = b
	}
	m.add(99, 0, nil)
	m.add(98, madeRecord+1, [][]byte{make([]byte, madeRecord+1)})
	for line, b := range want {
		if got, ok := m.get(line); !ok || !bytes.Equal(got, b) {
			t.Errorf("record at %d: got %d bytes (%v), want %d", line, len(got), ok, len(b))
		}
	}
	for _, line := range []int64{98, 99, 5} {
		if _, ok := m.get(line); ok {
			t.Errorf("record at %d kept", line)
		}
	}
	o := m.only([]int64{2000, 7000, 5})
	if len(o.at) != 2 {
		t.Fatalf("only kept %d records, want 2", len(o.at))
	}
	for _, line := range []int64{2000, 7000} {
		if got, ok := o.get(line); !ok || !bytes.Equal(got, want[line]) {
			t.Errorf("only: record at %d: got %d bytes (%v)", line, len(got), ok)
		}
	}
}

// The blocks hold the records' bytes with at most a block's room unused:
// a chunk's records, and the few it carries into the next, took 1 MiB
// blocks, up to 1 MiB of them unused each (issue 59's peak memory).
func TestMadeRecordsLeaveLittleRoom(t *testing.T) {
	room := func(m *madeRecords) (held, used int) {
		for _, b := range m.blocks {
			held, used = held+cap(b), used+len(b)
		}
		return held, used
	}
	m := newMadeRecords()
	for i := range 10000 {
		m.add(int64(i)*200, 130, [][]byte{make([]byte, 130)})
	}
	m.add(1<<40, 300<<10, [][]byte{make([]byte, 300<<10)}) // a long record: a block of its own
	if held, used := room(m); used != 10000*130+300<<10 || held-used > madeBlock {
		t.Fatalf("10,000 records of 130 bytes and one of 300 KiB: %d bytes held for %d", held, used)
	}
	carried := m.only([]int64{0, 200, 400})
	if held, used := room(carried); used != 3*130 || held > madeBlock {
		t.Fatalf("3 records carried: %d bytes held for %d", held, used)
	}
}
