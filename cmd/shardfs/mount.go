package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dustin/go-humanize"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/cache"
	"github.com/shardfs/shardfs/dataset"
	"github.com/shardfs/shardfs/fs"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/manifest"
	"github.com/shardfs/shardfs/metrics"
	"github.com/shardfs/shardfs/prefetch"
)

type mountFlags struct {
	order        orderFlags
	cacheSize    string
	cacheDir     string
	cacheDirSize string
	metricsAddr  string
	allowOther   bool
	readAheadKB  int
	noPrefetch   bool
	directIO     bool
	readTimeout  time.Duration
	// injectLatency is set only in the test build (testhooks.go).
	injectLatency string
}

// Set only by the test build of the binary (build tag shardfs_testhooks,
// testhooks.go): hidden flags of mount, and a wrapper around its stores.
var (
	mountFlagHooks []func(fl *pflag.FlagSet, f *mountFlags)
	wrapStores     func(stores []backend.Store, f *mountFlags, log *slog.Logger) ([]backend.Store, error)
	testCommands   []func(g *globals) *cobra.Command
)

func newMountCmd(g *globals) *cobra.Command {
	f := &mountFlags{}
	cmd := &cobra.Command{
		Use:   "mount --stores URL,... [order flags] NAME MOUNTPOINT | --mix NAME:W,... MOUNTPOINT",
		Short: "Mount a dataset as directories of stratified epoch and batch files",
		Long: `Mount serves dataset NAME at MOUNTPOINT, read-only, in the foreground:

  samples/<class>/<key>                          the dataset as-is (ImageFolder; with --mix samples/<dataset>/<class>/<key>)
  epochs/<EEEE>/rank-<RRR>/batch-<BBBBBB>.tar    one batch, WebDataset tar: <key>.<ext> + <key>.cls
  epochs/<EEEE>/rank-<RRR>/epoch.tar             the rank's whole epoch as one tar
  epochs/<EEEE>/rank-<RRR>/index.csv             position,batch,key,stratum,size,alpha
  .shardfs/info.json, .shardfs/stats.json

Every node computes the same global order from --seed with no coordination;
each rank sees its share. --rank picks the ranks this mount serves: one
(3), a range (8-15: one mount for a node's 8 GPUs, with one cache), or a
list; by default every rank 0..W-1 is shown. --epochs 0 makes epochs
open-ended: any epoch number opens, and the listing shows the epochs opened
so far and the next few (at most 10,000), so runs of hundreds of epochs need
no count. The
daemon prefetches exactly what the order says comes next. Every byte is
verified against checksums written at ingest; up to m stores may fail.

Stop with Ctrl-C, SIGTERM or umount MOUNTPOINT. While files in the mount are
open, the daemon names the processes that hold them and retries the unmount;
a second Ctrl-C or SIGTERM unmounts lazily and exits (those processes then get
errors on their open files).`,
		Example: `  shardfs mount --stores $STORES --rank 3 --world-size 8 --batch-size 256 --seed 17 imagenet-train /mnt/data
  shardfs mount --stores $STORES --mix web:0.7,books:0.3 --batch-size 256 /mnt/mix`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case f.order.mix != "" && len(args) != 1:
				return fmt.Errorf("with --mix the datasets come from the mix: give the mount point alone")
			case f.order.mix == "" && len(args) != 2:
				return fmt.Errorf("give the dataset NAME and the MOUNTPOINT (or --mix NAME:W,... and the MOUNTPOINT)")
			}
			if f.order.mix != "" {
				args = []string{"", args[0]}
			}
			stores, err := g.openStores()
			if err != nil {
				return err
			}
			log := g.logger()
			mt, err := mountDataset(cmd.Context(), log, stores, args[0], args[1], f)
			if err != nil {
				return err
			}
			if f.order.mix != "" {
				names, weights, _ := f.order.mixParts()
				log.Info("mix of datasets", "shares_served", describeMix(names, weights))
			}
			log.Info("mounted; stop with Ctrl-C or umount", "dataset", mt.name, "mountpoint", args[1])
			return mt.serve(cmd.Context())
		},
	}
	f.order.register(cmd.Flags(), "all")
	fl := cmd.Flags()
	fl.StringVar(&f.cacheSize, "cache-size", "2GiB", "memory for verified chunks; half of it may hold prefetched data")
	fl.StringVar(&f.cacheDir, "cache-dir", "", "persistent disk tier below the memory cache, on local disk or NVMe: survives remounts and crashes, shared safely by several mounts")
	fl.StringVar(&f.cacheDirSize, "cache-dir-size", "100GiB", "most bytes the disk tier holds, across every dataset in --cache-dir")
	fl.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus metrics on this address, e.g. 127.0.0.1:9464")
	fl.BoolVar(&f.allowOther, "allow-other", false, "let other users read the mount (turns on default_permissions too)")
	fl.IntVar(&f.readAheadKB, "read-ahead-kb", 4096, "kernel read-ahead for the mount, in KiB (0: leave the default)")
	fl.BoolVar(&f.directIO, "direct-io", false, "serve batch and epoch files past the kernel's page cache: faster when\n"+
		"each file is read once per epoch in large reads (DataLoader workers, WebDataset);\n"+
		"such files cannot be mmap'ed, and a second read of one is served by the daemon again")
	fl.BoolVar(&f.noPrefetch, "no-prefetch", false, "turn prefetching off (for measurements)")
	fl.DurationVar(&f.readTimeout, "read-timeout", 10*time.Second, "give up on a backend read after this long and return EIO")
	for _, hook := range mountFlagHooks {
		hook(fl, f)
	}
	return cmd
}

type mounted struct {
	server  *fuse.Server
	reader  *prefetch.Reader
	disk    *cache.Disk // nil without --cache-dir
	metrics *metrics.Metrics
	http    *http.Server
	dir     string
	log     *slog.Logger
	ds      *dataset.Dataset // the first dataset of a mix
	mix     *dataset.Mix     // nil for one dataset
	name    string
	input   *layout.Input
	params  layout.Params
	ranks   []int
	epochs  int
}

func mountDataset(ctx context.Context, log *slog.Logger, stores []backend.Store, name, dir string, f *mountFlags) (*mounted, error) {
	cacheSize, err := humanize.ParseBytes(f.cacheSize)
	if err != nil || cacheSize < 16<<20 {
		return nil, fmt.Errorf("--cache-size %q: use a size of at least 16MiB, e.g. 2GiB", f.cacheSize)
	}
	if f.readTimeout <= 0 {
		return nil, fmt.Errorf("--read-timeout %v: must be positive, e.g. 10s: a read that waits longer returns EIO", f.readTimeout)
	}
	if err := fs.CheckMountpoint(dir, log); err != nil {
		return nil, err
	}
	if wrapStores != nil {
		if stores, err = wrapStores(stores, f, log); err != nil {
			return nil, err
		}
	}
	var names []string
	for _, s := range stores {
		names = append(names, s.String())
	}
	// The access check runs beside the manifest load: a hung store costs one
	// request timeout, not two.
	failingc := make(chan []string, 1)
	go func() { failingc <- checkStores(ctx, stores) }()
	met := metrics.New(names)
	var mix *dataset.Mix
	var ds *dataset.Dataset
	if f.order.mix != "" {
		mix, err = openMix(ctx, stores, f, log, met)
		if err == nil {
			ds, name = mix.Parts[0], f.order.mix
		}
	} else {
		ds, err = dataset.Open(ctx, stores, name, dataset.Options{Logger: log, Metrics: met, LazyIndexes: true})
	}
	failing := <-failingc
	if err != nil {
		if len(failing) > 0 {
			return nil, fmt.Errorf("%w\nstores failing their access check:\n  %s", err, strings.Join(failing, "\n  "))
		}
		return nil, err
	}
	parity := ds.Manifest.Parity
	if mix != nil {
		for _, p := range mix.Parts {
			parity = min(parity, p.Manifest.Parity)
		}
	}
	if len(failing) > parity {
		return nil, fmt.Errorf("%d stores fail their access check, more than m=%d can be read around:\n  %s",
			len(failing), parity, strings.Join(failing, "\n  "))
	}
	for _, f := range failing {
		log.Warn("store failing; mounting degraded, reads decode around it", "store", f)
	}
	// What the tree and the read path see: one dataset, or the mix of several.
	var cat interface {
		fs.Catalog
		layout.Geometry
		prefetch.DiskIndex
	} = dataset.Catalog{M: ds.Manifest}
	var fetch prefetch.Fetcher = ds
	ns := ds.Manifest.Name + "-" + ds.Manifest.IngestID
	// The order flags are parsed once, here; the tree asks the schedule for
	// every rank-epoch it opens.
	sched, err := f.order.schedule()
	if err != nil {
		return nil, err
	}
	params, err := sched.Params(0, 0)
	if err != nil {
		return nil, err
	}
	in, err := dataset.OrderInput(ds, params)
	switch {
	case mix != nil:
		cat, fetch, ns = mix, mix, mix.Namespace()
		in, err = mix.Input()
	case ds.Lazy != nil:
		// Format 2: no shard index is read until a rank-epoch or a samples/
		// directory needs its shard, and the order comes from the counts.
		cat = lazyTree{ds.Lazy}
		if f.cacheDir != "" {
			ds.Lazy.PinWholeShards() // the disk tier keeps shards sample by sample
		}
		met.SetIndex(func() metrics.IndexSnapshot {
			return metrics.IndexSnapshot{Loads: ds.Lazy.IndexLoads.Load(), TierHits: ds.Lazy.TierHits.Load(), Unpinned: ds.Lazy.Unpinned.Load()}
		})
	}
	if err != nil {
		return nil, err
	}
	ranks := f.order.ranks()
	if err := f.order.checkResumeInEpochs(); err != nil {
		return nil, err
	}
	if _, err := f.order.checkSteps(in); err != nil {
		return nil, err
	}
	// One budget, --cache-size, holds the verified chunks (prefetched ones
	// included) and the bytes of prefetch GETs in flight, which are reserved
	// in the cache when issued; the lead, shared by all open rank-epochs, may
	// fill half of it. What lies outside: demand reads (DemandGET chunks at
	// most) and the stores' response buffers of GETs in flight (InFlight at
	// most). A soft limit keeps the Go heap's garbage from doubling that, so
	// RSS stays near --cache-size + InFlight + the daemon's own ~100 MiB.
	cfg := prefetch.DefaultConfig()
	cfg.Budget = int64(cacheSize) / 2
	cfg.InFlight = min(cfg.InFlight, int64(cacheSize)/4)
	debug.SetMemoryLimit(int64(cacheSize) + cfg.InFlight + 128<<20)
	c := cache.New(int64(cacheSize), func(n int64) { met.CacheBytes.Store(n) })
	met.CacheEvictions = c.Evictions.Load
	cfg.Disabled = f.noPrefetch
	cfg.ReadTimeout = f.readTimeout
	if f.cacheDir != "" {
		size, err := humanize.ParseBytes(f.cacheDirSize)
		if err != nil {
			return nil, fmt.Errorf("--cache-dir-size %q: use a size such as 200GiB", f.cacheDirSize)
		}
		// The namespace is the ingest, so a re-ingested dataset never meets stale bytes.
		disk, err := cache.OpenDisk(f.cacheDir, ns, int64(size))
		if err != nil {
			return nil, err
		}
		cfg.Disk = disk
		if mix == nil && ds.Lazy != nil {
			ds.Lazy.SetTier(disk) // shard indexes too, so a remount fetches none
		}
		met.SetDisk(func() metrics.DiskSnapshot {
			return metrics.DiskSnapshot{Hits: disk.Hits.Load(), HitBytes: disk.HitBytes.Load(), Misses: disk.Misses.Load(),
				Writes: disk.Writes.Load(), WriteBytes: disk.WriteBytes.Load(), Evictions: disk.Evictions.Load(),
				Corrupt: disk.Corrupt.Load(), Limit: disk.Limit()}
		})
		log.Info("disk tier", "dir", f.cacheDir, "limit", humanize.IBytes(size))
	}
	reader := prefetch.New(fetch, cat, c, met, cfg, log)
	mt := &mounted{reader: reader, disk: cfg.Disk, metrics: met, dir: dir, log: log, ds: ds, mix: mix, name: name, input: in, params: params, ranks: ranks, epochs: f.order.epochs}
	info, err := mt.info(f, int64(cacheSize))
	if err != nil {
		mt.shutdown()
		return nil, err
	}
	root := fs.NewRoot(fs.Options{
		Catalog: cat, Input: in, Reader: reader, Order: params, ParamsAt: sched.Params, Epochs: f.order.epochs, Ranks: ranks, DirectIO: f.directIO,
		Info: info, Stats: mt.statsJSON, Created: time.Unix(ds.Manifest.CreatedUnix, 0), Logger: log,
	})
	mt.server, err = fs.Mount(dir, root, fs.MountOptions{Name: name, AllowOther: f.allowOther, ReadAheadKB: f.readAheadKB, Logger: log})
	if err != nil {
		mt.shutdown()
		return nil, err
	}
	if f.metricsAddr != "" {
		reg := prometheus.NewRegistry()
		if err := met.Register(reg); err != nil {
			mt.close()
			return nil, err
		}
		l, err := net.Listen("tcp", f.metricsAddr)
		if err != nil {
			mt.close()
			return nil, fmt.Errorf("--metrics-addr %s: %w", f.metricsAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		// Profiles for diagnosing a slow mount; the address is loopback by default.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mt.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go mt.http.Serve(l)
		log.Info("metrics", "url", "http://"+l.Addr().String()+"/metrics")
	}
	return mt, nil
}

// lazyTree gives the tree a format-2 dataset's rows to pin.
type lazyTree struct{ *dataset.LazyCatalog }

func (l lazyTree) Pin(ctx context.Context, samples []int32) (fs.Catalog, error) {
	p, err := l.LazyCatalog.Pin(ctx, samples)
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (l lazyTree) PinStratum(ctx context.Context, c int) (fs.Catalog, []int32, error) {
	p, samples, err := l.LazyCatalog.PinStratum(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	return p, samples, nil
}

// checkStores pings every store in parallel and describes the failing ones.
func checkStores(ctx context.Context, stores []backend.Store) []string {
	errs := backend.OnEvery(stores, func(_ int, s backend.Store) error {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return backend.Ping(pctx, s)
	})
	var out []string
	for i, err := range errs {
		if err != nil {
			out = append(out, fmt.Sprintf("store %d: %v", i, err))
		}
	}
	return out
}

// serve runs until ctx is cancelled (SIGINT, SIGTERM) or the mount is unmounted.
func (mt *mounted) serve(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		mt.server.Wait()
		close(done)
	}()
	select {
	case <-ctx.Done():
	case <-done:
		mt.log.Info("unmounted externally", "mountpoint", mt.dir)
		mt.shutdown()
		return nil
	}
	// The first signal asked for a clean unmount; a second one is ours to
	// see, and unmounts lazily.
	again := make(chan os.Signal, 1)
	signal.Notify(again, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(again)
	mt.log.Info("unmounting", "mountpoint", mt.dir)
	for {
		err := mt.server.Unmount()
		if err == nil {
			mt.server.Wait()
			mt.shutdown()
			return nil
		}
		mt.log.Warn("the mount is busy: files in it are open; retrying every 2s. Close them, or signal again (Ctrl-C) to unmount lazily and exit",
			"mountpoint", mt.dir, "held_by", holders(mt.dir), "err", err)
		select {
		case <-again:
			held := holders(mt.dir)
			if err := unix.Unmount(mt.dir, unix.MNT_DETACH); err != nil {
				mt.log.Error("lazy unmount failed; run fusermount3 -uz "+mt.dir, "err", err)
			} else {
				mt.log.Warn("unmounted lazily: the processes that hold files in it get errors (ENOTCONN) on them", "mountpoint", mt.dir, "held_by", held)
			}
			mt.shutdown()
			return nil
		case <-done:
			mt.shutdown()
			return nil
		case <-time.After(2 * time.Second):
		}
	}
}

// holders names the processes with a file or working directory below dir
// (read from /proc), for the message that says why an unmount is refused.
func holders(dir string) []string {
	procs, _ := os.ReadDir("/proc")
	var out []string
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		links, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		paths := make([]string, 0, len(links)+1)
		for _, l := range links {
			paths = append(paths, fmt.Sprintf("/proc/%d/fd/%s", pid, l.Name()))
		}
		paths = append(paths, fmt.Sprintf("/proc/%d/cwd", pid))
		for _, link := range paths {
			if target, err := os.Readlink(link); err == nil && (target == dir || strings.HasPrefix(target, dir+"/")) {
				comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
				out = append(out, fmt.Sprintf("%s (pid %d)", strings.TrimSpace(string(comm)), pid))
				break
			}
		}
		if len(out) == 10 {
			out = append(out, "...")
			break
		}
	}
	return out
}

// close unmounts and stops background work.
func (mt *mounted) close() {
	if err := mt.server.Unmount(); err != nil {
		mt.log.Warn("unmount", "err", err)
	}
	mt.server.Wait()
	mt.shutdown()
}

func (mt *mounted) shutdown() {
	if mt.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		mt.http.Shutdown(ctx)
		cancel()
	}
	mt.reader.Close()
	if mt.disk != nil {
		mt.disk.Close()
	}
}

func (mt *mounted) statsJSON() []byte {
	b, _ := json.MarshalIndent(mt.metrics.Snapshot(), "", "  ")
	return append(b, '\n')
}

func (mt *mounted) info(f *mountFlags, cacheSize int64) ([]byte, error) {
	m := mt.ds.Manifest
	type stratum struct {
		Name   string   `json:"name"`
		Labels []string `json:"labels"`
		Count  int      `json:"count"`
	}
	describe := func(m *manifest.Manifest) map[string]any {
		var strata []stratum
		for _, s := range m.Strata {
			strata = append(strata, stratum{s.Name, s.Labels, s.Count})
		}
		return map[string]any{"name": m.Name, "ingest_id": m.IngestID, "created_unix": m.CreatedUnix,
			"samples": samples(m), "bytes": m.TotalBytes(), "shards": len(m.Shards), "label_fields": m.LabelFields, "strata": strata}
	}
	steps, err := layout.Steps(mt.input, mt.params)
	if err != nil {
		return nil, err
	}
	v := map[string]any{
		"dataset": describe(m),
		"erasure": map[string]any{"data": m.Data, "parity": m.Parity, "block_size": m.BlockSize, "stores": mt.metrics.Snapshot().Stores},
		"order": map[string]any{"version": f.order.orderVersion(), "seed": f.order.seed, "world_size": f.order.world, "ranks": mt.ranks, "batch_size": f.order.batch,
			"epochs": f.order.epochs, "alpha": f.order.alpha, "window": f.order.window, "affinity": f.order.affinity, "resume_at": f.order.resumeAt, "alpha_schedule": f.order.alphaSchedule, "alpha_by_epoch": alphaByEpoch(f), "tail": f.order.tail,
			"epoch_size": f.order.epochSize, "batches_per_rank": steps},
		"mount": map[string]any{"cache_size": cacheSize, "prefetch": !f.noPrefetch, "cache_dir": f.cacheDir, "cache_dir_size": f.cacheDirSize, "direct_io": f.directIO},
	}
	if mt.mix != nil {
		names, weights, _ := f.order.mixParts()
		var parts []map[string]any
		for i, p := range mt.mix.Parts {
			d := describe(p.Manifest)
			d["weight"] = weights[i]
			d["share"] = mixShares(weights)[i]
			parts = append(parts, d)
		}
		delete(v, "dataset")
		v["mix"] = map[string]any{"datasets": names, "parts": parts}
	}
	b, err := json.MarshalIndent(v, "", "  ")
	return append(b, '\n'), err
}

// openMix opens every dataset of --mix on the same stores.
func openMix(ctx context.Context, stores []backend.Store, f *mountFlags, log *slog.Logger, met *metrics.Metrics) (*dataset.Mix, error) {
	names, _, err := f.order.mixParts()
	if err != nil {
		return nil, err
	}
	var parts []*dataset.Dataset
	for _, n := range names {
		ds, err := dataset.Open(ctx, stores, n, dataset.Options{Logger: log, Metrics: met})
		if err != nil {
			return nil, fmt.Errorf("--mix: %w", err)
		}
		parts = append(parts, ds)
	}
	return dataset.NewMix(parts)
}

func newStatsCmd() *cobra.Command {
	var count int
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "stats MOUNTPOINT",
		Short: "Print a mount's live counters once a second",
		Long: `Stats reads MOUNTPOINT/.shardfs/stats.json once a second and prints a
compact line: throughput, memory cache hit ratio, disk tier hit ratio (with
--cache-dir), prefetch lead, stalls, degraded reads, checksum failures and
hedged reads, then each store's state.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runStats(cmd.Context(), cmd.OutOrStdout(), args[0], count, interval)
		},
	}
	cmd.Flags().IntVar(&count, "count", 0, "stop after this many lines (0: until Ctrl-C)")
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "time between lines")
	return cmd
}

func readStats(mountpoint string) (metrics.Snapshot, error) {
	var s metrics.Snapshot
	b, err := os.ReadFile(mountpoint + "/.shardfs/stats.json")
	if err != nil {
		return s, fmt.Errorf("%s is not a shardfs mount? %w", mountpoint, err)
	}
	return s, json.Unmarshal(b, &s)
}

func runStats(ctx context.Context, out interface{ Write([]byte) (int, error) }, mountpoint string, count int, interval time.Duration) error {
	prev, err := readStats(mountpoint)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%8s %10s %6s %6s %10s %8s %8s %9s %8s %6s %6s  stores\n",
		"uptime", "MB/s", "hit%", "disk%", "lead MB", "lead s", "stalls", "stall s", "degraded", "csum", "hedged")
	t := time.NewTicker(interval)
	defer t.Stop()
	for i := 0; count == 0 || i < count; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		s, err := readStats(mountpoint)
		if err != nil {
			return err
		}
		dt := s.UptimeSeconds - prev.UptimeSeconds
		hits, misses := s.CacheHits-prev.CacheHits, s.CacheMisses-prev.CacheMisses
		hit := 0.0
		if hits+misses > 0 {
			hit = 100 * float64(hits) / float64(hits+misses)
		}
		disk := "-"
		if s.Disk != nil && prev.Disk != nil {
			dh, dm := s.Disk.Hits-prev.Disk.Hits, s.Disk.Misses-prev.Disk.Misses
			disk = "0.0"
			if dh+dm > 0 {
				disk = fmt.Sprintf("%.1f", 100*float64(dh)/float64(dh+dm))
			}
		}
		stores := ""
		for i, st := range s.Stores {
			mark := "+"
			if st.State != "healthy" {
				mark = "DOWN"
			}
			stores += fmt.Sprintf(" %d:%s", i, mark)
		}
		fmt.Fprintf(out, "%7.0fs %10.1f %6.1f %6s %10.1f %8.2f %8d %9.2f %8d %6d %6d %s\n",
			s.UptimeSeconds, float64(s.BytesServed-prev.BytesServed)/1e6/max(dt, 1e-9), hit, disk,
			float64(s.PrefetchLeadBytes)/1e6, s.PrefetchLeadSecs, s.Stalls, s.StallSeconds,
			s.DegradedReads, s.ChecksumFailures, s.HedgedReads, stores)
		prev = s
	}
	return nil
}

// alphaByEpoch lists the alpha of each epoch shown (the first 1,000 when open-ended).
func alphaByEpoch(f *mountFlags) []float64 {
	n := f.order.epochs
	if n == 0 || n > 1000 {
		n = 1000
	}
	s, err := f.order.schedule()
	if err != nil {
		return nil
	}
	out := make([]float64, 0, n)
	for e := 0; e < n; e++ {
		out = append(out, s.AlphaAt(e))
	}
	return out
}

// samples is m's number of samples, also when its rows are not loaded.
func samples(m *manifest.Manifest) int {
	if m.Top != nil && m.Samples.Len() == 0 {
		return m.Top.Samples()
	}
	return m.Samples.Len()
}
