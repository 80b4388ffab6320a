package dataset

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardfs/shardfs/backend"
)

// Issue 55: the lock's refusal named every holder "ingest", so a user
// refused because a healer held the lock looked for an ingest that was
// never run. The refusal names the holder's kind, from the id it took the
// lock with.
func TestLockRefusalNamesItsHolder(t *testing.T) {
	ctx := context.Background()
	var stores []backend.Store
	for i := range 3 {
		s, err := backend.Open("file://"+filepath.Join(t.TempDir(), fmt.Sprint("s", i)), backend.OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
	}
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
