package fs

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/shardfs/shardfs/layout"
)

// PrimeRanks bounds the ranks a mount primes: a node runs a few ranks, one
// a GPU, and a mount that serves more (every rank of a large job, as a
// shared or test mount does) is not read by them all at once, so it
// primes none.
const PrimeRanks = 8

// primedRank is a rank-epoch's member table that Prime computed, for the
// directory's first lookup to take; done is closed once m or err is set.
type primedRank struct {
	params layout.Params
	done   chan struct{}
	m      *layout.Members
	err    error
}

// Prime starts fetching the first batches of epoch e for the ranks the
// tree serves (none when they are more than PrimeRanks) before any of their files is
// opened: prefetch.Reader.Prime, for hold at most. It computes each
// rank-epoch's order as its directory's first lookup would, and leaves it
// for that lookup, which then does not compute it again. It returns once
// every primer is started; with --follow the epoch's dataset version may
// take that long to be known, so callers run it in a goroutine.
func Prime(ctx context.Context, root gofs.InodeEmbedder, e int, hold time.Duration) error {
	rd, ok := root.(*rootDir)
	if !ok {
		return fmt.Errorf("prime: not a shardfs root")
	}
	t, err := rd.t.forEpoch(e)
	if err != nil {
		return fmt.Errorf("prime epoch %d: %w", e, err)
	}
	if len(t.Ranks) > PrimeRanks {
		return nil
	}
	var errs []error
	for _, r := range t.Ranks {
		if ctx.Err() != nil {
			return nil
		}
		params, err := t.rankParams(e, r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		pr := &primedRank{params: params, done: make(chan struct{})}
		key := [2]int{e, r}
		t.pinMu.Lock()
		if t.primed == nil {
			t.primed = map[[2]int]*primedRank{}
		}
		if t.primed[key] != nil {
			t.pinMu.Unlock()
			continue
		}
		t.primed[key] = pr
		t.pinMu.Unlock()
		path := "epochs/" + layout.EpochName(e) + "/" + layout.RankName(r)
		pr.m, pr.err = t.loadMembers(ctx, params, path)
		close(pr.done)
		if pr.err != nil {
			t.dropPrimed(key, pr)
			errs = append(errs, pr.err)
			continue
		}
		m := pr.m
		if m.Order().Batches == 0 {
			continue
		}
		t.Reader.Prime(m.Batch(0), hold)
	}
	return errors.Join(errs...)
}

// takePrimed hands the member table Prime computed for the rank-epoch of
// params to its directory, waiting for it if Prime is computing it: nil if
// there is none, or it was made with other params.
func (t *tree) takePrimed(ctx context.Context, params layout.Params) *layout.Members {
	key := [2]int{params.Epoch, params.Rank}
	t.pinMu.Lock()
	pr := t.primed[key]
	t.pinMu.Unlock()
	if pr == nil {
		return nil
	}
	select {
	case <-pr.done:
	case <-ctx.Done():
		return nil
	}
	t.dropPrimed(key, pr)
	if pr.err != nil || !reflect.DeepEqual(pr.params, params) {
		return nil
	}
	return pr.m
}

func (t *tree) dropPrimed(key [2]int, pr *primedRank) {
	t.pinMu.Lock()
	defer t.pinMu.Unlock()
	if t.primed[key] == pr {
		delete(t.primed, key)
	}
}
