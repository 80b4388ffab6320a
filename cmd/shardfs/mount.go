package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/fs"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/mount"
)

type mountFlags struct {
	order        orderFlags
	cacheSize    string
	cacheDir     string
	cacheDirSize string
	metricsAddr  string
	pprof        bool
	allowOther   bool
	readAheadKB  int
	maxRequest   string
	follow       bool
	noPrefetch   bool
	prime        bool
	// ranksNamed: --rank or --prime was given, so the ranks shown are
	// the ones this node reads. Otherwise a mount primes only when it
	// shows one rank: one that shows every rank of a larger job by
	// default (--rank all) cannot tell which this node's trainer reads.
	ranksNamed  bool
	directIO    bool
	readTimeout time.Duration
	reportWait  time.Duration
	daemon      bool
	logFile     string
	mkdir       bool
	readyFile   string
}

// Set only by the test build of the binary (build tag shardfs_testhooks,
// testhooks.go): hidden flags of mount, and a wrapper around its stores.
var (
	versionCheckEvery time.Duration // mount's hidden --version-check-every
	mountFlagHooks    []func(fl *pflag.FlagSet, f *mountFlags)
	wrapStores        func(stores []backend.Store, f *mountFlags, log *slog.Logger) ([]backend.Store, error)
	testCommands      []func(g *globals) *cobra.Command
)

func newMountCmd(g *globals) *cobra.Command { return mountCmd(g, &mountFlags{}) }

// mountCmd is the mount command over the flag values f (csi.go reads them
// to check a volume's attributes).
func mountCmd(g *globals, f *mountFlags) *cobra.Command {
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
list; by default every rank 0..W-1 is shown. Epochs are open-ended by
default: any epoch number opens, and the listing shows the epochs opened so
far and the next few (at most 10,000), so a loop of any number of epochs
needs no count; --epochs N shows exactly N. The daemon prefetches exactly
what the order says comes next. Every byte is verified against checksums
written at ingest; up to m stores may fail.

Stop with Ctrl-C, SIGTERM or umount MOUNTPOINT. While files in the mount are
open, the daemon names the processes that hold them and retries the unmount;
a second Ctrl-C or SIGTERM unmounts lazily and exits (those processes then get
errors on their open files).`,
		Example: `  shardfs mount --stores $SHARDFS_STORES --rank 3 --world-size 8 --batch-size 256 --seed 17 imagenet-train /mnt/data
  shardfs mount --daemon --mkdir imagenet-train /mnt/data && python3 train.py /mnt/data
  shardfs mount --stores $SHARDFS_STORES --mix web:0.7,books:0.3 --batch-size 256 /mnt/mix`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) (retErr error) {
			switch {
			case f.order.mix != "" && len(args) != 1:
				return fmt.Errorf("with --mix the datasets come from the mix: give the mount point alone")
			case f.order.mix == "" && len(args) != 2:
				return fmt.Errorf("give the dataset NAME and the MOUNTPOINT (or --mix NAME:W,... and the MOUNTPOINT)")
			}
			if f.order.mix != "" {
				args = []string{"", args[0]}
			}
			if f.mkdir {
				created, err := mkdirAll(args[1])
				if err != nil {
					return fmt.Errorf("--mkdir: %w", err)
				}
				// A mount that fails leaves no directory it made behind.
				defer func() {
					if retErr != nil {
						removeEmpty(created)
					}
				}()
			}
			if f.daemon {
				return startDaemon(cmd.Context(), cmd.OutOrStdout(), args[1], f.logFile)
			}
			f.ranksNamed = cmd.Flags().Changed("rank") || cmd.Flags().Changed("prime")
			ready := readyPipe()
			stores, err := g.openStores()
			if err != nil {
				reportReady(ready, err)
				return err
			}
			log := g.logger()
			defer reopenLogOnHangup(log)()
			mt, err := mountDataset(cmd.Context(), log, stores, args[0], args[1], f)
			if err == nil && f.readyFile != "" {
				if err = writeReadyFile(f.readyFile, args[1]); err != nil {
					mt.Close()
				} else {
					defer os.Remove(f.readyFile)
				}
			}
			reportReady(ready, err)
			if err != nil {
				return err
			}
			log.Info("mounted; stop with Ctrl-C or umount", "dataset", mt.Name, "mountpoint", args[1])
			return mt.Serve(cmd.Context())
		},
	}
	f.order.register(cmd.Flags(), orderDefaults{rank: "all", rankHelp: "the ranks to show (8-15: one mount serving a node's 8 GPUs, with one cache; a rank's bytes are fetched when its files are read, and with --prime its first batches as the mount starts)",
		epochs: 0, epochsHelp: "number of epochs to show; 0 (the default) is open-ended: any epoch number opens, as a training loop of any length expects"})
	fl := cmd.Flags()
	fl.StringVar(&f.cacheSize, "cache-size", "2GiB", "memory for verified chunks; half of it may hold prefetched data, and up to a sixteenth is kept as spare buffers that evicted chunks leave for the next fetches")
	fl.StringVar(&f.cacheDir, "cache-dir", "", "persistent disk tier below the memory cache, on local disk or NVMe: survives remounts and crashes, shared safely by several mounts")
	fl.StringVar(&f.cacheDirSize, "cache-dir-size", "100GiB", "most bytes the disk tier holds, across every dataset in --cache-dir")
	fl.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus metrics on this address, e.g. 127.0.0.1:9464 (default: none)")
	fl.BoolVar(&f.pprof, "pprof", false, "also serve Go profiles under /debug/pprof/ on --metrics-addr; they show the daemon's internals, so bind that address to loopback")
	fl.BoolVar(&f.allowOther, "allow-other", false, "let other users read the mount (turns on default_permissions too)")
	fl.IntVar(&f.readAheadKB, "read-ahead-kb", 4096, "kernel read-ahead for the mount, in KiB (0: leave the default)")
	fl.StringVar(&f.maxRequest, "fuse-max-request", "1MiB", "largest read the kernel sends the daemon at once, 128KiB to 16MiB; 1MiB was the fastest for shardfs here (16MiB cut the bare FUSE floor's CPU per GB by 7% but raised shardfs's by a third, and each read in flight holds up to twice its size in the daemon, outside --cache-size: docs/bench/fuse-request-size.md); above 1MiB the kernel needs sysctl -w fs.fuse.max_pages_limit=4096")
	fl.BoolVar(&f.directIO, "direct-io", false, "serve batch and epoch files past the kernel's page cache: faster when\n"+
		"each file is read once per epoch in large reads (DataLoader workers, WebDataset);\n"+
		"such files cannot be mmap'ed, and a second read of one is served by the daemon again")
	fl.BoolVar(&f.noPrefetch, "no-prefetch", false, "turn prefetching off (for measurements)")
	fl.BoolVar(&f.prime, "prime", true, "as the mount starts, fetch the first batches of the epoch the job starts in, for each rank shown (when at most 8),\n"+
		"so the trainer's first batch finds them cached (20 ms stores, 2 cores: 47-54 ms to the first batch, 101-118 unprimed, 17-32 from tmpfs);\n"+
		"at most one prefetch lead (64MiB) a rank, kept ahead for 10 minutes or until a file of the rank is opened;\n"+
		"by default only a mount that shows one rank, or the ranks --rank names, primes (one showing every rank of\n"+
		"--world-size cannot tell which this node reads); --prime=false where a job resumes mid-epoch without\n"+
		"--resume-at (it would fetch the epoch's start for nothing); ignored with --follow")
	fl.DurationVar(&f.readTimeout, "read-timeout", 10*time.Second, "give up on a backend read after this long and return EIO")
	fl.DurationVar(&f.reportWait, "report-wait", 10*time.Minute, "how long opening an epoch waits for the run's log: with --feedback the trainer's report of the epoch before, with --follow another node recording the epoch's version; then EIO, and the log says what is missing")
	fl.BoolVar(&f.follow, "follow", false, "serve each epoch from the newest dataset version committed when the epoch was first opened by any node: an append made during training joins at the next epoch, never mid-epoch; the version of each epoch is recorded under --run in the stores, so every node and a resumed job serve the same (needs --run; a node with read-only credentials waits for one that can write to record the epoch; metadata format 1)")
	fl.BoolVar(&f.daemon, "daemon", false, "run in the background: return once the tree is served (exit 0), or with the mount's error;\n"+
		"stop the daemon with umount MOUNTPOINT")
	fl.BoolVar(&f.mkdir, "mkdir", false, "create MOUNTPOINT (and its parents) if missing, as a container whose volume holds only the parent needs")
	fl.StringVar(&f.readyFile, "ready-file", "", "write this file (the daemon's pid and the mountpoint) once the tree is served, and remove it when the mount ends:\n"+
		"for supervisors and init containers that wait for a file")
	fl.StringVar(&f.logFile, "log-file", "", "with --daemon, where the daemon logs, appended to; SIGHUP reopens it, as logrotate expects (default: a new file in /var/log/shardfs as root, else ~/.local/state/shardfs; printed)")
	for _, hook := range mountFlagHooks {
		hook(fl, f)
	}
	return cmd
}

// primes says whether the mount fetches the first batches as it starts
// (--prime), and logs why when it would but does not: a mount that shows
// every rank of a larger job by default (--rank all) cannot tell which
// this node's trainer reads, and would fetch a lead for each.
func primes(f *mountFlags, spec *layout.Spec, log *slog.Logger) bool {
	if !f.prime || f.follow || f.noPrefetch {
		return false
	}
	switch {
	case len(spec.Ranks) > fs.PrimeRanks:
		log.Info(fmt.Sprintf("not fetching the first batches ahead: the mount shows %d ranks, more than the %d a node's GPUs read at once; give --rank with this node's ranks (e.g. --rank 0-7)", len(spec.Ranks), fs.PrimeRanks), "ranks", len(spec.Ranks))
		return false
	case !f.ranksNamed && len(spec.Ranks) > 1:
		log.Info(fmt.Sprintf("not fetching the first batches ahead: the mount shows all %d ranks of --world-size, and cannot tell which this node reads; give --rank with this node's ranks (--rank 0-%d where it reads them all), or --prime to prime them all", len(spec.Ranks), len(spec.Ranks)-1), "ranks", len(spec.Ranks))
		return false
	}
	log.Info("fetching the first batches ahead of the trainer (--prime; --prime=false turns it off)", "ranks", len(spec.Ranks))
	return true
}

// mountSizes are the mount's size and time flags, parsed.
type mountSizes struct {
	cache, cacheDir, maxRequest uint64
}

// checkMountFlags parses and checks the mount's own flags (not the order
// flags), with errors that name the flag.
func checkMountFlags(f *mountFlags) (mountSizes, error) {
	var sz mountSizes
	var err error
	if f.pprof {
		if f.metricsAddr == "" {
			return sz, fmt.Errorf("--pprof serves profiles on --metrics-addr: give that too, on loopback (e.g. --metrics-addr 127.0.0.1:9464)")
		}
		// Profiles show the daemon's internals (and its memory): never on
		// every interface, as --metrics-addr 0.0.0.0 would serve them.
		if host, _, err := net.SplitHostPort(f.metricsAddr); err != nil || !isLoopback(host) {
			return sz, fmt.Errorf("--pprof with --metrics-addr %s: profiles show the daemon's internals, so they are served on loopback only: give --metrics-addr 127.0.0.1:PORT, or leave out --pprof", f.metricsAddr)
		}
	}
	sz.cache, err = humanize.ParseBytes(f.cacheSize)
	if err != nil || sz.cache < 16<<20 {
		return sz, fmt.Errorf("--cache-size %q: use a size of at least 16MiB, e.g. 2GiB", f.cacheSize)
	}
	sz.maxRequest, err = humanize.ParseBytes(cmp.Or(f.maxRequest, "1MiB"))
	if err != nil || sz.maxRequest < 128<<10 || sz.maxRequest > 16<<20 || sz.maxRequest&(sz.maxRequest-1) != 0 {
		return sz, fmt.Errorf("--fuse-max-request %q: use a power of two from 128KiB to 16MiB, e.g. 1MiB (the default) or 16MiB", f.maxRequest)
	}
	if limit := fs.KernelMaxRequest(); sz.maxRequest > uint64(limit) {
		return sz, fmt.Errorf("--fuse-max-request %s: this kernel sends FUSE requests of at most %s (fs.fuse.max_pages_limit): raise it with sysctl -w fs.fuse.max_pages_limit=%d, or pass --fuse-max-request %s",
			f.maxRequest, humanize.IBytes(uint64(limit)), sz.maxRequest/uint64(os.Getpagesize()), humanize.IBytes(uint64(limit)))
	}
	if f.reportWait < 0 {
		return sz, fmt.Errorf("--report-wait %v: must be 0 (do not wait) or more, e.g. 10m", f.reportWait)
	}
	if f.readTimeout <= 0 {
		return sz, fmt.Errorf("--read-timeout %v: must be positive, e.g. 10s: a read that waits longer returns EIO", f.readTimeout)
	}
	if f.cacheDir != "" {
		if sz.cacheDir, err = humanize.ParseBytes(f.cacheDirSize); err != nil {
			return sz, fmt.Errorf("--cache-dir-size %q: use a size such as 200GiB", f.cacheDirSize)
		}
	}
	return sz, nil
}

// mountDataset parses the mount's flags into a mount.Config and mounts.
func mountDataset(ctx context.Context, log *slog.Logger, stores []backend.Store, name, dir string, f *mountFlags) (*mount.Mount, error) {
	sz, err := checkMountFlags(f)
	if err != nil {
		return nil, err
	}
	cacheSize, cacheDirSize := sz.cache, sz.cacheDir
	if wrapStores != nil {
		if stores, err = wrapStores(stores, f, log); err != nil {
			return nil, err
		}
	}
	// The order flags are parsed once, here; mount.Open checks the spec
	// against the dataset, and the tree asks it for every rank-epoch.
	f.order.follow = f.follow
	spec, err := f.order.spec()
	if err != nil {
		return nil, err
	}
	// A mix is shown by its flag's value, and names its datasets (MixNames
	// is nil for one dataset).
	cfg := mount.Config{Follow: f.follow, Name: cmp.Or(name, f.order.mix), Mix: spec.MixNames, Version: f.order.datasetVersion, VersionCheckEvery: versionCheckEvery, Spec: spec, Run: f.order.run, ReportWait: f.reportWait,
		CacheSize: int64(cacheSize), CacheDir: f.cacheDir, CacheDirSize: int64(cacheDirSize), NoPrefetch: f.noPrefetch, Prime: primes(f, spec, log), DirectIO: f.directIO,
		ReadTimeout: f.readTimeout, AllowOther: f.allowOther, ReadAheadKB: f.readAheadKB, MaxRequest: int(sz.maxRequest), MetricsAddr: f.metricsAddr, Profiles: f.pprof, Logger: log,
		// info.json shows these options as they were given.
		Info: mount.Info{
			Order: map[string]any{"resume_at": f.order.resumeAt, "alpha_schedule": f.order.alphaSchedule, "preset": f.order.preset, "recency_half_life": f.order.halfLife,
				"time_window": f.order.timeWindow, "time_window_step": f.order.windowStep, "as_of": f.order.asOf, "feedback": f.order.feedback, "run": f.order.run, "follow": f.follow},
			Mount: map[string]any{"cache_dir_size": f.cacheDirSize},
		},
	}
	mt, err := mount.Open(ctx, stores, dir, cfg)
	return mt, flagWorded(err)
}

// mkdirAll is os.MkdirAll that returns the directories it created,
// deepest last.
func mkdirAll(dir string) ([]string, error) {
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		missing = append([]string{d}, missing...)
		if d == filepath.Dir(d) {
			break
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return missing, nil
}

// removeEmpty removes the directories mkdirAll created, deepest first,
// while they are empty.
func removeEmpty(created []string) {
	for i := len(created) - 1; i >= 0; i-- {
		if os.Remove(created[i]) != nil {
			return
		}
	}
}

// isLoopback is whether host (of a listen address) names only loopback.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
