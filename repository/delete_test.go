package repository_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/internal/testds"
	"github.com/shardfs/shardfs/repository"
)

// refusesManifestDelete is a store that fails to delete key, as a store
// cut mid-delete does.
type refusesManifestDelete struct {
	backend.Store
	key string
}

func (s refusesManifestDelete) Delete(ctx context.Context, key string) error {
	if key == s.key {
		return &backend.Error{Store: s.String(), Op: "delete", Key: key, Err: fmt.Errorf("%w: cut", backend.ErrUnavailable)}
	}
	return s.Store.Delete(ctx, key)
}

// TestDeleteFailingAmongManifestsLeavesItWhole: a store that fails while
// a delete removes the manifest copies leaves the dataset whole, as the
// error says: the copies that went are put back, and it opens. CI
// (TestDeleteUnderFaults): a store cut after 5 of 6 copies went left one
// copy, the dataset did not open, and the error said it was whole.
func TestDeleteFailingAmongManifestsLeavesItWhole(t *testing.T) {
	ds := testds.New(t, synth.Spec{Counts: []int{20, 10}, MinSize: 500, MaxSize: 3000, Seed: 8}, nil)
	ctx := context.Background()
	stores := make([]backend.Store, len(ds.Faulty))
	for i, f := range ds.Faulty {
		stores[i] = f
	}
	stores[2] = refusesManifestDelete{stores[2], repository.ManifestKey("ds")}
	_, err := repository.Delete(ctx, stores, "ds", repository.DeleteOptions{})
	if err == nil || !strings.Contains(err.Error(), "the dataset is whole") {
		t.Fatalf("delete with store 2 failing its manifest's delete: %v, want an error that says the dataset is whole", err)
	}
	for i, s := range stores {
		if _, err := s.Stat(ctx, repository.ManifestKey("ds")); err != nil {
			t.Errorf("store %d after the failed delete: its manifest copy: %v", i, err)
		}
	}
	if _, err := repository.Open(ctx, stores, "ds", repository.Options{}); err != nil {
		t.Fatalf("the dataset after a delete that said it is whole: %v", err)
	}
	// A second delete, the store answering, removes it all.
	plain := make([]backend.Store, len(ds.Faulty))
	for i, f := range ds.Faulty {
		plain[i] = f
	}
	if _, err := repository.Delete(ctx, plain, "ds", repository.DeleteOptions{}); err != nil {
		t.Fatalf("a second delete: %v", err)
	}
	if _, err := repository.Open(ctx, plain, "ds", repository.Options{}); !errors.Is(err, repository.ErrNotFound) {
		t.Fatalf("open after the second delete: %v, want ErrNotFound", err)
	}
}
