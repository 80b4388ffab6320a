package prefetch

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/shardfs/shardfs/cache"
	"github.com/shardfs/shardfs/erasure"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/metrics"
)

// Fetcher reads verified byte ranges of shards: into a new buffer, or
// straight into several buffers that the range's bytes fill in turn, so a
// coalesced GET lands where its callers keep the bytes. An
// *erasure.HealNeeded error comes with every byte: the reader serves them
// and hands it to Config.Heal.
type Fetcher interface {
	ReadRange(ctx context.Context, shard int, off, n int64) ([]byte, error)
	ReadRangeV(ctx context.Context, shard int, off int64, bufs [][]byte) error
}

// ReadCatalog is what the read path needs to know of the samples: where each
// lies (layout.Geometry), which samples a shard holds and their checksums,
// for the disk tier, and whether every sample of a shard can be looked up
// (a format-2 dataset whose rank holds just its own rows cannot): bridging
// between samples, and the disk tier, which walk every sample of a shard,
// use a shard only when it is Complete.
type ReadCatalog interface {
	layout.Geometry
	// ShardSamples is the range [first, first+n) of sample indexes in shard.
	ShardSamples(shard int) (first, n int)
	// SampleSum is sample i's checksum written at ingest.
	SampleSum(i int) uint32
	// Complete reports whether every sample of shard can be looked up.
	Complete(shard int) bool
}

// Config tunes the reader. Zero fields take the defaults of DefaultConfig.
type Config struct {
	ChunkSize   int64         // cache granularity within a sample
	Budget      int64         // most bytes ready or in flight ahead of the slowest reader (the lead's cap)
	InFlight    int64         // most bytes of prefetch GETs in flight at once (outside the cache)
	MinLead     int64         // lead kept even before rates are measured
	Margin      time.Duration // added to the measured latency
	PrefetchGET int           // concurrent prefetch GETs before the demand is measured, and the fewest after
	// MaxPrefetchGET is the most prefetch GETs in flight the depth may
	// grow to as the readers' demand asks (depth.go): the mount gives the
	// stores' request slots less the demand GETs'. 0: PrefetchGET, a
	// fixed depth.
	MaxPrefetchGET int
	DemandGET      int   // concurrent demand GETs
	MaxGET         int64 // largest coalesced GET
	MergeGap       int64 // merge ranges on a shard this close
	// RideGap joins two ranges of a prefetch span across at most this
	// many bytes of samples the mount has fetched already, cached or read
	// by an open rank-epoch: the GET reads them too and drops them
	// (schedule). Samples still to be read, not cached, never ride.
	RideGap     int64
	ReadTimeout time.Duration // bound on one backend read
	Disabled    bool          // no prefetch: every miss is a demand read
	IdleAfter   time.Duration // a rank-epoch without readers this long is dropped
	// Disk, if set, is the persistent tier below the memory cache: the
	// reader fetches through a DiskTier in front of its Fetcher.
	Disk *cache.Disk
	// Heal, if set, is given every *erasure.HealNeeded the Fetcher
	// returns (the mount's hinter); the read it came with succeeded.
	Heal func(*erasure.HealNeeded)
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{ChunkSize: 1 << 20, Budget: 512 << 20, InFlight: 64 << 20, MinLead: 64 << 20, Margin: 2 * time.Second,
		PrefetchGET: 64, DemandGET: 32, MaxGET: 8 << 20, MergeGap: 64 << 10, RideGap: 256 << 10, ReadTimeout: 30 * time.Second}
}

func (c *Config) fill() {
	d := DefaultConfig()
	for _, f := range []struct{ v, def *int64 }{{&c.ChunkSize, &d.ChunkSize}, {&c.Budget, &d.Budget}, {&c.InFlight, &d.InFlight}, {&c.MinLead, &d.MinLead}, {&c.MaxGET, &d.MaxGET}, {&c.MergeGap, &d.MergeGap}, {&c.RideGap, &d.RideGap}} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	if c.Margin <= 0 {
		c.Margin = d.Margin
	}
	if c.PrefetchGET <= 0 {
		c.PrefetchGET = d.PrefetchGET
	}
	c.MaxPrefetchGET = max(c.MaxPrefetchGET, c.PrefetchGET)
	if c.DemandGET <= 0 {
		c.DemandGET = d.DemandGET
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = d.ReadTimeout
	}
	if c.IdleAfter <= 0 {
		c.IdleAfter = 5 * time.Second
	}
	c.MinLead = min(c.MinLead, c.Budget)
}

// Reader serves virtual files. It is safe for concurrent use.
type Reader struct {
	src   source    // the Fetcher given to New, or the disk tier in front of it
	tier  *DiskTier // nil without a disk tier
	cat   ReadCatalog
	cache *cache.Cache
	m     *metrics.Metrics
	// samplesView is the counters of the samples/ view's reads.
	samplesView *metrics.RankCounters
	cfg         Config
	log         *slog.Logger

	// semaphore.Weighted for the fixed limits: it waits on a context,
	// which every acquirer has, and counts in any unit. The prefetch GET
	// slots move with the demand, so they are a depthGate.
	demand   *semaphore.Weighted // demand GET slots
	prefGets *depthGate          // prefetch GET slots, as many as the demand asks (depth.go)
	inflight *semaphore.Weighted // prefetch bytes in flight

	ctx    context.Context // background work; cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	live atomic.Pointer[[]*stream] // the streams, for nextUse

	mu      sync.Mutex // guards streams and the estimates below
	streams map[*layout.Members]*stream
	rate    float64 // bytes/s served, EWMA
	latency float64 // seconds per GET, EWMA
	spanLen float64 // bytes per prefetch GET, EWMA

	served atomic.Int64 // bytes served to readers, for the rate

	primers map[*Handle]struct{} // Prime's open handles; guarded by mu
}

// New returns a reader. Close stops its background work.
func New(fetch Fetcher, cat ReadCatalog, c *cache.Cache, m *metrics.Metrics, cfg Config, log *slog.Logger) *Reader {
	cfg.fill()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Reader{src: direct{fetch, cfg.MergeGap, cfg.Heal}, cat: cat, cache: c, m: m, samplesView: m.Rank(metrics.SamplesView), cfg: cfg, log: log,
		demand: semaphore.NewWeighted(int64(cfg.DemandGET)), prefGets: newDepthGate(cfg.PrefetchGET),
		inflight: semaphore.NewWeighted(max(cfg.InFlight, cfg.MaxGET)), ctx: ctx, cancel: cancel, streams: map[*layout.Members]*stream{}, primers: map[*Handle]struct{}{}}
	if cfg.Disk != nil {
		r.tier = NewDiskTier(fetch, cfg.Disk, cat, cfg.MergeGap)
		r.tier.next.heal = cfg.Heal
		r.src = r.tier
	}
	r.publishLocked()
	c.SetNextUse(r.nextUse)
	r.wg.Add(1)
	go r.measure()
	return r
}

// Close stops prefetching and waits for background work.
func (r *Reader) Close() {
	r.cancel()
	r.wg.Wait()
}
