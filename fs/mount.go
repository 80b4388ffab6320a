package fs

import (
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
func CheckMountpoint(dir string) error {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("/dev/fuse is missing: load the fuse module (modprobe fuse) or run the container with --device /dev/fuse")
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("mountpoint %s: %w: create it with mkdir -p %s", dir, err, dir)
	}
	if !fi.IsDir() {
		return fmt.Errorf("mountpoint %s is not a directory", dir)
	}
	parent, err := os.Stat(filepath.Dir(filepath.Clean(dir)))
	if err == nil && parent.Sys().(*syscall.Stat_t).Dev != fi.Sys().(*syscall.Stat_t).Dev {
		return fmt.Errorf("mountpoint %s is busy: something is already mounted there (umount %s first)", dir, dir)
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

// Mount mounts root at dir and returns the running server; Unmount or an
// external umount stops it, and Wait returns then.
func Mount(dir string, root gofs.InodeEmbedder, o MountOptions) (*fuse.Server, error) {
	if err := CheckMountpoint(dir); err != nil {
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
			MaxWrite:     1 << 20,
			MaxReadAhead: 1 << 20,
			// Concurrent direct I/O reads reach the daemon in parallel.
			ExtraCapabilities: fuse.CAP_ASYNC_DIO,
			MaxBackground:     64,
			DisableXAttrs:     true,
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
	server, err := gofs.Mount(dir, root, opts)
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
