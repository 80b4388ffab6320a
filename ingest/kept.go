package ingest

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"sort"
)

// keptShard is a source shard the stream read whole, holding only its
// records' members' bytes until they are uploaded (readShards).
//
// A WebDataset shard of small members is mostly tar headers and padding:
// image-text records of 3.6 kB in the archive hold 0.75 kB of members.
// Keeping the archive bytes held five times a chunk's record bytes (120
// MB live of a 100,000-record ingest whose chunks are 16 MiB), and up to a
// hundred times for members of a few bytes; keeping the members holds
// what the chunk's bound counts.
//
// It reads as the shard read, for the reads the upload makes
// (readShardRecordsOf): a span from a member's first byte to a member's
// last byte, whose members' bytes are the shard's. What lies between
// members (headers, padding) reads as zeros, which no record holds: a
// read that starts or ends anywhere else is refused, so no other reader
// can take those zeros for the shard's bytes.
type keptShard struct {
	size int64
	// extents, ascending: member i is at offs[i] in the shard, and at
	// at[i]..at[i+1] in members.
	offs    []int64
	at      []int64
	members []byte
}

// keepMembers copies the members of b's records out of data, the whole
// shard b was scanned from.
func keepMembers(data []byte, b *recordBatch) *keptShard {
	n, total := 0, 0
	for i := range b.records {
		for _, m := range b.records[i].members {
			n++
			total += int(m.Size)
		}
	}
	k := &keptShard{size: int64(len(data)), offs: make([]int64, 0, n), at: make([]int64, 1, n+1), members: make([]byte, 0, total)}
	for i := range b.records {
		for _, m := range b.records[i].members {
			k.offs = append(k.offs, m.Off)
			k.members = append(k.members, data[m.Off:m.Off+int64(m.Size)]...)
			k.at = append(k.at, int64(len(k.members)))
		}
	}
	return k
}

// ReadAt reads the span [off, off+len(p)) of the shard, which must begin
// where a member begins and end where a member ends.
func (k *keptShard) ReadAt(p []byte, off int64) (int, error) {
	end := off + int64(len(p))
	first := sort.Search(len(k.offs), func(i int) bool { return k.offs[i] >= off })
	last := sort.Search(len(k.offs), func(i int) bool { return k.offs[i]+k.at[i+1]-k.at[i] >= end })
	if first == len(k.offs) || k.offs[first] != off || last == len(k.offs) || k.offs[last]+k.at[last+1]-k.at[last] != end || last < first {
		if off >= k.size {
			return 0, io.EOF
		}
		return 0, fmt.Errorf("bytes %d..%d of a source shard kept in memory: only spans of whole records' members were kept (an ingest read it otherwise: a bug)", off, end)
	}
	clear(p)
	for i := first; i <= last; i++ {
		copy(p[k.offs[i]-off:], k.members[k.at[i]:k.at[i+1]])
	}
	return len(p), nil
}

// record is it's members' bytes as k holds them, not copied: a record's
// members are consecutive in the shard, so they are in k.members too. It
// is false when k does not hold every member of it at its offset and size
// (the caller reads it another way, and refuses what it cannot read).
func (k *keptShard) record(it *Item) ([]byte, bool) {
	if len(it.Members) == 0 {
		return nil, false
	}
	first, found := slices.BinarySearch(k.offs, it.Members[0].Off)
	if !found || first+len(it.Members) > len(k.offs) {
		return nil, false
	}
	for i, m := range it.Members {
		if k.offs[first+i] != m.Off || k.at[first+i+1]-k.at[first+i] != int64(m.Size) {
			return nil, false
		}
	}
	lo, hi := k.at[first], k.at[first+len(it.Members)]
	return k.members[lo:hi:hi], true
}

// only is k holding only the given members (a chunk's carried records').
func (k *keptShard) only(members []MemberAt) *keptShard {
	slices.SortFunc(members, func(a, b MemberAt) int { return cmp.Compare(a.Off, b.Off) })
	// Room for the members k holds, not for all of them: a piece of a
	// shard (pieces.go) holds a few of a carry's members, and a room for
	// all in each of a shard's pieces held the carry many times over.
	n, total := 0, 0
	for _, m := range members {
		if i, found := slices.BinarySearch(k.offs, m.Off); found && k.at[i+1]-k.at[i] == int64(m.Size) {
			n++
			total += int(m.Size)
		}
	}
	o := &keptShard{size: k.size, offs: make([]int64, 0, n), at: make([]int64, 1, n+1), members: make([]byte, 0, total)}
	for _, m := range members {
		i, found := slices.BinarySearch(k.offs, m.Off)
		if !found || k.at[i+1]-k.at[i] != int64(m.Size) {
			continue // not kept here: the upload reads it, and refuses the read
		}
		o.offs = append(o.offs, m.Off)
		o.members = append(o.members, k.members[k.at[i]:k.at[i+1]]...)
		o.at = append(o.at, int64(len(o.members)))
	}
	return o
}

// bytes is what the kept shard holds in memory.
func (k *keptShard) bytes() int64 { return int64(len(k.members)) + 16*int64(len(k.offs)) }
