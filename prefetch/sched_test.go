package prefetch

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/shardfs/shardfs/cache"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/internal/testds"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/metrics"
	"github.com/shardfs/shardfs/repository"
)

// TestEveryReaderGetsItsLead: DataLoader workers read different batch files
// of one rank-epoch at once. The lead is shared among them, so the next
// bytes of every worker are prefetched, not only those after the slowest.
func TestEveryReaderGetsItsLead(t *testing.T) {
	met := metrics.New(make([]string, 6))
	ds := testds.New(t, synth.Spec{Counts: []int{120, 60, 20}, MinSize: 2000, MaxSize: 4000, Seed: 2}, met)
	in, _ := repository.LayoutInput(ds.Manifest)
	cat := repository.ManifestCatalog{M: ds.Manifest}
	o, err := layout.Order(in, layout.Params{World: 1, Batch: 10, Alpha: 1, Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	m := layout.NewMembers(o, cat)
	batchBytes := m.Offset(10) - m.Offset(0)
	cfg := DefaultConfig()
	// A lead of about four batches: enough for four workers' next samples,
	// far short of the distance between the first and the last worker.
	cfg.Budget, cfg.MinLead = 4*batchBytes, 4*batchBytes
	c := cache.New(64<<20, nil)
	r := New(ds, cat, c, met, cfg, nil)
	defer r.Close()
	workers := []int{0, 5, 10, 15}
	for _, b := range workers {
		h := r.Open(m.Batch(b))
		defer h.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, b := range workers {
		first := cache.Key{Sample: int64(m.Sample(10 * b))}
		for !c.Contains(first) {
			if time.Now().After(deadline) {
				t.Fatalf("batch %d's first sample not prefetched within 10s (workers at batches %v, lead %d bytes)", b, workers, cfg.Budget)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// And the lead is a bound: nothing beyond it is fetched.
	if n := met.PrefetchBytes.Load(); n > 2*cfg.Budget {
		t.Fatalf("prefetched %d bytes with a lead of %d", n, cfg.Budget)
	}
}

// TestRankIsNextUse: the cache's ranker gives, for every sample, the bytes
// between its next read in any open rank-epoch and the nearest reader
// before it, NoUse for samples no reader will read again; re-weighted
// epochs, where a sample is read more than once, included.
func TestRankIsNextUse(t *testing.T) {
	met := metrics.New(make([]string, 6))
	ds := testds.New(t, synth.Spec{Counts: []int{80, 30, 6}, MinSize: 500, MaxSize: 3000, Seed: 6}, met)
	in, _ := repository.LayoutInput(ds.Manifest)
	cat := repository.ManifestCatalog{M: ds.Manifest}
	cfg := DefaultConfig()
	cfg.Disabled = true // positions only; nothing fetched
	r := New(ds, cat, cache.New(1<<20, nil), met, cfg, nil)
	defer r.Close()
	var ms []*layout.Members
	repeats := 0
	for e, alpha := range []float64{1, 0} { // alpha 0: every class equally often, rare samples repeat
		o, err := layout.Order(in, layout.Params{World: 1, Batch: 8, Alpha: alpha, Epoch: e, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		m := layout.NewMembers(o, cat)
		seen := map[int]bool{}
		for i := 0; i < m.Len(); i++ {
			if seen[m.Sample(i)] {
				repeats++
			}
			seen[m.Sample(i)] = true
		}
		ms = append(ms, m)
	}
	if repeats == 0 {
		t.Fatal("the re-weighted epoch repeats no sample: the test does not cover repeats")
	}
	readers := [][]int{{3, 7}, {0, 2, 5}} // batch files open per rank-epoch
	for i, bs := range readers {
		for _, b := range bs {
			h := r.Open(ms[i].Batch(b))
			defer h.Close()
		}
	}
	for s := 0; s < in.N(); s++ {
		want := cache.NoUse
		for i, m := range ms {
			var pos []int
			for _, b := range readers[i] {
				pos = append(pos, 8*b)
			}
			// The first read of s at or after the first reader, measured from the reader just before it.
			for j := pos[0]; j < m.Len(); j++ {
				if m.Sample(j) != s {
					continue
				}
				p := pos[0]
				for _, q := range pos {
					if q <= j {
						p = q
					}
				}
				want = min(want, m.Offset(j)-m.Offset(p))
				break
			}
		}
		if got := r.nextUse(cache.Key{Sample: int64(s)}); got != want {
			t.Fatalf("sample %d: next use %d, want %d", s, got, want)
		}
	}
}

// TestReadMembersAreNotNeeded: DataLoader workers take batches in stripes,
// so a fast worker finishes batches that lie ahead of a slow one. What was
// read to its end is not needed again: it ranks NoUse, for eviction first,
// and is never a prefetch target, though it lies within the slow worker's
// lead. When it ranked by its distance from the slow worker, a small cache
// filled with finished batches and evicted the unread ones instead.
func TestReadMembersAreNotNeeded(t *testing.T) {
	met := metrics.New(make([]string, 6))
	ds := testds.New(t, synth.Spec{Counts: []int{90, 40, 10}, MinSize: 500, MaxSize: 3000, Seed: 9}, met)
	in, _ := repository.LayoutInput(ds.Manifest)
	cat := repository.ManifestCatalog{M: ds.Manifest}
	o, err := layout.Order(in, layout.Params{World: 1, Batch: 10, Alpha: 1, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	m := layout.NewMembers(o, cat)
	cfg := DefaultConfig()
	cfg.Disabled = true // positions and ranks only; the test drives targets itself
	r := New(ds, cat, cache.New(1<<20, nil), met, cfg, nil)
	defer r.Close()

	slow := r.Open(m.Batch(0))
	defer slow.Close()
	fast := r.Open(m.Batch(2))
	f := m.Batch(2)
	buf := make([]byte, f.Size())
	if n, err := fast.ReadAt(context.Background(), buf, 0); n != len(buf) || (err != nil && err != io.EOF) {
		t.Fatalf("read batch 2: %d of %d bytes, %v", n, len(buf), err)
	}
	fast.Close()
	next := r.Open(m.Batch(4)) // the fast worker's next batch
	defer next.Close()

	seen := map[int]int{}
	for i := 0; i < m.Len(); i++ {
		seen[m.Sample(i)]++
	}
	for i := 0; i < 50; i++ {
		smp := m.Sample(i)
		if seen[smp] != 1 {
			t.Fatalf("sample %d is read %d times in this epoch: the test needs each once", smp, seen[smp])
		}
		got := r.nextUse(cache.Key{Sample: int64(smp)})
		switch b := i / 10; {
		case b == 2:
			if got != cache.NoUse {
				t.Errorf("member %d (batch 2, read to its end): next use %d, want NoUse", i, got)
			}
		case b < 4:
			if want := m.Offset(i) - m.Offset(0); got != want {
				t.Errorf("member %d (batch %d, unread, after the slow worker): next use %d, want %d", i, b, got, want)
			}
		default:
			if want := m.Offset(i) - m.Offset(40); got != want {
				t.Errorf("member %d (batch %d, after the fast worker): next use %d, want %d", i, b, got, want)
			}
		}
	}

	// A lead that, shared by the two workers, reaches from the slow one to
	// the fast one: batches 0, 1 and 3 are targets, batch 2 is not.
	ts := fast.st.targets(fast.st.positions(), 2*(m.Offset(40)-m.Offset(0)))
	got := map[int]bool{}
	for _, tg := range ts {
		got[tg.member] = true
	}
	for i := 0; i < 40; i++ {
		if want := i/10 != 2; got[i] != want {
			t.Errorf("member %d (batch %d): target %v, want %v", i, i/10, got[i], want)
		}
	}
}

// Issue 40 item 17: stats printed a lead of 60919811473287497981624320
// seconds once reads had stopped and the rate decayed toward zero.
func TestLeadSecondsCapped(t *testing.T) {
	for _, tc := range []struct {
		ahead int64
		rate  float64
		want  float64
	}{
		{0, 1e6, 0}, {1e6, 1e6, 1}, {1e6, 1e-20, maxLeadSeconds}, {1e6, 0, maxLeadSeconds}, {0, 0, 0},
	} {
		if got := leadSeconds(tc.ahead, tc.rate); got != tc.want {
			t.Errorf("leadSeconds(%d, %g) = %g, want %g", tc.ahead, tc.rate, got, tc.want)
		}
	}
}
