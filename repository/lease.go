package repository

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/manifest"
)

// Leases: a mount's claim on the version it serves, so that gc never
// deletes what a running job reads. A mount writes its lease to every store
// before it checks that its version is still there (Lease.Confirm), and
// refreshes it while it runs; gc reads the leases after it has removed the
// kept manifests of the versions it deletes and before it deletes their
// data, so a mount either is seen by gc or finds its version gone.

// LeasePrefix holds the leases of a dataset's mounts.
func LeasePrefix(name string) string { return name + "/leases/" }

// LeaseInfo is the content of a lease object.
type LeaseInfo struct {
	Version   int      `json:"version"`
	IngestIDs []string `json:"ingest_ids"` // every ingest whose objects the version reads
	Host      string   `json:"host"`
	PID       int      `json:"pid"`
	PIDStart  string   `json:"pid_start"`
	Started   int64    `json:"started_unix"`
	Heartbeat int64    `json:"heartbeat_unix"`
}

// LeaseRefresh is how often a mount refreshes its lease, and LeaseStale how
// old a lease's heartbeat may be before gc no longer honours it (a mount
// that was killed, or that lost every store for that long).
const (
	LeaseRefresh = time.Minute
	LeaseStale   = 15 * time.Minute
)

// leaseWriteTimeout bounds a lease's write at a mount's start.
const leaseWriteTimeout = 5 * time.Second

// Lease is a running mount's lease.
type Lease struct {
	name, key string
	stores    []backend.Store
	mu        sync.Mutex // guards info
	info      LeaseInfo
	stop      chan struct{}
	done      chan struct{}
}

// TakeLease writes a lease on version m of dataset name to every store; at
// least one must take it. Confirm, then Release when the mount ends.
func TakeLease(ctx context.Context, stores []backend.Store, name string, m *manifest.Manifest, log *slog.Logger) (*Lease, error) {
	var b [8]byte
	crand.Read(b[:])
	host, _ := os.Hostname()
	now := time.Now().Unix()
	l := &Lease{name: name, key: LeasePrefix(name) + hex.EncodeToString(b[:]), stores: stores, stop: make(chan struct{}), done: make(chan struct{}),
		info: LeaseInfo{Version: m.VersionNumber(), IngestIDs: LeaseIDs(m), Host: host, PID: os.Getpid(), PIDStart: processStart(os.Getpid()), Started: now, Heartbeat: now}}
	// One store's copy is enough for gc, which lists every store; a store
	// that hangs must not hold the mount's start for long.
	wctx, cancel := context.WithTimeout(ctx, leaseWriteTimeout)
	defer cancel()
	if err := l.write(wctx); err != nil {
		return nil, fmt.Errorf("lease version %d of %s: %w", l.info.Version, name, err)
	}
	go l.refresh(log)
	return l, nil
}

// LeaseIDs are the ingests whose objects version m reads: its shards'
// segments, and its own (its manifest, and its group objects in format 3).
func LeaseIDs(m *manifest.Manifest) []string {
	ids := m.SegmentIDs()
	for _, id := range ids {
		if id == m.IngestID {
			return ids
		}
	}
	return append(ids, m.IngestID)
}

func (l *Lease) write(ctx context.Context) error {
	l.mu.Lock()
	l.info.Heartbeat = time.Now().Unix()
	body, _ := json.Marshal(l.info)
	l.mu.Unlock()
	ok, errs := backend.Split(backend.OnEvery(l.stores, func(i int, s backend.Store) error {
		return s.Put(ctx, l.key, body)
	}))
	if len(ok) == 0 {
		return fmt.Errorf("no store took it: %w", errors.Join(errs...))
	}
	return nil
}

func (l *Lease) refresh(log *slog.Logger) {
	defer close(l.done)
	t := time.NewTicker(LeaseRefresh)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := l.write(ctx); err != nil && log != nil {
				log.Warn("could not refresh the mount's lease; gc may remove its version once the lease is stale", "err", err, "stale_after", LeaseStale)
			}
			cancel()
		}
	}
}

// Confirm checks, after the lease is written, that the version it names is
// still on the stores: current, or kept. A gc that removed it before it
// could see the lease is caught here.
func (l *Lease) Confirm(ctx context.Context, log *slog.Logger) error {
	_, err := LoadVersionHeader(ctx, l.stores, l.name, l.info.Version, log)
	if err != nil {
		return fmt.Errorf("version %d of %s: %w", l.info.Version, l.name, err)
	}
	return nil
}

// Release stops the refreshes and deletes the lease.
func (l *Lease) Release(ctx context.Context) {
	select {
	case <-l.stop:
		return
	default:
	}
	close(l.stop)
	<-l.done
	backend.OnEvery(l.stores, func(i int, s backend.Store) error { return s.Delete(ctx, l.key) })
}

// ReadLeases returns the live leases of dataset name: every store's, once
// each. A lease is dead, and left out, when its heartbeat is older than
// stale, or when its mount ran on this host and its process is gone. Every
// store must answer: a lease is missed only if it is on no store that did.
func ReadLeases(ctx context.Context, stores []backend.Store, name string, stale time.Duration) ([]LeaseInfo, error) {
	keys := make([][]string, len(stores))
	if _, errs := backend.Split(backend.OnEvery(stores, func(i int, s backend.Store) (err error) {
		keys[i], err = s.List(ctx, LeasePrefix(name))
		return err
	})); len(errs) > 0 {
		return nil, fmt.Errorf("list the mounts' leases: every store must answer, or a running mount could be missed: %w", errors.Join(errs...))
	}
	host, _ := os.Hostname()
	seen := map[string]bool{}
	var out []LeaseInfo
	for i, ks := range keys {
		for _, k := range ks {
			if seen[k] {
				continue
			}
			size, err := stores[i].Stat(ctx, k)
			if errors.Is(err, backend.ErrNotExist) {
				continue // released meanwhile
			}
			if err != nil {
				return nil, err
			}
			b := make([]byte, min(size, 1<<20))
			if err := stores[i].ReadAt(ctx, k, b, 0); err != nil {
				if errors.Is(err, backend.ErrNotExist) {
					continue
				}
				return nil, err
			}
			var li LeaseInfo
			if err := json.Unmarshal(b, &li); err != nil {
				return nil, fmt.Errorf("store %s: lease %s is not a lease (%v): remove it by hand if no mount of %s runs", stores[i], k, err, name)
			}
			seen[k] = true
			if leaseDead(&li, host, stale) {
				continue
			}
			out = append(out, li)
		}
	}
	return out, nil
}

func leaseDead(li *LeaseInfo, host string, stale time.Duration) bool {
	if li.Host == host && li.PID > 0 {
		if err := syscall.Kill(li.PID, 0); errors.Is(err, syscall.ESRCH) {
			return true
		}
		if li.PIDStart != "" && processStart(li.PID) != li.PIDStart {
			return true
		}
	}
	return time.Since(time.Unix(li.Heartbeat, 0)) > stale
}

// Describe says whose lease li is, for gc's report.
func (li *LeaseInfo) Describe() string {
	return fmt.Sprintf("a mount on %s (pid %d, since %s, heartbeat %v ago)", li.Host, li.PID,
		time.Unix(li.Started, 0).UTC().Format(time.RFC3339), time.Since(time.Unix(li.Heartbeat, 0)).Round(time.Second))
}
