package ingest

import (
	"bufio"
	"bytes"
	"cmp"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/shardfs/shardfs/manifest"
)

// keyRuns checks that a streaming ingest's keys are distinct, holding none
// of them in memory past its chunk: each chunk's keys, sorted, with where
// each record is, are written as one run to an unlinked temporary file
// (os.TempDir: about 50 bytes a record), and the runs are merged at the
// end, where two equal keys meet.
type keyRuns struct {
	f    *os.File
	w    *bufio.Writer
	off  int64
	runs []int64 // run i is [runs[i], runs[i+1]) of f; the last ends at off
	buf  []byte
	bufs []*bufio.Reader // readers' buffers, maxMergeRuns at most
}

func newKeyRuns() (*keyRuns, error) {
	f, err := os.CreateTemp("", "shardfs-keys-*")
	if err != nil {
		return nil, fmt.Errorf("a temporary file for the keys (set TMPDIR to a directory with room): %w", err)
	}
	// Unlinked at once: it goes with the process, however that ends.
	os.Remove(f.Name())
	return &keyRuns{f: f, w: bufio.NewWriterSize(f, 256<<10)}, nil
}

func (k *keyRuns) close() { k.f.Close() }

// add writes the keys of m's samples (src's items, as planned) as a run.
func (k *keyRuns) add(src *Source, m *manifest.Manifest) error {
	n := m.Samples.Len()
	order := make([]int32, n)
	for j := range order {
		order[j] = int32(j)
	}
	slices.SortFunc(order, func(a, b int32) int { return cmp.Compare(m.Samples.Key(int(a)), m.Samples.Key(int(b))) })
	k.runs = append(k.runs, k.off)
	for _, j := range order {
		it := &src.Items[src.planned[j]]
		k.buf = appendString(k.buf[:0], it.Key)
		k.buf = appendString(k.buf, it.recordAt())
		if _, err := k.w.Write(k.buf); err != nil {
			return fmt.Errorf("the keys' temporary file: %w", err)
		}
		k.off += int64(len(k.buf))
	}
	return nil
}

func appendString[S string | []byte](b []byte, s S) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// runReader reads one run back, an entry at a time, into buffers it
// reuses: a merge of 5,000,000 keys made a string of each key and each
// place, 10 MB of garbage per 100,000 keys.
type runReader struct {
	r          *bufio.Reader
	run        int // runs are in source order: an equal key's earlier record first
	key, where []byte
}

func (r *runReader) next() (bool, error) {
	var err error
	if r.key, err = readBytes(r.r, r.key); err == io.EOF {
		return false, nil
	} else if err != nil {
		return false, err
	}
	r.where, err = readBytes(r.r, r.where)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err == nil, err
}

// readBytes reads one length-prefixed string into buf's room.
func readBytes(r *bufio.Reader, buf []byte) ([]byte, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return buf[:0], err
	}
	if n > 1<<30 {
		return buf[:0], fmt.Errorf("an entry of %d bytes: the file is damaged", n)
	}
	buf = slices.Grow(buf[:0], int(n))[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return buf[:0], io.ErrUnexpectedEOF
	}
	return buf, nil
}

// runHeap orders the runs by their current key.
type runHeap []*runReader

func (h runHeap) Len() int { return len(h) }
func (h runHeap) Less(i, j int) bool {
	c := bytes.Compare(h[i].key, h[j].key)
	return c < 0 || c == 0 && h[i].run < h[j].run
}
func (h runHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *runHeap) Push(x any)   { *h = append(*h, x.(*runReader)) }
func (h *runHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// checkUnique merges the runs and refuses the first key that two records
// share, naming both.
func (k *keyRuns) checkUnique() error { return k.merge(nil) }

// maxMergeRuns bounds the runs one merge reads at once, each through a
// 16 KiB buffer. A merge of every run held 11 MB at the end of a stream of
// 5,000,000 records (711 runs at --shard-size 512KiB), more than a chunk
// does, and it grew with the records. More runs are merged in passes, as
// an external sort merges them (mergePass).
const maxMergeRuns = 64

// merge merges the runs, refusing the first key that two records share,
// and hands each key and where its record is to each (nil: none), in
// order; the bytes are valid until each returns.
func (k *keyRuns) merge(each func(key, where []byte) error) error {
	if err := k.w.Flush(); err != nil {
		return fmt.Errorf("the keys' temporary file: %w", err)
	}
	for len(k.runs) > maxMergeRuns {
		if err := k.mergePass(); err != nil {
			return err
		}
	}
	err := mergeRuns(k.readers(0, len(k.runs)), true, each)
	if err != nil && !errors.Is(err, errKeyAgain) {
		return fmt.Errorf("the keys' temporary file: %w", err)
	}
	return err
}

// readers read runs [from, to) of k's file, each numbered by its place,
// through the buffers of the readers before (bufs), which a pass's
// groups share: one new 16 KiB buffer a run was a pass's garbage.
func (k *keyRuns) readers(from, to int) []*runReader {
	var runs []*runReader
	for i := from; i < to; i++ {
		end := k.off
		if i+1 < len(k.runs) {
			end = k.runs[i+1]
		}
		run := io.NewSectionReader(k.f, k.runs[i], end-k.runs[i])
		if j := i - from; j < len(k.bufs) {
			k.bufs[j].Reset(run)
		} else {
			k.bufs = append(k.bufs, bufio.NewReaderSize(run, 16<<10))
		}
		runs = append(runs, &runReader{r: k.bufs[i-from], run: i})
	}
	return runs
}

// mergePass merges k's runs, maxMergeRuns consecutive ones at a time,
// each group into one run of a new temporary file, which then replaces
// k's. It keeps every entry, two with one key too, the earlier record's
// first: consecutive runs in source order make runs in source order, so
// the last merge sees the entries one merge of every run would, in the
// same order, and refuses the same key, naming the same records.
func (k *keyRuns) mergePass() error {
	next, err := newKeyRuns()
	if err != nil {
		return err
	}
	for from := 0; from < len(k.runs) && err == nil; from += maxMergeRuns {
		next.runs = append(next.runs, next.off)
		err = mergeRuns(k.readers(from, min(from+maxMergeRuns, len(k.runs))), false, func(key, where []byte) error {
			next.buf = appendString(appendString(next.buf[:0], key), where)
			next.off += int64(len(next.buf))
			_, err := next.w.Write(next.buf)
			return err
		})
	}
	if err == nil {
		err = next.w.Flush()
	}
	if err != nil {
		next.close()
		return fmt.Errorf("the keys' temporary file: %w", err)
	}
	k.close()
	next.bufs = k.bufs
	*k = *next
	return nil
}

// errKeyAgain: two records share a key (keyAgainError says which).
var errKeyAgain = errors.New("two records with one key")

// keyAgainError is keyAgain's refusal, which is errKeyAgain.
type keyAgainError struct{ error }

func (keyAgainError) Is(target error) bool { return target == errKeyAgain }

// mergeRuns merges sorted runs of keys (in source order: of two equal
// keys, the one of the lower run is the earlier record) and hands each key
// and where its record is to each (nil: none), in order; the bytes are the
// runs' buffers, valid until each returns. With refuse, it refuses the
// first key that two records share (errKeyAgain, naming both); without,
// it hands on both, the earlier first.
func mergeRuns(runs []*runReader, refuse bool, each func(key, where []byte) error) error {
	var h runHeap
	for _, r := range runs {
		ok, err := r.next()
		if err != nil {
			return err
		}
		if ok {
			h = append(h, r)
		}
	}
	heap.Init(&h)
	var prevKey, prevWhere []byte
	first := true
	for h.Len() > 0 {
		r := h[0]
		if refuse {
			if !first && bytes.Equal(r.key, prevKey) {
				return keyAgain(string(r.where), string(r.key), string(prevWhere))
			}
			first, prevKey, prevWhere = false, append(prevKey[:0], r.key...), append(prevWhere[:0], r.where...)
		}
		if each != nil {
			if err := each(r.key, r.where); err != nil {
				return err
			}
		}
		ok, err := r.next()
		switch {
		case err != nil:
			return err
		case ok:
			heap.Fix(&h, 0)
		default:
			heap.Pop(&h)
		}
	}
	return nil
}
