package ingest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/shardfs/shardfs/erasure"
	"hash/fnv"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/backend/storetest"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/manifest"
	"github.com/shardfs/shardfs/repository"
)

// tree writes a synthetic ImageFolder source of n samples in classes
// classes, its file names started by tag, and scans it.
func tree(t *testing.T, n, classes int, tag string, seed uint64) *Source {
	t.Helper()
	dir := t.TempDir()
	spec := synth.Imbalanced(n, classes, 0.6, 500, 9_000, seed)
	spec.Tag = tag
	if _, err := synth.Write(dir, spec); err != nil {
		t.Fatal(err)
	}
	src, err := Scan(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// objectSums is every object of dataset name on the stores, with its CRC.
func objectSums(t *testing.T, stores []backend.Store, name string) map[string]uint32 {
	t.Helper()
	return storetest.Sums(t, stores, name+"/")
}

// checkServes opens version v of ds and checks that it holds exactly the
// samples of srcs, each read back byte for byte.
func checkServes(t *testing.T, stores []backend.Store, v int, srcs ...*Source) *repository.Dataset {
	t.Helper()
	ctx := context.Background()
	ds, err := repository.Open(ctx, stores, "ds", repository.Options{Version: v})
	if err != nil {
		t.Fatalf("open version %d: %v", v, err)
	}
	if got := ds.Manifest.VersionNumber(); v != 0 && got != v {
		t.Fatalf("opened version %d, asked for %d", got, v)
	}
	want := map[string]string{}
	for _, src := range srcs {
		for _, it := range src.Items {
			want[it.Key] = it.Path
		}
	}
	s := &ds.Manifest.Samples
	if s.Len() != len(want) {
		t.Fatalf("version %d holds %d samples, want %d", v, s.Len(), len(want))
	}
	for i := 0; i < s.Len(); i++ {
		path, ok := want[s.Key(i)]
		if !ok {
			t.Fatalf("version %d holds %s, which none of its sources has", v, s.Key(i))
		}
		got, err := ds.ReadSample(ctx, i) // a HealNeeded (stores removed) comes with every byte
		if err != nil && erasure.Heal(err) == nil {
			t.Fatalf("version %d: %s: %v", v, s.Key(i), err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, b) {
			t.Fatalf("version %d: %s: wrong bytes", v, s.Key(i))
		}
	}
	return ds
}

// orderPin is the keys of rank 0's first epoch of ds, hashed: the order is
// a function of the version's content and the order options alone.
func orderPin(t *testing.T, ds *repository.Dataset) uint64 {
	t.Helper()
	in, err := repository.LayoutInput(ds.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	o, err := layout.Order(in, layout.Params{Seed: 5, World: 2, Batch: 8, Alpha: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	h := fnv.New64a()
	for i := 0; i < o.Samples.Len(); i++ {
		h.Write(ds.Manifest.Samples.KeyBytes(int(o.Samples.At(i))))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// Ingest v1, append v2 (with a class v1 lacks) and v3: each version serves
// exactly its samples, byte for byte; the appends upload only the new
// samples and leave every object of v1 as it was; a version's order does
// not change when later ones are appended; rollback, and the rollback of
// the rollback, serve the content they name.
//
// With local numbering (manifest.Segment.Local), each append's shards are
// named and placed by their numbers within it, and every version serves,
// verifies and repairs the same: in format 3, whose versions are read
// both eagerly and lazily (shard indexes and group objects).
func TestAppendMakesVersions(t *testing.T) {
	for _, format := range []int{1, 2, 3} {
		t.Run(fmt.Sprint("format", format), func(t *testing.T) { appendMakesVersions(t, format, false) })
	}
	t.Run("format3-local", func(t *testing.T) { appendMakesVersions(t, 3, true) })
}

func appendMakesVersions(t *testing.T, format int, local bool) {
	ctx := context.Background()
	stores := localStores(t, t.TempDir(), 3)
	src1 := tree(t, 200, 3, "", 1)
	opts := Options{Name: "ds", Stores: stores, Data: 2, Parity: 1, ShardSize: 64 << 10, BlockSize: 4096, Seed: 3, Format: format}
	if _, err := Run(ctx, src1, opts); err != nil {
		t.Fatal(err)
	}
	v1 := checkServes(t, stores, 0, src1)
	pin1 := orderPin(t, v1)
	before := objectSums(t, stores, "ds")

	src2 := tree(t, 120, 4, "b", 2) // class03 is new
	aopts := Options{Name: "ds", Stores: stores, ShardSize: 64 << 10, localSegment: local}
	res2, err := Append(ctx, src2, aopts, AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res2.Version != 2 || res2.Parent != 1 || res2.Samples != 120 {
		t.Fatalf("append: version %d after %d, %d samples", res2.Version, res2.Parent, res2.Samples)
	}
	// Uploaded: the new samples' fragments, (k+m)/k = 1.5 times their
	// bytes, up to each fragment's padding to k.
	if ratio := float64(res2.StoredBytes) / float64(res2.Bytes); ratio < 1.5 || ratio > 1.51 {
		t.Fatalf("append uploaded %d bytes for %d bytes of samples: %.4f, want 1.5", res2.StoredBytes, res2.Bytes, ratio)
	}
	src3 := tree(t, 80, 2, "c", 3)
	if _, err := Append(ctx, src3, aopts, AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	after := objectSums(t, stores, "ds")
	for k, sum := range before {
		if strings.HasSuffix(k, "ds/manifest") || strings.HasSuffix(k, "ds/identity") {
			continue // the commit point and each store's identity name the current version
		}
		if got, ok := after[k]; !ok || got != sum {
			t.Fatalf("%s changed or went away in the appends", k)
		}
	}
	// v1's manifest is kept as it was committed.
	for i := range stores {
		kept := fmt.Sprintf("%d:%s", i, repository.VersionKey("ds", v1.Manifest.IngestID))
		if after[kept] != before[fmt.Sprintf("%d:ds/manifest", i)] {
			t.Fatalf("store %d: v1's kept manifest is not the manifest v1 committed", i)
		}
	}

	if got := orderPin(t, checkServes(t, stores, 1, src1)); got != pin1 {
		t.Fatalf("version 1's order changed after the appends: %x, was %x", got, pin1)
	}
	v2 := checkServes(t, stores, 2, src1, src2)
	v3 := checkServes(t, stores, 0, src1, src2, src3)
	if n := v3.Manifest.VersionNumber(); n != 3 || len(v3.Manifest.Segments) != 3 {
		t.Fatalf("current version %d in %d segments", n, len(v3.Manifest.Segments))
	}
	checkNumbering(t, stores, v3.Manifest, local)
	if i := slices.IndexFunc(v2.Manifest.Strata, func(s manifest.Stratum) bool { return s.Name == "class03" }); i != 3 {
		t.Fatalf("the new class is stratum %d, want 3 (after the dataset's)", i)
	}
	// Golden pins: the order of each version, as this construction deals it.
	// They change only with a new order version.
	if got, want := [3]uint64{pin1, orderPin(t, v2), orderPin(t, v3)}, goldenVersionPins; got != want {
		t.Errorf("version orders %#x, pinned %#x", got, want)
	}
	rep, err := v3.Verify(ctx, nil)
	if err != nil || !rep.Intact() {
		t.Fatalf("version 3 does not verify: %v %+v", err, rep)
	}
	checkRepairsOneShard(t, stores, v3, local)
	// A mount opens a version of format 2 or 3 lazily: the same samples.
	for v, eager := range map[int]*repository.Dataset{1: v1, 2: v2, 3: v3} {
		lazy, err := repository.Open(ctx, stores, "ds", repository.Options{Version: v, LazyIndexes: true})
		if err != nil {
			t.Fatalf("version %d, lazily: %v", v, err)
		}
		if (lazy.Lazy != nil) != (format >= 2) {
			t.Fatalf("version %d of format %d opened lazily: %v", v, format, lazy.Lazy != nil)
		}
		for i := 0; i < eager.Manifest.Samples.Len(); i++ {
			a, err1 := eager.ReadSample(ctx, i)
			b, err2 := lazy.ReadSample(ctx, i)
			if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
				t.Fatalf("version %d sample %d: eager and lazy reads differ (%v, %v)", v, i, err1, err2)
			}
		}
		checkAffineSegments(t, eager, lazy)
	}

	if _, err := Rollback(ctx, Options{Name: "ds", Stores: stores}, 1); err != nil {
		t.Fatal(err)
	}
	v4 := checkServes(t, stores, 0, src1)
	if v4.Manifest.VersionNumber() != 4 || orderPin(t, v4) != pin1 {
		t.Fatalf("the rollback to 1 is version %d, its order the same as 1's: %v", v4.Manifest.VersionNumber(), orderPin(t, v4) == pin1)
	}
	if _, err := Rollback(ctx, Options{Name: "ds", Stores: stores}, 3); err != nil {
		t.Fatal(err)
	}
	checkServes(t, stores, 0, src1, src2, src3)
	checkServes(t, stores, 4, src1)
	if _, err := Rollback(ctx, Options{Name: "ds", Stores: stores}, 5); !errors.Is(err, ErrNothingToDo) {
		t.Fatalf("a rollback to the current version: %v", err)
	}
	if _, err := Rollback(ctx, Options{Name: "ds", Stores: stores}, 9); !errors.Is(err, repository.ErrNoVersion) {
		t.Fatalf("a rollback to a version that does not exist: %v", err)
	}
	// An ingest after all this removes nothing a version needs.
	if _, err := Append(ctx, tree(t, 10, 1, "d", 4), aopts, AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	for v := 1; v <= 5; v++ {
		if _, err := repository.Open(ctx, stores, "ds", repository.Options{Version: v}); err != nil {
			t.Fatalf("version %d after a sixth: %v", v, err)
		}
	}
	ds, err := repository.Open(ctx, stores, "ds", repository.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := ds.Verify(ctx, nil); err != nil || !rep.Intact() {
		t.Fatalf("version 6 does not verify: %v %+v", err, rep)
	}
}

// goldenVersionPins are orderPin of versions 1, 2 and 3 of
// TestAppendMakesVersions, the same in every metadata format.
var goldenVersionPins = [3]uint64{0x7e6a99a521623981, 0x4131e2912b5cd08f, 0x33b002b511a32dc6}

// An append that is refused writes nothing: keys the dataset has, a
// listing of other fields, erasure options that are not the dataset's, a
// dataset that does not exist.
func TestAppendRefusesAndWritesNothing(t *testing.T) {
	ctx := context.Background()
	stores := localStores(t, t.TempDir(), 3)
	src1 := tree(t, 60, 2, "", 1)
	if _, err := Run(ctx, src1, Options{Name: "ds", Stores: stores, Data: 2, Parity: 1, ShardSize: 64 << 10, BlockSize: 4096}); err != nil {
		t.Fatal(err)
	}
	before := objectSums(t, stores, "ds")
	aopts := Options{Name: "ds", Stores: stores}
	unchanged := func(what string) {
		t.Helper()
		if after := objectSums(t, stores, "ds"); !maps.Equal(before, after) {
			t.Fatalf("%s: the stores changed", what)
		}
	}

	again := tree(t, 60, 2, "", 1) // the same keys
	_, err := Append(ctx, again, aopts, AppendOptions{})
	if !errors.Is(err, ErrDuplicateKeys) || !strings.Contains(err.Error(), "60 of the 60") || !strings.Contains(err.Error(), "class00/class00_00000.bin") {
		t.Fatalf("duplicate keys: %v", err)
	}
	unchanged("duplicate keys")
	if _, err := Append(ctx, tree(t, 60, 2, "", 1), aopts, AppendOptions{SkipExisting: true}); !errors.Is(err, ErrNothingToDo) {
		t.Fatalf("nothing left to append: %v", err)
	}
	unchanged("nothing left to append")

	dir := t.TempDir()
	listing := filepath.Join(dir, "new.csv")
	os.WriteFile(filepath.Join(dir, "a.bin"), []byte("sample a"), 0o644)
	os.WriteFile(listing, []byte("path,label,site\na.bin,class00,x\n"), 0o644)
	withFields, err := Scan(listing, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Append(ctx, withFields, aopts, AppendOptions{}); err == nil || !strings.Contains(err.Error(), `"site"], the dataset's []`) {
		t.Fatalf("a listing with another field: %v", err)
	}
	unchanged("other fields")
	bad := aopts
	bad.Data, bad.Parity = 4, 2
	if _, err := Append(ctx, tree(t, 5, 1, "e", 5), bad, AppendOptions{}); err == nil || !strings.Contains(err.Error(), "RS(2,1)") {
		t.Fatalf("another erasure code: %v", err)
	}
	unchanged("another erasure code")
	missing := aopts
	missing.Name = "nope"
	if _, err := Append(ctx, tree(t, 5, 1, "e", 5), missing, AppendOptions{}); !errors.Is(err, repository.ErrNotFound) || !strings.Contains(err.Error(), "shardfs ingest") {
		t.Fatalf("a dataset that does not exist: %v", err)
	}
	unchanged("a missing dataset")
	if _, err := repository.Open(ctx, stores, "ds", repository.Options{Version: 2}); !errors.Is(err, repository.ErrNoVersion) {
		t.Fatalf("version 2 of a dataset of one: %v", err)
	}

	// Half of these keys are new: --skip-existing appends those.
	mixed := tree(t, 60, 2, "", 1)
	mixed.Items = append(mixed.Items[:30], tree(t, 30, 2, "f", 6).Items...)
	res, err := Append(ctx, mixed, aopts, AppendOptions{SkipExisting: true})
	if err != nil || res.Skipped != 30 || res.Samples != 30 {
		t.Fatalf("skip existing: %+v, %v", res, err)
	}
}

// Two appends at once: one commits, the other is told another holds the
// lock, and the dataset is one of the two outcomes, whole.
func TestConcurrentAppendsOneCommits(t *testing.T) {
	ctx := context.Background()
	stores := localStores(t, t.TempDir(), 3)
	src1 := tree(t, 60, 2, "", 1)
	if _, err := Run(ctx, src1, Options{Name: "ds", Stores: stores, Data: 2, Parity: 1, ShardSize: 64 << 10, BlockSize: 4096}); err != nil {
		t.Fatal(err)
	}
	srcs := []*Source{tree(t, 400, 2, "a", 2), tree(t, 400, 2, "b", 3)}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range srcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = Append(ctx, srcs[i], Options{Name: "ds", Stores: stores, ShardSize: 16 << 10}, AppendOptions{})
		}()
	}
	wg.Wait()
	ok := slices.IndexFunc(errs, func(err error) bool { return err == nil })
	if ok < 0 {
		t.Fatalf("neither append committed: %v", errs)
	}
	if other := errs[1-ok]; other != nil {
		if !errors.Is(other, repository.ErrLocked) {
			t.Fatalf("the other append failed for another reason than the lock: %v", other)
		}
		checkServes(t, stores, 0, src1, srcs[ok])
		return
	}
	// Both committed, one after the other (the second took the lock
	// after the first released it): the second is version 3.
	checkServes(t, stores, 0, src1, srcs[0], srcs[1])
}

// A distributed append (parts, then commit) commits what a single-process
// append commits: the same samples in the same shards; a part rerun after
// the commit has nothing to do; a commit whose parent is no longer current
// is refused and commits nothing.
func TestDistributedAppend(t *testing.T) {
	for _, format := range []int{1, 2, 3} {
		t.Run(fmt.Sprint("format", format), func(t *testing.T) { distributedAppend(t, format) })
	}
}

func distributedAppend(t *testing.T, format int) {
	ctx := context.Background()
	src1, src2 := tree(t, 150, 3, "", 1), tree(t, 200, 4, "b", 2)
	base := Options{Name: "ds", Data: 2, Parity: 1, ShardSize: 32 << 10, BlockSize: 4096, Seed: 7, Format: format}
	single, dist := base, base
	single.Stores, dist.Stores = localStores(t, t.TempDir(), 3), localStores(t, t.TempDir(), 3)
	for _, o := range []Options{single, dist} {
		if _, err := Run(ctx, src1, o); err != nil {
			t.Fatal(err)
		}
	}
	want, err := Append(ctx, src2, Options{Name: "ds", Stores: single.Stores}, AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	aopts := Options{Name: "ds", Stores: dist.Stores}
	const n = 3
	for i := n - 1; i >= 0; i-- {
		if _, err := RunAppendPart(ctx, src2, aopts, AppendOptions{}, Part{i, n}, "job"); err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
	}
	res, err := Commit(ctx, CommitOptions{Name: "ds", Stores: dist.Stores})
	if err != nil {
		t.Fatal(err)
	}
	if res.Samples != 200 || res.StoredBytes != want.StoredBytes || res.Bytes != want.Bytes {
		t.Fatalf("the commit says %d samples, %d bytes, %d stored appended; the single process %d, %d, %d", res.Samples, res.Bytes, res.StoredBytes, want.Samples, want.Bytes, want.StoredBytes)
	}
	got := checkServes(t, dist.Stores, 0, src1, src2)
	wantDS := checkServes(t, single.Stores, 0, src1, src2)
	if got.Manifest.VersionNumber() != 2 || len(got.Manifest.Segments) != 2 {
		t.Fatalf("version %d in %d segments", got.Manifest.VersionNumber(), len(got.Manifest.Segments))
	}
	sameManifest(t, wantDS.Manifest, got.Manifest)
	if orderPin(t, got) != orderPin(t, wantDS) {
		t.Fatal("the distributed append's order differs from the single process's")
	}
	if _, err := RunAppendPart(ctx, src2, aopts, AppendOptions{}, Part{1, n}, "job"); !errors.Is(err, ErrAlreadyCommitted) {
		t.Fatalf("a part rerun after the commit: %v", err)
	}
	if rep, err := got.Verify(ctx, nil); err != nil || !rep.Intact() {
		t.Fatalf("verify: %v %+v", err, rep)
	}

	// Parts of an append to v2, then another append commits v3 first.
	src3, src4 := tree(t, 40, 2, "c", 3), tree(t, 30, 2, "d", 4)
	for i := 0; i < 2; i++ {
		if _, err := RunAppendPart(ctx, src3, aopts, AppendOptions{}, Part{i, 2}, "late"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Append(ctx, src4, aopts, AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Commit(ctx, CommitOptions{Name: "ds", Stores: dist.Stores}); err == nil || !strings.Contains(err.Error(), "is current now: run the parts again") {
		t.Fatalf("a commit of parts whose parent is no longer current: %v", err)
	}
	checkServes(t, dist.Stores, 0, src1, src2, src4)
}

// checkAffineSegments checks the rank-affine order (order version 3) of a
// version with several ingests: every rank reads its range of each
// ingest's samples, and ds held whole and lazy give the same order.
func checkAffineSegments(t *testing.T, whole, lazy *repository.Dataset) {
	t.Helper()
	segs := len(whole.Manifest.Segments)
	for r := range 3 {
		p := layout.Params{Seed: 5, World: 3, Rank: r, Batch: 2, Alpha: 1, Affinity: true}
		var orders [2][]int64
		var in *layout.Input
		for i, ds := range []*repository.Dataset{whole, lazy} {
			var err error
			if in, err = repository.OrderInput(ds, p); err != nil {
				t.Fatal(err)
			}
			o, err := layout.Order(in, p)
			if err != nil {
				t.Fatal(err)
			}
			orders[i] = o.Samples.Int64s()
		}
		if len(orders[0]) == 0 || !slices.Equal(orders[0], orders[1]) {
			t.Fatalf("rank %d's affine order: %d samples whole, %d lazily, or they differ", r, len(orders[0]), len(orders[1]))
		}
		ranges := layout.AffinityRanges(in, 3, r)
		if len(ranges) != max(segs, 1) {
			t.Fatalf("rank %d: %d ranges for %d ingests", r, len(ranges), segs)
		}
		for _, x := range ranges {
			if x[0] >= x[1] || !slices.ContainsFunc(orders[0], func(s int64) bool { return s >= x[0] && s < x[1] }) {
				t.Fatalf("rank %d: none of its %d samples in its range [%d, %d) of an ingest", r, len(orders[0]), x[0], x[1])
			}
		}
	}
}

// checkNumbering checks that every fragment of m's shards is on the store
// its number places it on, under the name its number gives it: the
// dataset's number, or with local the number within its append (the
// segments after the first number their shards on their own).
func checkNumbering(t *testing.T, stores []backend.Store, m *manifest.Manifest, local bool) {
	t.Helper()
	ctx := context.Background()
	first := 0
	for i, seg := range m.Segments {
		if seg.Local != (local && i > 0) {
			t.Fatalf("segment %d of ingest %s: local %v", i, seg.IngestID, seg.Local)
		}
		for k := range seg.Shards {
			s := first + k
			n := s
			if seg.Local {
				n = k
			}
			if id, got := m.ShardObject(s); id != seg.IngestID || got != n {
				t.Fatalf("shard %d: object %s/%d, want %s/%d", s, id, got, seg.IngestID, n)
			}
			total := m.Data + m.Parity
			for f := range total {
				key := repository.FragmentKey("ds", seg.IngestID, n, f)
				for st := range stores {
					_, err := stores[st].Stat(ctx, key)
					if holds := err == nil; holds != (st == (n+f)%total) {
						t.Fatalf("shard %d fragment %d (%s): on store %d %v (%v), placed on %d", s, f, key, st, holds, err, (n+f)%total)
					}
				}
			}
		}
		first += seg.Shards
	}
}

// checkRepairsOneShard deletes one fragment of an appended shard of ds
// (with local, one that its number within its append places on another
// store than the dataset's number would): a check finds it missing, and a
// repair writes the same bytes back under its name, on its store.
func checkRepairsOneShard(t *testing.T, stores []backend.Store, ds *repository.Dataset, local bool) {
	t.Helper()
	ctx := context.Background()
	m := ds.Manifest
	total := m.Data + m.Parity
	s := len(m.Shards) - 1
	for local && s >= 0 {
		if _, n := m.ShardObject(s); n%total != s%total {
			break
		}
		s--
	}
	if s < 0 {
		t.Fatal("no shard's number within its append places it elsewhere: the test cannot tell the placements apart")
	}
	id, n := m.ShardObject(s)
	const frag = 1
	key := repository.FragmentKey("ds", id, n, frag)
	st := stores[(n+frag)%total]
	size, err := st.Stat(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, size)
	if err := st.ReadAt(ctx, key, want, 0); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	rep, err := ds.Verify(ctx, nil)
	if err != nil || rep.Intact() || len(rep.Damaged) != 1 || rep.Damaged[0].Shard != s || rep.Damaged[0].Frag != frag {
		t.Fatalf("a check after %s was deleted: %v, damage %+v", key, err, rep.Damaged)
	}
	if written, err := ds.Repair(ctx, rep, false, nil); err != nil || written != 1 {
		t.Fatalf("repair of %s: %d objects written, %v", key, written, err)
	}
	got := make([]byte, size)
	if err := st.ReadAt(ctx, key, got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%s after the repair: %v, the bytes it held %v", key, err, bytes.Equal(got, want))
	}
}
