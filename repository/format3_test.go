package repository_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/repository"
)

// Issue 30: a dataset ingested in metadata format 3 (root, group objects,
// shard indexes) opens, verifies intact, and serves byte for byte the
// samples, in the same order by key, that the same source serves in format
// 2; the order computed from the root alone is that order too.
func TestFormat3ServesFormat2Order(t *testing.T) {
	src := synthSource(t, synth.Imbalanced(300, 4, 0.6, 200, 3000, 8))
	ctx := context.Background()
	var keys [2][]string
	var data [2][][]byte
	for fi, format := range []int{2, 3} {
		stores := ingestFormat(t, src, format)
		ds, err := repository.Open(ctx, stores, "ds", repository.Options{})
		if err != nil {
			t.Fatal(err)
		}
		m := ds.Manifest
		if (m.Root != nil) != (format == 3) || m.Top == nil || len(m.Shards) < 5 {
			t.Fatalf("format %d: root %v, top %v, %d shards", format, m.Root != nil, m.Top != nil, len(m.Shards))
		}
		rep, err := ds.Verify(ctx, nil)
		if err != nil || !rep.Intact() {
			t.Fatalf("format %d: verify: %v %+v", format, err, rep)
		}
		p := layout.Params{Seed: 3, World: 2, Rank: 1, Batch: 16, Alpha: 0.5}
		o := orderOf(t, ds, p)
		for _, s := range o.Samples.All() {
			keys[fi] = append(keys[fi], m.Samples.Key(int(s)))
			b, err := ds.ReadSample(ctx, int(s))
			if err != nil {
				t.Fatal(err)
			}
			data[fi] = append(data[fi], b)
		}
		if format == 3 {
			// From the root alone, each sample located through its group.
			rootIn, err := repository.RootInput(m.Root)
			if err != nil {
				t.Fatal(err)
			}
			ro, err := layout.Order(rootIn, p)
			if err != nil {
				t.Fatal(err)
			}
			gr, err := repository.NewGroupReader(m.Root, rootIn, stores, 2)
			if err != nil {
				t.Fatal(err)
			}
			locs, err := gr.LocateAll(ctx, ro.Samples, 4, nil, nil)
			if err != nil || len(locs) != o.Samples.Len() {
				t.Fatalf("%d located of %d: %v", len(locs), o.Samples.Len(), err)
			}
			for i, l := range locs {
				j := m.Shards[l.Shard].FirstSample + int(l.Pos)
				if got := m.Samples.Key(j); got != keys[fi][i] {
					t.Fatalf("slot %d: %s from the root, %s from the expanded top", i, got, keys[fi][i])
				}
			}
		}
	}
	if len(keys[0]) == 0 || !slices.Equal(keys[0], keys[1]) {
		t.Fatalf("the orders differ by key between format 2 and 3 (%d and %d samples)", len(keys[0]), len(keys[1]))
	}
	for i := range data[0] {
		if !slices.Equal(data[0][i], data[1][i]) {
			t.Fatalf("slot %d (%s): different bytes", i, keys[0][i])
		}
	}
}

// A group object copy that is missing or corrupt is found by verify and
// restored by repair from an intact copy, byte for byte; with every copy of
// a group damaged the dataset does not open, and says which group.
func TestFormat3GroupCopiesRepaired(t *testing.T) {
	src := synthSource(t, synth.Imbalanced(120, 3, 0.6, 200, 3000, 4))
	ctx := context.Background()
	stores := ingestFormat(t, src, 3)
	ds, err := repository.Open(ctx, stores, "ds", repository.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := repository.GroupKey("ds", ds.Manifest.IngestID, 0)
	intact := make([]byte, ds.Manifest.Root.Groups[0].ObjectSize)
	if err := stores[0].ReadAt(ctx, key, intact, 0); err != nil {
		t.Fatal(err)
	}
	if err := stores[0].Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	bad := slices.Clone(intact)
	bad[len(bad)/2] ^= 4
	if err := stores[2].Put(ctx, key, bad); err != nil {
		t.Fatal(err)
	}
	if ds, err = repository.Open(ctx, stores, "ds", repository.Options{}); err != nil {
		t.Fatalf("one intact copy of group 0 left: %v", err)
	}
	rep, err := ds.Verify(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := []repository.GroupCopy{}
	for _, gc := range rep.BadGroups {
		got = append(got, repository.GroupCopy{Store: gc.Store, Group: gc.Group})
	}
	if want := []repository.GroupCopy{{Store: 0, Group: 0}, {Store: 2, Group: 0}}; !slices.Equal(got, want) || rep.Intact() || len(rep.BadIndexes) != 0 {
		t.Fatalf("bad group copies %v, want %v (bad index copies %v)", got, want, rep.BadIndexes)
	}
	if n, err := ds.Repair(ctx, rep, false, nil); err != nil || n != 2 {
		t.Fatalf("repair wrote %d objects: %v", n, err)
	}
	if rep, err = ds.Verify(ctx, nil); err != nil || !rep.Intact() {
		t.Fatalf("after repair: %v %+v", err, rep)
	}
	for _, i := range []int{0, 2} {
		back := make([]byte, len(intact))
		if err := stores[i].ReadAt(ctx, key, back, 0); err != nil || !slices.Equal(back, intact) {
			t.Fatalf("store %d: the restored copy differs from the intact one: %v", i, err)
		}
	}
	for _, s := range stores {
		s.Put(ctx, key, bad)
	}
	if _, err := repository.Open(ctx, stores, "ds", repository.Options{}); err == nil || !strings.Contains(err.Error(), "group 0's object: no intact copy on any store") {
		t.Fatalf("open with group 0 damaged everywhere: %v", err)
	}
}

// Issue 30: a format-3 dataset opened with LazyIndexes reads no group
// object at open. Pinning a rank-epoch of the order computed from the root
// reads the group objects of its samples only, each once; it gives the
// samples numbered as the dataset opened whole numbers them, which is the
// same order, and the bytes read are the same. A window order, which lists
// every sample's shard, reads every group and is the whole dataset's too.
func TestFormat3LazyReadsOnlyItsGroups(t *testing.T) {
	ctx := context.Background()
	stores, whole := format3Groups(t)
	m := whole.Manifest
	groups := len(m.Root.Groups)
	if groups < 10 {
		t.Fatalf("%d groups of 2 shards: the test needs more", groups)
	}
	groupOf := func(sample int64) int { return int(m.Samples.Shard[sample]) / 2 }
	counted, groupReads := countReads(stores, "/group/")
	lazy, err := repository.Open(ctx, counted, "ds", repository.Options{LazyIndexes: true})
	if err != nil {
		t.Fatal(err)
	}
	l := lazy.Lazy
	if l == nil || !l.Root() || lazy.Manifest.Top != nil || len(lazy.Manifest.Shards) != 0 || groupReads() != 0 {
		t.Fatalf("lazy open: catalog %v, top %v, %d shards, %d group reads; want a root catalog, no top, no shard, no read",
			l != nil, lazy.Manifest.Top != nil, len(lazy.Manifest.Shards), groupReads())
	}
	if l.Samples() != m.Samples.Len() {
		t.Fatalf("lazy: %d samples, whole: %d", l.Samples(), m.Samples.Len())
	}

	p := layout.Params{Seed: 3, World: 8, Rank: 5, Batch: 4, Alpha: 0.5}
	if !repository.ByRoot(lazy, p) || repository.ByRoot(whole, p) {
		t.Fatalf("ByRoot: lazy %v, whole %v", repository.ByRoot(lazy, p), repository.ByRoot(whole, p))
	}
	ref, ro := orderOf(t, whole, p), orderOf(t, lazy, p)
	groupsOf := func(samples layout.Positions) int {
		in := map[int]bool{}
		for _, x := range samples.All() {
			in[groupOf(x)] = true
		}
		return len(in)
	}

	// One batch: the groups of its samples, no other.
	pinned, ids, err := l.PinRoot(ctx, ro.BatchSamples(0))
	if err != nil {
		t.Fatal(err)
	}
	want := groupsOf(ref.BatchSamples(0))
	if !slices.Equal(ids.Int64s(), ref.BatchSamples(0).Int64s()) {
		t.Fatalf("batch 0 from the root: %v; from the whole manifest: %v", ids.Int64s(), ref.BatchSamples(0).Int64s())
	}
	if got := groupReads(); got != want || l.GroupLoads() != int64(want) || want >= groups {
		t.Fatalf("pinning one batch: %d group reads, %d loads; its samples lie in %d of %d groups", got, l.GroupLoads(), want, groups)
	}
	if held, of := l.GroupsHeld(); held != want || of != groups {
		t.Fatalf("groups held %d of %d, want %d of %d", held, of, want, groups)
	}

	// The rank-epoch: each of its groups read once in all.
	want = groupsOf(ref.Samples)
	pinned, ids, err = l.PinRoot(ctx, ro.Samples)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids.Int64s(), ref.Samples.Int64s()) {
		t.Fatalf("rank 5's epoch: the root's order, translated, differs from the whole manifest's")
	}
	if got := groupReads(); got != want || l.GroupLoads() != int64(want) {
		t.Fatalf("pinning rank 5's epoch: %d group reads, %d loads; its samples lie in %d of %d groups", got, l.GroupLoads(), want, groups)
	}
	t.Logf("rank 5 of 8: %d samples in %d of %d groups", ids.Len(), want, groups)
	eager := repository.ManifestCatalog{M: m}
	for _, x := range ids.All() {
		i := int(x)
		if pinned.Key(i) != eager.Key(i) || pinned.Size(i) != eager.Size(i) || pinned.Stratum(i) != eager.Stratum(i) {
			t.Fatalf("sample %d: pinned %q %d %d, whole %q %d %d", i, pinned.Key(i), pinned.Size(i), pinned.Stratum(i), eager.Key(i), eager.Size(i), eager.Stratum(i))
		}
		s1, o1, n1 := l.Locate(i)
		s2, o2, n2 := eager.Locate(i)
		if s1 != s2 || o1 != o2 || n1 != n2 || l.SampleSum(i) != eager.SampleSum(i) || l.FragSize(s1) != eager.FragSize(s2) {
			t.Fatalf("sample %d: lazy at %d/%d+%d, whole at %d/%d+%d", i, s1, o1, n1, s2, o2, n2)
		}
		f1, c1 := l.ShardSamples(s1)
		f2, c2 := eager.ShardSamples(s2)
		if f1 != f2 || c1 != c2 {
			t.Fatalf("shard %d: lazy samples [%d,+%d), whole [%d,+%d)", s1, f1, c1, f2, c2)
		}
		got, err := lazy.ReadSample(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		b, err := whole.ReadSample(ctx, i)
		if err != nil || !bytes.Equal(got, b) {
			t.Fatalf("sample %d: %d bytes lazily, %d whole (%v)", i, len(got), len(b), err)
		}
	}
	if n := l.Unpinned.Load(); n != 0 || groupReads() != want {
		t.Fatalf("reads of pinned samples: %d unpinned lookups, %d group reads (want 0 and %d)", n, groupReads(), want)
	}

	// Rank affinity (order version 3): a rank reads the groups of its range
	// of samples only, and pins its samples as the catalog numbers them.
	aff, err := repository.Open(ctx, counted, "ds", repository.Options{LazyIndexes: true})
	if err != nil {
		t.Fatal(err)
	}
	before := groupReads()
	pa := layout.Params{Seed: 3, World: 8, Rank: 3, Batch: 4, Alpha: 1, Affinity: true}
	if repository.ByRoot(aff, pa) {
		t.Fatal("a rank-affine order is numbered as the catalog is, not by the root")
	}
	ao, wo := orderOf(t, aff, pa), orderOf(t, whole, pa)
	if ao.Samples.Len() == 0 || !slices.Equal(ao.Samples.Int64s(), wo.Samples.Int64s()) {
		t.Fatalf("rank 3's affine order: %d samples from the root and its groups, %d from the whole manifest, or they differ", ao.Samples.Len(), wo.Samples.Len())
	}
	lo, hi := layout.AffinityRange(int64(m.Samples.Len()), 8, 3)
	inRange := map[int]bool{}
	for x := lo; x < hi; x++ {
		inRange[groupOf(x)] = true
	}
	if got := groupReads() - before; got != len(inRange) || aff.Lazy.GroupLoads() != int64(len(inRange)) || got >= groups/2 {
		t.Fatalf("rank 3 of 8's affine order read %d group objects (%d loads); its samples [%d, %d) lie in %d of %d groups", got, aff.Lazy.GroupLoads(), lo, hi, len(inRange), groups)
	}
	ap, err := aff.Lazy.Pin(ctx, ao.Samples)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range ao.Samples.All() {
		if x < lo || x >= hi || ap.Key(int(x)) != m.Samples.Key(int(x)) {
			t.Fatalf("affine sample %d: %q, whole %q, range [%d, %d)", x, ap.Key(int(x)), m.Samples.Key(int(x)), lo, hi)
		}
	}

	// A window lists every sample's shard: every group, and the same order.
	pw := p
	pw.Window, pw.Alpha = 2, 1
	if repository.ByRoot(lazy, pw) {
		t.Fatal("a window order is not computed from the root")
	}
	if got, ref := orderOf(t, lazy, pw), orderOf(t, whole, pw); !slices.Equal(got.Samples.Int64s(), ref.Samples.Int64s()) {
		t.Fatal("window order: the lazily read groups give another order than the whole manifest")
	}
	if held, _ := l.GroupsHeld(); held != groups {
		t.Fatalf("after a window order: %d groups held of %d", held, groups)
	}
	// A stratum's samples, listed group by group.
	checkStrataListed(t, l, m)
}

// A group object with no intact copy fails the pin of the samples in it,
// naming the group; other groups' samples still pin, and nothing is served
// from the damaged group.
func TestFormat3LazyDamagedGroup(t *testing.T) {
	src := synthSource(t, synth.Imbalanced(200, 3, 0.6, 200, 3000, 4))
	ctx := context.Background()
	stores := ingestGroups(t, src, 3, 2)
	whole, err := repository.Open(ctx, stores, "ds", repository.Options{})
	if err != nil {
		t.Fatal(err)
	}
	root := whole.Manifest.Root
	key := repository.GroupKey("ds", root.IngestID, 1)
	b := make([]byte, root.Groups[1].ObjectSize)
	if err := stores[0].ReadAt(ctx, key, b, 0); err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	for _, s := range stores[:2] {
		if err := s.Put(ctx, key, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := stores[2].Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	lazy, err := repository.Open(ctx, stores, "ds", repository.Options{LazyIndexes: true})
	if err != nil {
		t.Fatalf("a damaged group is found when its samples are read, not at open: %v", err)
	}
	in, err := repository.RootInput(root)
	if err != nil {
		t.Fatal(err)
	}
	var inGroup1, elsewhere layout.Positions
	for x := range in.N() {
		if g, _, _, _ := in.Split(int64(x)); g == 1 {
			inGroup1.Append(int64(x))
		} else if elsewhere.Len() < 20 {
			elsewhere.Append(int64(x))
		}
	}
	// Group 1's samples pin as lost, each of its stratum, numbered in
	// the group's range; reading one fails.
	lp, lostIDs, err := lazy.Lazy.PinRoot(ctx, inGroup1)
	if err != nil || lostIDs.Len() != inGroup1.Len() {
		t.Fatalf("pinning group 1's samples: %v", err)
	}
	seen := map[int64]bool{}
	for k, x := range lostIDs.All() {
		_, c, _, _ := in.Split(inGroup1.At(k))
		if !lp.Lost(int(x)) || lp.Stratum(int(x)) != c || seen[x] || lp.Size(int(x)) != 0 {
			t.Fatalf("group 1's sample %d (root %d): lost %v, stratum %d of %d, repeated %v", x, inGroup1.At(k), lp.Lost(int(x)), lp.Stratum(int(x)), c, seen[x])
		}
		seen[x] = true
		if _, err := lazy.ReadSample(ctx, int(x)); err == nil {
			t.Fatalf("sample %d of the lost group 1 was served", x)
		}
	}
	p, ids, err := lazy.Lazy.PinRoot(ctx, elsewhere)
	if err != nil {
		t.Fatalf("other groups' samples: %v", err)
	}
	for _, x := range ids.All() {
		got, err := lazy.ReadSample(ctx, int(x))
		ref, rerr := whole.ReadSample(ctx, int(x))
		if err != nil || rerr != nil || !bytes.Equal(got, ref) || p.Key(int(x)) != whole.Manifest.Samples.Key(int(x)) {
			t.Fatalf("sample %d: %v %v", x, err, rerr)
		}
	}
}

// Pins of several rank-epochs at once (a rank-epoch and the next one's,
// several ranks) read each group object once, and give each its samples.
func TestFormat3ConcurrentPinsReadEachGroupOnce(t *testing.T) {
	ctx := context.Background()
	stores, whole := format3Groups(t)
	counted, groupReads := countReads(stores, "/group/")
	lazy, err := repository.Open(ctx, counted, "ds", repository.Options{LazyIndexes: true})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		p := layout.Params{Seed: 3, World: 4, Rank: i % 4, Epoch: i / 4, Batch: 4, Alpha: 1}
		root, want := orderOf(t, lazy, p), orderOf(t, whole, p)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, ids, err := lazy.Lazy.PinRoot(ctx, root.Samples)
			if err == nil && !slices.Equal(ids.Int64s(), want.Samples.Int64s()) {
				err = fmt.Errorf("rank %d epoch %d: another order than the whole manifest's", p.Rank, p.Epoch)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	held, groups := lazy.Lazy.GroupsHeld()
	if got := groupReads(); int64(got) != lazy.Lazy.GroupLoads() || got != held || held != groups {
		t.Fatalf("8 pins at once: %d group object reads, %d loads, %d groups held of %d; want one read a group", got, lazy.Lazy.GroupLoads(), held, groups)
	}
}

// format3Groups ingests 400 samples in format 3, groups of 2 shards, and
// opens them whole.
func format3Groups(t *testing.T) ([]backend.Store, *repository.Dataset) {
	t.Helper()
	stores := ingestGroups(t, synthSource(t, synth.Imbalanced(400, 4, 0.6, 200, 3000, 9)), 3, 2)
	whole, err := repository.Open(context.Background(), stores, "ds", repository.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return stores, whole
}

// Issue 40 item 5: one group object lost on every store made verify say
// "could not check" (exit 3) and repair refuse, leaving an unrelated lost
// fragment unrepaired. Now verify names the lost group and its shards as
// unrecoverable, checks everything else, and repair mends the rest.
func TestFormat3LostGroupDoesNotBlockRepair(t *testing.T) {
	ctx := context.Background()
	stores, whole := format3Groups(t)
	r := whole.Manifest.Root
	if len(r.Groups) < 3 {
		t.Fatalf("%d groups, want at least 3", len(r.Groups))
	}
	for _, s := range stores {
		must(t, s.Delete(ctx, repository.GroupKey("ds", r.IngestID, 1)))
	}
	// An unrelated loss: a fragment of a shard of group 0.
	must(t, stores[1].Delete(ctx, repository.FragmentKey("ds", r.IngestID, 0, 1)))
	if _, err := repository.Open(ctx, stores, "ds", repository.Options{}); err == nil {
		t.Fatal("a mount-style open with group 1 lost: want it refused, naming the group")
	}
	ds, err := repository.Open(ctx, stores, "ds", repository.Options{LostIndexesOK: true})
	if err != nil {
		t.Fatalf("verify's open with group 1 lost: %v", err)
	}
	rep, err := ds.Verify(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, n := r.FirstShard(1), r.Groups[1].Shards
	if !slices.Equal(rep.LostGroups, []int{1}) || rep.Recoverable() || len(rep.Damaged) != 1 || rep.Damaged[0].Shard != 0 {
		t.Fatalf("report: lost groups %v (want [1]), recoverable %v, damaged %v (want shard 0's fragment)", rep.LostGroups, rep.Recoverable(), rep.Damaged)
	}
	for s := first; s < first+n; s++ {
		if !slices.Contains(rep.LostIndexes, s) {
			t.Fatalf("shard %d of the lost group is not reported lost: %v", s, rep.LostIndexes)
		}
	}
	if _, err := ds.Repair(ctx, rep, false, nil); !errors.Is(err, repository.ErrUnrecoverable) || !strings.Contains(err.Error(), "group 1 lost every copy of its object") {
		t.Fatalf("repair with group 1 lost: want the rest repaired and group 1 named unrecoverable, got %v", err)
	}
	if _, err := stores[1].Stat(ctx, repository.FragmentKey("ds", r.IngestID, 0, 1)); err != nil {
		t.Fatalf("the unrelated fragment was not repaired: %v", err)
	}
	if rep, err = ds.Verify(ctx, nil); err != nil || len(rep.Damaged) != 0 || !slices.Equal(rep.LostGroups, []int{1}) {
		t.Fatalf("after repair: %+v, %v", rep, err)
	}
}

// Issue 40 item 5: one lost index (format 2) or group object (format 3)
// made every samples/<class> directory of a mount fail. PinStratum now
// leaves the lost shards' samples out and lists the rest.
func TestLazyStrataSkipLostMetadata(t *testing.T) {
	ctx := context.Background()
	src := synthSource(t, synth.Imbalanced(400, 4, 0.6, 200, 3000, 9))
	for _, format := range []int{2, 3} {
		t.Run(fmt.Sprint("format ", format), func(t *testing.T) {
			stores := ingestGroups(t, src, format, 2)
			whole, err := repository.Open(ctx, stores, "ds", repository.Options{})
			if err != nil {
				t.Fatal(err)
			}
			m := whole.Manifest
			lostShards := []int{3}
			key := repository.IndexKey("ds", m.IngestID, 3)
			if format == 3 {
				key = repository.GroupKey("ds", m.IngestID, 1)
				lostShards = []int{2, 3}
			}
			for _, s := range stores {
				must(t, s.Delete(ctx, key))
			}
			lazy, err := repository.Open(ctx, stores, "ds", repository.Options{LazyIndexes: true})
			if err != nil {
				t.Fatal(err)
			}
			for c := range m.Strata {
				_, samples, err := lazy.Lazy.PinStratum(ctx, c)
				if err != nil {
					t.Fatalf("stratum %d with %s lost: %v", c, key, err)
				}
				var want []int64
				for i := range m.Samples.Len() {
					if int(m.Samples.Stratum[i]) == c && !slices.Contains(lostShards, int(m.Samples.Shard[i])) {
						want = append(want, int64(i))
					}
				}
				if !slices.Equal(samples.Int64s(), want) {
					t.Fatalf("stratum %d: %d samples listed, want the %d outside shards %v", c, samples.Len(), len(want), lostShards)
				}
			}
		})
	}
}
