package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/synth"
)

// Issue 40 item 2: migrate --to-stores accepted an old store under another
// host name (localhost for 127.0.0.1) and re-encoded it in place, leaving
// the old set, the rollback, with foreign fragments. The probe now spans
// the old and the new stores together and refuses before any write.
func TestMigrateRefusesAnOldStoreUnderAnotherName(t *testing.T) {
	c := startCluster(t, 5)
	old := c.urls[:3]
	alias := strings.Replace(old[0], "127.0.0.1", "localhost", 1)
	if alias == old[0] {
		t.Fatalf("store URL %s has no 127.0.0.1 to alias", old[0])
	}
	src := writeSource(t, synth.Imbalanced(40, 3, 0.7, 500, 4_000, 3))
	if r := run(t, time.Minute, nil, "ingest", "--stores="+strings.Join(old, ","), "--data=2", "--parity=1", src, "moving"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	before := storeSums(t, []backend.Store{c.store(t, 0), c.store(t, 1), c.store(t, 2), c.store(t, 3), c.store(t, 4)}, "moving")
	to := []string{alias, c.urls[3], c.urls[4]}
	r := run(t, time.Minute, nil, "migrate", "--stores="+strings.Join(old, ","), "moving", "--to-stores="+strings.Join(to, ","), "--data=1", "--parity=2")
	want := "old store 0 (" + old[0] + ") and new store 0 (" + alias + ") are the same place under two names"
	if r.code == 0 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "Nothing was written") {
		t.Fatalf("want the alias of an old store refused, naming both: %v", r)
	}
	after := storeSums(t, []backend.Store{c.store(t, 0), c.store(t, 1), c.store(t, 2), c.store(t, 3), c.store(t, 4)}, "moving")
	if len(after) != len(before) {
		t.Fatalf("the refused migrate left %d objects, %d before", len(after), len(before))
	}
	for k, sum := range before {
		if after[k] != sum {
			t.Fatalf("the refused migrate changed %s", k)
		}
	}
	if r := run(t, time.Minute, nil, "verify", "--stores="+strings.Join(old, ","), "moving"); r.code != 0 {
		t.Fatalf("the old set after the refused migrate: %v", r)
	}
}
