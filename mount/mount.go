// Package mount assembles a mount: it opens the dataset (or the mix of
// several) on its stores, makes the run's order (repository.PlanOrder, which
// checks the spec against the data) and chooses the catalog, sizes
// the memory cache and opens the disk tier, builds the prefetching reader
// and the go-fuse tree, serves metrics, and unmounts on a signal. With
// --follow it also opens each newer version an epoch's record names, as a
// read path of its own over the same cache (follow.go). Warm fills a
// disk tier with what given ranks will read, under the names a mount's
// tier reads them by (warm.go), for shardfs warm. Tests
// build a mount in-process with Open, on any stores, fault-injecting ones
// included; cmd/shardfs only parses flags into a Config.
package mount

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime/debug"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/cache"
	"github.com/shardfs/shardfs/fs"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/metrics"
	"github.com/shardfs/shardfs/prefetch"
	"github.com/shardfs/shardfs/repository"
)

// Config is what a mount serves, and how.
type Config struct {
	// Name is the dataset to serve; with Mix, the name the mix is shown by.
	Name string
	// Version is the dataset version served; 0, the one current at start.
	// A mount never switches version while it runs.
	Version int
	// VersionCheckEvery is how often the mount asks which version is
	// current, for stats and metrics (0: repository.LeaseRefresh).
	VersionCheckEvery time.Duration
	// Mix names the datasets of a mix, in the order of Spec.Base.Mix's
	// weights; nil serves Name alone.
	Mix []string
	// Spec is the run's order, with the ranks and epochs shown: checked
	// here against the dataset as the CLI's are (repository.PlanOrder), then
	// asked for every rank-epoch.
	Spec *layout.Spec
	// Run names the run whose log holds the trainer's reports, when
	// Spec.Feedback re-weights the strata from them; ReportWait bounds how
	// long opening an epoch waits for the report of the epoch before.
	Run        string
	ReportWait time.Duration
	// Follow serves each epoch from the version the run's log records for
	// it, the newest committed when the epoch was first needed (follow.go);
	// it needs Run.
	Follow bool

	CacheSize    int64  // the memory budget, at least 16 MiB
	CacheDir     string // the disk tier; empty: none
	CacheDirSize int64
	NoPrefetch   bool
	// Prime fetches the first epoch's first batches as the mount starts
	// (prime.go); without it nothing is fetched before a file is read.
	Prime       bool
	DirectIO    bool
	ReadTimeout time.Duration // a read that waits longer fails with EIO
	AllowOther  bool
	ReadAheadKB int
	MaxRequest  int    // the largest FUSE read, bytes; 0: 1 MiB
	MetricsAddr string // serve Prometheus metrics here; empty: none
	Profiles    bool   // also serve Go profiles (/debug/pprof/) at MetricsAddr
	Logger      *slog.Logger

	// Info is what .shardfs/info.json says in the caller's words (info.go).
	Info Info
}

// Mount is a served dataset.
type Mount struct {
	Dataset *repository.Dataset // the first dataset of a mix
	Name    string
	Input   *layout.Input
	Params  layout.Params // rank 0's of epoch 0
	Metrics *metrics.Metrics

	server *fuse.Server
	reader *prefetch.Reader
	disk   *cache.Disk // nil without a disk tier
	http   *http.Server
	// stopAnomalies ends the anomaly detector.
	stopAnomalies chan struct{}
	// stopPrime ends the priming of the first batches, and primed is
	// closed once it has (prime.go); nil when the mount does not prime.
	stopPrime    context.CancelFunc
	primed       chan struct{}
	dir          string
	log          *slog.Logger
	leases       []*repository.Lease // on the versions served, until the mount ends
	hinters      []*repository.Hinter
	src          source                      // the dataset, or the mix, served
	spec         *layout.Spec                // the run's order
	run          string                      // the run the feedback's reports are read from
	follow       *follower                   // --follow; nil without
	feedback     *repository.FeedbackWeights // --feedback; nil without
	runReaders   []runReader                 // what reads the run's log: follow, feedback
	newerVersion string                      // what the log says when a newer version is current
	cache        *cache.Cache                // the memory cache every reader shares
	readerCfg    prefetch.Config
}

// Open mounts cfg's dataset at dir and returns once the tree is served.
// The stores are used as given: open them with backend.OpenStack (or wrap
// each in backend.Stack), as the CLI does, so every request has a time
// bound and each store a bound on requests in flight. The order is
// checked against the dataset as the CLI's is (repository.PlanOrder): errors
// about cfg.Spec are *layout.SpecError.
func Open(ctx context.Context, stores []backend.Store, dir string, cfg Config) (*Mount, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Spec == nil {
		return nil, fmt.Errorf("mount %s: no order spec given", cfg.Name)
	}
	// Which of the run's options combine is the spec's rule (layout.Spec):
	// the mount's run, follow and version join a copy of it.
	sp := *cfg.Spec
	sp.Run, sp.Follow, sp.DataVersion = cfg.Run, cfg.Follow, cfg.Version
	if err := sp.Validate(); err != nil {
		return nil, fmt.Errorf("mount %s: %w", cfg.Name, err)
	}
	cfg.Spec = &sp
	if cfg.CacheSize < 16<<20 {
		return nil, fmt.Errorf("cache size %d: use at least 16MiB", cfg.CacheSize)
	}
	if cfg.ReadTimeout <= 0 {
		return nil, fmt.Errorf("read timeout %v: must be positive", cfg.ReadTimeout)
	}
	if err := fs.CheckMountpoint(dir, log); err != nil {
		return nil, err
	}
	mt := &Mount{Name: cfg.Name, dir: dir, log: log, spec: cfg.Spec, run: cfg.Run,
		newerVersion: "a newer version of the dataset is current; this mount keeps serving its own until it is remounted"}
	if err := mt.openSource(ctx, stores, cfg); err != nil {
		mt.closeHinters()
		return nil, err
	}
	if err := mt.takeLeases(ctx, stores); err != nil {
		mt.closeHinters()
		return nil, err
	}
	if cfg.Follow && mt.Dataset.Lazy != nil {
		mt.closeHinters()
		mt.releaseLeases()
		return nil, fmt.Errorf("mount %s --follow: the dataset keeps its shard indexes apart (metadata format 2 or 3, ingest's default from a million samples); following new versions serves format 1 (ingest --format 1)", cfg.Name)
	}
	rp, err := mt.readPath(cfg)
	if err == nil {
		err = mt.newReader(cfg, rp, stores)
	}
	if err != nil {
		mt.closeHinters()
		mt.releaseLeases()
		return nil, err
	}
	info, err := mt.infoJSON(cfg)
	if err != nil {
		mt.shutdown()
		return nil, err
	}
	var sourceAt func(int) (*fs.Source, error)
	if cfg.Follow {
		mt.follow = &follower{mt: mt, stores: stores, run: cfg.Run, wait: cfg.ReportWait,
			epochs: map[int]int{}, sources: map[int]*fs.Source{}, versions: map[int]*repository.Dataset{}}
		mt.follow.largest.Store(mt.Dataset.Manifest)
		if mt.disk != nil {
			mt.disk.SetShardNamespace(mt.follow.shardNamespace)
		}
		sourceAt = mt.follow.sourceAt
		mt.runReaders = append(mt.runReaders, mt.follow)
		mt.newerVersion = "a newer version of the dataset is current; with --follow, the next epoch no node has recorded yet serves it"
	}
	root := fs.NewRoot(fs.Options{SourceAt: sourceAt,
		Catalog: rp.cat, Pinner: rp.pinner, Input: mt.Input, Reader: mt.reader, Order: mt.Params, ParamsAt: cfg.Spec.Params, Epochs: cfg.Spec.Epochs, Ranks: cfg.Spec.Ranks, DirectIO: cfg.DirectIO,
		Info: info, Stats: mt.StatsJSON, Created: time.Unix(mt.Dataset.Manifest.CreatedUnix, 0), Logger: log,
	})
	// The metrics listen before the mount point appears: whoever sees the
	// mount (a test, a scraper started beside the job, the CSI driver's
	// caller) may ask for them at once, and got "connection refused"
	// while the mount was up and its listener not yet (CI:
	// TestProfilesAreOptIn).
	if cfg.MetricsAddr != "" {
		if err := mt.serveMetrics(cfg.MetricsAddr, cfg.Profiles); err != nil {
			mt.shutdown()
			return nil, err
		}
	}
	mt.server, err = fs.Mount(dir, root, fs.MountOptions{Name: mt.Name, AllowOther: cfg.AllowOther, ReadAheadKB: cfg.ReadAheadKB, MaxRequest: cfg.MaxRequest, Logger: log,
		OpLatency: mt.Metrics.FuseOp,
		XAttrs:    mt.src.xattrs()})
	if err != nil {
		mt.shutdown()
		return nil, err
	}
	mt.Metrics.SetLogger(log)
	if cfg.Prime && !cfg.NoPrefetch && !cfg.Follow {
		mt.startPrime(root, cfg.Spec)
	}
	mt.stopAnomalies = make(chan struct{})
	go mt.detectAnomalies(mt.stopAnomalies)
	mt.src.watch(mt, stores, cmp.Or(cfg.VersionCheckEvery, repository.LeaseRefresh), mt.stopAnomalies)
	return mt, nil
}

// watchVersion asks the stores which version is current, every period,
// for stats and metrics: the mount serves its own all along.
func (mt *Mount) watchVersion(stores []backend.Store, every time.Duration, stop chan struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if h, err := repository.LoadHeader(ctx, stores, mt.Dataset.Name, nil); err == nil {
				if n := int64(h.VersionNumber()); mt.Metrics.VersionCurrent.Swap(n) != n && n != mt.Metrics.VersionServed.Load() {
					mt.log.Info(mt.newerVersion, "dataset", mt.Dataset.Name, "serving", mt.Metrics.VersionServed.Load(), "current", n)
				}
			}
			cancel()
		}
	}
}

// takeLeases leases the version of every dataset served, so that gc leaves
// it alone while the mount runs, and checks that the version is still there
// now that the lease is visible.
func (mt *Mount) takeLeases(ctx context.Context, stores []backend.Store) error {
	for _, ds := range mt.src.parts() {
		l, err := repository.TakeLease(ctx, stores, ds.Name, ds.Manifest, mt.log)
		if err != nil {
			// Read-only credentials mount as before; gc just cannot see
			// this mount.
			mt.log.Warn("could not lease the version served (read-only credentials?): shardfs gc cannot see this mount, so run it only when no job reads an old version",
				"dataset", ds.Name, "version", ds.Manifest.VersionNumber(), "err", err)
			continue
		}
		mt.leases = append(mt.leases, l)
		if err := l.Confirm(ctx, mt.log); err != nil {
			mt.releaseLeases()
			return fmt.Errorf("mount %s: %w", ds.Name, err)
		}
	}
	return nil
}

func (mt *Mount) releaseLeases() {
	// Short: a lease left on a store that does not answer goes stale, and
	// gc on this host sees at once that its process is gone.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, l := range mt.leases {
		l.Release(ctx)
	}
	mt.leases = nil
}

// anomalyEvery is how often the daemon looks for anomalies.
const anomalyEvery = 2 * time.Second

// detectAnomalies evaluates the anomaly rules (metrics.Evaluate) until stop closes.
func (mt *Mount) detectAnomalies(stop chan struct{}) {
	t := time.NewTicker(anomalyEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			mt.Metrics.Evaluate(now)
		}
	}
}

// openSource opens the dataset, or every dataset of the mix, while the
// stores' access check runs beside it: a hung store costs one request
// timeout, not two. More failing stores than m refuse the mount.
func (mt *Mount) openSource(ctx context.Context, stores []backend.Store, cfg Config) error {
	var names []string
	for _, s := range stores {
		names = append(names, s.String())
	}
	mt.Metrics = metrics.New(names)
	for i, s := range stores { // before any request
		st := mt.Metrics.Store(i)
		backend.OnThrottle(s, func() { st.Throttled.Add(1) })
	}
	type check struct {
		lines []string // the failures, worded by cause
		n     int      // the stores failing
	}
	failingc := make(chan check, 1)
	go func() {
		lines, n := checkStores(ctx, stores)
		failingc <- check{lines, n}
	}()
	src, err := openDatasetOrMix(ctx, stores, cfg, mt.log, mt.Metrics, mt.hinterFor(stores))
	if err == nil {
		mt.src, mt.Dataset = src, src.parts()[0]
	}
	checked := <-failingc
	failing := checked.lines
	if err != nil {
		if len(failing) > 0 {
			return fmt.Errorf("%w\nstores failing their access check:\n  %s", err, strings.Join(failing, "\n  "))
		}
		return err
	}
	parity := mt.Dataset.Manifest.Parity
	for _, p := range mt.src.parts() {
		parity = min(parity, p.Manifest.Parity)
	}
	if checked.n > parity {
		return fmt.Errorf("%d stores fail their access check, more than m=%d can be read around:\n  %s",
			checked.n, parity, strings.Join(failing, "\n  "))
	}
	for _, f := range failing {
		mt.log.Warn("store failing; mounting degraded, reads decode around it", "store", f)
	}
	return nil
}

// catalog is what the tree and the read path see of the dataset.
type servedCatalog interface {
	fs.TreeCatalog
	prefetch.ReadCatalog
}

// readPath is what the tree and the read path see of the dataset.
type readPath struct {
	cat    servedCatalog
	pinner fs.Pinner // pins rows the catalog does not hold; nil when it holds them all
	fetch  prefetch.Fetcher
	// ns is the disk tier's namespace: the ingest, so a re-ingested
	// dataset never meets stale bytes.
	ns string
}

// readPath makes the run's order and chooses what the tree and the read
// path see (the source's plan), and refuses an order the read path cannot
// serve.
func (mt *Mount) readPath(cfg Config) (readPath, error) {
	rp, plan, err := mt.src.plan(mt, cfg)
	if err != nil {
		return readPath{}, err
	}
	mt.Params, mt.Input = plan.First, plan.Input
	if err := checkServable(mt.Dataset.Manifest.Name, plan.Input, plan.First); err != nil {
		return readPath{}, err
	}
	// The readers' window and the next one, prefetched, must fit the
	// memory cache, or its shards are evicted before they are read and
	// fetched again: a window chosen for the dataset does not know the
	// node's cache, so say so where it does not fit.
	shape := repository.Shape(mt.Dataset)
	wb := layout.WindowBytes(plan.First, shape)
	mt.log.Info("order", "window", plan.First.Window, "window_auto", cfg.Spec.WindowChosen, "window_bytes", humanize.IBytes(uint64(wb)),
		"trade", cfg.Spec.WindowTrade(shape))
	if 2*wb > cfg.CacheSize {
		mt.log.Warn("the order's window holds more than half the memory cache: the window the readers are in and the next one do not both fit, so shards are fetched again; raise --cache-size to at least twice the window, or pass a smaller --window",
			"window", plan.First.Window, "window_bytes", humanize.IBytes(uint64(wb)), "cache_size", humanize.IBytes(uint64(cfg.CacheSize)))
	}
	return rp, nil
}

// goOverhead is what the Go runtime may hold beyond the cache and the GETs
// in flight before it collects harder: the FUSE request buffers, the
// order, the indexes and their garbage. The RSS bound a mount promises is
// the cache + InFlight + 128 MiB; the 32 MiB left over are what the
// kernel counts that Go's limit does not, chiefly the binary's own pages
// (RssFile, about 25 MiB): with 128 MiB here, a mount with all its prefetch
// GETs in flight on busy cores peaked 10 MiB over the bound (issue 57's
// depth test).
const goOverhead = 96 << 20

// prefetchCeiling is the most prefetch GETs in flight the depth may grow
// to: every store's request slots (--store-concurrency each), less the
// demand reads', so a reader's miss finds a slot. A store without a bound
// counts as backend.DefaultStoreConcurrency.
func prefetchCeiling(stores []backend.Store, demand int) int {
	slots := 0
	for _, s := range stores {
		n := backend.Concurrency(s)
		if n == 0 {
			n = backend.DefaultStoreConcurrency
		}
		slots += n
	}
	return max(slots-demand, 1)
}

// newReader builds the memory cache, the disk tier and the prefetching
// reader. One budget, the cache size, holds the verified chunks
// (prefetched ones included), the spare buffers evicted chunks leave for
// the next fetches (a sixteenth at most) and the bytes of prefetch GETs in
// flight, which are reserved in the cache when issued; the lead, shared by all open
// rank-epochs, may fill half of it. What lies outside: demand reads
// (DemandGET chunks at most) and the stores' response buffers of GETs in
// flight (InFlight at most). A soft limit keeps the Go heap's garbage from
// doubling that, so RSS stays within the cache size + InFlight + 128 MiB
// (goOverhead).
func (mt *Mount) newReader(cfg Config, rp readPath, stores []backend.Store) error {
	met := mt.Metrics
	pc := prefetch.DefaultConfig()
	pc.Budget = cfg.CacheSize / 2
	pc.MaxPrefetchGET = prefetchCeiling(stores, pc.DemandGET)
	pc.InFlight = min(pc.InFlight, cfg.CacheSize/4)
	debug.SetMemoryLimit(cfg.CacheSize + pc.InFlight + goOverhead)
	c := cache.New(cfg.CacheSize, func(n int64) { met.CacheBytes.Store(n) })
	met.CacheEvictions = c.Evictions.Load
	met.CacheInserted, met.CacheEvictedUnread = c.Inserted.Load, c.EvictedUnread.Load
	pc.Disabled = cfg.NoPrefetch
	pc.ReadTimeout = cfg.ReadTimeout
	pc.Heal = mt.src.heal
	if cfg.CacheDir != "" {
		disk, err := cache.OpenDisk(cfg.CacheDir, rp.ns, cfg.CacheDirSize)
		if err != nil {
			return err
		}
		pc.Disk = disk
		mt.src.openTier(disk)
		met.SetDisk(func() metrics.DiskSnapshot {
			return metrics.DiskSnapshot{Hits: disk.Hits.Load(), HitBytes: disk.HitBytes.Load(), Misses: disk.Misses.Load(),
				Writes: disk.Writes.Load(), WriteBytes: disk.WriteBytes.Load(), Evictions: disk.Evictions.Load(),
				Corrupt: disk.Corrupt.Load(), Limit: disk.Limit(), Used: disk.Used()}
		})
		mt.log.Info("disk tier", "dir", cfg.CacheDir, "limit", humanize.IBytes(uint64(cfg.CacheDirSize)))
	}
	mt.disk = pc.Disk
	mt.cache, mt.readerCfg = c, pc
	mt.reader = prefetch.New(rp.fetch, rp.cat, c, met, pc, mt.log)
	return nil
}

// serveMetrics serves Prometheus metrics at addr, and Go profiles if
// profiles says so (they reveal the daemon's internals: opt-in).
func (mt *Mount) serveMetrics(addr string, profiles bool) error {
	reg := prometheus.NewRegistry()
	if err := mt.Metrics.Register(reg); err != nil {
		return err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if profiles {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	}
	mt.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go mt.http.Serve(l)
	mt.log.Info("metrics", "url", "http://"+l.Addr().String()+"/metrics")
	return nil
}

// StatsJSON is the content of .shardfs/stats.json.
func (mt *Mount) StatsJSON() []byte {
	snap := any(mt.Metrics.Snapshot())
	if len(mt.runReaders) == 0 {
		b, _ := json.MarshalIndent(snap, "", "  ")
		return append(b, '\n')
	}
	// The run's log as far as this mount has read it, beside the counters.
	b, _ := json.Marshal(snap)
	var m map[string]any
	json.Unmarshal(b, &m)
	for _, r := range mt.runReaders {
		m[r.statsKey()] = r.stats()
	}
	b, _ = json.MarshalIndent(m, "", "  ")
	return append(b, '\n')
}

// runReader reads the run's log while the mount serves it: the follower
// (each epoch's dataset version) and the feedback (the trainer's reports).
// stats.json shows each under its key, and each ends with the mount.
type runReader interface {
	statsKey() string
	stats() any
	close()
}

func (f *follower) statsKey() string { return "follow" }
func (f *follower) stats() any {
	return map[string]any{"run": f.mt.run, "epochs": f.servedVersions()}
}

// feedbackReader is the trainer's feedback as the mount reads it.
type feedbackReader struct {
	mt *Mount
	w  *repository.FeedbackWeights
}

func (f feedbackReader) statsKey() string { return "feedback" }
func (f feedbackReader) close()           {}

// stats: each epoch's share of every stratum, from the reports read.
func (f feedbackReader) stats() any {
	mt := f.mt
	var epochs []map[string]any
	for e := range f.w.Known() {
		p, err := mt.spec.Params(e, 0)
		if err != nil {
			break
		}
		shares := map[string]float64{}
		for c, pi := range layout.TargetsOf(mt.Input, p) {
			shares[mt.Dataset.Manifest.Strata[c].Name] = pi
		}
		epochs = append(epochs, map[string]any{"epoch": e, "shares": shares})
	}
	return map[string]any{"rule": mt.spec.Feedback.String(), "run": mt.run, "epochs": epochs}
}

// hinterFor returns a maker of each served dataset's hinter, to which the
// mount hands every *erasure.HealNeeded its reads of that dataset return
// (prefetch.Config.Heal). The hinters end with the mount.
func (mt *Mount) hinterFor(stores []backend.Store) func(name string) *repository.Hinter {
	return func(name string) *repository.Hinter {
		h := repository.NewHinter(stores, name, mt.log)
		mt.hinters = append(mt.hinters, h)
		return h
	}
}

// closeHinters ends the hinters, after the reads that feed them.
func (mt *Mount) closeHinters() {
	for _, h := range mt.hinters {
		h.Close()
	}
	mt.hinters = nil
}

// openMix opens every dataset of a mix on the same stores.
// lazyTree gives the tree a format-2 or format-3 dataset's rows to pin.
// byRoot: the order is computed from a format-3 root (repository.ByRoot).
type lazyTree struct {
	*repository.LazyCatalog
	byRoot bool
}

func (l lazyTree) Pin(ctx context.Context, samples layout.Positions) (fs.TreeCatalog, layout.Positions, error) {
	var p *repository.Pinned
	var err error
	if l.byRoot {
		p, samples, err = l.LazyCatalog.PinRoot(ctx, samples)
	} else {
		p, err = l.LazyCatalog.Pin(ctx, samples)
	}
	if err != nil {
		return nil, layout.Positions{}, err
	}
	if rc, ok := p.ForLayout().(repository.PinnedRecords); ok {
		return rc, samples, nil
	}
	return p, samples, nil
}

func (l lazyTree) PinStratum(ctx context.Context, c int) (fs.TreeCatalog, layout.Positions, error) {
	p, samples, err := l.LazyCatalog.PinStratum(ctx, c)
	if err != nil {
		return nil, layout.Positions{}, err
	}
	if rc, ok := p.ForLayout().(repository.PinnedRecords); ok {
		return rc, samples, nil
	}
	return p, samples, nil
}

// checkStores pings every store in parallel and describes the failing ones.
func checkStores(ctx context.Context, stores []backend.Store) ([]string, int) {
	errs := backend.OnEvery(stores, func(_ int, s backend.Store) error {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return backend.Ping(pctx, s)
	})
	names := make([]string, len(stores))
	n := 0
	for i, err := range errs {
		names[i] = fmt.Sprintf("store %d (%s)", i, stores[i])
		if err != nil {
			n++
		}
	}
	return backend.Causes(names, errs), n
}

// checkServable refuses an order whose rank-epoch has more members than
// the read path numbers (2^31-1): sample ids are 64-bit, but a member of a
// rank-epoch is named in 32 bits. Such a rank-epoch's member table alone
// would take tens of GB; more ranks share the epoch.
func checkServable(name string, in *layout.Input, p layout.Params) error {
	steps, err := layout.Steps(in, p)
	if err != nil {
		return err
	}
	if n := int64(steps) * int64(max(p.Batch, 1)); n > math.MaxInt32 {
		return fmt.Errorf("%s: a rank-epoch of %d samples (%d samples in %d ranks): a mount serves at most %d a rank-epoch; raise --world-size or lower --epoch-size", name, n, in.N(), p.World, math.MaxInt32)
	}
	return nil
}
