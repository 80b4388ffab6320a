package repository_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/shardfs/shardfs/erasure"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/ingest"
	"github.com/shardfs/shardfs/internal/faultstore"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/repository"
)

// ingestLocal ingests a small synthetic dataset RS(4,2) into six local stores
// with 4 KiB checksum blocks, and returns the stores, their directories and the source.
func ingestLocal(t *testing.T, wrap func(i int, s backend.Store) backend.Store) ([]backend.Store, []string, string, error) {
	t.Helper()
	base := t.TempDir()
	src := filepath.Join(base, "src")
	if _, err := synth.Write(src, synth.Spec{Counts: []int{60, 30, 10}, MinSize: 1000, MaxSize: 9000, Seed: 4}); err != nil {
		t.Fatal(err)
	}
	var stores []backend.Store
	var dirs []string
	for i := 0; i < 6; i++ {
		d := filepath.Join(base, fmt.Sprint("s", i))
		s, err := backend.NewLocal(d)
		if err != nil {
			t.Fatal(err)
		}
		var st backend.Store = s
		if wrap != nil {
			st = wrap(i, s)
		}
		stores, dirs = append(stores, st), append(dirs, d)
	}
	source, err := ingest.Scan(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ingest.Run(context.Background(), source, ingest.Options{Name: "ds", Stores: stores, Data: 4, Parity: 2, ShardSize: 200_000, BlockSize: 4096})
	return stores, dirs, src, err
}

// fragmentFile is the file of fragment frag of shard 0 in store dir.
func fragmentFile(t *testing.T, dir string, frag int) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "ds", "data", "*", fmt.Sprintf("00000000.%02d", frag)))
	if len(m) != 1 {
		t.Fatalf("fragment %d of shard 0 in %s: found %v", frag, dir, m)
	}
	return m[0]
}

func flipByte(t *testing.T, name string, off int64) {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x40
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Issue 9 item 11: three fragments each with one bad block, in different
// block stripes, leave every stripe with at most one bad block (m=2). Reads,
// verify and repair must work stripe by stripe, not fragment by fragment.
func TestRecoveryPerBlockStripe(t *testing.T) {
	ctx := context.Background()
	stores, dirs, src, err := ingestLocal(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Shard 0: fragment f lives on store f. Block b of a fragment starts at b*4096.
	flipByte(t, fragmentFile(t, dirs[0], 0), 0*4096+10)
	flipByte(t, fragmentFile(t, dirs[2], 2), 1*4096+10)
	flipByte(t, fragmentFile(t, dirs[5], 5), 2*4096+10)
	ds, err := repository.Open(ctx, stores, "ds", repository.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := ds.Manifest
	if m.FragSize(0) < 3*4096 {
		t.Fatalf("fragments of %d bytes: the test needs at least 3 blocks", m.FragSize(0))
	}
	var want []byte
	for i := m.Shards[0].FirstSample; i < m.Shards[0].FirstSample+m.Shards[0].NumSamples; i++ {
		b, _ := os.ReadFile(filepath.Join(src, m.Samples.Key(i)))
		want = append(want, b...)
	}
	// Served whole, and the read names the two data fragments' stores it
	// found bad for healing (store 5's bad block is in a stripe whose data
	// blocks are good: not read).
	got, err := ds.Reader.ReadRange(ctx, ds.Shard(0), 0, m.Shards[0].Size)
	if h := erasure.Heal(err); h == nil || h.Shard != 0 || !slices.Equal(h.Stores, []int{0, 2}) || !bytes.Equal(got, want) {
		t.Fatalf("read of shard 0 with one bad block per stripe: err %v, bytes equal %v; want a HealNeeded for stores 0 and 2", err, bytes.Equal(got, want))
	}
	rep, err := ds.Verify(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Recoverable() || len(rep.Damaged) != 3 {
		t.Fatalf("verify: %d damaged, unrecoverable shards %v; want 3 damaged fragments, all recoverable", len(rep.Damaged), rep.Unrecoverable)
	}
	n, err := ds.Repair(ctx, rep, false, nil)
	if err != nil || n != 3 {
		t.Fatalf("repair wrote %d objects, err %v; want 3", n, err)
	}
	rep, err = ds.Verify(ctx, nil)
	if err != nil || !rep.Intact() {
		t.Fatalf("verify after repair: %+v, %v", rep, err)
	}
}

// Issue 9 item 10: verify reads stores the read path has marked down: being
// marked down is not damage.
func TestVerifyReadsStoresMarkedDown(t *testing.T) {
	ctx := context.Background()
	var faulty *faultstore.Faulty
	stores, _, _, err := ingestLocal(t, func(i int, s backend.Store) backend.Store {
		if i == 1 {
			faulty = faultstore.New(s)
			return faulty
		}
		return s
	})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := repository.Open(ctx, stores, "ds", repository.Options{})
	if err != nil {
		t.Fatal(err)
	}
	faulty.SetDown(true)
	for i := 0; i < 20 && !ds.Reader.StoreDown(1); i++ {
		for sh := range ds.Manifest.Shards {
			ds.Reader.ReadRange(ctx, ds.Shard(sh), 0, ds.Manifest.Shards[sh].Size)
		}
	}
	if !ds.Reader.StoreDown(1) {
		t.Fatal("store 1 failing every request was never marked down")
	}
	faulty.SetDown(false)
	rep, err := ds.Verify(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Intact() {
		t.Fatalf("verify of an intact dataset after store 1 was marked down: %d damaged, first %v", len(rep.Damaged), rep.Damaged[0])
	}
}

// failManifest fails every write of the manifest, as a store that breaks at the commit.
type failManifest struct{ backend.Store }

func (f failManifest) Put(ctx context.Context, key string, data []byte) error {
	if strings.HasSuffix(key, "/manifest") {
		return &backend.Error{Store: f.String(), Op: "write", Key: key, Err: fmt.Errorf("%w: injected", backend.ErrUnavailable)}
	}
	return f.Store.Put(ctx, key, data)
}

// Issue 9 item 3: a store failing at the commit does not cancel the other
// copies; the count of copies decides, and the result says what holds.
func TestCommitWritesEveryCopy(t *testing.T) {
	ctx := context.Background()
	t.Run("one store fails", func(t *testing.T) {
		stores, _, _, err := ingestLocal(t, func(i int, s backend.Store) backend.Store {
			if i == 4 {
				return failManifest{s}
			}
			return s
		})
		if err != nil {
			t.Fatalf("5 of 6 manifest copies written must commit: %v", err)
		}
		for i, s := range stores {
			if _, err := s.Stat(ctx, "ds/manifest"); (err == nil) != (i != 4) {
				t.Errorf("store %d: manifest copy present = %v", i, err == nil)
			}
		}
		if _, err := repository.Open(ctx, stores, "ds", repository.Options{}); err != nil {
			t.Fatalf("open the committed dataset: %v", err)
		}
	})
	t.Run("three stores fail", func(t *testing.T) {
		stores, _, _, err := ingestLocal(t, func(i int, s backend.Store) backend.Store {
			if i >= 3 {
				return failManifest{s}
			}
			return s
		})
		// Issue 40: every store took the pending copy, then three real
		// ones: the commit point (the first real copy) is passed, so the
		// ingest is committed and whole, never taken back. (Before issue
		// 40 this asserted "not committed" and took the three real copies
		// back, which for a new version deleted the current one's.)
		if err != nil {
			t.Fatalf("3 of 6 real copies and 6 pending: want committed, got %v", err)
		}
		ds, err := repository.Open(ctx, stores, "ds", repository.Options{})
		if err != nil {
			t.Fatalf("the committed dataset does not open: %v", err)
		}
		rep, err := ds.Verify(ctx, nil)
		if err != nil || !rep.Intact() || len(rep.Pending) != 3 {
			t.Fatalf("want whole with 3 pending copies: %+v, %v", rep, err)
		}
	})
}

// A commit killed after writing one of three manifest copies leaves no
// dataset: the other stores answer that they hold none, so the quorum was
// provably never reached. A rerun of the ingest, without --force, commits.
func TestInterruptedCommitIsInvisible(t *testing.T) {
	ctx := context.Background()
	stores, source, opts := ingestedOnThree(t)
	// As if killed mid-commit: only store 1 got its copy (and no identities).
	for _, i := range []int{0, 2} {
		stores[i].Delete(ctx, "ds/manifest")
	}
	for i := range stores {
		stores[i].Delete(ctx, "ds/identity")
	}
	if _, err := repository.Open(ctx, stores, "ds", repository.Options{}); !errors.Is(err, repository.ErrNotFound) {
		t.Fatalf("a commit that reached 1 of 3 stores (quorum 2) must leave no dataset: %v", err)
	}
	if _, err := ingest.Run(ctx, source, opts); err != nil {
		t.Fatalf("rerunning the interrupted ingest: %v", err)
	}
	ds, err := repository.Open(ctx, stores, "ds", repository.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := ds.Verify(ctx, nil); err != nil || !rep.Intact() {
		t.Fatalf("after the rerun: %+v, %v", rep, err)
	}
}

// A commit killed at any point leaves the dataset invisible or whole: the
// manifest and identities reach every store under the pending keys before
// any real copy is written. States as a kill leaves them, on 3 stores
// (RS(2,1), quorum 2).
func TestKilledCommitLeavesInvisibleOrWhole(t *testing.T) {
	ctx := context.Background()
	stores, _, _ := ingestedOnThree(t)
	read := func(i int, key string) []byte {
		n, err := stores[i].Stat(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, n)
		if err := stores[i].ReadAt(ctx, key, b, 0); err != nil {
			t.Fatal(err)
		}
		return b
	}
	manifests, identities := map[int][]byte{}, map[int][]byte{}
	for i := range stores {
		manifests[i], identities[i] = read(i, "ds/manifest"), read(i, "ds/identity")
		if _, err := stores[i].Stat(ctx, "ds/manifest.pending"); !errors.Is(err, backend.ErrNotExist) {
			t.Fatalf("a finished commit left a pending manifest on store %d: %v", i, err)
		}
	}
	// state sets each store to: "" nothing, "p" pending only, "r" real and pending, "R" real only.
	state := func(s string) {
		for i, c := range s {
			for _, k := range []string{"ds/manifest", "ds/identity", "ds/manifest.pending", "ds/identity.pending"} {
				stores[i].Delete(ctx, k)
			}
			if c == 'p' || c == 'r' {
				stores[i].Put(ctx, "ds/manifest.pending", manifests[i])
				stores[i].Put(ctx, "ds/identity.pending", identities[i])
			}
			if c == 'r' || c == 'R' {
				stores[i].Put(ctx, "ds/manifest", manifests[i])
				stores[i].Put(ctx, "ds/identity", identities[i])
			}
		}
	}
	for _, tc := range []struct {
		state   string
		visible bool
	}{
		{"ppp", false}, // killed after the pending copies: no real copy, nothing to see
		{"p", false},
		// The first real copy is a first ingest's commit point (issue 40:
		// before it, this state was "invisible", and a commit that failed
		// here took the real copy back).
		{"Rpp", true},
		{"RRp", true}, // killed after the quorum-th real copy: whole, one store pending
		{"RRr", true},
		{"rrp", true},
	} {
		state(tc.state + strings.Repeat("-", 3-len(tc.state)))
		ds, err := repository.Open(ctx, stores, "ds", repository.Options{})
		if !tc.visible {
			if !errors.Is(err, repository.ErrNotFound) {
				t.Fatalf("state %s: want no dataset, got %v", tc.state, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("state %s: %v", tc.state, err)
		}
		rep, err := ds.Verify(ctx, nil)
		if err != nil || !rep.Intact() {
			t.Fatalf("state %s: want whole, got %+v, %v", tc.state, rep, err)
		}
		if _, err := ds.Repair(ctx, rep, false, nil); err != nil {
			t.Fatalf("state %s: repair: %v", tc.state, err)
		}
		for i := range stores {
			if !bytes.Equal(read(i, "ds/manifest"), manifests[i]) || !bytes.Equal(read(i, "ds/identity"), identities[i]) {
				t.Fatalf("state %s: after repair store %d lacks its real manifest or identity", tc.state, i)
			}
			if _, err := stores[i].Stat(ctx, "ds/manifest.pending"); !errors.Is(err, backend.ErrNotExist) && strings.ContainsAny(tc.state[i:i+1], "p") {
				t.Fatalf("state %s: repair left store %d's pending manifest", tc.state, i)
			}
		}
	}
}

// ingestedOnThree ingests a small dataset "ds" RS(2,1) into three local stores.
func ingestedOnThree(t *testing.T) ([]backend.Store, *ingest.Source, ingest.Options) {
	t.Helper()
	base := t.TempDir()
	src := filepath.Join(base, "src")
	if _, err := synth.Write(src, synth.Spec{Counts: []int{20, 10}, MinSize: 100, MaxSize: 900, Seed: 9}); err != nil {
		t.Fatal(err)
	}
	var stores []backend.Store
	for i := 0; i < 3; i++ {
		s, _ := backend.NewLocal(filepath.Join(base, fmt.Sprint("s", i)))
		stores = append(stores, s)
	}
	source, err := ingest.Scan(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	opts := ingest.Options{Name: "ds", Stores: stores, Data: 2, Parity: 1}
	if _, err := ingest.Run(context.Background(), source, opts); err != nil {
		t.Fatal(err)
	}
	return stores, source, opts
}

// A --force re-ingest killed after writing its pending copies leaves the
// dataset it replaces whole: pending copies of another ingest never count.
func TestKilledForceCommitKeepsTheOldDataset(t *testing.T) {
	ctx := context.Background()
	stores, _, _ := ingestedOnThree(t)
	other, _, _ := ingestedOnThree(t) // another ingest of "ds", elsewhere
	for i := range stores {
		for _, k := range []string{"manifest", "identity"} {
			n, err := other[i].Stat(ctx, "ds/"+k)
			if err != nil {
				t.Fatal(err)
			}
			b := make([]byte, n)
			if err := other[i].ReadAt(ctx, "ds/"+k, b, 0); err != nil {
				t.Fatal(err)
			}
			stores[i].Put(ctx, "ds/"+k+".pending", b)
		}
	}
	before, err := repository.LoadManifest(ctx, stores, "ds", nil)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := repository.Open(ctx, stores, "ds", repository.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := ds.Verify(ctx, nil)
	if err != nil || !rep.Intact() || len(rep.Pending) != 0 || ds.Manifest.IngestID != before.IngestID {
		t.Fatalf("old dataset with another ingest's pending copies: ingest %s (want %s), %+v, %v", ds.Manifest.IngestID, before.IngestID, rep, err)
	}
}
