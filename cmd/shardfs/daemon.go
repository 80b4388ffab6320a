package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/csinode"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/repository"
)

// readyFDEnv names, in a daemon's environment, the file descriptor on which
// it tells the command that started it (mount --daemon, or the CSI plugin)
// that the mount is served, or why it failed: csinode.ReadyLine.
const readyFDEnv = csinode.ReadyFDEnv

// daemonTimeout bounds how long mount --daemon waits for the daemon to say
// it is ready: opening a dataset reads a manifest from every store, each
// bounded by the request timeout.
const daemonTimeout = 10 * time.Minute

// logFileEnv names, in a daemon's environment, the file it logs to, so
// that SIGHUP (logrotate's signal) can reopen it.
const logFileEnv = "SHARDFS_LOG_FILE"

// defaultLogDir is where a daemon logs without --log-file: a directory only
// its owner can write, never a shared one such as $TMPDIR, where another
// user could plant a symlink under the name the daemon will open.
func defaultLogDir() (string, error) {
	if os.Geteuid() == 0 {
		return "/var/log/shardfs", nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "shardfs"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("--daemon: no home directory for the log (%w): pass --log-file", err)
	}
	return filepath.Join(home, ".local", "state", "shardfs"), nil
}

// openDaemonLog opens the daemon's log. The default one is created afresh
// (O_EXCL) in defaultLogDir, which must be the user's own and closed to
// others; --log-file is appended to, as logrotate expects. Neither follows
// a symlink, and both are created 0600.
func openDaemonLog(mountpoint, logFile string) (*os.File, string, error) {
	flags := os.O_CREATE | os.O_WRONLY | os.O_APPEND | syscall.O_NOFOLLOW
	if logFile == "" {
		dir, err := defaultLogDir()
		if err != nil {
			return nil, "", err
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, "", fmt.Errorf("--daemon: log directory %s: %w (pass --log-file)", dir, err)
		}
		if err := ownPrivateDir(dir); err != nil {
			return nil, "", err
		}
		logFile = filepath.Join(dir, fmt.Sprintf("mount-%s-%s-%d.log", filepath.Base(filepath.Clean(mountpoint)), time.Now().UTC().Format("20060102T150405Z"), os.Getpid()))
		flags |= os.O_EXCL
	}
	f, err := os.OpenFile(logFile, flags, 0o600)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, "", fmt.Errorf("--log-file %s is a symbolic link: the daemon does not follow one; name the file itself", logFile)
		}
		return nil, "", fmt.Errorf("--log-file %s: %w", logFile, err)
	}
	return f, logFile, nil
}

// ownPrivateDir refuses a log directory that is not a directory owned by
// this user and closed to group and others.
func ownPrivateDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("--daemon: log directory %s is not a directory of this user's that only it can write (%v): fix it, or pass --log-file", dir, fi.Mode())
	}
	return nil
}

// startDaemon runs this command again without --daemon, in a session of
// its own, its output going to its log, and returns once the daemon says
// the mount is served (nil) or that it failed (its error). It prints where
// the daemon runs and logs. A signal (ctx done) while it waits stops the
// daemon and returns.
func startDaemon(ctx context.Context, out io.Writer, mountpoint, logFile string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("--daemon: cannot find this program to start it again: %w", err)
	}
	var args []string
	for _, a := range os.Args[1:] {
		if a != "--daemon" && a != "--daemon=true" {
			args = append(args, a)
		}
	}
	log, logFile, err := openDaemonLog(mountpoint, logFile)
	if err != nil {
		return err
	}
	defer log.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	defer pr.Close()
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), readyFDEnv+"=3", logFileEnv+"="+logFile)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.ExtraFiles = []*os.File{pw}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		pw.Close()
		return fmt.Errorf("--daemon: start: %w", err)
	}
	pw.Close() // the daemon holds the only write end: EOF means it is gone
	pid := cmd.Process.Pid
	cmd.Process.Release()
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(pr).ReadString('\n')
		lines <- line
	}()
	select {
	case line := <-lines:
		ready, _, msg := csinode.ParseReadyLine(line)
		switch {
		case ready:
			fmt.Fprintf(out, "mounted at %s by daemon pid %d, logging to %s; stop it with: umount %s\n", mountpoint, pid, logFile, mountpoint)
			return nil
		case msg != "":
			return fmt.Errorf("%s (daemon log: %s)", msg, logFile)
		default:
			return fmt.Errorf("the daemon (pid %d) exited before the mount was served; see its log %s", pid, logFile)
		}
	case <-ctx.Done():
		syscall.Kill(pid, syscall.SIGTERM)
		return fmt.Errorf("stopped while the daemon (pid %d) was starting: sent it SIGTERM; see its log %s", pid, logFile)
	case <-time.After(daemonTimeout):
		syscall.Kill(pid, syscall.SIGTERM)
		return fmt.Errorf("the daemon (pid %d) did not serve the mount within %v; stopped it; see its log %s", pid, daemonTimeout, logFile)
	}
}

// readyPipe is where a daemon started by startDaemon reports; nil in the
// foreground.
func readyPipe() *os.File {
	if os.Getenv(readyFDEnv) != "3" {
		return nil
	}
	os.Unsetenv(readyFDEnv) // not for the daemon's children
	return os.NewFile(3, "ready")
}

// reportReady tells the command that started this daemon how the mount
// went, once: ready (err nil) or why not.
func reportReady(p *os.File, err error) {
	if p == nil {
		return
	}
	io.WriteString(p, csinode.ReadyLine(errorKind(err), err))
	p.Close()
}

// errorKind sorts a mount's failure for whoever started the daemon: the
// CSI plugin answers each kind with its own gRPC code.
func errorKind(err error) string {
	var se *layout.SpecError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &se):
		return csinode.KindInvalid
	case errors.Is(err, repository.ErrNotFound), errors.Is(err, repository.ErrNoVersion):
		return csinode.KindNotFound
	case errors.Is(err, backend.ErrAccessDenied):
		return csinode.KindDenied
	}
	return csinode.KindFailed
}

// writeReadyFile writes the daemon's pid and the mountpoint to name, whole
// or not at all (a waiter never sees half of it).
func writeReadyFile(name, mountpoint string) error {
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, []byte(fmt.Sprintf("%d\n%s\n", os.Getpid(), mountpoint)), 0o644); err != nil {
		return fmt.Errorf("--ready-file: %w", err)
	}
	if err := os.Rename(tmp, name); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("--ready-file: %w", err)
	}
	return nil
}

// reopenLogOnHangup makes SIGHUP reopen the daemon's log file onto its
// stdout and stderr, as logrotate expects, instead of ending the process
// and leaving a dead mount. In the foreground (no log file) SIGHUP is
// logged and otherwise ignored: the mount stays until SIGTERM, Ctrl-C or
// umount. It returns a function that stops the handling.
func reopenLogOnHangup(log *slog.Logger) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-hup:
			}
			name := os.Getenv(logFileEnv)
			if name == "" {
				log.Info("SIGHUP: no log file to reopen; the mount stays (stop it with SIGTERM, Ctrl-C or umount)")
				continue
			}
			f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
			if err != nil {
				log.Warn("SIGHUP: could not reopen the log file; logging on to the old one", "file", name, "err", err)
				continue
			}
			syscall.Dup3(int(f.Fd()), 1, 0)
			syscall.Dup3(int(f.Fd()), 2, 0)
			f.Close()
			log.Info("SIGHUP: reopened the log file", "file", name)
		}
	}()
	return func() { signal.Stop(hup); close(done) }
}
