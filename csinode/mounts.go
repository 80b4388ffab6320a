package csinode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
	mountutils "k8s.io/mount-utils"
)

// answerTimeout bounds a stat of a mount: a daemon that does not answer
// within it is treated as not serving, and the goroutine is left behind
// (a FUSE request cannot be cancelled from here; it ends with the mount).
const answerTimeout = 5 * time.Second

// answers reports whether the shardfs tree at dir answers: its
// .shardfs/info.json can be read within answerTimeout. A read, not a stat:
// the kernel answers a stat from its attribute cache even after the
// daemon behind the mount is gone, but an open always asks the daemon.
func answers(dir string) error {
	_, err := readWithin(dir, ".shardfs/info.json")
	return err
}

// readWithin reads a file of the tree at dir within answerTimeout.
func readWithin(dir, name string) ([]byte, error) {
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := os.ReadFile(filepath.Join(dir, name))
		done <- result{b, err}
	}()
	select {
	case r := <-done:
		return r.b, r.err
	case <-time.After(answerTimeout):
		return nil, fmt.Errorf("%s did not answer within %v", dir, answerTimeout)
	}
}

// mounted reports whether path is a mount point, from the mount table:
// never a stat of the path, which a dead FUSE mount answers with ENOTCONN
// or ECONNABORTED and a hung one not at all.
func (d *Driver) mounted(path string) (bool, error) {
	mis, err := mountutils.ParseMountInfo("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	for _, mi := range mis {
		if mi.MountPoint == path {
			return true, nil
		}
	}
	return false, nil
}

// unmountAll takes every mount off path, a dead or hung one included
// (lazily when it is busy: open files keep their mount until closed, and
// the path is free at once). Several mounts may be stacked there by a
// plugin that was killed between steps.
func (d *Driver) unmountAll(path string) error {
	for range 8 {
		mnt, err := d.mounted(path)
		if err != nil {
			return fmt.Errorf("check mount %s: %w", path, err)
		}
		if !mnt {
			return nil
		}
		if err := unix.Unmount(path, 0); err != nil {
			if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
				return fmt.Errorf("unmount %s: %w", path, err)
			}
		}
	}
	return fmt.Errorf("unmount %s: still a mount point after 8 unmounts", path)
}

// bind mounts the view's tree at target, read-only. The kernel's bind of
// a FUSE mount shares its connection: the target is served by the view's
// daemon, through its cache.
func (d *Driver) bind(source, target string) error {
	if err := os.MkdirAll(target, 0o750); err != nil {
		return fmt.Errorf("create target path %s: %w", target, err)
	}
	if err := d.unmountAll(target); err != nil {
		return err
	}
	if err := d.mounter.Mount(source, target, "", []string{"bind", "ro"}); err != nil {
		return fmt.Errorf("bind %s at %s: %w", source, target, err)
	}
	return nil
}
