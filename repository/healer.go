package repository

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/manifest"
)

// This file holds what the healer (package heal) keeps on the stores: its
// own lock, where it is in its scrub, and the hints mounts leave it
// (Hinter writes them); and the listing of a dataset's fragments its
// survey compares with where they belong.

// AcquireHealLock takes the healer's lock of dataset name (HealLockKey),
// which makes one healer of a dataset at a time: stale after lease, its
// heartbeat every lease/4. The returned context is cancelled if the lock
// is lost (ErrLockLost).
func AcquireHealLock(ctx context.Context, stores []backend.Store, name, id string, lease time.Duration, log *slog.Logger) (*Lock, context.Context, error) {
	return AcquireLock(ctx, stores, name, id, LockOptions{Key: HealLockKey(name), Stale: lease, Heartbeat: lease / 4, Logger: log})
}

// maxHealState bounds a heal state object: a larger one is not the
// healer's.
const maxHealState = 64 << 10

// ReadHealState reads store s's copy of the healer's state of dataset
// name: nil, nil when it holds none.
func ReadHealState(ctx context.Context, s backend.Store, name string) ([]byte, error) {
	key := HealStateKey(name)
	size, err := s.Stat(ctx, key)
	if errors.Is(err, backend.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if size > maxHealState {
		return nil, fmt.Errorf("store %s: %s of %d bytes is not a heal state", s, key, size)
	}
	b := make([]byte, size)
	if err := s.ReadAt(ctx, key, b, 0); err != nil {
		return nil, err
	}
	return b, nil
}

// WriteHealState writes the healer's state of dataset name to every store
// that takes it: advisory, so a store that does not is no failure. holds
// runs right before each store's write, and a store whose holds fails is
// not written: a healer frozen (SIGSTOP, a paused VM) among its writes
// for longer than its lease may have been taken over, and its writes not
// yet sent must not land over the new healer's state (one way
// TestTwoHealersOneWrites can fail: the stopped healer, resumed, writes
// after the other took over).
func WriteHealState(ctx context.Context, stores []backend.Store, name string, b []byte, holds func(context.Context) error) {
	backend.OnEvery(stores, func(i int, s backend.Store) error {
		if err := holds(ctx); err != nil {
			return err
		}
		return s.Put(ctx, HealStateKey(name), b)
	})
}

// Fragments is which fragments of a dataset one store's listing holds.
type Fragments map[string]bool

// Holds reports whether the listing holds fragment frag of shard of the
// dataset name whose header is h.
func (f Fragments) Holds(name string, h *manifest.Header, shard, frag int) bool {
	return f[ShardFragmentKey(name, h, shard, frag)]
}

// ListFragments lists the fragments of dataset name that store s holds.
func ListFragments(ctx context.Context, s backend.Store, name string) (Fragments, error) {
	keys, err := s.List(ctx, DataPrefix(name))
	if err != nil {
		return nil, err
	}
	f := make(Fragments, len(keys))
	for _, k := range keys {
		f[k] = true
	}
	return f, nil
}

// Hints are the hints mounts left for the healer of a dataset: per
// ingest, the shards read degraded.
type Hints struct {
	Shards map[string]map[int]bool // ingest id -> shard -> hinted
	held   map[string][]int        // hint key -> stores holding it
}

// ListHints lists the hints of dataset name on every store that answers.
func ListHints(ctx context.Context, stores []backend.Store, name string) *Hints {
	h := &Hints{Shards: map[string]map[int]bool{}, held: map[string][]int{}}
	var mu sync.Mutex
	backend.OnEvery(stores, func(i int, s backend.Store) error {
		ks, err := s.List(ctx, HealHintPrefix(name))
		mu.Lock()
		defer mu.Unlock()
		for _, k := range ks {
			h.held[k] = append(h.held[k], i)
		}
		return err
	})
	for k := range h.held {
		id, si, ok := parseHint(strings.TrimPrefix(k, HealHintPrefix(name)))
		if !ok {
			continue
		}
		if h.Shards[id] == nil {
			h.Shards[id] = map[int]bool{}
		}
		h.Shards[id][si] = true
	}
	return h
}

// Empty reports whether no store held a hint.
func (h *Hints) Empty() bool { return len(h.held) == 0 }

// Delete deletes every hint listed from the stores that held it.
func (h *Hints) Delete(ctx context.Context, stores []backend.Store) {
	for k, on := range h.held {
		for _, i := range on {
			stores[i].Delete(ctx, k)
		}
	}
}

// parseHint reads a hint's name (HealHintKey past its prefix):
// INGEST.SHARD.
func parseHint(s string) (string, int, bool) {
	dot := strings.LastIndexByte(s, '.')
	if dot <= 0 {
		return "", 0, false
	}
	si, err := strconv.Atoi(s[dot+1:])
	return s[:dot], si, err == nil && si >= 0
}
