package ingest

import (
	"bufio"
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

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// runReader reads one run back, an entry at a time.
type runReader struct {
	r          *bufio.Reader
	run        int // runs are in source order: an equal key's earlier record first
	key, where string
}

func (r *runReader) next() (bool, error) {
	var err error
	if r.key, err = readString(r.r); err == io.EOF {
		return false, nil
	} else if err != nil {
		return false, err
	}
	r.where, err = readString(r.r)
	return err == nil, err
}

func readString(r *bufio.Reader) (string, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return "", err
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", io.ErrUnexpectedEOF
	}
	return string(b), nil
}

// runHeap orders the runs by their current key.
type runHeap []*runReader

func (h runHeap) Len() int { return len(h) }
func (h runHeap) Less(i, j int) bool {
	return h[i].key < h[j].key || h[i].key == h[j].key && h[i].run < h[j].run
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

// merge merges the runs, refusing the first key that two records share,
// and hands each key and where its record is to each (nil: none), in
// order.
func (k *keyRuns) merge(each func(key, where string) error) error {
	if err := k.w.Flush(); err != nil {
		return fmt.Errorf("the keys' temporary file: %w", err)
	}
	var runs []*runReader
	for i, start := range k.runs {
		end := k.off
		if i+1 < len(k.runs) {
			end = k.runs[i+1]
		}
		runs = append(runs, &runReader{r: bufio.NewReaderSize(io.NewSectionReader(k.f, start, end-start), 16<<10), run: i})
	}
	err := mergeRuns(runs, each)
	if err != nil && !errors.Is(err, errKeyAgain) {
		return fmt.Errorf("the keys' temporary file: %w", err)
	}
	return err
}

// errKeyAgain: two records share a key (keyAgainError says which).
var errKeyAgain = errors.New("two records with one key")

// keyAgainError is keyAgain's refusal, which is errKeyAgain.
type keyAgainError struct{ error }

func (keyAgainError) Is(target error) bool { return target == errKeyAgain }

// mergeRuns merges sorted runs of keys (in source order: of two equal
// keys, the one of the lower run is the earlier record), refusing the
// first key that two records share (errKeyAgain, naming both), and hands
// each key and where its record is to each (nil: none), in order.
func mergeRuns(runs []*runReader, each func(key, where string) error) error {
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
	var prevKey, prevWhere string
	first := true
	for h.Len() > 0 {
		r := h[0]
		if !first && r.key == prevKey {
			return keyAgain(r.where, r.key, prevWhere)
		}
		first, prevKey, prevWhere = false, r.key, r.where
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
