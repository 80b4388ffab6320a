package heal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/erasure"
	"github.com/shardfs/shardfs/ingest"
	"github.com/shardfs/shardfs/internal/faultstore"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/repository"
)

// ingestLocal ingests a small dataset RS(4,2) into six local stores, in
// shards of about 100 kB, and returns the stores and their directories.
func ingestLocal(t *testing.T) ([]backend.Store, []string) {
	t.Helper()
	base := t.TempDir()
	src := filepath.Join(base, "src")
	if _, err := synth.Write(src, synth.Spec{Counts: []int{60, 30, 10}, MinSize: 1000, MaxSize: 9000, Seed: 4}); err != nil {
		t.Fatal(err)
	}
	var stores []backend.Store
	var dirs []string
	for i := range 6 {
		d := filepath.Join(base, fmt.Sprint("s", i))
		s, err := backend.NewLocal(d)
		if err != nil {
			t.Fatal(err)
		}
		stores, dirs = append(stores, s), append(dirs, d)
	}
	source, err := ingest.Scan(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ingest.Run(context.Background(), source, ingest.Options{Name: "ds", Stores: stores, Data: 4, Parity: 2, ShardSize: 100_000, BlockSize: 4096}); err != nil {
		t.Fatal(err)
	}
	return stores, dirs
}

func verify(t *testing.T, stores []backend.Store) *repository.Report {
	t.Helper()
	ds, err := repository.Open(context.Background(), stores, "ds", repository.Options{LostIndexesOK: true})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := ds.Verify(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// One cycle finds a deleted fragment, a fragment with a flipped byte, a
// lost manifest copy and a lost identity, and mends them all: verify is
// clean after, the margin gauge went to m-1 and back to m, and the state
// says one cycle was done.
func TestOnceHealsFragmentsAndMetadata(t *testing.T) {
	stores, dirs := ingestLocal(t)
	frags, _ := filepath.Glob(filepath.Join(dirs[2], "ds", "data", "*", "*"))
	if len(frags) < 4 {
		t.Fatalf("store 2 holds %d fragments, want several", len(frags))
	}
	os.Remove(frags[0])
	b, _ := os.ReadFile(frags[len(frags)-1])
	b[len(b)/2] ^= 0xff
	os.WriteFile(frags[len(frags)-1], b, 0o644)
	os.Remove(filepath.Join(dirs[4], "ds", "manifest"))
	os.Remove(filepath.Join(dirs[5], "ds", "identity"))
	rep := verify(t, stores)
	if len(rep.Damaged) != 2 || len(rep.BadManifests) != 1 || len(rep.NoIdentity) != 1 {
		t.Fatalf("before healing: %d damaged fragments, %d bad manifests, %d missing identities; want 2, 1, 1", len(rep.Damaged), len(rep.BadManifests), len(rep.NoIdentity))
	}
	reg := prometheus.NewRegistry()
	met := NewMetrics(reg)
	if err := Run(context.Background(), Config{Stores: stores, Name: "ds", Once: true, Batch: 2, Metrics: met}); err != nil {
		t.Fatal(err)
	}
	if rep := verify(t, stores); !rep.Intact() {
		t.Fatalf("after one cycle: not intact: %+v", rep)
	}
	if got := testutil.ToFloat64(met.rebuilt.WithLabelValues("ds")); got != 4 {
		t.Fatalf("objects written %v, want 4 (2 fragments, a manifest copy, an identity)", got)
	}
	if got := testutil.ToFloat64(met.margin.WithLabelValues("ds")); got != 2 {
		t.Fatalf("margin after healing %v, want 2", got)
	}
	st, err := ReadState(context.Background(), stores, "ds")
	if err != nil || st == nil || st.Cycle != 1 || st.Next != 0 || st.Margin != 2 || st.Parity != 2 {
		t.Fatalf("state after one cycle: %+v, %v", st, err)
	}
}

// A store that does not answer keeps the margin down (its fragments cannot
// be checked), and nothing is written to it.
func TestMarginCountsAStoreDown(t *testing.T) {
	stores, dirs := ingestLocal(t)
	os.RemoveAll(filepath.Join(dirs[1], "ds", "data"))
	down := &downStore{Store: stores[3]}
	down.down.Store(true)
	stores[3] = down
	reg := prometheus.NewRegistry()
	met := NewMetrics(reg)
	if err := Run(context.Background(), Config{Stores: stores, Name: "ds", Once: true, Metrics: met}); err != nil {
		t.Fatal(err)
	}
	// Store 1's fragments are rebuilt; store 3's cannot be checked.
	if got := testutil.ToFloat64(met.margin.WithLabelValues("ds")); got != 1 {
		t.Fatalf("margin with one store down %v, want 1", got)
	}
	if n := down.writes.Load(); n != 0 {
		t.Fatalf("%d writes reached the store that is down", n)
	}
	down.down.Store(false)
	if rep := verify(t, stores); !rep.Intact() {
		t.Fatalf("with the store back: not intact: %+v", rep.Damaged)
	}
}

// downStore fails every request while down, counting the writes of the
// dataset's objects it is sent (not the healer's own state and locks,
// which it tries everywhere).

type downStore struct {
	backend.Store
	down   atomic.Bool
	writes atomic.Int64
}

func (s *downStore) fail() error {
	if s.down.Load() {
		return fmt.Errorf("store down: %w", backend.ErrUnavailable)
	}
	return nil
}
func (s *downStore) ReadAt(ctx context.Context, k string, p []byte, off int64) error {
	if err := s.fail(); err != nil {
		return err
	}
	return s.Store.ReadAt(ctx, k, p, off)
}
func (s *downStore) ReadAtV(ctx context.Context, k string, b [][]byte, off int64) error {
	if err := s.fail(); err != nil {
		return err
	}
	return s.Store.ReadAtV(ctx, k, b, off)
}
func (s *downStore) count(k string) {
	if !strings.Contains(k, "/heal/") && !strings.HasSuffix(k, "/lock") {
		s.writes.Add(1)
	}
}
func (s *downStore) Put(ctx context.Context, k string, d []byte) error {
	s.count(k)
	if err := s.fail(); err != nil {
		return err
	}
	return s.Store.Put(ctx, k, d)
}
func (s *downStore) Create(ctx context.Context, k string, d []byte) error {
	s.count(k)
	if err := s.fail(); err != nil {
		return err
	}
	return s.Store.Create(ctx, k, d)
}
func (s *downStore) ReadWhole(ctx context.Context, k string, max int64, into func(int64) []byte) (int64, bool, error) {
	if err := s.fail(); err != nil {
		return 0, false, err
	}
	return s.Store.ReadWhole(ctx, k, max, into)
}
func (s *downStore) Stat(ctx context.Context, k string) (int64, error) {
	if err := s.fail(); err != nil {
		return 0, err
	}
	return s.Store.Stat(ctx, k)
}
func (s *downStore) List(ctx context.Context, p string) ([]string, error) {
	if err := s.fail(); err != nil {
		return nil, err
	}
	return s.Store.List(ctx, p)
}
func (s *downStore) Delete(ctx context.Context, k string) error {
	s.count(k)
	if err := s.fail(); err != nil {
		return err
	}
	return s.Store.Delete(ctx, k)
}

// A healer resumes where the state says: with the state at the last shard,
// one cycle checks one step's shards, not the whole dataset.
func TestResumesAtRecordedShard(t *testing.T) {
	stores, _ := ingestLocal(t)
	ds, err := repository.Open(context.Background(), stores, "ds", repository.Options{})
	if err != nil {
		t.Fatal(err)
	}
	n := len(ds.Manifest.Shards)
	if n < 4 {
		t.Fatalf("%d shards, want at least 4", n)
	}
	b, _ := json.Marshal(State{Version: ds.Current.IngestID, Cycle: 7, Next: n - 1, Updated: time.Now().Unix()})
	for _, s := range stores {
		s.Put(context.Background(), repository.HealStateKey("ds"), b)
	}
	reg := prometheus.NewRegistry()
	met := NewMetrics(reg)
	if err := Run(context.Background(), Config{Stores: stores, Name: "ds", Once: true, Batch: 1, Metrics: met}); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(met.shardsChecked.WithLabelValues("ds")); got != 1 {
		t.Fatalf("resumed at the last of %d shards, checked %v shards; want 1", n, got)
	}
	if st, _ := ReadState(context.Background(), stores, "ds"); st == nil || st.Cycle != 8 {
		t.Fatalf("state after the resumed cycle: %+v, want cycle 8", st)
	}
	// A state of another version is not resumed: the whole dataset is checked.
	b, _ = json.Marshal(State{Version: "another", Cycle: 3, Next: n - 1, Updated: time.Now().Unix() + 1})
	for _, s := range stores {
		s.Put(context.Background(), repository.HealStateKey("ds"), b)
	}
	if err := Run(context.Background(), Config{Stores: stores, Name: "ds", Once: true, Batch: 1, Metrics: met}); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(met.shardsChecked.WithLabelValues("ds")); got != float64(1+n) {
		t.Fatalf("checked %v shards in all, want %d", got, 1+n)
	}
}

// A hint left by a mount is healed and removed, during the pause, long
// before the next cycle.
func TestHintHealedDuringPause(t *testing.T) {
	stores, dirs := ingestLocal(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ds, err := repository.Open(ctx, stores, "ds", repository.Options{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Stores: stores, Name: "ds", Pause: time.Hour, HintPoll: 100 * time.Millisecond})
	}()
	waitState(ctx, t, stores, func(st *State) bool { return st.Cycle == 1 })
	frags, _ := filepath.Glob(filepath.Join(dirs[0], "ds", "data", "*", "00000001.*"))
	if len(frags) != 1 {
		t.Fatalf("shard 1 on store 0: %v", frags)
	}
	os.Remove(frags[0])
	h := repository.NewHinter(stores, "ds", nil)
	h.SetVersion(ds.Manifest)
	h.Heal(&erasure.HealNeeded{Shard: 1, Stores: []int{0}})
	h.Heal(&erasure.HealNeeded{Shard: 1, Stores: []int{0}}) // once per shard
	h.Close()
	start := time.Now()
	for {
		if _, err := os.Stat(frags[0]); err == nil {
			break
		}
		if time.Since(start) > 20*time.Second {
			t.Fatal("the hinted fragment was not rebuilt in 20 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for time.Since(start) < 20*time.Second {
		keys, _ := stores[0].List(ctx, repository.HealHintPrefix("ds"))
		if len(keys) == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if keys, _ := stores[0].List(ctx, repository.HealHintPrefix("ds")); len(keys) != 0 {
		t.Fatalf("hints left after healing: %v", keys)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if rep := verify(t, stores); !rep.Intact() {
		t.Fatalf("not intact: %+v", rep.Damaged)
	}
}

// Of two healers, one holds the lock; --once on the other says so.
func TestOneHealerAtATime(t *testing.T) {
	stores, _ := ingestLocal(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, Config{Stores: stores, Name: "ds", Pause: time.Hour}) }()
	waitState(ctx, t, stores, func(st *State) bool { return st.Cycle == 1 })
	err := Run(context.Background(), Config{Stores: stores, Name: "ds", Once: true})
	if err == nil || !errors.Is(err, repository.ErrLocked) {
		t.Fatalf("a second healer with --once: %v, want ErrLocked", err)
	}
	cancel()
	<-done
	// Released: the next one runs.
	if err := Run(context.Background(), Config{Stores: stores, Name: "ds", Once: true}); err != nil {
		t.Fatal(err)
	}
}

// The byte rate holds: a cycle over about 700 kB of fragments at 256 KiB/s
// takes at least the time the rate allows for them (more is read: every
// data fragment twice, and the metadata), less the second of burst.
func TestByteRateBound(t *testing.T) {
	stores, _ := ingestLocal(t)
	ds, _ := repository.Open(context.Background(), stores, "ds", repository.Options{})
	var total int64
	for si := range ds.Manifest.Shards {
		total += ds.Manifest.FragSize(si) * 6
	}
	const rate = 256 << 10
	start := time.Now()
	if err := Run(context.Background(), Config{Stores: stores, Name: "ds", Once: true, Rates: Rates{BytesPerSec: rate}}); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	// A second's worth of bytes passes at once.
	if min := time.Duration(float64(total-rate) / rate * float64(time.Second)); took < min {
		t.Fatalf("read %d fragment bytes in %v at %d B/s: faster than the bound allows (%v)", total, took, rate, min)
	}
	t.Logf("%d bytes in %v at a bound of %d B/s", total, took, rate)
}

// A version replaced while the healer pauses, and its fragments removed
// (as gc would): a mount's hint for one of its shards must not read as
// damage. The healer finds the new version current, moves to it, writes
// nothing, and its margin stays m.
func TestNewVersionIsNotDamage(t *testing.T) {
	stores, _ := ingestLocal(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	old, err := repository.Open(ctx, stores, "ds", repository.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	met := NewMetrics(reg)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Stores: stores, Name: "ds", Pause: time.Hour, HintPoll: 100 * time.Millisecond, Metrics: met})
	}()
	waitState(ctx, t, stores, func(st *State) bool { return st.Cycle == 1 })
	src := filepath.Join(t.TempDir(), "src2")
	if _, err := synth.Write(src, synth.Spec{Counts: []int{20, 10}, MinSize: 1000, MaxSize: 9000, Seed: 9}); err != nil {
		t.Fatal(err)
	}
	source, err := ingest.Scan(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := ingest.Run(ctx, source, ingest.Options{Name: "ds", Stores: stores, Data: 4, Parity: 2, ShardSize: 100_000, BlockSize: 4096, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stores {
		keys, _ := s.List(ctx, repository.DataPrefix("ds")+old.Current.IngestID+"/")
		for _, k := range keys {
			s.Delete(ctx, k)
		}
	}
	h := repository.NewHinter(stores, "ds", nil)
	h.SetVersion(old.Manifest)
	h.Heal(&erasure.HealNeeded{Shard: 0, Stores: []int{0}})
	h.Close()
	waitState(ctx, t, stores, func(st *State) bool { return st.Version == res.Manifest.IngestID })
	if got := testutil.ToFloat64(met.rebuilt.WithLabelValues("ds")); got != 0 {
		t.Fatalf("the healer wrote %v objects for a version gc removed", got)
	}
	if got := testutil.ToFloat64(met.margin.WithLabelValues("ds")); got != 2 {
		t.Fatalf("margin %v after the version changed, want 2", got)
	}
	for _, s := range stores {
		if keys, _ := s.List(ctx, repository.DataPrefix("ds")+old.Current.IngestID+"/"); len(keys) != 0 {
			t.Fatalf("fragments of the removed version written back: %v", keys)
		}
	}
	cancel()
	<-done
}

// waitState waits until the recorded state satisfies ok, or fails when
// ctx ends.
func waitState(ctx context.Context, t *testing.T, stores []backend.Store, ok func(*State) bool) {
	t.Helper()
	for {
		if st, _ := ReadState(ctx, stores, "ds"); st != nil && ok(st) {
			return
		}
		if ctx.Err() != nil {
			st, _ := ReadState(context.Background(), stores, "ds")
			t.Fatalf("the healer's state did not come to what the test waits for; it is %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ReadState answers "no position recorded" while some stores answer and
// none holds a state, whatever the others do; it fails only when no store
// answers. It failed whenever any store did not answer before a first
// state was written (it compared the count of its per-store results, one
// for every store, with the count of stores): TestHealKilledAtRandomMoments
// met it when the first healer was killed before it wrote its state and
// the next round took a store down.
func TestReadStateWithStoresDown(t *testing.T) {
	ctx := context.Background()
	var stores []backend.Store
	var faults []*faultstore.Faulty
	for i := range 6 {
		s, err := backend.NewLocal(filepath.Join(t.TempDir(), fmt.Sprint("s", i)))
		if err != nil {
			t.Fatal(err)
		}
		f := faultstore.New(s)
		stores, faults = append(stores, f), append(faults, f)
	}
	for down := range 5 {
		faults[down].SetDown(true)
		st, err := ReadState(ctx, stores, "ds")
		if err != nil || st != nil {
			t.Fatalf("no state anywhere, %d of 6 stores down: got %+v, %v; want no state and no error", down+1, st, err)
		}
	}
	faults[5].SetDown(true)
	if _, err := ReadState(ctx, stores, "ds"); err != nil {
		t.Logf("every store down: %v", err)
	} else {
		t.Fatal("every store down: ReadState said nothing is recorded; want the stores' error")
	}
}
