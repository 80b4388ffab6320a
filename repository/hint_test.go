package repository_test

import (
	"context"
	"slices"
	"testing"

	"github.com/shardfs/shardfs/erasure"
	"github.com/shardfs/shardfs/repository"
)

// TestHinterHintsOnlyItsVersionsShards (issue 58): a heal handed to the
// hinter of another version (a shard number it does not hold) writes no
// hint, whose key would name another ingest's shard; one of its own shards
// is hinted once, however often it is handed over.
func TestHinterHintsOnlyItsVersionsShards(t *testing.T) {
	ctx := context.Background()
	stores, _, _, err := ingestLocal(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := repository.Open(ctx, stores, "ds", repository.Options{})
	if err != nil {
		t.Fatal(err)
	}
	n := ds.Manifest.NumShards()
	h := repository.NewHinter(stores, "ds", nil)
	h.SetVersion(ds.Manifest)
	h.Heal(&erasure.HealNeeded{Shard: n, Stores: []int{1}})
	h.Heal(&erasure.HealNeeded{Shard: -1, Stores: []int{1}})
	h.Heal(&erasure.HealNeeded{Shard: n - 1, Stores: []int{2}})
	h.Heal(&erasure.HealNeeded{Shard: n - 1, Stores: []int{3}})
	h.Close()
	for i, s := range stores {
		hints, err := s.List(ctx, repository.HealHintPrefix("ds"))
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{repository.ShardHealHintKey("ds", &ds.Manifest.Header, n-1)}; !slices.Equal(hints, want) {
			t.Fatalf("store %d holds hints %v, want only %v", i, hints, want)
		}
	}
}
