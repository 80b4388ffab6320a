package ingest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/manifest"
	"github.com/shardfs/shardfs/repository"
)

// sliceParts runs parts parts of an ingest of the WebDataset shards in
// dir at once, each reading the source through a store of its own that
// counts its reads, and returns those stores.
func sliceParts(t *testing.T, dir string, stores []backend.Store, parts, format int) ([]*countingStore, error) {
	t.Helper()
	counted := make([]*countingStore, parts)
	var g errgroup.Group
	for i := range parts {
		g.Go(func() (err error) {
			counted[i], err = slicePart(t, dir, stores, Part{i, parts}, format)
			return err
		})
	}
	return counted, g.Wait()
}

// slicePart runs part of an ingest of the WebDataset shards in dir,
// reading them through a store that counts its reads.
func slicePart(t *testing.T, dir string, stores []backend.Store, part Part, format int) (*countingStore, error) {
	ctx := context.Background()
	raw, err := backend.Open("file://"+dir, backend.OpenOptions{})
	if err != nil {
		return nil, err
	}
	counted := &countingStore{Store: raw, reads: map[string][][2]int64{}}
	st, err := OpenStoreStream(ctx, ScanOptions{Store: counted, Strata: []string{"source"}})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	// Windows of 512 KiB, each shard's share 256 KiB: the source shards,
	// about 180 KiB, are kept, and so read once.
	opts := Options{Name: "ds", Stores: stores, Data: 2, Parity: 1, ShardSize: 128 << 10, BlockSize: 4096, Seed: 5, Format: format}
	_, err = RunSlicePart(ctx, st, opts, part, "job-7")
	return counted, err
}

// Four parts of an ingest of 24 WebDataset shards, run at once: each reads
// its slice of 6 source shards, each whole and once, and nothing else of
// the source. The commit serves every member byte for byte and verifies;
// its strata and members are numbered by name, each part is a segment of
// its own that numbers its shards and ids on its own, and no part object
// is left.
func TestSlicePartsReadOnlyTheirSlice(t *testing.T) {
	for _, format := range []int{2, 3} {
		t.Run(fmt.Sprint("format", format), func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			want := writeShards(t, dir, 24, 40)
			stores := localStores(t, t.TempDir(), 3)
			counted, err := sliceParts(t, dir, stores, 4, format)
			if err != nil {
				t.Fatal(err)
			}
			for i, c := range counted {
				var read []string
				for key, reads := range c.reads {
					read = append(read, key)
					if len(reads) != 1 || reads[0][0] != 0 {
						t.Errorf("part %d read %s as %v: want it whole, once", i, key, reads)
					}
				}
				slices.Sort(read)
				var slice []string
				for s := i * 6; s < (i+1)*6; s++ {
					slice = append(slice, fmt.Sprintf("shard-%04d.tar", s))
				}
				if !slices.Equal(read, slice) {
					t.Errorf("part %d read %v, want its slice %v", i, read, slice)
				}
			}
			// A part run again writes what it wrote.
			if _, err := slicePart(t, dir, stores, Part{2, 4}, format); err != nil {
				t.Fatalf("part 2/4 run again: %v", err)
			}
			res, err := Commit(ctx, CommitOptions{Name: "ds", Stores: stores})
			if err != nil {
				t.Fatal(err)
			}
			// ... and after the commit, has nothing to do.
			if _, err := slicePart(t, dir, stores, Part{1, 4}, format); !errors.Is(err, ErrAlreadyCommitted) {
				t.Fatalf("part 1/4 run after the commit: %v", err)
			}
			if res.Samples != len(want) {
				t.Fatalf("%d samples committed, want %d", res.Samples, len(want))
			}
			ds := recordsBack(t, stores, "ds", want)
			m := ds.Manifest
			if len(m.Segments) != 4 {
				t.Fatalf("%d segments, want one a part", len(m.Segments))
			}
			mapped := 0 // parts that met the strata in another order than their names'
			for i, seg := range m.Segments {
				if !seg.Local || seg.Strata == nil || seg.Members == nil || seg.IngestID != repository.SliceSegmentID(m.IngestID, i) {
					t.Fatalf("segment %d: %+v", i, seg)
				}
				if !slices.IsSorted(seg.Strata) {
					mapped++
				}
			}
			if mapped == 0 {
				t.Fatal("every part met the strata in their names' order: the maps are not tried")
			}
			if !slices.IsSortedFunc(m.Strata, func(a, b manifest.Stratum) int { return strings.Compare(a.Name, b.Name) }) || !slices.IsSorted(m.Members) {
				t.Fatalf("strata %v and members %v not numbered by name", m.Strata, m.Members)
			}
			if rep, err := ds.Verify(ctx, nil); err != nil || !rep.Intact() {
				t.Fatalf("the committed dataset does not verify: %v %+v", err, rep)
			}
			for _, s := range stores {
				left, err := s.List(ctx, repository.PartPrefix("ds"))
				if err != nil || len(left) > 0 {
					t.Fatalf("%s holds part objects after the commit: %v %v", s, left, err)
				}
			}
		})
	}
}

// A key two records of one part share is refused by the part, naming
// both and asking for the source to be fixed, not for a rerun alone.
func TestSlicePartRefusesAKeyItsRecordsShare(t *testing.T) {
	dir := t.TempDir()
	writeShards(t, dir, 4, 20)
	// Shard 1 (part 0's, with shard 0) holds a record keyed as one of shard 0's.
	writeTar(t, dir+"/shard-0001.tar", []string{"000003"}, []string{"txt", "json"}, map[string]map[string][]byte{"000003": {"txt": []byte("again"), "json": []byte(`{"source": "web"}`)}})
	stores := localStores(t, t.TempDir(), 3)
	_, err := slicePart(t, dir, stores, Part{0, 2}, 2)
	if !errors.Is(err, errKeyAgain) || !strings.Contains(err.Error(), "fix the source") || strings.Contains(err.Error(), "(rerun this part)") {
		t.Fatalf("a key two records of a part share: %v", err)
	}
}

// A key two parts' records share is refused by the commit, naming both
// records; nothing is committed.
func TestSlicePartsCommitRefusesAKeyTwoPartsShare(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	writeShards(t, dir, 8, 20)
	// Shard 7 (part 3's) holds a record keyed as one of shard 0's (part 0's).
	writeTar(t, dir+"/shard-0007.tar", []string{"000003"}, []string{"txt", "json"}, map[string]map[string][]byte{"000003": {"txt": []byte("again"), "json": []byte(`{"source": "web"}`)}})
	stores := localStores(t, t.TempDir(), 3)
	if _, err := sliceParts(t, dir, stores, 4, 2); err != nil {
		t.Fatal(err)
	}
	_, err := Commit(ctx, CommitOptions{Name: "ds", Stores: stores})
	if !errors.Is(err, errKeyAgain) || !strings.Contains(err.Error(), "shard-0007.tar") || !strings.Contains(err.Error(), "shard-0000.tar") {
		t.Fatalf("a key two parts share: %v", err)
	}
	if _, err := repository.Open(ctx, stores, "ds", repository.Options{}); err == nil {
		t.Fatal("a refused commit committed")
	}
}

// A commit of slice parts is stopped at every kind of moment: a kill
// (every write after a random one fails) and a random store failing a
// random write, over the whole commit, its cleanup included. After each
// stopped try, the name is invisible or serves every record; a rerun
// without faults then commits or finishes what was committed, serves
// every record byte for byte, verifies, and leaves no part object: not
// a record, a piece of keys, nor a segment's started mark.
func TestSlicePartsCommitUnderKillsAndStoreFailures(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	want := writeShards(t, dir, 8, 20)
	rng := rand.New(rand.NewPCG(59, 7))
	// The writes and deletes of a commit without faults bound the kills.
	counting, failing := stoppingStores(localStores(t, t.TempDir(), 3), rng, 1<<30, 1)
	counting[failing].(*stopping).failAt = 0
	if _, err := sliceParts(t, dir, counting, 4, 3); err != nil {
		t.Fatal(err)
	}
	counting[0].(*stopping).budget.Store(1 << 30)
	if _, err := Commit(ctx, CommitOptions{Name: "ds", Stores: counting}); err != nil {
		t.Fatal(err)
	}
	writes := 1<<30 - int(counting[0].(*stopping).budget.Load())
	trials := 16
	if testing.Short() {
		trials = 6
	}
	for trial := range trials {
		base := localStores(t, t.TempDir(), 3)
		if _, err := sliceParts(t, dir, base, 4, 2+trial%2); err != nil {
			t.Fatal(err)
		}
		killAfter := rng.IntN(writes + 1)
		stores, failing := stoppingStores(base, rng, killAfter, writes)
		_, err := Commit(ctx, CommitOptions{Name: "ds", Stores: stores})
		t.Logf("trial %d: killed after %d of %d writes, store %d fails its write %d: %v", trial, killAfter, writes, failing, stores[failing].(*stopping).failAt, err)
		if _, openErr := repository.Open(ctx, base, "ds", repository.Options{}); openErr == nil {
			recordsBack(t, base, "ds", want)
		} else if err == nil {
			t.Fatalf("trial %d: the commit said it was done, and the dataset does not open: %v", trial, openErr)
		}
		for _, s := range base { // the stopped commit's lock goes as a kill would let it go
			s.Delete(ctx, repository.LockKey("ds"))
		}
		if _, err := Commit(ctx, CommitOptions{Name: "ds", Stores: base}); err != nil && !errors.Is(err, ErrAlreadyCommitted) {
			t.Fatalf("trial %d: the commit again, without faults: %v", trial, err)
		}
		ds := recordsBack(t, base, "ds", want)
		rep, err := ds.Verify(ctx, nil)
		if err != nil || len(rep.Damaged) != 0 || len(rep.Unrecoverable) != 0 || len(rep.BadSamples) != 0 {
			t.Fatalf("trial %d: after the rerun: %v %+v", trial, err, rep)
		}
		for _, s := range base {
			if left, _ := s.List(ctx, repository.PartPrefix("ds")); len(left) != 0 {
				t.Fatalf("trial %d: part objects left after the rerun: %v", trial, left)
			}
		}
	}
}
