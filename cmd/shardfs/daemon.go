package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// readyFDEnv names, in a daemon's environment, the file descriptor on which
// it tells the command that started it that the mount is served ("ready"),
// or why it failed ("error: ...").
const readyFDEnv = "SHARDFS_READY_FD"

// daemonTimeout bounds how long mount --daemon waits for the daemon to say
// it is ready: opening a dataset reads a manifest from every store, each
// bounded by the request timeout.
const daemonTimeout = 10 * time.Minute

// startDaemon runs this command again without --daemon, in a session of
// its own, its output going to logFile, and returns once the daemon says
// the mount is served (nil) or that it failed (its error). It prints where
// the daemon runs and logs.
func startDaemon(out io.Writer, mountpoint, logFile string) error {
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
	if logFile == "" {
		logFile = filepath.Join(os.TempDir(), fmt.Sprintf("shardfs-%s-%d.log", filepath.Base(filepath.Clean(mountpoint)), os.Getpid()))
	}
	log, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("--log-file %s: %w", logFile, err)
	}
	defer log.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	defer pr.Close()
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), readyFDEnv+"=3")
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
		lines <- strings.TrimSpace(line)
	}()
	select {
	case line := <-lines:
		switch {
		case line == "ready":
			fmt.Fprintf(out, "mounted at %s by daemon pid %d, logging to %s; stop it with: umount %s\n", mountpoint, pid, logFile, mountpoint)
			return nil
		case strings.HasPrefix(line, "error: "):
			return fmt.Errorf("%s (daemon log: %s)", strings.TrimPrefix(line, "error: "), logFile)
		default:
			return fmt.Errorf("the daemon (pid %d) exited before the mount was served; see its log %s", pid, logFile)
		}
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
	if err != nil {
		fmt.Fprintf(p, "error: %s\n", strings.ReplaceAll(err.Error(), "\n", "; "))
	} else {
		fmt.Fprintln(p, "ready")
	}
	p.Close()
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
