package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/fs"
	"github.com/shardfs/shardfs/repository"
)

// errNotReady: doctor found a problem (exit 1); each is printed with its fix.
var errNotReady = &exitError{code: exitFailure, err: errors.New("this node is not ready: fix the checks marked FAIL above")}

type doctorFlags struct {
	cacheDir string
	maxSkew  time.Duration
	minFiles uint64
}

func newDoctorCmd(g *globals) *cobra.Command {
	f := &doctorFlags{}
	var pr *printer
	cmd := &cobra.Command{
		Use:   "doctor [NAME]",
		Short: "Check that this node can mount: FUSE, stores, credentials, clocks, the dataset, the cache dir, file limits",
		Long: `Doctor checks a node before a job and prints one line per check: OK, or
FAIL with what is wrong and the fix. It exits 0 when the node is ready, 1
when a check failed.

  FUSE        /dev/fuse is there and fusermount3 (fuse3) is installed
  stores      each store answers a listing, and its time to first byte;
              the credentials are accepted; the bucket exists
  clock       each S3 store's clock is within --max-skew of this node's
              (signed requests fail beyond 15 minutes)
  dataset     with NAME: its manifest reads on a quorum of the stores
  cache dir   with --cache-dir: its filesystem, free space, write permission
  open files  the open-file limit is at least --min-open-files`,
		Example: `  shardfs doctor imagenet-train
  shardfs doctor --cache-dir /nvme/shardfs imagenet-train`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			pr.out = cmd.OutOrStdout()
			return runDoctor(cmd.Context(), pr, g, name, f)
		},
	}
	cmd.Flags().StringVar(&f.cacheDir, "cache-dir", "", "the disk tier the mount will use (--cache-dir of mount)")
	cmd.Flags().DurationVar(&f.maxSkew, "max-skew", 5*time.Minute, "largest clock difference to a store that passes")
	cmd.Flags().Uint64Var(&f.minFiles, "min-open-files", 4096, "smallest open-file limit (ulimit -n) that passes")
	pr = addJSONFlag(cmd)
	return cmd
}

// checker prints one line a check as it is made (with --json, one
// document at the end) and counts the failures.
type checker struct {
	pr     *printer
	checks []doctorCheck
	failed int
}

// doctorReport is what doctor --json prints.
type doctorReport struct {
	Ready  bool          `json:"ready"`
	Failed int           `json:"failed"`
	Checks []doctorCheck `json:"checks"`
}

type doctorCheck struct {
	Check  string `json:"check"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"` // with a failure, what is wrong and the fix
}

func (c *checker) ok(what, detail string, args ...any) {
	c.add(doctorCheck{what, true, fmt.Sprintf(detail, args...)})
}

func (c *checker) fail(what, detail string, args ...any) {
	c.failed++
	c.add(doctorCheck{what, false, fmt.Sprintf(detail, args...)})
}

func (c *checker) add(ch doctorCheck) {
	c.checks = append(c.checks, ch)
	if c.pr.json {
		return
	}
	mark := "OK"
	if !ch.OK {
		mark = "FAIL"
	}
	fmt.Fprintf(c.pr.out, "%-4s  %-12s %s\n", mark, ch.Check, ch.Detail)
}

// done prints the verdict: the last line, or the JSON document.
func (c *checker) done() error {
	rep := doctorReport{Ready: c.failed == 0, Failed: c.failed, Checks: c.checks}
	if err := c.pr.print(rep, func(out io.Writer) error {
		if rep.Ready {
			fmt.Fprintln(out, "this node is ready")
		}
		return nil
	}); err != nil {
		return err
	}
	if !rep.Ready {
		return errNotReady
	}
	return nil
}

func runDoctor(ctx context.Context, pr *printer, g *globals, name string, f *doctorFlags) error {
	c := &checker{pr: pr}
	if fi, err := os.Stat("/dev/fuse"); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		c.fail("fuse", "/dev/fuse is missing: load the module (modprobe fuse), or give the container --device /dev/fuse")
	} else {
		c.ok("fuse", "/dev/fuse")
	}
	if p, err := exec.LookPath("fusermount3"); err != nil {
		c.fail("fuse3", "fusermount3 is not on PATH: install fuse3 (apt-get install fuse3): unmounting needs it")
	} else {
		c.ok("fuse3", "%s", p)
	}
	doctorFiles(c, f.minFiles)
	doctorFuseRequests(c)
	if f.cacheDir != "" {
		doctorCacheDir(c, f.cacheDir)
	}
	stores, err := g.openStores()
	if err != nil {
		c.fail("stores", "%v", err)
		return c.done()
	}
	answered := doctorStores(ctx, c, stores, f.maxSkew, name != "")
	if name != "" {
		// Too few stores to read the manifest from is the dataset check's
		// own failure, with the stores' causes: no count of ours first.
		doctorDataset(ctx, c, stores, name, answered)
	}
	return c.done()
}

// doctorDataset opens the dataset as a mount does (its manifest on a
// quorum, and every store's identity against its place) and says what it
// found. Stores that did not answer were named already.
func doctorDataset(ctx context.Context, c *checker, stores []backend.Store, name string, answered []bool) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	ds, err := repository.Open(ctx, stores, name, repository.Options{LazyIndexes: true, LostIndexesOK: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		c.fail("dataset", "%v", err)
		return
	}
	m := ds.Manifest
	c.ok("dataset", "%s: ingest %s, %d samples in %d shards, RS(%d,%d)", name, m.IngestID, repository.SampleCount(m), m.NumShards(), m.Data, m.Parity)
	inPlace := 0
	for i, p := range ds.Places {
		switch {
		case !answered[i]:
		case p.State == repository.InPlace:
			inPlace++
		case p.State == repository.Foreign:
			c.fail("identity", "store %d (%s) holds %s, another dataset or ingest of this name: check --stores (repair --force would overwrite what it holds)", i, stores[i], p.Detail)
		default:
			c.fail("identity", "store %d (%s): %s: a new or replaced store, or one that did not answer: shardfs verify %s, then shardfs repair %s", i, stores[i], p.Detail, name, name)
		}
	}
	if inPlace == len(stores) {
		c.ok("identity", "every store is in its place in the ingest's order")
	}
}

// doctorStores checks every store at once; it returns which answered.
// Without a dataset to check, a missing bucket is what a node sees before
// its first ingest, which creates it: not a failure.
func doctorStores(ctx context.Context, c *checker, stores []backend.Store, maxSkew time.Duration, dataset bool) []bool {
	type answer struct {
		ttfb  time.Duration
		skew  time.Duration
		clock bool
		err   error
		cerr  error
	}
	answers := make([]answer, len(stores))
	backend.OnEvery(stores, func(i int, s backend.Store) error {
		a := &answers[i]
		sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		start := time.Now()
		a.err = backend.Ping(sctx, s)
		a.ttfb = time.Since(start)
		var t time.Time
		before := time.Now()
		t, a.clock, a.cerr = backend.ServerTime(sctx, s)
		if a.clock {
			mid := before.Add(time.Since(before) / 2)
			a.skew = t.Sub(mid).Truncate(time.Second)
		}
		return nil
	})
	up := make([]bool, len(stores))
	for i, a := range answers {
		what := fmt.Sprintf("store %d", i)
		switch {
		case errors.Is(a.err, backend.ErrAccessDenied):
			c.fail(what, "%v", a.err) // the error says what to check
		case errors.Is(a.err, backend.ErrNoBucket) && dataset:
			c.fail(what, "%v", a.err)
		case errors.Is(a.err, backend.ErrNoBucket):
			up[i] = true
			c.ok(what, "%s answered in %v; its bucket does not exist yet: ingest creates it", stores[i], a.ttfb.Round(time.Millisecond))
		case a.err != nil:
			c.fail(what, "%v: is the server up, and the URL's host and port right?", a.err)
		default:
			up[i] = true
			c.ok(what, "%s answered in %v", stores[i], a.ttfb.Round(time.Millisecond))
		}
		switch {
		case a.cerr != nil && a.err == nil:
			c.fail(what+" clock", "%v", a.cerr)
		case a.clock && (a.skew > maxSkew || -a.skew > maxSkew):
			c.fail(what+" clock", "%s is %v off this node's clock (more than --max-skew %v): run NTP (chrony, systemd-timesyncd) here or there", stores[i], a.skew, maxSkew)
		case a.clock:
			c.ok(what+" clock", "within %v", max(a.skew, -a.skew)+time.Second)
		}
	}
	return up
}

func doctorFiles(c *checker, minFiles uint64) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		c.fail("open files", "getrlimit: %v", err)
		return
	}
	if lim.Cur < minFiles {
		c.fail("open files", "the limit is %d (hard %d), less than %d: raise it (ulimit -n %d, or LimitNOFILE= in the unit)", lim.Cur, lim.Max, minFiles, max(minFiles, min(lim.Max, 1<<20)))
		return
	}
	c.ok("open files", "limit %d", lim.Cur)
}

// doctorFuseRequests says how large a read the kernel may send the daemon
// against the 1 MiB shardfs mounts ask for: speed left unused is said, not
// failed (reads work, in more requests).
func doctorFuseRequests(c *checker) {
	limit := fs.KernelMaxRequest()
	if limit < 1<<20 {
		c.ok("fuse reads", "the kernel sends FUSE requests of at most %s, less than the 1 MiB shardfs mounts ask for: reads take %d requests a MiB; on Linux 6.13 and later raise it with sysctl -w fs.fuse.max_pages_limit=256",
			humanize.IBytes(uint64(limit)), (1<<20)/limit)
		return
	}
	c.ok("fuse reads", "FUSE requests of up to %s allowed; shardfs mounts use 1 MiB, the fastest measured (docs/bench/fuse-request-size.md: 16 MiB cost shardfs a third more CPU per GB)", humanize.IBytes(uint64(limit)))
}

func doctorCacheDir(c *checker, dir string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.fail("cache dir", "%v: create it, or pick a directory on local disk this user can write", err)
		return
	}
	probe, err := os.CreateTemp(dir, ".shardfs-doctor-*")
	if err != nil {
		c.fail("cache dir", "%s is not writable: %v: fix its permissions or mount options, or pick another --cache-dir", dir, err)
		return
	}
	probe.Close()
	os.Remove(probe.Name())
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		c.fail("cache dir", "statfs %s: %v", dir, err)
		return
	}
	free := st.Bavail * uint64(st.Bsize)
	kind := fsName(st.Type)
	if kind == "tmpfs" || kind == "fuse" || kind == "nfs" {
		c.fail("cache dir", "%s is on %s: the disk tier belongs on local disk or NVMe", dir, kind)
		return
	}
	abs, _ := filepath.Abs(dir)
	c.ok("cache dir", "%s on %s, %s free, writable", abs, kind, humanize.IBytes(free))
}

// fsName names the filesystems a cache dir is commonly put on.
func fsName(magic int64) string {
	switch magic {
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlayfs"
	case unix.NFS_SUPER_MAGIC:
		return "nfs"
	case unix.FUSE_SUPER_MAGIC:
		return "fuse"
	}
	return fmt.Sprintf("filesystem 0x%x", magic)
}
