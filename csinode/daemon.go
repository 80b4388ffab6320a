package csinode

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ReadyFDEnv names, in a mount daemon's environment, the file descriptor on
// which it tells whoever started it how the mount went, in one line: see
// ReadyLine.
const ReadyFDEnv = "SHARDFS_READY_FD"

// The kinds of failure a daemon reports on its ready line, so that the
// plugin answers with the gRPC code the CSI spec names for each.
const (
	KindInvalid  = "invalid"   // a flag (volume attribute) is wrong
	KindNotFound = "not_found" // the dataset or version does not exist
	KindDenied   = "denied"    // the stores refused the credentials
	KindFailed   = "failed"    // anything else
)

// ReadyLine is a daemon's report: "ready" when err is nil, else
// "error KIND: message" on one line.
func ReadyLine(kind string, err error) string {
	if err == nil {
		return "ready\n"
	}
	return fmt.Sprintf("error %s: %s\n", kind, strings.ReplaceAll(err.Error(), "\n", "; "))
}

// ParseReadyLine reads a ReadyLine: ready, or the kind and message of the
// failure. A line that is neither (the daemon died first) is KindFailed
// with an empty message.
func ParseReadyLine(line string) (ready bool, kind, msg string) {
	line = strings.TrimSpace(line)
	if line == "ready" {
		return true, "", ""
	}
	if rest, ok := strings.CutPrefix(line, "error "); ok {
		if k, m, ok := strings.Cut(rest, ": "); ok {
			return false, k, m
		}
	}
	return false, KindFailed, ""
}

// StartError is a daemon that did not serve: its kind and message.
type StartError struct {
	Kind, Msg string
}

func (e *StartError) Error() string { return e.Msg }

// daemon is one running mount daemon.
type daemon struct {
	pid    int
	exited chan struct{} // closed once the process is gone
}

// secretEnv are the environment variables that carry credentials: a daemon
// whose view has secrets gets them from its config file alone.
var secretEnv = []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"}

// ownEnv are set by the plugin for each daemon, never inherited.
var ownEnv = []string{ReadyFDEnv, "SHARDFS_STORES", "SHARDFS_CONFIG", "SHARDFS_LOG_FILE"}

// daemonEnv is the plugin's environment without what the daemon must not
// inherit.
func daemonEnv(withSecrets bool) []string {
	drop := append([]string(nil), ownEnv...)
	if withSecrets {
		drop = append(drop, secretEnv...)
	}
	var env []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !slices.Contains(drop, name) {
			env = append(env, kv)
		}
	}
	return append(env, ReadyFDEnv+"=3")
}

// start runs the view's mount daemon in a session of its own (a signal to
// the plugin does not reach it, and it outlives a plugin that is killed),
// logging to the view's daemon.log, and returns once it says the tree is
// served, or its error. A daemon that fails, or does not answer by
// ctx's end, is killed and reaped: nothing is left running.
func (d *Driver) start(ctx context.Context, v *view) (*daemon, error) {
	if err := os.MkdirAll(v.staging(), 0o700); err != nil {
		return nil, err
	}
	log, err := os.OpenFile(v.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer pr.Close()
	args := append([]string(nil), d.cfg.MountCommand[1:]...)
	if v.st.Secret {
		args = append(args, "--config", v.configPath())
	}
	args = append(append(args, v.st.Args...), v.staging())
	cmd := exec.Command(d.cfg.MountCommand[0], args...)
	cmd.Env = daemonEnv(v.st.Secret)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.ExtraFiles = []*os.File{pw}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		pw.Close()
		return nil, fmt.Errorf("start the mount daemon: %w", err)
	}
	pw.Close() // the daemon holds the only write end: EOF means it is gone
	dm := &daemon{pid: cmd.Process.Pid, exited: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(dm.exited)
	}()
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(pr).ReadString('\n')
		lines <- line
	}()
	var serr error
	select {
	case line := <-lines:
		ready, kind, msg := ParseReadyLine(line)
		if ready {
			return dm, nil
		}
		if msg == "" {
			msg = "the mount daemon exited before the tree was served: " + tail(v.logPath())
		}
		serr = &StartError{Kind: kind, Msg: msg}
	case <-ctx.Done():
		serr = fmt.Errorf("the mount daemon did not serve the tree in time (%w): see %s", ctx.Err(), v.logPath())
	}
	d.stop(v, dm)
	return nil, serr
}

// tail is the last line of a daemon's log, for an error that has no
// message of its own.
func tail(name string) string {
	b, err := os.ReadFile(name)
	if err != nil {
		return "see " + name
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// adopt watches a daemon that a previous plugin process started (not our
// child, so not waitable): a pidfd becomes readable when it exits.
func adopt(pid int) (*daemon, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, err
	}
	dm := &daemon{pid: pid, exited: make(chan struct{})}
	go func() {
		defer unix.Close(fd)
		defer close(dm.exited)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err == nil || !errors.Is(err, unix.EINTR) {
				return
			}
		}
	}()
	return dm, nil
}

// isViewDaemon reports whether process pid is the mount daemon of the
// view whose mount point is staging: a pid in a state file may have been
// reused by another process since.
func isViewDaemon(pid int, staging string) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(pid), "cmdline"))
	if err != nil {
		return false
	}
	args := bytes.Split(bytes.TrimRight(b, "\x00"), []byte{0})
	return len(args) > 0 && string(args[len(args)-1]) == staging
}

// stop ends a view's daemon: its mount is taken off (a daemon exits when
// its mount ends), and a daemon still running 10 s later is killed. It
// returns once the process is gone.
func (d *Driver) stop(v *view, dm *daemon) {
	if err := d.unmountAll(v.staging()); err != nil {
		d.log.Warn("unmount the view's mount", "view", v.key, "err", err)
	}
	select {
	case <-dm.exited:
		return
	case <-time.After(10 * time.Second):
	}
	d.log.Warn("the mount daemon did not exit 10s after its unmount: killing it", "view", v.key, "pid", dm.pid)
	syscall.Kill(dm.pid, syscall.SIGKILL)
	select {
	case <-dm.exited:
	case <-time.After(10 * time.Second):
		d.log.Error("the mount daemon survived SIGKILL for 10s", "view", v.key, "pid", dm.pid)
	}
	d.unmountAll(v.staging())
}
