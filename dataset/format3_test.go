package dataset_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/shardfs/shardfs/dataset"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/layout"
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
		ds, err := dataset.Open(ctx, stores, "ds", dataset.Options{})
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
		in, err := dataset.OrderInput(ds, p)
		if err != nil {
			t.Fatal(err)
		}
		o, err := layout.Order(in, p)
		if err != nil {
			t.Fatal(err)
		}
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
			rootIn, err := dataset.RootInput(m.Root)
			if err != nil {
				t.Fatal(err)
			}
			ro, err := layout.Order(rootIn, p)
			if err != nil {
				t.Fatal(err)
			}
			gr, err := dataset.NewGroupReader(m.Root, rootIn, stores, 2)
			if err != nil {
				t.Fatal(err)
			}
			locs, err := gr.LocateAll(ctx, ro.Samples, 4)
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
	ds, err := dataset.Open(ctx, stores, "ds", dataset.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := dataset.GroupKey("ds", ds.Manifest.IngestID, 0)
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
	if ds, err = dataset.Open(ctx, stores, "ds", dataset.Options{}); err != nil {
		t.Fatalf("one intact copy of group 0 left: %v", err)
	}
	rep, err := ds.Verify(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := []dataset.GroupCopy{}
	for _, gc := range rep.BadGroups {
		got = append(got, dataset.GroupCopy{Store: gc.Store, Group: gc.Group})
	}
	if want := []dataset.GroupCopy{{Store: 0, Group: 0}, {Store: 2, Group: 0}}; !slices.Equal(got, want) || rep.Intact() || len(rep.BadIndexes) != 0 {
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
	if _, err := dataset.Open(ctx, stores, "ds", dataset.Options{}); err == nil || !strings.Contains(err.Error(), "group 0's object: no intact copy on any store") {
		t.Fatalf("open with group 0 damaged everywhere: %v", err)
	}
}
