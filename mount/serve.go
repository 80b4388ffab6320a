package mount

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Serve runs until ctx is cancelled (SIGINT, SIGTERM) or the mount is unmounted.
func (mt *Mount) Serve(ctx context.Context) error {
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
	// /proc's links hold absolute paths without symlinks: compare with the
	// mountpoint as they would name it, also when it was given relative.
	// (Only its parent is resolved: resolving the mountpoint itself would
	// ask the mount.)
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
		if parent, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
			dir = filepath.Join(parent, filepath.Base(abs))
		}
	}
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

// Close unmounts and stops background work.
func (mt *Mount) Close() {
	if err := mt.server.Unmount(); err != nil {
		mt.log.Warn("unmount", "err", err)
	}
	mt.server.Wait()
	mt.shutdown()
}

func (mt *Mount) shutdown() {
	if mt.stopAnomalies != nil {
		close(mt.stopAnomalies)
		mt.stopAnomalies = nil
	}
	if mt.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		mt.http.Shutdown(ctx)
		cancel()
	}
	if mt.stopPrime != nil {
		// Before the reader closes: a primer opened after its Close
		// would start a stream nobody stops.
		mt.stopPrime()
		<-mt.primed
		mt.stopPrime = nil
	}
	mt.reader.Close()
	for _, r := range mt.runReaders {
		r.close()
	}
	if mt.src != nil {
		for _, ds := range mt.src.parts() {
			ds.Reader.Close()
		}
	}
	if mt.disk != nil {
		mt.disk.Close()
	}
	mt.closeHinters()
	mt.releaseLeases()
}
