package repository

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/busy"
	"github.com/shardfs/shardfs/internal/faultstore"
	"github.com/shardfs/shardfs/internal/miniotest"
)

// Issue 55: the lock's refusal named every holder "ingest", so a user
// refused because a healer held the lock looked for an ingest that was
// never run. The refusal names the holder's kind, from the id it took the
// lock with.
func TestLockRefusalNamesItsHolder(t *testing.T) {
	ctx := context.Background()
	stores := threeLocalStores(t)
	for id, kind := range map[string]string{
		"heal-node1-42":             "healer heal-node1-42",
		"gc-0011aabb":               "gc gc-0011aabb",
		"migrate-x":                 "migration migrate-x",
		"commit-job7":               "part commit commit-job7",
		"20261122T032005Z-993f201e": "ingest 20261122T032005Z-993f201e",
	} {
		held, _, err := AcquireLock(ctx, stores, "ds", id, LockOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = AcquireLock(ctx, stores, "ds", "20990101T000000Z-00000000", LockOptions{})
		if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "the dataset is locked: another "+kind+" (host") {
			t.Fatalf("the lock held by %s: %v; want the refusal to name %q", id, err, kind)
		}
		held.Release(ctx)
	}
}

// A lock's holder may go its own Stale between heartbeats: a taker with a
// shorter Stale waits that long too. A healer with --lease 20m (a heartbeat
// every 5 minutes) held its lock, and a delete, with the default 2 minutes,
// would have taken it over 3 minutes after a heartbeat, while the healer ran.
func TestLockHonoursItsHoldersStale(t *testing.T) {
	ctx := context.Background()
	stores := threeLocalStores(t)
	beat := time.Now().Add(-3 * time.Minute).Unix() // older than the taker's 2m, younger than the holder's 20m
	for _, c := range []struct {
		stale    int64
		takeOver bool
	}{{1200, false}, {0, true}, {60, true}} {
		body, _ := json.Marshal(LockInfo{IngestID: "heal-elsewhere-1", Host: "another-host", PID: 1, Started: beat, Heartbeat: beat, StaleSeconds: c.stale})
		for _, s := range stores {
			s.Delete(ctx, HealLockKey("ds"))
			if err := s.Put(ctx, HealLockKey("ds"), body); err != nil {
				t.Fatal(err)
			}
		}
		l, _, err := AcquireLock(ctx, stores, "ds", "delete-1", LockOptions{Key: HealLockKey("ds")})
		switch {
		case c.takeOver && err != nil:
			t.Fatalf("a holder 3 minutes silent, its own stale %ds: %v; want it taken over after the taker's 2 minutes", c.stale, err)
		case !c.takeOver && !errors.Is(err, ErrLocked):
			t.Fatalf("a holder 3 minutes silent, its own stale %ds: %v; want the lock refused", c.stale, err)
		}
		if l != nil {
			l.Release(ctx)
		}
	}
	// And a lock records its holder's Stale.
	l, _, err := AcquireLock(ctx, stores, "ds", "heal-here-1", LockOptions{Key: HealLockKey("ds"), Stale: 20 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	o, err := readLock(ctx, stores[0], HealLockKey("ds"))
	if err != nil || o.StaleSeconds != 1200 {
		t.Fatalf("the lock records stale %+v (%v), want 1200 s", o, err)
	}
}

// threeLocalStores opens three file:// stores in fresh directories.
// minioStores are n buckets of one MinIO server.
func minioStores(t *testing.T, n int) []backend.Store {
	t.Helper()
	var buckets []string
	for i := range n {
		buckets = append(buckets, fmt.Sprint("store", i))
	}
	srv := miniotest.Start(t, buckets...)
	creds := &backend.Credentials{AccessKeyID: miniotest.AccessKey, SecretAccessKey: miniotest.SecretKey}
	var stores []backend.Store
	for _, b := range buckets {
		s, err := backend.Open(srv.URL(b), backend.OpenOptions{Credentials: creds})
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
	}
	return stores
}

func threeLocalStores(t *testing.T) []backend.Store {
	t.Helper()
	var stores []backend.Store
	for i := range 3 {
		s, err := backend.Open("file://"+filepath.Join(t.TempDir(), fmt.Sprint("s", i)), backend.OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
	}
	return stores
}

// Two takers of a dead holder's lock, each of which read it before either
// wrote: a takeover deleted the lock it read and created its own, so the
// second taker deleted the first's fresh lock and created its own too,
// and both held the lock (and could both commit). A holder's Refresh read
// the lock, then wrote it: a taker's lock written between the two was
// overwritten. A takeover and a refresh now replace only the version they
// read (backend.Versions: S3's If-Match), so of two takers one holds the
// lock and the other is refused, naming it; and a stale holder whose lock
// was taken over loses it at its Refresh, leaving the taker's in place.
// On file:// stores and on MinIO.
func TestLockTakeoverHasOneWinner(t *testing.T) {
	ctx := context.Background()
	for _, where := range []string{"file", "MinIO"} {
		t.Run(where, func(t *testing.T) {
			var raw []backend.Store
			if where == "MinIO" {
				raw = minioStores(t, 3)
			} else {
				raw = threeLocalStores(t)
			}
			beat := time.Now().Add(-time.Hour).Unix()
			dead, _ := json.Marshal(LockInfo{IngestID: "20260101T000000Z-deaddead", Host: "another-host", PID: 1, Started: beat, Heartbeat: beat})
			for _, s := range raw {
				if err := s.Put(ctx, LockKey("ds"), dead); err != nil {
					t.Fatal(err)
				}
			}
			// Both takers read the dead lock on every store before
			// either writes one, and the first writes before the second.
			gate := &takeoverGate{readers: 2, read: make(chan struct{}), firstWrote: make(chan struct{})}
			stores := make([]backend.Store, len(raw))
			for i, s := range raw {
				stores[i] = &gatedStore{Store: s, gate: gate, store: i, stores: len(raw)}
			}
			type outcome struct {
				l   *Lock
				err error
			}
			got := make(chan outcome, 2)
			for _, id := range []string{"20260102T000000Z-aaaaaaaa", "20260102T000000Z-bbbbbbbb"} {
				go func() {
					l, _, err := AcquireLock(gate.as(ctx, id), stores, "ds", id, LockOptions{})
					got <- outcome{l, err}
				}()
			}
			var held []*Lock
			var refused []error
			for range 2 {
				o := <-got
				if o.err == nil {
					held = append(held, o.l)
				} else {
					refused = append(refused, o.err)
				}
			}
			for _, l := range held {
				defer l.Release(ctx)
			}
			if len(held) != 1 || len(refused) != 1 || !errors.Is(refused[0], ErrLocked) {
				t.Fatalf("two takers of a dead holder's lock: %d hold it, refused with %v; want one holder, the other refused (ErrLocked)", len(held), refused)
			}
			winner := held[0].info.IngestID
			for i, s := range raw {
				o, err := readLock(ctx, s, LockKey("ds"))
				if err != nil || o.IngestID != winner {
					t.Fatalf("store %d's lock is %+v (%v), want the holder %s's", i, o, err, winner)
				}
			}
			// A stale holder that comes back as another takes its lock
			// over, between its Refresh's read and write, loses the lock,
			// and the taker's lock stays.
			body, _ := json.Marshal(LockInfo{IngestID: "20260103T000000Z-cccccccc", Host: "another-host", PID: 1, Started: beat, Heartbeat: time.Now().Unix()})
			for i, s := range raw {
				held[0].stores[i] = &takenAfterRead{Store: s, body: body}
			}
			if err := held[0].Refresh(ctx); !errors.Is(err, ErrLockLost) || !strings.Contains(err.Error(), "20260103T000000Z-cccccccc") {
				t.Fatalf("Refresh of a lock another took over after its read: %v, want ErrLockLost naming the taker", err)
			}
			for i, s := range raw {
				if o, err := readLock(ctx, s, LockKey("ds")); err != nil || o.IngestID != "20260103T000000Z-cccccccc" {
					t.Fatalf("store %d's lock after the lost Refresh is %+v (%v), want the taker's", i, o, err)
				}
			}
		})
	}
}

// takeoverGate orders two takers: every read of the lock waits until both
// have read it on every store, and the second taker's first write on a
// store waits until the first taker has written there.
type takeoverGate struct {
	mu         sync.Mutex
	readers    int
	reads      int
	read       chan struct{}
	first      string
	firstWrote chan struct{}
	wrote      int
}

type takerKey struct{}

func (g *takeoverGate) as(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, takerKey{}, id)
}

// gatedStore is a store whose lock reads and writes go through gate.
type gatedStore struct {
	backend.Store
	gate          *takeoverGate
	store, stores int
}

func (s *gatedStore) taker(ctx context.Context, key string) (string, bool) {
	id, ok := ctx.Value(takerKey{}).(string)
	return id, ok && key == LockKey("ds")
}

func (s *gatedStore) afterRead(ctx context.Context, key string) {
	if _, ok := s.taker(ctx, key); !ok {
		return
	}
	g := s.gate
	g.mu.Lock()
	g.reads++
	if g.reads == g.readers*s.stores {
		close(g.read)
	}
	g.mu.Unlock()
	select {
	case <-g.read:
	case <-time.After(5 * time.Second): // a taker that read once more than planned
	}
}

// beforeWrite lets the first taker write at once, and tells once its lock
// is written on every store (makes: a write that makes the lock); it
// holds the second's writes until then.
func (s *gatedStore) beforeWrite(ctx context.Context, key string, makes bool) func() {
	id, ok := s.taker(ctx, key)
	if !ok {
		return func() {}
	}
	g := s.gate
	g.mu.Lock()
	if g.first == "" {
		g.first = id
	}
	first := g.first == id
	g.mu.Unlock()
	if first {
		if !makes {
			return func() {}
		}
		return func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.wrote++; g.wrote == s.stores {
				close(g.firstWrote)
			}
		}
	}
	select {
	case <-g.firstWrote:
	case <-time.After(5 * time.Second):
	}
	return func() {}
}

func (s *gatedStore) ReadWhole(ctx context.Context, key string, max int64, into func(size int64) []byte) (int64, bool, error) {
	size, whole, err := s.Store.ReadWhole(ctx, key, max, into)
	s.afterRead(ctx, key)
	return size, whole, err
}

func (s *gatedStore) Put(ctx context.Context, key string, data []byte) error {
	defer s.beforeWrite(ctx, key, true)()
	return s.Store.Put(ctx, key, data)
}

func (s *gatedStore) Delete(ctx context.Context, key string) error {
	defer s.beforeWrite(ctx, key, false)()
	return s.Store.Delete(ctx, key)
}

func (s *gatedStore) Create(ctx context.Context, key string, data []byte) error {
	if _, ok := s.taker(ctx, key); ok && s.gate.readOver() {
		defer s.beforeWrite(ctx, key, true)()
	}
	return s.Store.Create(ctx, key, data)
}

// readOver says both takers have read the lock: a Create before that is
// each taker's first try, which the dead lock refuses.
func (g *takeoverGate) readOver() bool {
	select {
	case <-g.read:
		return true
	default:
		return false
	}
}

// takenAfterRead is a store on which another takes the lock over right
// after each read of it.
type takenAfterRead struct {
	backend.Store
	body []byte
}

func (s *takenAfterRead) ReadWhole(ctx context.Context, key string, max int64, into func(size int64) []byte) (int64, bool, error) {
	size, whole, err := s.Store.ReadWhole(ctx, key, max, into)
	if key == LockKey("ds") {
		if perr := s.Store.Put(context.Background(), key, s.body); perr != nil {
			return 0, false, perr
		}
	}
	return size, whole, err
}

// Takers of one dead lock, at once, while each store fails a random call:
// in every round at most one holds the lock, and it holds it on a majority
// of the stores.
func TestLockTakeoverUnderStoreFailures(t *testing.T) {
	busy.Burn(t, runtime.GOMAXPROCS(0))
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(59, 4))
	base := threeLocalStores(t)
	held := 0
	for round := range 30 {
		beat := time.Now().Add(-time.Hour).Unix()
		dead, _ := json.Marshal(LockInfo{IngestID: "20260101T000000Z-deaddead", Host: "another-host", PID: 1, Started: beat, Heartbeat: beat})
		stores := make([]backend.Store, len(base))
		for i, s := range base {
			if err := s.Put(ctx, LockKey("ds"), dead); err != nil {
				t.Fatal(err)
			}
			f := faultstore.New(s)
			f.FailNth(1 + rng.IntN(5))
			stores[i] = f
		}
		var mu sync.Mutex
		var holders []*Lock
		var wg sync.WaitGroup
		for k := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, _, err := AcquireLock(ctx, stores, "ds", fmt.Sprintf("20260102T000000Z-%08d", round*10+k), LockOptions{})
				if err == nil {
					mu.Lock()
					holders = append(holders, l)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(holders) > 1 {
			t.Fatalf("round %d: %d takers hold the lock at once", round, len(holders))
		}
		for _, l := range holders {
			on := 0
			for _, s := range base {
				if o, err := readLock(ctx, s, LockKey("ds")); err == nil && o.IngestID == l.info.IngestID {
					on++
				}
			}
			if on < majority(len(base)) {
				t.Fatalf("round %d: the holder's lock is on %d stores, want a majority", round, on)
			}
			held++
			l.Release(ctx)
		}
	}
	if held == 0 {
		t.Fatal("no round had a holder: the faults left the test nothing to check")
	}
	t.Logf("%d of 30 rounds had a holder", held)
}

// Takers of one dead lock in processes of their own, started at one
// instant, with every core kept busy: in each round at most one holds the
// lock (it keeps it 2 s, longer than the others take to try), and each
// other is refused, naming a holder. Takers that each win a minority of
// the stores all give up, so a round may have none; some must have one.
func TestLockTakeoverAcrossProcesses(t *testing.T) {
	busy.Burn(t, runtime.GOMAXPROCS(0))
	var dirs []string
	var stores []backend.Store
	for i := range 3 {
		dir := filepath.Join(t.TempDir(), fmt.Sprint("s", i))
		s, err := backend.Open("file://"+dir, backend.OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dirs, stores = append(dirs, dir), append(stores, s)
	}
	ctx := context.Background()
	const takers = 6
	rounds := 0
	for round := range 4 {
		beat := time.Now().Add(-time.Hour).Unix()
		dead, _ := json.Marshal(LockInfo{IngestID: "20260101T000000Z-deaddead", Host: "another-host", PID: 1, Started: beat, Heartbeat: beat})
		for _, s := range stores {
			if err := s.Put(ctx, LockKey("ds"), dead); err != nil {
				t.Fatal(err)
			}
		}
		at := time.Now().Add(time.Second).UnixNano()
		var cmds []*exec.Cmd
		var outs []*bytes.Buffer
		for k := range takers {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "SHARDFS_LOCK_TAKER_STORES="+strings.Join(dirs, ","), fmt.Sprint("SHARDFS_LOCK_TAKER_AT=", at),
				fmt.Sprintf("SHARDFS_LOCK_TAKER_ID=20260102T000000Z-%04d%04d", round, k))
			out := &bytes.Buffer{}
			cmd.Stdout, cmd.Stderr = out, out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			cmds, outs = append(cmds, cmd), append(outs, out)
		}
		held, refused := 0, 0
		for k, cmd := range cmds {
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("round %d, taker %d: %v: %s", round, k, err, outs[k])
				}
			case <-time.After(time.Minute):
				cmd.Process.Kill()
				t.Fatalf("round %d, taker %d still runs after a minute: %s", round, k, outs[k])
			}
			switch out := outs[k].String(); {
			case strings.HasPrefix(out, "held"):
				held++
			case strings.HasPrefix(out, "refused") && strings.Contains(out, "the dataset is locked: another"):
				refused++
			default:
				t.Fatalf("round %d, taker %d said %q: want held, or refused naming the holder", round, k, out)
			}
		}
		if held > 1 || held+refused != takers {
			t.Fatalf("round %d: %d of %d taker processes held the lock, %d were refused; want at most 1 holder", round, held, takers, refused)
		}
		rounds += held
	}
	if rounds == 0 {
		t.Fatal("no round had a holder: the test checked nothing")
	}
	t.Logf("%d of 4 rounds had a holder", rounds)
}

// lockTaker is one taker process of TestLockTakeoverAcrossProcesses: it
// waits for the instant given, takes the lock of ds on the stores given,
// says "held" (and keeps it 2 s) or "refused: why", and returns its exit
// code.
func lockTaker(dirs, at, id string) int {
	var stores []backend.Store
	for _, dir := range strings.Split(dirs, ",") {
		s, err := backend.Open("file://"+dir, backend.OpenOptions{})
		if err != nil {
			fmt.Println("open:", err)
			return 1
		}
		stores = append(stores, s)
	}
	ns, _ := strconv.ParseInt(at, 10, 64)
	time.Sleep(time.Until(time.Unix(0, ns)))
	ctx := context.Background()
	l, _, err := AcquireLock(ctx, stores, "ds", id, LockOptions{})
	if err != nil {
		fmt.Println("refused:", err)
		return 0
	}
	fmt.Println("held")
	time.Sleep(2 * time.Second)
	l.Release(ctx)
	return 0
}

func TestMain(m *testing.M) {
	if dirs := os.Getenv("SHARDFS_LOCK_TAKER_STORES"); dirs != "" {
		os.Exit(lockTaker(dirs, os.Getenv("SHARDFS_LOCK_TAKER_AT"), os.Getenv("SHARDFS_LOCK_TAKER_ID")))
	}
	os.Exit(m.Run())
}
