package integration

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestDoctor checks a node as a user would before a job: healthy, then with
// bad credentials, a read-only cache dir and a store down. Each problem is
// one FAIL line naming the thing and the fix, and the exit code says
// whether the node is ready.
func TestDoctor(t *testing.T) {
	requireTool(t, "fusermount3")
	c := startCluster(t, 3)
	ingestSynthetic(t, c.urls, 60, "train", 2, 1)
	stores := "--stores=" + strings.Join(c.urls, ",")
	// doctor refuses a cache dir on tmpfs, where scripts/test.sh puts
	// TMPDIR: this one is on disk.
	cache := diskTempDir(t)

	r := run(t, 2*time.Minute, nil, "doctor", stores, "--cache-dir", cache, "train")
	for _, want := range []string{"OK    fuse ", "OK    fuse3", "OK    open files", "OK    fuse reads   ", "OK    cache dir", "OK    store 0 ", "OK    store 2 clock", "OK    dataset      train: ingest", "OK    identity     every store is in its place", "this node is ready"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("healthy node: no %q: %v", want, r)
		}
	}
	if r.code != 0 || strings.Contains(r.stdout, "FAIL") {
		t.Fatalf("healthy node: %v", r)
	}

	r = run(t, 2*time.Minute, []string{"AWS_SECRET_ACCESS_KEY=not-the-secret"}, "doctor", stores, "train")
	if r.code != 1 || strings.Count(r.stdout, "FAIL  store ") != 3 || !strings.Contains(r.stdout, "access denied") || !strings.Contains(r.stdout, "AWS_SECRET_ACCESS_KEY") {
		t.Fatalf("bad credentials: want exit 1 and every store FAIL with access denied and the fix: %v", r)
	}
	if strings.Contains(r.stdout+r.stderr, "not-the-secret") {
		t.Fatalf("doctor printed the secret: %v", r)
	}

	// A read-only cache dir: root writes through permissions, so the
	// directory is bind-mounted read-only.
	ro := t.TempDir()
	if out, err := exec.Command("mount", "--bind", ro, ro).CombinedOutput(); err != nil {
		t.Fatalf("bind mount: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", ro).Run() })
	if out, err := exec.Command("mount", "-o", "remount,ro,bind", ro).CombinedOutput(); err != nil {
		t.Fatalf("remount read-only: %v: %s", err, out)
	}
	r = run(t, 2*time.Minute, nil, "doctor", stores, "--cache-dir", ro, "train")
	if r.code != 1 || !strings.Contains(r.stdout, "FAIL  cache dir    "+ro+" is not writable") || strings.Count(r.stdout, "FAIL") != 1 {
		t.Fatalf("read-only cache dir: want exit 1 and one FAIL naming it: %v", r)
	}
	if entries, _ := os.ReadDir(ro); len(entries) != 0 {
		t.Fatalf("doctor left %d files in the cache dir", len(entries))
	}

	// Stores given out of order: the dataset check says which order to pass.
	swapped := "--stores=" + strings.Join([]string{c.urls[2], c.urls[1], c.urls[0]}, ",")
	r = run(t, 2*time.Minute, nil, "doctor", swapped, "train")
	if r.code != 1 || !strings.Contains(r.stdout, "FAIL  dataset") || !strings.Contains(r.stdout, "not in the order of its ingest") || !strings.Contains(r.stdout, "--stores "+strings.Join(c.urls, ",")) {
		t.Fatalf("stores out of order: want exit 1 and the order to pass: %v", r)
	}

	c.servers[1].Kill()
	r = run(t, 2*time.Minute, nil, "doctor", stores, "train")
	host := strings.TrimPrefix(c.urls[1], "http://")
	host = host[:strings.IndexByte(host, '/')]
	if r.code != 1 || !strings.Contains(r.stdout, "FAIL  store 1 ") || !strings.Contains(r.stdout, host) || strings.Count(r.stdout, "FAIL") != 1 {
		t.Fatalf("store 1 down: want exit 1 and one FAIL naming %s: %v", host, r)
	}
	// The dataset still reads from the other two (a quorum of 3).
	if !strings.Contains(r.stdout, "OK    dataset") {
		t.Fatalf("store 1 down: the manifest should still read on stores 0 and 2: %v", r)
	}
}

// diskTempDir is t.TempDir on a disk: under $SHARDFS_DISK_TMPDIR, which
// scripts/test.sh sets to the temporary directory it found before it moved
// TMPDIR to tmpfs, or /var/tmp. It is removed in t.Cleanup.
func diskTempDir(t *testing.T) string {
	t.Helper()
	base := os.Getenv("SHARDFS_DISK_TMPDIR")
	if base == "" {
		base = "/var/tmp"
	}
	dir, err := os.MkdirTemp(base, "shardfs-disk-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
