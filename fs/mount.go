package fs

import (
	"cmp"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// MountOptions are the FUSE settings.
type MountOptions struct {
	Name        string // shown as the file system source
	AllowOther  bool   // also turns on default_permissions
	ReadAheadKB int    // written to the mount's bdi read_ahead_kb; 0 leaves the kernel default
	Debug       bool
	Logger      *slog.Logger
	// XAttrs serves extended attributes: a dataset's fields on its sample
	// files. Off, the kernel learns once that there are none and never
	// asks again (ls -l would ask for ACLs on every file).
	XAttrs bool
	// OpLatency, if set, returns the observer of each FUSE op's time in
	// the daemon (timedOps names the ops); it is called once per op.
	OpLatency func(op string) func(time.Duration)
	// MaxRequest is the largest FUSE read the kernel may send, in bytes;
	// 0 means 1 MiB. The kernel caps it at fs.fuse.max_pages_limit pages.
	MaxRequest int
}

// KernelMaxRequest is the largest FUSE request this kernel sends, in
// bytes: fs.fuse.max_pages_limit pages (256 before Linux 6.13 made it a
// setting).
func KernelMaxRequest() int {
	pages := 256
	if b, err := os.ReadFile("/proc/sys/fs/fuse/max_pages_limit"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
			pages = n
		}
	}
	return pages * os.Getpagesize()
}

// slogWriter routes go-fuse's log lines to slog at debug level.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	if w.l != nil {
		w.l.Debug("go-fuse: " + strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

// CheckMountpoint refuses what would surprise a user: a missing, non-directory,
// non-empty or already mounted mountpoint, and a machine without /dev/fuse.
// A dead shardfs mount left by a daemon that was killed is provably stale
// (the kernel says its daemon is gone): it is cleared with a lazy unmount,
// and the log says so.
func CheckMountpoint(dir string, log *slog.Logger) error {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("/dev/fuse is missing: load the fuse module (modprobe fuse) or run the container with --device /dev/fuse")
	}
	fi, err := os.Stat(dir)
	if err != nil && !errors.Is(err, syscall.ENOTCONN) {
		return fmt.Errorf("mountpoint %s: %w: create it with mkdir -p %s, or pass --mkdir", dir, err, dir)
	}
	if err == nil && !fi.IsDir() {
		return fmt.Errorf("mountpoint %s is not a directory", dir)
	}
	if fstype, mounted := mountType(dir); mounted {
		_, rerr := os.ReadDir(dir)
		dead := errors.Is(rerr, syscall.ENOTCONN) || errors.Is(rerr, syscall.ECONNABORTED) || errors.Is(err, syscall.ENOTCONN)
		switch {
		case dead && fstype == "fuse.shardfs":
			if uerr := syscall.Unmount(dir, syscall.MNT_DETACH); uerr != nil {
				return fmt.Errorf("mountpoint %s holds a stale shardfs mount (its daemon died) that could not be cleared: %v: run fusermount3 -uz %s", dir, uerr, dir)
			}
			if log != nil {
				log.Warn("cleared a stale shardfs mount left by a daemon that died", "mountpoint", dir)
			}
			return CheckMountpoint(dir, log)
		case dead:
			return fmt.Errorf("mountpoint %s holds a dead %s mount whose daemon is gone: clear it with fusermount3 -uz %s (or umount -l %s)", dir, fstype, dir, dir)
		default:
			return fmt.Errorf("mountpoint %s is busy: a live %s file system is mounted there: unmount it first (umount %s)", dir, fstype, dir)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("mountpoint %s: %w", dir, err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("mountpoint %s is not empty (%d entries): mount on an empty directory so nothing is hidden", dir, len(entries))
	}
	return nil
}

// mountType reports whether something is mounted exactly at dir, and its
// file system type, from /proc/self/mountinfo.
func mountType(dir string) (fstype string, mounted bool) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", false
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", false
	}
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f := strings.Fields(pre)
		if !ok || len(f) < 5 {
			continue
		}
		if unescapeMount(f[4]) == abs {
			if pf := strings.Fields(post); len(pf) > 0 {
				fstype = pf[0]
			}
			mounted = true // the last line wins: it is the top of the stack
		}
	}
	return fstype, mounted
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Mount mounts root at dir and returns the running server; Unmount or an
// external umount stops it, and Wait returns then.
func Mount(dir string, root gofs.InodeEmbedder, o MountOptions) (*fuse.Server, error) {
	if err := CheckMountpoint(dir, o.Logger); err != nil {
		return nil, err
	}
	hour := time.Hour
	opts := &gofs.Options{
		EntryTimeout:    &hour,
		AttrTimeout:     &hour,
		NegativeTimeout: &hour,
		MountOptions: fuse.MountOptions{
			FsName:       "shardfs:" + o.Name,
			Name:         "shardfs",
			DirectMount:  true,
			AllowOther:   o.AllowOther,
			MaxWrite:     cmp.Or(o.MaxRequest, 1<<20),
			MaxReadAhead: 1 << 20,
			// Concurrent direct I/O reads reach the daemon in parallel.
			ExtraCapabilities: fuse.CAP_ASYNC_DIO,
			MaxBackground:     64,
			DisableXAttrs:     !o.XAttrs,
			// Reads are served from memory; splice of 1 MiB reads does not fit
			// the default 1 MiB pipe and falls back on every read: pure overhead.
			DisableSplice: true,
			Logger:        log.New(slogWriter{o.Logger}, "", 0),
			Options:       []string{"ro"},
			Debug:         o.Debug,
		},
	}
	if o.AllowOther {
		opts.MountOptions.Options = append(opts.MountOptions.Options, "default_permissions")
	}
	server, err := serve(dir, root, opts, o.OpLatency)
	if err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
			return nil, fmt.Errorf("mount %s: %w: mounting needs root or CAP_SYS_ADMIN (or fusermount3 from fuse3 for users)", dir, err)
		}
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	if o.ReadAheadKB > 0 {
		if err := setReadAhead(dir, o.ReadAheadKB); err != nil {
			// Not fatal: reads work, only larger sequential reads are lost.
			fmt.Fprintf(os.Stderr, "shardfs: could not raise read-ahead: %v\n", err)
		}
	}
	return server, nil
}

// serve is gofs.Mount, with every op timed when opLatency is set.
func serve(dir string, root gofs.InodeEmbedder, opts *gofs.Options, opLatency func(op string) func(time.Duration)) (*fuse.Server, error) {
	var raw fuse.RawFileSystem = gofs.NewNodeFS(root, opts)
	if opLatency != nil {
		raw = newTimedFS(raw, opLatency)
	}
	server, err := fuse.NewServer(raw, dir, &opts.MountOptions)
	if err != nil {
		return nil, err
	}
	go server.Serve()
	if err := server.WaitMount(); err != nil {
		return nil, err // as gofs.Mount: a mount that failed has no serve loop to stop
	}
	return server, nil
}

// setReadAhead writes read_ahead_kb of the mount's backing device info.
func setReadAhead(dir string, kb int) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	dev := fi.Sys().(*syscall.Stat_t).Dev
	major, minor := (dev>>8)&0xfff, (dev&0xff)|((dev>>12)&0xfff00)
	name := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", major, minor)
	return os.WriteFile(name, []byte(strconv.Itoa(kb)), 0o644)
}
