package csinode

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// recoverViews takes over the views a previous plugin process left in
// StateDir, before the plugin answers any call:
//   - a view whose daemon still runs and answers is adopted, and each of its
//     targets that is not served (a dead or missing bind) is bound again;
//   - a view whose daemon is gone, or hangs, has its dead mounts cleared
//     (its own and its targets'), the daemon started again, and its targets
//     bound again; while that fails the view is abnormal and retried;
//   - a view with no target is stopped and removed, and so is a directory
//     with no readable state (its mount, if any, is taken off first).
//
// Nothing is left mounted that no daemon serves: a dead FUSE mount makes
// every stat of its path fail with ENOTCONN, in the host and in pods.
func (d *Driver) recoverViews() {
	dirs, _ := filepath.Glob(filepath.Join(d.cfg.StateDir, "views", "*"))
	for _, dir := range dirs {
		v := &view{key: filepath.Base(dir), dir: dir}
		b, err := os.ReadFile(v.statePath())
		if err == nil {
			err = json.Unmarshal(b, &v.st)
		}
		if err != nil || len(v.st.Args) == 0 {
			d.log.Warn("a view directory without a readable state: clearing it", "dir", dir, "err", err)
			d.discard(v)
			continue
		}
		if v.st.Targets == nil {
			v.st.Targets = map[string]string{}
		}
		if len(v.st.Targets) == 0 {
			d.log.Info("a view with no target: stopping it", "view", v.key)
			d.discard(v)
			continue
		}
		d.views[v.key] = v
		for t := range v.st.Targets {
			d.targets[t] = v
		}
		if isViewDaemon(v.st.PID, v.staging()) && answers(v.staging()) == nil {
			if dm, err := adopt(v.st.PID); err == nil {
				v.dm = dm
				for t := range v.st.Targets {
					if answers(t) != nil {
						if err := d.bind(v.staging(), t); err != nil {
							d.log.Error("re-serve a target", "target", t, "err", err)
							v.abnormal = "target path " + t + " could not be bound again: " + err.Error()
						}
					}
				}
				d.log.Info("adopted a running view", "view", v.key, "daemon", dm.pid, "targets", len(v.st.Targets))
				go d.watch(v, dm)
				continue
			}
		}
		d.killStale(v)
		v.abnormal = "the mount daemon was gone when the plugin started; restarting it"
		d.log.Warn("a view's daemon is gone or does not answer: restarting it", "view", v.key, "pid", v.st.PID, "targets", len(v.st.Targets))
		if !d.revive(v) {
			go d.retryRevive(v)
		}
	}
}

// killStale ends a view's daemon that runs but does not answer (hung), so
// that a new one can take its place.
func (d *Driver) killStale(v *view) {
	if !isViewDaemon(v.st.PID, v.staging()) {
		return
	}
	d.log.Warn("killing the view's daemon: it does not answer", "view", v.key, "pid", v.st.PID)
	syscall.Kill(v.st.PID, syscall.SIGKILL)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if syscall.Kill(v.st.PID, 0) != nil {
			return
		}
	}
}

// discard stops what runs of a view found at start and removes it.
func (d *Driver) discard(v *view) {
	d.killStale(v)
	for t := range v.st.Targets {
		d.unmountAll(t)
	}
	if err := d.unmountAll(v.staging()); err != nil {
		d.log.Error("clear a stale view's mount", "view", v.key, "err", err)
		return
	}
	os.RemoveAll(v.dir)
}
