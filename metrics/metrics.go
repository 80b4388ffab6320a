// Package metrics owns the live counters of a mount: one set of atomics
// that the read path updates, exported both as Prometheus metrics and as the
// JSON snapshot behind .shardfs/stats.json, so the two always agree.
package metrics

import (
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardfs/shardfs/erasure"
)

// Store health states.
const (
	StoreHealthy int32 = iota
	StoreDown
)

// Metrics holds every counter. The zero value is not usable; call New.
type Metrics struct {
	BytesServed      atomic.Int64
	Reads            atomic.Int64
	CacheHits        atomic.Int64
	CacheMisses      atomic.Int64
	Stalls           atomic.Int64 // reads that waited on the backend
	StallNanos       atomic.Int64
	DegradedReads    atomic.Int64
	ChecksumFailures atomic.Int64
	HedgedReads      atomic.Int64
	PrefetchBytes    atomic.Int64 // bytes fetched ahead of readers
	PrefetchLead     atomic.Int64 // bytes ready or in flight ahead of the slowest reader
	leadSeconds      atomic.Uint64
	depth            atomic.Pointer[Depth]
	CacheBytes       atomic.Int64
	PrefetchStreams  atomic.Int64 // rank-epochs with prefetch state
	// GETBytes counts the bytes the GETs sent to the stores asked for, by
	// why they were made (erasure.ReadKind): what an epoch costs, by
	// cause. The GETs themselves are counted by store (gets).
	GETBytes [erasure.NumReadKinds]atomic.Int64
	// VersionServed is the dataset version the mount serves, and
	// VersionCurrent the one its stores last said is current: a mount
	// never switches, so a newer one means a remount would read it.
	VersionServed, VersionCurrent atomic.Int64
	// The memory tier's chunks added, evicted, and evicted before any
	// reader took them (thrash); nil reads as 0.
	CacheInserted, CacheEvictions, CacheEvictedUnread func() int64

	stores []*StoreCounters
	names  []string
	start  time.Time

	shardBytes sync.Map // shard -> *atomic.Int64: bytes read from the stores, for the hottest shards
	anomalies  *anomalies

	// Latency, where it is spent: per store, a GET's whole time and its
	// time to first byte; per rank, each read's wait on the data path;
	// per FUSE operation, its time in the daemon.
	getSeconds, firstByteSeconds, readWaitSeconds, fuseOpSeconds *prometheus.HistogramVec
	hedges                                                       *prometheus.CounterVec // by reason
	ranks                                                        sync.Map               // rank -> *RankCounters

	disk  func() DiskSnapshot  // nil without a disk tier
	index func() IndexSnapshot // nil unless shard indexes are fetched lazily
}

// IndexSnapshot counts the shard indexes a format-2 mount fetched when
// their shards were first needed.
type IndexSnapshot struct {
	Loads    int64 `json:"loads"`     // from the stores
	TierHits int64 `json:"tier_hits"` // from the disk tier
	// Unpinned counts lookups of a sample whose shard no rank-epoch or
	// directory held: each may fetch an index again. 0 in a healthy mount.
	Unpinned int64 `json:"unpinned_lookups"`
	// Format 3: group objects read from the stores, and the groups whose
	// shards the mount holds, of Groups (0 in format 2).
	GroupLoads int64 `json:"group_loads"`
	GroupsHeld int   `json:"groups_held"`
	Groups     int   `json:"groups"`
}

// SetIndex makes the lazy shard indexes' counters part of every snapshot and of /metrics.
func (m *Metrics) SetIndex(f func() IndexSnapshot) { m.index = f }

// DiskSnapshot is the disk tier's counters.
type DiskSnapshot struct {
	Hits       int64 `json:"hits"`
	HitBytes   int64 `json:"hit_bytes"`
	Misses     int64 `json:"misses"`
	Writes     int64 `json:"writes"`
	WriteBytes int64 `json:"write_bytes"`
	Evictions  int64 `json:"evictions"`
	// Corrupt counts samples whose bytes on disk failed their checksum:
	// dropped and fetched again, never served.
	Corrupt int64 `json:"corrupt_refetches"`
	Limit   int64 `json:"limit_bytes"`
	// Used is the bytes the tier holds, across every mount sharing it.
	Used int64 `json:"used_bytes"`
}

// SetDisk makes the disk tier's counters part of every snapshot and of /metrics.
func (m *Metrics) SetDisk(f func() DiskSnapshot) { m.disk = f }

// StoreCounters are one store's counters.
type StoreCounters struct {
	Bytes, Errors atomic.Int64
	// requestsByKind counts its requests by why they were sent; its
	// requests and the mount's GETs by kind are sums of these, so a
	// snapshot that reads each once has the two agree while GETs land.
	requestsByKind [erasure.NumReadKinds]atomic.Int64
	Nanos          atomic.Int64
	Degraded       atomic.Int64 // degraded reads that rebuilt this store's fragment
	Throttled      atomic.Int64 // requests the store refused for load (503 SlowDown, 500, 429)
	State          atomic.Int32
	get, firstByte prometheus.Observer
	recent         firstBytes // for anomaly detection
}

// latencyBuckets span 0.5 ms to about 16 s, doubling; fuseBuckets 10 µs
// to about 20 s, since most FUSE operations are served from memory.
var (
	latencyBuckets = prometheus.ExponentialBuckets(0.0005, 2, 16)
	fuseBuckets    = prometheus.ExponentialBuckets(0.00001, 4, 12)
)

// New returns counters for stores named names (never secrets).
func New(names []string) *Metrics {
	m := &Metrics{names: names, start: time.Now(), anomalies: newAnomalies(),
		getSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "shardfs_store_get_seconds",
			Help: "Time of a ranged GET on a store, from send to the last byte (successful GETs).", Buckets: latencyBuckets}, []string{"store"}),
		firstByteSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "shardfs_store_first_byte_seconds",
			Help: "Time from sending a ranged GET to a store to the first byte of its answer (stores that report it: S3).", Buckets: latencyBuckets}, []string{"store"}),
		readWaitSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "shardfs_read_wait_seconds",
			Help: "Time each read of a rank's files waited on the data path (0 when its bytes were ready); rank=\"samples\" for the samples/ view.", Buckets: latencyBuckets}, []string{"rank"}),
		fuseOpSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "shardfs_fuse_op_seconds",
			Help: "Time the daemon spent on each FUSE operation, by op (lookup, getattr, open, read, release, opendir, readdir, readdirplus, releasedir, getxattr, listxattr, statfs).", Buckets: fuseBuckets}, []string{"op"}),
		hedges: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shardfs_hedges_total",
			Help: "Reads raced against a parity decode, by reason: no_first_byte (the store had not begun to answer by its deadline), stalled (it answered, then delivered too slowly)."}, []string{"reason"}),
	}
	for _, reason := range erasure.HedgeReasons { // every series from the start
		m.hedges.WithLabelValues(reason)
	}
	for _, name := range names {
		m.stores = append(m.stores, &StoreCounters{get: m.getSeconds.WithLabelValues(name), firstByte: m.firstByteSeconds.WithLabelValues(name)})
	}
	return m
}

// Store returns store i's counters.
func (m *Metrics) Store(i int) *StoreCounters { return m.stores[i] }

// SetLeadSeconds records how many seconds of reading the prefetch lead covers.
func (m *Metrics) SetLeadSeconds(s float64) { m.leadSeconds.Store(math.Float64bits(s)) }

// Depth is the prefetch depth and what it was sized from, by Little's law:
// the GETs in flight the readers' demand needs is DemandGETsPerSecond ×
// LatencySeconds; Slots is that with a margin, within [the floor,
// Ceiling].
type Depth struct {
	Slots                int64   `json:"slots"`
	InFlight             int64   `json:"in_flight"`
	Ceiling              int64   `json:"ceiling"`
	LatencySeconds       float64 `json:"get_latency_seconds"`
	DemandBytesPerSecond float64 `json:"demand_bytes_per_second"`
	DemandGETsPerSecond  float64 `json:"demand_gets_per_second"`
}

// SetDepth records the prefetch depth.
func (m *Metrics) SetDepth(d Depth) { m.depth.Store(&d) }

func (m *Metrics) depthNow() Depth {
	if d := m.depth.Load(); d != nil {
		return *d
	}
	return Depth{}
}

// LeadSeconds is the last SetLeadSeconds value.
func (m *Metrics) LeadSeconds() float64 { return math.Float64frombits(m.leadSeconds.Load()) }

// BackendRead implements erasure.Metrics: firstByte is 0 when the store
// does not report it.
func (m *Metrics) BackendRead(store, shard int, bytes int, d, firstByte time.Duration, kind erasure.ReadKind, err error) {
	s := m.stores[store]
	s.requestsByKind[kind].Add(1)
	m.GETBytes[kind].Add(int64(bytes))
	s.Nanos.Add(int64(d))
	if firstByte > 0 {
		s.firstByte.Observe(firstByte.Seconds())
		s.recent.add(time.Now(), firstByte)
	}
	if err != nil {
		s.Errors.Add(1)
		return
	}
	s.Bytes.Add(int64(bytes))
	s.get.Observe(d.Seconds())
	n, ok := m.shardBytes.Load(shard)
	if !ok {
		n, _ = m.shardBytes.LoadOrStore(shard, new(atomic.Int64))
	}
	n.(*atomic.Int64).Add(int64(bytes))
}

// hotShards is how many of the most read shards a snapshot lists.
const hotShards = 5

// ShardBytes is the bytes read from the stores for one shard.
type ShardBytes struct {
	Shard int   `json:"shard"`
	Bytes int64 `json:"bytes"`
}

// hottest returns the most read shards, most first, and how many were read.
func (m *Metrics) hottest() ([]ShardBytes, int) {
	var top []ShardBytes
	n := 0
	m.shardBytes.Range(func(k, v any) bool {
		n++
		sb := ShardBytes{k.(int), v.(*atomic.Int64).Load()}
		i := sort.Search(len(top), func(i int) bool {
			return top[i].Bytes < sb.Bytes || top[i].Bytes == sb.Bytes && top[i].Shard > sb.Shard
		})
		if i < hotShards {
			top = slices.Insert(top, i, sb)
			top = top[:min(len(top), hotShards)]
		}
		return true
	})
	return top, n
}

// storeSkew is the most bytes any store served over the mean of the
// stores that served any: 1 when reads spread evenly.
func (m *Metrics) storeSkew() float64 {
	var most, sum, n int64
	for _, s := range m.stores {
		if b := s.Bytes.Load(); b > 0 {
			most, sum, n = max(most, b), sum+b, n+1
		}
	}
	if n == 0 {
		return 0
	}
	return float64(most) / (float64(sum) / float64(n))
}

// SamplesView is the rank the samples/ view's reads are counted under.
const SamplesView = -1

// WaitedFloor is the wait from which a read counts as one that waited: a
// chunk a moment from arriving is not a reader starved.
const WaitedFloor = time.Millisecond

// RankCounters are one rank's progress and waits on this node.
type RankCounters struct {
	// Epoch is the latest epoch of the rank a reader opened.
	Epoch atomic.Int64
	// BatchesServed counts batches whose every member was read to its end.
	BatchesServed atomic.Int64
	// LeadBytes is the bytes ready in memory ahead of the rank's slowest
	// reader, as the prefetcher last measured it.
	LeadBytes atomic.Int64
	// Reads and WaitNanos are its reads and their summed wait on the data
	// path; ReadsWaited those reads that waited at least WaitedFloor.
	Reads, WaitNanos, ReadsWaited atomic.Int64
	leadChecks, leadZero          atomic.Int64
	wait                          prometheus.Observer
}

// SetLead records a measure of the bytes ready ahead of the rank's slowest
// reader, and whether they fall short of the batch it reads next: then its
// next read waits, and the lead is, for that reader, at zero.
func (rc *RankCounters) SetLead(bytes int64, short bool) {
	rc.LeadBytes.Store(bytes)
	rc.leadChecks.Add(1)
	if short {
		rc.leadZero.Add(1)
	}
}

// SetEpoch records that a reader opened the rank's epoch; the latest wins.
func (rc *RankCounters) SetEpoch(epoch int) {
	for cur := rc.Epoch.Load(); int64(epoch) > cur && !rc.Epoch.CompareAndSwap(cur, int64(epoch)); cur = rc.Epoch.Load() {
	}
}

// Rank returns rank's counters (SamplesView: the samples/ view's).
func (m *Metrics) Rank(rank int) *RankCounters {
	if rc, ok := m.ranks.Load(rank); ok {
		return rc.(*RankCounters)
	}
	label := "samples"
	if rank != SamplesView {
		label = strconv.Itoa(rank)
	}
	rc, _ := m.ranks.LoadOrStore(rank, &RankCounters{wait: m.readWaitSeconds.WithLabelValues(label)})
	return rc.(*RankCounters)
}

// ReadWait records how long one read of rank's files (SamplesView: of
// samples/) waited on the data path.
func (m *Metrics) ReadWait(rank int, d time.Duration) { m.Rank(rank).ReadWait(d) }

// ReadWait records how long one read of the rank's files waited on the
// data path. The read path holds its rank's counters (Metrics.Rank, once
// per open file), so a read finds them without a lookup.
func (rc *RankCounters) ReadWait(d time.Duration) {
	rc.Reads.Add(1)
	rc.WaitNanos.Add(int64(d))
	if d >= WaitedFloor {
		rc.ReadsWaited.Add(1)
	}
	rc.wait.Observe(d.Seconds())
}

// FuseOp returns the observer of FUSE operation op's time in the daemon.
func (m *Metrics) FuseOp(op string) func(time.Duration) {
	o := m.fuseOpSeconds.WithLabelValues(op)
	return func(d time.Duration) { o.Observe(d.Seconds()) }
}

// ChecksumFailure implements erasure.Metrics.
func (m *Metrics) ChecksumFailure(store int) { m.ChecksumFailures.Add(1) }

// DegradedRead implements erasure.Metrics.
func (m *Metrics) DegradedRead(stores []int) {
	m.DegradedReads.Add(1)
	for _, s := range stores {
		m.stores[s].Degraded.Add(1)
	}
}

// HedgedRead implements erasure.Metrics.
func (m *Metrics) HedgedRead(reason string) {
	m.HedgedReads.Add(1)
	m.hedges.WithLabelValues(reason).Inc()
}

// requests is the GETs sent to the store, of every kind.
func (s *StoreCounters) requests() int64 {
	var n int64
	for k := range erasure.NumReadKinds {
		n += s.requestsByKind[k].Load()
	}
	return n
}

// gets is the GETs of kind k sent to any store.
func (m *Metrics) gets(k erasure.ReadKind) int64 {
	var n int64
	for _, s := range m.stores {
		n += s.requestsByKind[k].Load()
	}
	return n
}

// fetched is the bytes read from every store.
func (m *Metrics) fetched() int64 {
	var n int64
	for _, s := range m.stores {
		n += s.Bytes.Load()
	}
	return n
}

// rankCollector exports every rank's progress: ranks appear as readers
// open them, so the series are made at each scrape.
type rankCollector struct{ m *Metrics }

var (
	rankEpochDesc   = prometheus.NewDesc("shardfs_rank_epoch", "The latest epoch of the rank a reader opened.", []string{"rank"}, nil)
	rankBatchesDesc = prometheus.NewDesc("shardfs_rank_batches_served_total", "Batches of the rank whose every member was read to its end.", []string{"rank"}, nil)
	rankLeadDesc    = prometheus.NewDesc("shardfs_rank_prefetch_lead_bytes", "Bytes ready in memory ahead of the rank's slowest reader.", []string{"rank"}, nil)
)

func (c rankCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- rankEpochDesc
	ch <- rankBatchesDesc
	ch <- rankLeadDesc
}

func (c rankCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.ranks.Range(func(k, v any) bool {
		rank, rc := k.(int), v.(*RankCounters)
		if rank == SamplesView {
			return true
		}
		label := strconv.Itoa(rank)
		ch <- prometheus.MustNewConstMetric(rankEpochDesc, prometheus.GaugeValue, float64(rc.Epoch.Load()), label)
		ch <- prometheus.MustNewConstMetric(rankBatchesDesc, prometheus.CounterValue, float64(rc.BatchesServed.Load()), label)
		ch <- prometheus.MustNewConstMetric(rankLeadDesc, prometheus.GaugeValue, float64(rc.LeadBytes.Load()), label)
		return true
	})
}

// RankSnapshot is one rank's progress.
type RankSnapshot struct {
	Rank          int   `json:"rank"`
	Epoch         int64 `json:"epoch"`
	BatchesServed int64 `json:"batches_served"`
	LeadBytes     int64 `json:"prefetch_lead_bytes"`
	// LeadChecks counts the prefetcher's measures of the lead, LeadZero
	// those that found less than the slowest reader's next batch ready.
	LeadChecks  int64   `json:"lead_checks"`
	LeadZero    int64   `json:"lead_zero_checks"`
	Reads       int64   `json:"reads"`
	ReadsWaited int64   `json:"reads_waited"`
	WaitSeconds float64 `json:"read_wait_seconds"`
}

// rankSnapshots lists the ranks read on this node, lowest first.
func (m *Metrics) rankSnapshots() []RankSnapshot {
	out := []RankSnapshot{}
	m.ranks.Range(func(k, v any) bool {
		if rank, rc := k.(int), v.(*RankCounters); rank != SamplesView {
			out = append(out, RankSnapshot{Rank: rank, Epoch: rc.Epoch.Load(), BatchesServed: rc.BatchesServed.Load(),
				LeadBytes: rc.LeadBytes.Load(), LeadChecks: rc.leadChecks.Load(), LeadZero: rc.leadZero.Load(), Reads: rc.Reads.Load(), ReadsWaited: rc.ReadsWaited.Load(), WaitSeconds: float64(rc.WaitNanos.Load()) / 1e9})
		}
		return true
	})
	slices.SortFunc(out, func(a, b RankSnapshot) int { return a.Rank - b.Rank })
	return out
}

// StoreState implements erasure.Metrics.
func (m *Metrics) StoreState(store int, down bool) {
	if down {
		m.stores[store].State.Store(StoreDown)
	} else {
		m.stores[store].State.Store(StoreHealthy)
	}
}

// Stall records a read that waited d on the backend.
func (m *Metrics) Stall(d time.Duration) {
	m.Stalls.Add(1)
	m.StallNanos.Add(int64(d))
}

// Snapshot is the JSON form of the counters.
type Snapshot struct {
	UptimeSeconds    float64 `json:"uptime_seconds"`
	BytesServed      int64   `json:"bytes_served"`
	Reads            int64   `json:"reads"`
	CacheHits        int64   `json:"cache_hits"`
	CacheMisses      int64   `json:"cache_misses"`
	CacheBytes       int64   `json:"cache_bytes"`
	CacheEvictions   int64   `json:"cache_evictions"`
	Stalls           int64   `json:"stalls"`
	StallSeconds     float64 `json:"stall_seconds"`
	DegradedReads    int64   `json:"degraded_reads"`
	ChecksumFailures int64   `json:"checksum_failures"`
	HedgedReads      int64   `json:"hedged_reads"`
	// BytesFetched is the bytes read from the stores; ReadAmplification
	// is it over BytesServed (below 1 when reads hit the caches).
	BytesFetched      int64   `json:"bytes_fetched"`
	ReadAmplification float64 `json:"read_amplification"`
	// CacheEvictedUnread counts chunks evicted before any reader took
	// them: fetched for nothing (thrash).
	CacheEvictedUnread int64   `json:"cache_evicted_unread"`
	PrefetchBytes      int64   `json:"prefetch_bytes"`
	PrefetchLeadBytes  int64   `json:"prefetch_lead_bytes"`
	PrefetchLeadSecs   float64 `json:"prefetch_lead_seconds"`
	PrefetchStreams    int64   `json:"prefetch_streams"`
	// PrefetchDepth is the prefetch GETs allowed in flight, and the demand
	// and latency they were sized from.
	PrefetchDepth Depth `json:"prefetch_depth"`
	// GETsByKind counts the GETs sent to the stores by why (demand,
	// prefetch, hedge, degraded), and GETBytesByKind the bytes they asked
	// for: the sum of GETsByKind is the stores' requests.
	GETsByKind     map[string]int64 `json:"gets_by_kind"`
	GETBytesByKind map[string]int64 `json:"get_bytes_by_kind"`
	// DatasetVersion is the version served, CurrentVersion the stores'
	// current one when last checked (0 for a mix).
	DatasetVersion int64           `json:"dataset_version"`
	CurrentVersion int64           `json:"current_version"`
	Disk           *DiskSnapshot   `json:"disk,omitempty"`
	Index          *IndexSnapshot  `json:"shard_indexes,omitempty"`
	Stores         []StoreSnapshot `json:"stores"`
	// HotShards are the shards most read from the stores, most first, of
	// ShardsRead shards read at all; StoreSkew is the most bytes a store
	// served over the stores' mean (1: even).
	Anomalies []Anomaly `json:"anomalies"`
	// AnomaliesFired counts the anomalies that started since the mount, by
	// kind, over AnomalyChecks evaluations of the detector.
	AnomaliesFired map[string]int64 `json:"anomalies_fired"`
	AnomalyChecks  int64            `json:"anomaly_checks"`
	Ranks          []RankSnapshot   `json:"ranks"`
	HotShards      []ShardBytes     `json:"hot_shards"`
	ShardsRead     int              `json:"shards_read"`
	StoreSkew      float64          `json:"store_skew"`
}

// StoreSnapshot is one store's counters.
type StoreSnapshot struct {
	Name         string  `json:"name"`
	State        string  `json:"state"`
	Bytes        int64   `json:"bytes"`
	Requests     int64   `json:"requests"`
	Errors       int64   `json:"errors"`
	Degraded     int64   `json:"degraded_reads"`
	Throttled    int64   `json:"throttled"`
	MeanLatencyS float64 `json:"mean_latency_seconds"`
}

func stateName(s int32) string {
	if s == StoreDown {
		return "down"
	}
	return "healthy"
}

func orZero(f func() int64) int64 {
	if f == nil {
		return 0
	}
	return f()
}

// Snapshot reads every counter.
func (m *Metrics) Snapshot() Snapshot {
	s := Snapshot{
		UptimeSeconds: time.Since(m.start).Seconds(), BytesServed: m.BytesServed.Load(), Reads: m.Reads.Load(),
		CacheHits: m.CacheHits.Load(), CacheMisses: m.CacheMisses.Load(), CacheBytes: m.CacheBytes.Load(),
		Stalls: m.Stalls.Load(), StallSeconds: float64(m.StallNanos.Load()) / 1e9,
		DegradedReads: m.DegradedReads.Load(), ChecksumFailures: m.ChecksumFailures.Load(), HedgedReads: m.HedgedReads.Load(),
		PrefetchBytes: m.PrefetchBytes.Load(), PrefetchLeadBytes: m.PrefetchLead.Load(), PrefetchLeadSecs: m.LeadSeconds(),
		PrefetchStreams: m.PrefetchStreams.Load(), PrefetchDepth: m.depthNow(), CacheEvictions: orZero(m.CacheEvictions),
		CacheEvictedUnread: orZero(m.CacheEvictedUnread),
		DatasetVersion:     m.VersionServed.Load(), CurrentVersion: m.VersionCurrent.Load(),
	}
	s.GETsByKind, s.GETBytesByKind = map[string]int64{}, map[string]int64{}
	for k := range erasure.NumReadKinds {
		s.GETsByKind[k.String()] = 0 // summed from the stores' readings below
		s.GETBytesByKind[k.String()] = m.GETBytes[k].Load()
	}
	if m.disk != nil {
		d := m.disk()
		s.Disk = &d
	}
	if m.index != nil {
		x := m.index()
		s.Index = &x
	}
	for i, st := range m.stores {
		ss := StoreSnapshot{Name: m.names[i], State: stateName(st.State.Load()), Bytes: st.Bytes.Load(),
			Errors: st.Errors.Load(), Degraded: st.Degraded.Load(), Throttled: st.Throttled.Load()}
		for k := range erasure.NumReadKinds {
			n := st.requestsByKind[k].Load()
			ss.Requests += n
			s.GETsByKind[k.String()] += n
		}
		if ss.Requests > 0 {
			ss.MeanLatencyS = float64(st.Nanos.Load()) / 1e9 / float64(ss.Requests)
		}
		s.Stores = append(s.Stores, ss)
		// The total is these readings' sum, not a second reading of
		// counters that move while GETs land: stats.json's bytes fetched
		// equals its stores' bytes.
		s.BytesFetched += ss.Bytes
	}
	if s.BytesServed > 0 {
		s.ReadAmplification = float64(s.BytesFetched) / float64(s.BytesServed)
	}
	s.HotShards, s.ShardsRead = m.hottest()
	s.Anomalies = m.Anomalies()
	s.AnomaliesFired, s.AnomalyChecks = m.anomaliesFired()
	s.StoreSkew = m.storeSkew()
	s.Ranks = m.rankSnapshots()
	return s
}

// Register exports the counters to reg under the shardfs_ prefix.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	counter := func(name, help string, v *atomic.Int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "shardfs_" + name, Help: help}, func() float64 { return float64(v.Load()) })
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "shardfs_" + name, Help: help}, f)
	}
	cs := []prometheus.Collector{
		counter("bytes_served_total", "Bytes returned to readers.", &m.BytesServed),
		counter("reads_total", "Read calls served.", &m.Reads),
		counter("cache_hits_total", "Chunk lookups served from the cache.", &m.CacheHits),
		counter("cache_misses_total", "Chunk lookups that needed the backend.", &m.CacheMisses),
		counter("stalls_total", "Reads that waited on the backend.", &m.Stalls),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "shardfs_stall_seconds_total", Help: "Time reads waited on the backend."},
			func() float64 { return float64(m.StallNanos.Load()) / 1e9 }),
		counter("degraded_reads_total", "Ranges decoded from parity.", &m.DegradedReads),
		counter("checksum_failures_total", "Fragment ranges that failed their checksum.", &m.ChecksumFailures),
		counter("hedged_reads_total", "Reads raced against a parity decode.", &m.HedgedReads),
		counter("prefetch_bytes_total", "Bytes fetched ahead of readers.", &m.PrefetchBytes),
		gauge("prefetch_lead_bytes", "Bytes ready or in flight ahead of the slowest reader.", func() float64 { return float64(m.PrefetchLead.Load()) }),
		gauge("prefetch_lead_seconds", "Seconds of reading the prefetch lead covers.", m.LeadSeconds),
		gauge("prefetch_depth", "Prefetch GETs allowed in flight: the demand in GETs per second × the GET latency, with a margin (Little's law).", func() float64 { return float64(m.depthNow().Slots) }),
		gauge("prefetch_gets_in_flight", "Prefetch GETs in flight when the depth was last set.", func() float64 { return float64(m.depthNow().InFlight) }),
		gauge("prefetch_depth_ceiling", "The most prefetch GETs in flight the depth may grow to: the stores' request slots less the demand reads'.", func() float64 { return float64(m.depthNow().Ceiling) }),
		gauge("prefetch_get_latency_seconds", "Seconds a GET takes, as the depth measures it (moving average).", func() float64 { return m.depthNow().LatencySeconds }),
		gauge("prefetch_demand_bytes_per_second", "Bytes per second the readers take (moving average).", func() float64 { return m.depthNow().DemandBytesPerSecond }),
		gauge("prefetch_demand_gets_per_second", "The readers' demand in prefetch GETs per second: bytes per second over the mean GET's bytes.", func() float64 { return m.depthNow().DemandGETsPerSecond }),
		gauge("cache_bytes", "Bytes held in the cache.", func() float64 { return float64(m.CacheBytes.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "shardfs_cache_evictions_total", Help: "Chunks evicted from the memory tier."},
			func() float64 { return float64(orZero(m.CacheEvictions)) }),
		gauge("prefetch_streams", "Rank-epochs with prefetch state.", func() float64 { return float64(m.PrefetchStreams.Load()) }),
		gauge("dataset_version", "The dataset version the mount serves (0: a mix).", func() float64 { return float64(m.VersionServed.Load()) }),
		gauge("dataset_current_version", "The version the stores hold as current, checked every minute: above shardfs_dataset_version, a newer version exists and a remount would read it.", func() float64 { return float64(m.VersionCurrent.Load()) }),
		m.getSeconds, m.firstByteSeconds, m.readWaitSeconds, m.fuseOpSeconds, m.hedges, rankCollector{m},
		m.anomalies.gauge, m.anomalies.fired,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "shardfs_bytes_fetched_total", Help: "Bytes read from the stores, parity and hedges included: over shardfs_bytes_served_total, the read amplification."},
			func() float64 { return float64(m.fetched()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "shardfs_cache_inserted_total", Help: "Chunks added to the memory tier."},
			func() float64 { return float64(orZero(m.CacheInserted)) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "shardfs_cache_evicted_unread_total", Help: "Chunks evicted from the memory tier before any reader took them: fetched for nothing (thrash)."},
			func() float64 { return float64(orZero(m.CacheEvictedUnread)) }),
		gauge("store_read_skew", "Most bytes any store served over the stores' mean: 1 when reads spread evenly.", m.storeSkew),
	}
	for k := range erasure.NumReadKinds {
		labels := prometheus.Labels{"kind": k.String()}
		cs = append(cs,
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "shardfs_gets_total", Help: "GETs sent to the stores, by why: demand (a reader waits), prefetch (ahead, by the order), hedge (a slow store raced), degraded (rebuilt from other fragments). Stores bill per request.", ConstLabels: labels},
				func() float64 { return float64(m.gets(k)) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "shardfs_get_bytes_total", Help: "Bytes the GETs to the stores asked for, by why (as shardfs_gets_total).", ConstLabels: labels},
				func() float64 { return float64(m.GETBytes[k].Load()) }),
		)
	}
	if m.disk != nil {
		disk := func(name, help string, f func(DiskSnapshot) int64) prometheus.Collector {
			return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "shardfs_disk_" + name, Help: help}, func() float64 { return float64(f(m.disk())) })
		}
		cs = append(cs,
			disk("hits_total", "Samples served from the disk tier.", func(d DiskSnapshot) int64 { return d.Hits }),
			disk("hit_bytes_total", "Bytes served from the disk tier.", func(d DiskSnapshot) int64 { return d.HitBytes }),
			disk("misses_total", "Disk tier lookups that went to the stores.", func(d DiskSnapshot) int64 { return d.Misses }),
			disk("writes_total", "Samples written to the disk tier.", func(d DiskSnapshot) int64 { return d.Writes }),
			disk("write_bytes_total", "Bytes written to the disk tier.", func(d DiskSnapshot) int64 { return d.WriteBytes }),
			disk("evictions_total", "Shard files evicted from the disk tier.", func(d DiskSnapshot) int64 { return d.Evictions }),
			disk("corrupt_refetches_total", "Samples on disk that failed their checksum and were fetched again.", func(d DiskSnapshot) int64 { return d.Corrupt }),
		)
	}
	if m.index != nil {
		cs = append(cs,
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "shardfs_shard_index_loads_total", Help: "Shard indexes fetched when their shards were first needed."},
				func() float64 { return float64(m.index().Loads) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "shardfs_shard_index_tier_hits_total", Help: "Shard indexes read from the disk tier."},
				func() float64 { return float64(m.index().TierHits) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "shardfs_shard_index_unpinned_lookups_total", Help: "Lookups of a sample whose shard's rows no rank-epoch held."},
				func() float64 { return float64(m.index().Unpinned) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "shardfs_group_object_loads_total", Help: "Format-3 group objects read from the stores, when their samples were first needed."},
				func() float64 { return float64(m.index().GroupLoads) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "shardfs_groups_held", Help: "Format-3 groups whose shards the mount holds (of shardfs_groups)."},
				func() float64 { return float64(m.index().GroupsHeld) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "shardfs_groups", Help: "Format-3 groups of the dataset (0 in format 2)."},
				func() float64 { return float64(m.index().Groups) }),
		)
	}
	for i, name := range m.names {
		st := m.stores[i]
		labels := prometheus.Labels{"store": name}
		cs = append(cs,
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "shardfs_backend_bytes_total", Help: "Bytes read from a store.", ConstLabels: labels},
				func() float64 { return float64(st.Bytes.Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "shardfs_backend_requests_total", Help: "Ranged GETs sent to a store.", ConstLabels: labels},
				func() float64 { return float64(st.requests()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "shardfs_backend_errors_total", Help: "Failed GETs on a store.", ConstLabels: labels},
				func() float64 { return float64(st.Errors.Load()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "shardfs_store_down", Help: "1 when the store is marked down.", ConstLabels: labels},
				func() float64 { return float64(st.State.Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "shardfs_store_throttled_total", Help: "Requests the store refused for load (503 SlowDown, 500, 429); each was retried after a backoff, within the read's deadline.", ConstLabels: labels},
				func() float64 { return float64(st.Throttled.Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "shardfs_store_degraded_reads_total", Help: "Degraded reads that rebuilt this store's fragment from parity (it was missing, late or bad there).", ConstLabels: labels},
				func() float64 { return float64(st.Degraded.Load()) }),
		)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
