package repository

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardfs/shardfs/backend"
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
