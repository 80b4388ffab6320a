package erasure

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// HealNeeded is what a read returns when it served every byte asked for,
// verified, yet found the shard's fragment on some stores missing or
// corrupt (not late, not on a store that is down): the bytes came from the
// other fragments, and the shard should be rebuilt before another loss
// makes it unreadable. It is an error value so that no caller can take
// its bytes without seeing it, as MinIO's reads return "heal required";
// the caller serves the bytes and hands it to whoever heals (the mount:
// repository.Hinter), or drops it. Heal tells it from a failure.
type HealNeeded struct {
	Shard  int   // numbered as the read named it
	Stores []int // where the fragment was missing or corrupt, ascending
}

func (h *HealNeeded) Error() string {
	where := "store " + joinInts(h.Stores)
	if len(h.Stores) > 1 {
		where = "stores " + joinInts(h.Stores)
	}
	return fmt.Sprintf("shard %d: its fragment on %s was missing or corrupt; the bytes were decoded from the other fragments, and the shard needs healing",
		h.Shard, where)
}

// Heal returns the HealNeeded that err is, or wraps one by one (never
// inside a join with other failures): the read that returned it served
// every byte. Any other error, and nil, give nil.
func Heal(err error) *HealNeeded {
	for err != nil {
		if h, ok := err.(*HealNeeded); ok {
			return h
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return nil
		}
		err = u.Unwrap()
	}
	return nil
}

// lostFragments collects, for one read, the stores whose fragment was
// missing or corrupt, from every goroutine of the read (primary reads,
// decodes, hedges).
type lostFragments struct {
	mu     sync.Mutex // guards stores
	stores []int
}

type lostKey struct{}

// lostIn records that store's fragment was missing or corrupt, in the
// read ctx belongs to (none: a repair's own reads, which find losses
// themselves).
func lostIn(ctx context.Context, store int) {
	l, ok := ctx.Value(lostKey{}).(*lostFragments)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !slices.Contains(l.stores, store) {
		l.stores = append(l.stores, store)
	}
}

// healing runs one public read of shard sh and turns the losses it met
// into its result: its own error if it failed, else a *HealNeeded if a
// fragment was missing or corrupt, else nil. A read nested in another
// reports to the outer one.
func healing(ctx context.Context, sh *Shard, read func(context.Context) error) error {
	if _, nested := ctx.Value(lostKey{}).(*lostFragments); nested {
		return read(ctx)
	}
	l := &lostFragments{}
	if err := read(context.WithValue(ctx, lostKey{}, l)); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.stores) == 0 {
		return nil
	}
	stores := slices.Clone(l.stores)
	slices.Sort(stores)
	return &HealNeeded{Shard: sh.ID, Stores: stores}
}

func joinInts(v []int) string {
	s := ""
	for i, x := range v {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprint(x)
	}
	return s
}
