package ingest

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/shardfs/shardfs/internal/busy"
)

// writeRun writes one run of sorted keys, each placed at "run R entry K",
// as keyRuns.add does.
func writeRun(t *testing.T, k *keyRuns, run int, keys []string) {
	t.Helper()
	slices.Sort(keys)
	k.runs = append(k.runs, k.off)
	for _, key := range keys {
		k.buf = appendString(appendString(k.buf[:0], key), fmt.Sprintf("run %d entry %s", run, key))
		if _, err := k.w.Write(k.buf); err != nil {
			t.Fatal(err)
		}
		k.off += int64(len(k.buf))
	}
}

// More runs than one merge reads at once are merged in passes: every key
// comes out once, in order, and a key two records share is refused as one
// merge of every run refuses it, naming the same two records: the first
// such key in key order, the earlier record first, whichever runs and
// passes the two lie in.
func TestKeyRunsMergeInPasses(t *testing.T) {
	for _, runs := range []int{1, maxMergeRuns, maxMergeRuns + 1, 3*maxMergeRuns + 5, maxMergeRuns*maxMergeRuns + 7} {
		k, err := newKeyRuns()
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for r := range runs {
			var keys []string
			for e := range 3 {
				keys = append(keys, fmt.Sprintf("k%07d", e*runs+r))
			}
			want = append(want, keys...)
			writeRun(t, k, r, keys)
		}
		slices.Sort(want)
		var got []string
		if err := k.merge(func(key, where []byte) error {
			if !strings.HasSuffix(string(where), " entry "+string(key)) {
				t.Fatalf("%d runs: key %s placed at %q", runs, key, where)
			}
			got = append(got, string(key))
			return nil
		}); err != nil {
			t.Fatalf("%d runs: %v", runs, err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%d runs: %d keys merged, want %d, in order", runs, len(got), len(want))
		}
		if len(k.runs) > maxMergeRuns {
			t.Fatalf("%d runs: %d runs left for the last merge", runs, len(k.runs))
		}
		k.close()
	}

	// Duplicates: "b" within one group of runs, "a" across groups (runs
	// 70 and 140: merged in different passes' groups), "c" across the
	// first and last runs. "a" is the first in key order.
	k, err := newKeyRuns()
	if err != nil {
		t.Fatal(err)
	}
	const runs = 3*maxMergeRuns + 5
	for r := range runs {
		keys := []string{fmt.Sprintf("z%05d", r)}
		switch r {
		case 1, 2:
			keys = append(keys, "b")
		case 70, 140:
			keys = append(keys, "a")
		case 0, runs - 1:
			keys = append(keys, "c")
		}
		writeRun(t, k, r, keys)
	}
	err = k.checkUnique()
	want := `run 140 entry a: key "a" again, after the record at run 70 entry a:`
	if !errors.Is(err, errKeyAgain) || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("a key two records share: %v; want %s...", err, want)
	}
	k.close()
}

// A merge of many runs holds maxMergeRuns readers' buffers at most, not one
// per run: 1,000 runs (a stream of about 8,000,000 records of 8,192 a
// chunk) held 1,000 buffers of 16 KiB, 16 MB, at once. It holds with every
// core busy and 4 merges at once in the process: each adds its own bound.
func TestKeyRunsMergeMemoryIsBounded(t *testing.T) {
	const runs, merges = 1000, 4
	var ks []*keyRuns
	for range merges {
		k, err := newKeyRuns()
		if err != nil {
			t.Fatal(err)
		}
		defer k.close()
		for r := range runs {
			writeRun(t, k, r, []string{fmt.Sprintf("a%05d", r), fmt.Sprintf("b%05d", r)})
		}
		ks = append(ks, k)
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	busy.Burn(t, runtime.NumCPU())
	var mu sync.Mutex
	var most uint64
	var wg sync.WaitGroup
	errs := make([]error, merges)
	counts := make([]int, merges)
	for i, k := range ks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = k.merge(func(key, where []byte) error {
				if counts[i]++; counts[i]%250 == 1 {
					mu.Lock()
					defer mu.Unlock()
					var ms runtime.MemStats
					runtime.GC()
					runtime.ReadMemStats(&ms)
					most = max(most, ms.HeapAlloc-min(ms.HeapAlloc, before))
				}
				return nil
			})
		}()
	}
	wg.Wait()
	for i := range ks {
		if errs[i] != nil || counts[i] != 2*runs {
			t.Fatalf("merge %d: %d keys merged, want %d (%v)", i, counts[i], 2*runs, errs[i])
		}
	}
	// maxMergeRuns buffers of 16 KiB are 1 MiB a merge; one per run would
	// be 16 MiB a merge.
	if bound := uint64(merges * 4 << 20); most > bound {
		t.Fatalf("%d merges held %d bytes live, more than %d: their buffers are not bounded by maxMergeRuns", merges, most, bound)
	}
	t.Logf("%d merges of %d runs at once, cores busy: %d KiB live at most", merges, runs, most>>10)
}
