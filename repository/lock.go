package repository

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shardfs/shardfs/backend"
)

// ErrLocked: another holder (an ingest, the healer, gc, ...) holds the lock;
// the error that wraps it names the holder.
var ErrLocked = errors.New("the dataset is locked")

// ErrLockLost: this ingest's lock was taken over; it must not commit.
var ErrLockLost = errors.New("ingest lock lost")

// LockInfo is the content of NAME/lock: who holds it, refreshed by heartbeats.
type LockInfo struct {
	IngestID  string `json:"ingest_id"`
	Host      string `json:"host"`
	PID       int    `json:"pid"`
	PIDStart  string `json:"pid_start"` // the process's start time, so a reused PID is not mistaken for it
	Started   int64  `json:"started_unix"`
	Heartbeat int64  `json:"heartbeat_unix"`
	// StaleSeconds is how long the holder may go between heartbeats and
	// still hold the lock (its LockOptions.Stale): a taker waits at least
	// that long, whatever its own Stale, so a healer with a long --lease
	// is not taken over between heartbeats by a delete's shorter default.
	// 0 in locks written before it was recorded.
	StaleSeconds int64 `json:"stale_seconds,omitempty"`
}

// LockOptions tune Lock. Zero fields take defaults.
type LockOptions struct {
	// Heartbeat is how often the holder refreshes the lock (15s).
	Heartbeat time.Duration
	// Stale is how old a heartbeat must be before another ingest may take
	// the lock over (2m). A holder on this host that provably died (its
	// process is gone) is taken over at once.
	Stale  time.Duration
	Logger *slog.Logger
	// Key is the object the lock lives in; empty: the ingest lock,
	// LockKey(name), which ingests, gc and repair share. The healer's
	// own lock (HealLockKey) makes one healer of a dataset at a time
	// without keeping ingests out.
	Key string
}

func (o *LockOptions) fill() {
	if o.Heartbeat <= 0 {
		o.Heartbeat = 15 * time.Second
	}
	if o.Stale <= 0 {
		o.Stale = 2 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// key is the object l lives in.
func (l *Lock) key() string {
	if l.opts.Key != "" {
		return l.opts.Key
	}
	return LockKey(l.name)
}

// Lock is an ingest's hold on NAME/lock on a majority of the stores. It is
// taken with conditional creates (If-None-Match: *), so of two ingests at
// most one holds a majority; it is refreshed by a heartbeat, and an ingest
// that loses it is cancelled before it can commit.
type Lock struct {
	name   string
	stores []backend.Store
	info   LockInfo
	opts   LockOptions

	mu   sync.Mutex // guards held, lost
	held []bool
	lost error
	// renewed is when a Refresh last confirmed the lock on a majority.
	renewed time.Time
	cancel  context.CancelFunc
	done    chan struct{}
}

func majority(n int) int { return n/2 + 1 }

// AcquireLock takes the ingest lock of name for ingestID on a majority of
// stores. The returned context is cancelled if the lock is lost; Release
// gives it back.
func AcquireLock(ctx context.Context, stores []backend.Store, name, ingestID string, opts LockOptions) (*Lock, context.Context, error) {
	opts.fill()
	host, _ := os.Hostname()
	now := time.Now().Unix()
	l := &Lock{name: name, stores: stores, opts: opts, held: make([]bool, len(stores)), done: make(chan struct{}),
		info: LockInfo{IngestID: ingestID, Host: host, PID: os.Getpid(), PIDStart: processStart(os.Getpid()), Started: now, Heartbeat: now,
			StaleSeconds: int64(opts.Stale / time.Second)}}
	body, _ := json.Marshal(l.info)
	others := make([]*LockInfo, len(stores))
	errs := backend.OnEvery(stores, func(i int, s backend.Store) (err error) {
		others[i], err = l.createOrTakeOver(ctx, s, body)
		l.held[i] = err == nil
		return err
	})
	got := l.heldCount()
	if got < majority(len(stores)) {
		l.releaseHeld(context.WithoutCancel(ctx))
		var holder *LockInfo
		var on []int
		for i, o := range others {
			if o != nil {
				holder = o
				on = append(on, i)
			}
		}
		if holder != nil {
			return nil, nil, fmt.Errorf("%w: another %s holds the lock of %s on stores %v: wait for it to finish; if it died on another host, its lock expires %v after its last heartbeat",
				ErrLocked, holder.describe(), name, on, opts.Stale)
		}
		return nil, nil, fmt.Errorf("could not take the ingest lock of %s on a majority of the stores (%d of %d): %w", name, got, len(stores), errors.Join(errs...))
	}
	l.renewed = time.Now()
	lctx, cancel := context.WithCancelCause(ctx)
	l.cancel = func() { cancel(ErrLockLost) }
	go l.heartbeat(lctx, cancel)
	return l, lctx, nil
}

func (o *LockInfo) describe() string {
	age := time.Since(time.Unix(o.Heartbeat, 0)).Round(time.Second)
	return fmt.Sprintf("%s %s (host %s, pid %d, started %s, last heartbeat %v ago)",
		o.holderKind(), o.IngestID, o.Host, o.PID, time.Unix(o.Started, 0).UTC().Format(time.RFC3339), age)
}

// holderKind names what holds a lock, from the id it took it with: the
// healer, gc, a migration, a part commit and a --follow recorder take the
// ingest lock (or their own) too, and a message that called a healer an
// ingest sent the user looking for an ingest that was never run.
func (o *LockInfo) holderKind() string {
	for _, k := range []struct{ prefix, kind string }{
		{"heal-", "healer"}, {"gc-", "gc"}, {"migrate-", "migration"}, {"commit-", "part commit"}, {"follow-", "--follow recorder"},
	} {
		if strings.HasPrefix(o.IngestID, k.prefix) {
			return k.kind
		}
	}
	return "ingest"
}

// createOrTakeOver creates the lock on s, or takes over a lock whose holder
// is provably dead. It returns the other holder when the lock is taken.
//
// A takeover replaces the lock it read, and only that version of it (a
// Put under backend.Versions: S3's If-Match, a file:// store's compare and
// rename under its directory's lock). It used to delete the lock, then
// create its own: two takers that read one dead lock both held the lock,
// the second having deleted the first's new one. Now, of takers that read
// one version, exactly one replaces it; every other's Put is ErrChanged,
// and it finds the lock held. A kill at any point leaves the dead lock or
// the taker's whole (a Put replaces an object at once), and a store that
// fails the Put leaves that store's lock as it was: the taker does not
// hold it there, and needs a majority as before.
func (l *Lock) createOrTakeOver(ctx context.Context, s backend.Store, body []byte) (*LockInfo, error) {
	err := s.Create(ctx, l.key(), body)
	if !errors.Is(err, backend.ErrExists) {
		return nil, err
	}
	read := backend.NewVersions().Pin(ctx)
	other, rerr := readLock(read, s, l.key())
	if errors.Is(rerr, backend.ErrNotExist) { // released since: create it again
		if err := s.Create(ctx, l.key(), body); err != nil {
			if errors.Is(err, backend.ErrExists) {
				other, _ = readLock(ctx, s, l.key())
				return other, ErrLocked
			}
			return nil, err
		}
		return nil, nil
	}
	if rerr != nil {
		return nil, rerr
	}
	if !l.dead(other) {
		return other, ErrLocked
	}
	l.opts.Logger.Warn("taking over the ingest lock of a dead ingest", "store", s.String(), "dead", other.describe())
	if err := s.Put(read, l.key(), body); err != nil {
		if errors.Is(err, backend.ErrChanged) { // another taker, or the holder, wrote first
			other, _ = readLock(ctx, s, l.key())
			return other, ErrLocked
		}
		return nil, err
	}
	return nil, nil
}

// dead reports whether the holder of o can no longer be running: its process
// on this host is gone, or its heartbeat is older than Stale (or than the
// holder's own, when longer).
func (l *Lock) dead(o *LockInfo) bool {
	if o.Host == l.info.Host && o.PID > 0 {
		if o.PID == l.info.PID && o.PIDStart == l.info.PIDStart {
			return false
		}
		if err := syscall.Kill(o.PID, 0); errors.Is(err, syscall.ESRCH) {
			return true
		}
		if o.PIDStart != "" && processStart(o.PID) != o.PIDStart {
			return true // the PID was reused by another process
		}
	}
	return time.Since(time.Unix(o.Heartbeat, 0)) > max(l.opts.Stale, time.Duration(o.StaleSeconds)*time.Second)
}

// processStart is the start time of a process in clock ticks since boot
// (field 22 of /proc/PID/stat), or "" when unknown.
func processStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		if f := strings.Fields(s[i+1:]); len(f) > 19 {
			return f[19]
		}
	}
	return ""
}

// readLock reads the lock object key of s.
func readLock(ctx context.Context, s backend.Store, key string) (*LockInfo, error) {
	b, size, err := readSmallObject(ctx, s, key, 4<<10)
	if err != nil {
		return nil, err
	}
	if b == nil {
		return nil, fmt.Errorf("store %s: %s of %d bytes is not a lock", s, key, size)
	}
	var o LockInfo
	if err := json.Unmarshal(b, &o); err != nil {
		// An unreadable lock proves nothing about a live holder; treat it as old.
		return &LockInfo{IngestID: "unreadable"}, nil
	}
	return &o, nil
}

// heartbeat refreshes the lock until ctx ends; losing the majority cancels ctx.
func (l *Lock) heartbeat(ctx context.Context, cancel context.CancelCauseFunc) {
	defer close(l.done)
	t := time.NewTicker(l.opts.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := l.Refresh(ctx); err != nil {
				cancel(err)
				return
			}
		}
	}
}

// Refresh checks that this ingest still holds the lock on a majority of the
// stores and renews its heartbeat there. Call it right before committing.
func (l *Lock) Refresh(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost != nil {
		return l.lost
	}
	l.info.Heartbeat = time.Now().Unix()
	body, _ := json.Marshal(l.info)
	var thief *LockInfo
	var tmu sync.Mutex
	l.eachHeld(func(i int, s backend.Store) {
		read := backend.NewVersions().Pin(ctx)
		o, err := readLock(read, s, l.key())
		if err != nil || o.IngestID != l.info.IngestID {
			l.held[i] = false
			if o != nil {
				tmu.Lock()
				thief = o
				tmu.Unlock()
			}
			return
		}
		// Only the version read, this holder's, is rewritten: a taker's
		// lock written since the read stays, and this holder loses the
		// store (it used to overwrite the taker's, and both held it).
		if err := s.Put(read, l.key(), body); err != nil {
			l.held[i] = false
			if !errors.Is(err, backend.ErrChanged) {
				return
			}
			if o, _ := readLock(ctx, s, l.key()); o != nil {
				tmu.Lock()
				thief = o
				tmu.Unlock()
			}
		}
	})
	got := l.heldCount()
	if got >= majority(len(l.stores)) {
		l.renewed = time.Now()
	}
	if got < majority(len(l.stores)) {
		who := "the stores did not answer"
		if thief != nil {
			who = thief.describe() + " took it over"
		}
		l.lost = fmt.Errorf("%w: this ingest of %s holds it on %d of %d stores (%s): it will not commit", ErrLockLost, l.name, got, len(l.stores), who)
		return l.lost
	}
	return nil
}

// Renewed is when the lock was last confirmed on a majority of the
// stores (taken, or refreshed). A holder that was stopped for longer than
// the lock's Stale may have lost it without knowing: Refresh before writing.
func (l *Lock) Renewed() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewed
}

// Release stops the heartbeat and deletes the lock where this ingest holds it.
func (l *Lock) Release(ctx context.Context) {
	l.cancel()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releaseHeld(ctx)
}

func (l *Lock) releaseHeld(ctx context.Context) {
	l.eachHeld(func(i int, s backend.Store) {
		if o, err := readLock(ctx, s, l.key()); err == nil && o.IngestID == l.info.IngestID {
			s.Delete(ctx, l.key())
		}
		l.held[i] = false
	})
}

// eachHeld runs fn for every store this ingest holds the lock on, in
// parallel, and waits. fn may clear its own held[i].
func (l *Lock) eachHeld(fn func(i int, s backend.Store)) {
	held := slices.Clone(l.held)
	backend.OnEvery(l.stores, func(i int, s backend.Store) error {
		if held[i] {
			fn(i, s)
		}
		return nil
	})
}

func (l *Lock) heldCount() int {
	n := 0
	for _, h := range l.held {
		if h {
			n++
		}
	}
	return n
}
