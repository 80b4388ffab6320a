package repository

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/erasure"
	"github.com/shardfs/shardfs/manifest"
)

// Hinter tells the healer which shards a mount found a fragment of missing
// or corrupt: the mount hands it each *erasure.HealNeeded its reads
// return, and it writes one hint object per shard (HealHintKey) on every
// store that takes it, in the background, so the healer (heal) rebuilds
// that shard long before its scrub would reach it. A read never waits for
// a hint; a shard is hinted at most once a minute per mount, and hints
// beyond a short queue are dropped (the scrub still finds what they name).
type Hinter struct {
	stores  []backend.Store
	name    string
	log     *slog.Logger
	version atomic.Pointer[manifest.Manifest] // whose shards the hints name
	// strayWarned: a shard beyond the version was asked for, and said once.
	strayWarned atomic.Bool
	mu          sync.Mutex        // guards sent, closed and sends on queue
	sent        map[int]time.Time // shard -> when last hinted
	closed      bool
	queue       chan int
	done        chan struct{}
}

// hintEvery is how often one mount hints one shard at most.
const hintEvery = time.Minute

// NewHinter hints for dataset name on stores. Call SetVersion once the
// dataset is open; until then nothing is hinted.
func NewHinter(stores []backend.Store, name string, log *slog.Logger) *Hinter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Hinter{stores: stores, name: name, log: log, sent: map[int]time.Time{},
		queue: make(chan int, 64), done: make(chan struct{})}
	go h.run()
	return h
}

// SetVersion gives the version read, whose shards the hints name.
func (h *Hinter) SetVersion(m *manifest.Manifest) { h.version.Store(m) }

// Heal queues a hint for the shard a read of this dataset found in need
// of healing (numbered in the version given to SetVersion). A shard that
// version does not hold is not hinted: its key would name another
// ingest's shard (a read of another version handed here by mistake).
func (h *Hinter) Heal(need *erasure.HealNeeded) {
	m := h.version.Load()
	if m == nil {
		return
	}
	if need.Shard < 0 || need.Shard >= m.NumShards() {
		if !h.strayWarned.Swap(true) {
			h.log.Warn("a read asked to heal a shard its version does not hold: not hinted", "dataset", h.name, "shard", need.Shard, "shards", m.NumShards())
		}
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if t, ok := h.sent[need.Shard]; h.closed || ok && time.Since(t) < hintEvery {
		return
	}
	h.sent[need.Shard] = time.Now()
	select {
	case h.queue <- need.Shard:
	default: // the scrub finds it
	}
}

// hint is what a hint object says, for a person reading the stores.
type hint struct {
	Shard int    `json:"shard"`
	Host  string `json:"host"`
	PID   int    `json:"pid"`
	Unix  int64  `json:"unix"`
}

func (h *Hinter) run() {
	defer close(h.done)
	host, _ := os.Hostname()
	for shard := range h.queue {
		hd := h.version.Load()
		key := ShardHealHintKey(h.name, &hd.Header, shard)
		b, _ := json.Marshal(hint{Shard: shard, Host: host, PID: os.Getpid(), Unix: time.Now().Unix()})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		errs := backend.OnEvery(h.stores, func(i int, s backend.Store) error { return s.Put(ctx, key, b) })
		cancel()
		ok := 0
		for _, err := range errs {
			if err == nil {
				ok++
			}
		}
		h.log.Info("a fragment was missing or corrupt: told the healer", "dataset", h.name, "shard", shard, "stores_told", ok)
	}
}

// Close stops the hinter after the hints queued are written.
func (h *Hinter) Close() {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		close(h.queue)
	}
	h.mu.Unlock()
	<-h.done
}
