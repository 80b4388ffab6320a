package csinode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"
)

// viewState is a view as written to StateDir/views/KEY/view.json. It holds
// no secret: those are in config.json beside it.
type viewState struct {
	// Args are the daemon's flags and dataset name, from the attributes.
	Args []string `json:"args"`
	// Secret: config.json holds the volume's credentials.
	Secret bool `json:"secret"`
	// PID is the daemon's, 0 while none runs.
	PID int `json:"pid"`
	// Targets are the target paths published, each with its volume id.
	Targets map[string]string `json:"targets"`
}

// view is one daemon and the target paths it serves.
type view struct {
	key string
	dir string
	// mu is held across a start, a stop and every change of st, so that
	// one view's slow start does not hold up another's publish.
	mu sync.Mutex
	st viewState
	dm *daemon
	// pending counts publishes that chose this view and have not finished:
	// an unpublish of its last target then leaves the daemon running.
	// Guarded by Driver.mu.
	pending int
	// gone: the view was stopped and removed; a publish that waited for
	// mu starts over.
	gone bool
	// abnormal says why the view does not serve ("" while it does), for
	// NodeGetVolumeStats.
	abnormal string
}

func (v *view) staging() string    { return filepath.Join(v.dir, "mnt") }
func (v *view) logPath() string    { return filepath.Join(v.dir, "daemon.log") }
func (v *view) configPath() string { return filepath.Join(v.dir, "config.json") }
func (v *view) statePath() string  { return filepath.Join(v.dir, "view.json") }

// viewKey names the view of a set of daemon arguments and secrets: equal
// sets share a daemon. The secrets are part of it, so that a pod never
// reads through a daemon that another pod's credentials opened.
func viewKey(args []string, secrets map[string]string) string {
	h := sha256.New()
	for _, a := range args {
		fmt.Fprintf(h, "a%d:%s\x00", len(a), a)
	}
	keys := make([]string, 0, len(secrets))
	for k := range secrets {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(h, "s%d:%s=%d:%s\x00", len(k), k, len(secrets[k]), secrets[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:20]
}

// save writes the view's state whole or not at all.
func (v *view) save() error {
	b, err := json.MarshalIndent(v.st, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(v.statePath(), b)
}

func writeFileAtomic(name string, b []byte) error {
	tmp := name + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, name)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// credentialsFile is config.json: the shardfs config file's shape, with the
// secrets as the credentials for every store.
type credentialsFile struct {
	Credentials map[string]map[string]string `json:"credentials"`
}

// publish serves target from the view of args and secrets: the view's
// daemon is started if none runs, then target is bound to it.
func (d *Driver) publish(ctx context.Context, volumeID, target string, args []string, secrets map[string]string) error {
	key := viewKey(args, secrets)
	for {
		d.mu.Lock()
		if w := d.targets[target]; w != nil {
			d.mu.Unlock()
			w.mu.Lock()
			same := w.key == key && w.st.Targets[target] == volumeID && !w.gone
			w.mu.Unlock()
			if !same {
				return &conflictError{target}
			}
			return nil // published already: idempotent
		}
		v := d.views[key]
		if v == nil {
			v = &view{key: key, dir: filepath.Join(d.cfg.StateDir, "views", key), st: viewState{Args: args, Secret: len(secrets) > 0, Targets: map[string]string{}}}
			d.views[key] = v
		}
		v.pending++
		d.mu.Unlock()
		err, retry := d.publishTo(ctx, v, volumeID, target, secrets)
		d.mu.Lock()
		v.pending--
		if err == nil {
			d.targets[target] = v
		}
		d.mu.Unlock()
		if !retry {
			if err != nil {
				d.dropIfIdle(v)
			}
			return err
		}
	}
}

type conflictError struct{ target string }

func (e *conflictError) Error() string {
	return fmt.Sprintf("target path %s is published already with another volume id or other attributes: unpublish it first", e.target)
}

// publishTo starts v's daemon if it has none, then binds target. retry:
// v was removed while this waited for it; choose the view again.
func (d *Driver) publishTo(ctx context.Context, v *view, volumeID, target string, secrets map[string]string) (err error, retry bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.gone {
		return nil, true
	}
	if dm := v.dm; dm != nil {
		if err := answers(v.staging()); err != nil {
			// Its daemon died and the watch has not restarted it yet: a
			// bind now would bind a dead mount. Wait for the exit the
			// watch waits for, then start it here, as the watch would.
			select {
			case <-dm.exited:
				d.log.Warn("the view's mount daemon exited; a publish starts it again", "view", v.key, "pid", dm.pid)
				v.dm = nil
			case <-time.After(answerTimeout):
				return fmt.Errorf("the view's mount daemon (pid %d) does not answer: %w", dm.pid, err), false
			}
		}
	}
	switch {
	case v.dm == nil && len(v.st.Targets) > 0:
		// The view's daemon died and is being restarted: start it now,
		// with every target it serves, not this one alone.
		if err := d.reviveLocked(v); err != nil {
			return err, false
		}
	case v.dm == nil:
		if err := d.create(ctx, v, secrets); err != nil {
			return err, false
		}
	}
	// The target is recorded before it is bound: a plugin killed between
	// the two re-binds it at start, and the kubelet's unpublish clears it.
	v.st.Targets[target] = volumeID
	if err := v.save(); err != nil {
		delete(v.st.Targets, target)
		return fmt.Errorf("record target %s: %w", target, err), false
	}
	if err := d.bind(v.staging(), target); err != nil {
		delete(v.st.Targets, target)
		v.save()
		return err, false
	}
	d.log.Info("published", "volume", volumeID, "target", target, "view", v.key, "daemon", v.dm.pid, "targets", len(v.st.Targets))
	return nil, false
}

// create makes the view's directory, its credentials file and state, and
// starts its daemon. On failure nothing of it is left.
func (d *Driver) create(ctx context.Context, v *view, secrets map[string]string) (err error) {
	if err := os.MkdirAll(v.dir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(v.dir, 0o700); err != nil {
		return err
	}
	defer func() {
		if err != nil && len(v.st.Targets) == 0 {
			os.RemoveAll(v.dir)
		}
	}()
	if len(secrets) > 0 {
		b, err := json.Marshal(credentialsFile{Credentials: map[string]map[string]string{"default": secrets}})
		if err != nil {
			return err
		}
		if err := writeFileAtomic(v.configPath(), b); err != nil {
			return fmt.Errorf("write the credentials file: %w", err)
		}
	}
	v.st.PID = 0
	if err := v.save(); err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, d.cfg.StartTimeout)
	defer cancel()
	dm, err := d.start(sctx, v)
	if err != nil {
		return err
	}
	v.dm, v.st.PID, v.abnormal = dm, dm.pid, ""
	if err := v.save(); err != nil {
		d.stop(v, dm)
		v.dm = nil
		return err
	}
	go d.watch(v, dm)
	return nil
}

// dropIfIdle removes a view that serves no target and that no publish is
// choosing: its daemon is stopped, its directory removed.
//
// Lock order: a view's lock, then the driver's, never the other way. A
// view holds its lock across its daemon's start (up to the start timeout),
// so whoever holds the driver's lock must never wait for a view's: it
// would stall every other publish for that start.
func (d *Driver) dropIfIdle(v *view) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.st.Targets) > 0 || v.gone {
		return
	}
	d.mu.Lock()
	if v.pending > 0 {
		// A publish chose this view and will take its lock next.
		d.mu.Unlock()
		return
	}
	v.gone = true
	delete(d.views, v.key)
	d.mu.Unlock()
	if v.dm != nil {
		d.stop(v, v.dm)
		d.log.Info("stopped the view's daemon: no target left", "view", v.key, "daemon", v.dm.pid)
		v.dm = nil
	}
	os.RemoveAll(v.dir)
}

// unpublish takes the bind off target and removes the directory, and stops
// the view's daemon if target was its last.
func (d *Driver) unpublish(volumeID, target string) error {
	d.mu.Lock()
	v := d.targets[target]
	d.mu.Unlock()
	if v == nil {
		// Not published here, or unpublished already. The driver's
		// targets are saved with their views and recovered at start, so
		// a target it does not know is not its own: whatever is mounted
		// there, and the directory, are someone else's, and stay (the
		// spec's "delete what it created at this path": nothing).
		d.log.Info("unpublish of a target this driver has not published: nothing to do", "volume", volumeID, "target", target)
		return nil
	}
	v.mu.Lock()
	if got := v.st.Targets[target]; got != volumeID {
		v.mu.Unlock()
		return &otherVolumeError{target: target, volume: volumeID, published: got}
	}
	if err := d.unmountAll(target); err != nil {
		v.mu.Unlock()
		return err
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		v.mu.Unlock()
		return fmt.Errorf("remove target path %s: %w", target, err)
	}
	delete(v.st.Targets, target)
	err := v.save()
	left := len(v.st.Targets)
	v.mu.Unlock()
	d.mu.Lock()
	delete(d.targets, target)
	d.mu.Unlock()
	d.log.Info("unpublished", "target", target, "view", v.key, "targets_left", left)
	if left == 0 {
		d.dropIfIdle(v)
	}
	return err
}

// otherVolumeError is an unpublish of a target published for another
// volume: nothing is unmounted or removed.
type otherVolumeError struct{ target, volume, published string }

func (e *otherVolumeError) Error() string {
	return fmt.Sprintf("target path %s is published for volume %s, not %s: nothing unpublished", e.target, e.published, e.volume)
}

// watch waits for a daemon to exit. One that exits while the view still
// has targets (not stopped by us) is started again, and its targets bound
// anew; while that fails the view is abnormal and the start is retried,
// from 5 s apart up to a minute.
func (d *Driver) watch(v *view, dm *daemon) {
	select {
	case <-dm.exited:
	case <-d.done:
		return
	}
	v.mu.Lock()
	if v.dm != dm || v.gone {
		v.mu.Unlock()
		return // stopped on purpose
	}
	v.dm = nil
	v.abnormal = fmt.Sprintf("the mount daemon (pid %d) exited; restarting it: %s", dm.pid, tail(v.logPath()))
	d.log.Warn("the mount daemon exited while its targets are published: restarting it", "view", v.key, "pid", dm.pid, "targets", len(v.st.Targets))
	v.mu.Unlock()
	if !d.revive(v) {
		d.retryRevive(v)
	}
}

// retryRevive keeps starting a view's daemon, from 5 s apart up to a
// minute, until it serves or has no target left.
func (d *Driver) retryRevive(v *view) {
	for wait := 5 * time.Second; ; wait = min(2*wait, time.Minute) {
		select {
		case <-time.After(wait):
		case <-d.done:
			return
		}
		if d.revive(v) {
			return
		}
	}
}

// revive clears the dead mounts of a view whose daemon is gone, starts it
// again and binds every target. It reports whether it is done (served,
// or nothing left to serve).
func (d *Driver) revive(v *view) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.gone || v.dm != nil || len(v.st.Targets) == 0 {
		return true
	}
	return d.reviveLocked(v) == nil
}

// reviveLocked is revive with v.mu held; its error is the daemon's.
func (d *Driver) reviveLocked(v *view) error {
	for t := range v.st.Targets {
		if err := d.unmountAll(t); err != nil {
			d.log.Warn("clear a dead target mount", "target", t, "err", err)
		}
	}
	if err := d.unmountAll(v.staging()); err != nil {
		d.log.Warn("clear the view's dead mount", "view", v.key, "err", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.StartTimeout)
	defer cancel()
	dm, err := d.start(ctx, v)
	if err != nil {
		v.abnormal = "the mount daemon cannot be started again: " + err.Error()
		d.log.Error("restart the view's daemon", "view", v.key, "err", err)
		return err
	}
	v.dm, v.st.PID = dm, dm.pid
	if err := v.save(); err != nil {
		d.log.Error("record the view's new daemon", "view", v.key, "err", err)
	}
	var failed []string
	for t := range v.st.Targets {
		if err := d.bind(v.staging(), t); err != nil {
			failed = append(failed, t)
			d.log.Error("re-serve a target", "target", t, "err", err)
		}
	}
	v.abnormal = ""
	if len(failed) > 0 {
		v.abnormal = fmt.Sprintf("target paths %v could not be bound again", failed)
	}
	d.log.Info("the view serves again", "view", v.key, "daemon", dm.pid, "targets", len(v.st.Targets))
	go d.watch(v, dm)
	return nil
}

// volumeStats is what NodeGetVolumeStats reports of a target's view.
type volumeStats struct {
	cacheUsed, cacheSize int64
	diskUsed, diskSize   int64
	abnormal             string
	storesDown           []string
}

// targetOf is a target path where volumeID is published, or "".
func (d *Driver) targetOf(volumeID string) string {
	d.mu.Lock()
	targets := maps.Clone(d.targets) // not held while waiting for a view (dropIfIdle)
	d.mu.Unlock()
	for t, v := range targets {
		v.mu.Lock()
		id := v.st.Targets[t]
		v.mu.Unlock()
		if id == volumeID {
			return t
		}
	}
	return ""
}

// stats reads the view's counters from its tree, if it answers.
func (d *Driver) stats(volumeID, target string) (*volumeStats, error) {
	d.mu.Lock()
	v := d.targets[target]
	d.mu.Unlock()
	if v == nil {
		return nil, errNotPublished
	}
	v.mu.Lock()
	id, abnormal := v.st.Targets[target], v.abnormal
	v.mu.Unlock()
	if id != volumeID {
		return nil, errNotPublished
	}
	out := &volumeStats{abnormal: abnormal}
	if abnormal != "" {
		return out, nil
	}
	var info struct {
		Mount struct {
			CacheSize int64 `json:"cache_size"`
		} `json:"mount"`
	}
	var st struct {
		CacheBytes int64 `json:"cache_bytes"`
		Disk       *struct {
			Used  int64 `json:"used_bytes"`
			Limit int64 `json:"limit_bytes"`
		} `json:"disk"`
		Stores []struct {
			Name  string `json:"name"`
			State string `json:"state"`
		} `json:"stores"`
	}
	b, err := readWithin(target, ".shardfs/info.json")
	if err == nil {
		err = json.Unmarshal(b, &info)
	}
	if err == nil {
		if b, err = readWithin(target, ".shardfs/stats.json"); err == nil {
			err = json.Unmarshal(b, &st)
		}
	}
	if err != nil {
		out.abnormal = "the mount does not answer: " + err.Error()
		return out, nil
	}
	out.cacheUsed, out.cacheSize = st.CacheBytes, info.Mount.CacheSize
	if st.Disk != nil {
		out.diskUsed, out.diskSize = st.Disk.Used, st.Disk.Limit
	}
	for _, s := range st.Stores {
		if s.State == "down" {
			out.storesDown = append(out.storesDown, s.Name)
		}
	}
	return out, nil
}

var errNotPublished = errors.New("no volume of this id is published at this path")
