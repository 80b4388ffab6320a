package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/miniotest"
	"github.com/shardfs/shardfs/repository"
)

// epochRead is the outcome of reading one rank-epoch batch by batch.
type epochRead struct {
	bytes   int64
	elapsed time.Duration
	lat     []time.Duration // per 1 MiB read() call
	samples int
	batches int
}

// readEpochVerified reads every batch tar of rank-000 in epoch e and checks
// every sample against the source. before(b) runs before batch b is read.
func readEpochVerified(t *testing.T, mnt, src string, e int, before func(b int)) (epochRead, error) {
	t.Helper()
	dir := filepath.Join(mnt, "epochs", fmt.Sprintf("%04d", e), "rank-000")
	f, err := os.Open(filepath.Join(dir, "index.csv"))
	if err != nil {
		return epochRead{}, err
	}
	rows, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil {
		return epochRead{}, err
	}
	rows = rows[1:]
	var res epochRead
	start := time.Now()
	for b, pos := 0, 0; pos < len(rows); b++ {
		if before != nil {
			before(b)
		}
		data, lat, err := readTimed(filepath.Join(dir, fmt.Sprintf("batch-%06d.tar", b)))
		res.lat = append(res.lat, lat...)
		if err != nil {
			return res, err
		}
		res.bytes += int64(len(data))
		res.batches++
		tr := tar.NewReader(bytes.NewReader(data))
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("epoch %d batch %d: %v", e, b, err)
			}
			body, _ := io.ReadAll(tr)
			if strings.HasSuffix(hdr.Name, ".cls") {
				continue
			}
			want, _ := os.ReadFile(filepath.Join(src, rows[pos][2]))
			if !bytes.Equal(body, want) {
				t.Fatalf("epoch %d batch %d: %s: WRONG BYTES", e, b, rows[pos][2])
			}
			pos++
			res.samples++
		}
	}
	res.elapsed = time.Since(start)
	return res, nil
}

// readTimed reads a file with 1 MiB read() calls and times each call.
func readTimed(name string) ([]byte, []time.Duration, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var data []byte
	var lat []time.Duration
	buf := make([]byte, 1<<20)
	for {
		t0 := time.Now()
		n, err := f.Read(buf)
		lat = append(lat, time.Since(t0))
		data = append(data, buf[:n]...)
		if err == io.EOF {
			return data, lat, nil
		}
		if err != nil {
			return data, lat, err
		}
	}
}

func p99(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*99/100)]
}

func storeStates(t *testing.T, mnt string) []string {
	var s struct {
		Stores []struct {
			State string `json:"state"`
		} `json:"stores"`
		ChecksumFailures int64 `json:"checksum_failures"`
	}
	if err := json.Unmarshal(mustRead(t, filepath.Join(mnt, ".shardfs", "stats.json")), &s); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, st := range s.Stores {
		out = append(out, st.State)
	}
	return out
}

func checksumFailures(t *testing.T, mnt string) int64 {
	var s struct {
		ChecksumFailures int64 `json:"checksum_failures"`
	}
	json.Unmarshal(mustRead(t, filepath.Join(mnt, ".shardfs", "stats.json")), &s)
	return s.ChecksumFailures
}

// TestFaultsMinIO runs the fault scenarios on six MinIO processes, RS(4,2),
// with a mount reading while the faults happen. Every sample byte is checked.
func TestFaultsMinIO(t *testing.T) {
	c := startCluster(t, 6)
	src := ingestSynthetic(t, c.urls, 2000, "train", 4, 2)
	stores := "--stores=" + strings.Join(c.urls, ",")
	mp := mountShardfsEnv(t, nil, stores, "--rank=0", "--world-size=1", "--batch-size=32", "--epochs=8",
		"--cache-size=32MiB", "--read-timeout=5s", "train")
	mnt := mp.dir
	var report []string

	// 1. Two stores killed mid-epoch.
	healthy, err := readEpochVerified(t, mnt, src, 0, nil)
	if err != nil {
		t.Fatalf("healthy epoch: %v", err)
	}
	half := healthy.batches / 2
	degraded, err := readEpochVerified(t, mnt, src, 1, func(b int) {
		if b == half {
			c.servers[1].Kill()
			c.servers[4].Kill()
		}
	})
	if err != nil {
		t.Fatalf("epoch with 2 stores killed mid-way: %v", err)
	}
	if states := storeStates(t, mnt); states[1] != "down" || states[4] != "down" {
		t.Fatalf("after killing stores 1 and 4 mid-epoch, the mount reports %v", states)
	}
	hRate := float64(healthy.bytes) / healthy.elapsed.Seconds()
	dRate := float64(degraded.bytes) / degraded.elapsed.Seconds()
	report = append(report, fmt.Sprintf("2 stores SIGKILLed mid-epoch: %d samples, 0 wrong; throughput %.0f MB/s vs healthy %.0f MB/s: ratio %.2f",
		degraded.samples, dRate/1e6, hRate/1e6, dRate/hRate))

	// 2. A third store: past m, reads fail with EIO, never hang; then recover.
	// Epoch 2 is larger than the cache: reading it must reach a read() that
	// needs the backend, and that read must fail with EIO, not hang or lie.
	c.servers[2].Kill()
	errc := make(chan error, 1)
	var eioAfter time.Duration
	go func() {
		for b := 0; ; b++ {
			f, err := os.Open(filepath.Join(mnt, "epochs", "0002", "rank-000", fmt.Sprintf("batch-%06d.tar", b)))
			if err != nil {
				errc <- fmt.Errorf("ran out of batches without an error: %w", err)
				return
			}
			buf := make([]byte, 1<<20)
			for {
				t0 := time.Now()
				_, err := f.Read(buf)
				if err == io.EOF {
					break
				}
				if err != nil {
					eioAfter = time.Since(t0)
					f.Close()
					errc <- err
					return
				}
			}
			f.Close()
		}
	}()
	select {
	case err = <-errc:
	case <-time.After(90 * time.Second):
		t.Fatal("reads with 3 of 6 stores down hung for 90s")
	}
	if !errorsIsErrno(err, syscall.EIO) {
		t.Fatalf("read with 3 stores down: %v, want EIO\nlog:\n%s", err, mustRead(t, mp.log))
	}
	log := string(mustRead(t, mp.log))
	if !strings.Contains(log, c.servers[2].Addr) {
		t.Fatalf("the EIO log does not name the failed store %s:\n%s", c.servers[2].Addr, log)
	}
	for _, i := range []int{1, 2, 4} {
		c.servers[i].Restart()
	}
	var recovered time.Duration
	t0 := time.Now()
	for {
		_, err := os.ReadFile(filepath.Join(mnt, "epochs", "0002", "rank-000", "batch-000001.tar"))
		if err == nil {
			recovered = time.Since(t0)
			break
		}
		if time.Since(t0) > 90*time.Second {
			t.Fatalf("reads did not recover within 90s of the stores' restart: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := readEpochVerified(t, mnt, src, 2, nil); err != nil {
		t.Fatalf("epoch after the stores came back: %v", err)
	}
	report = append(report, fmt.Sprintf("3rd store SIGKILLed: EIO after %v (no hang, no bytes); stores restarted: reads back after %v without remount",
		eioAfter.Round(time.Millisecond), recovered.Round(time.Millisecond)))

	// 3. A hung store (SIGSTOP): reads continue, hedged; SIGCONT brings it back.
	base, err := readEpochVerified(t, mnt, src, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	hedgedBefore := readMountStats(t, mnt).HedgedReads
	if err := c.servers[0].Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	hung, err := readEpochVerified(t, mnt, src, 4, nil)
	hedgedWhileStopped := readMountStats(t, mnt).HedgedReads - hedgedBefore
	c.servers[0].Signal(syscall.SIGCONT)
	if err != nil {
		t.Fatalf("epoch with a hung store: %v", err)
	}
	if hedgedWhileStopped == 0 && storeStates(t, mnt)[0] == "healthy" {
		t.Errorf("an epoch read with store 0 SIGSTOPped counted no hedged read and left it healthy: the hung store was neither hedged nor marked down")
	}
	var back time.Duration
	t0 = time.Now()
	for e := 5; ; e = 5 + (e-4)%3 {
		if storeStates(t, mnt)[0] == "healthy" {
			back = time.Since(t0)
			break
		}
		if time.Since(t0) > 90*time.Second {
			t.Fatalf("store 0 still %v 90s after SIGCONT", storeStates(t, mnt))
		}
		readEpochVerified(t, mnt, src, e, nil) // reads probe the store
	}
	report = append(report, fmt.Sprintf("1 store SIGSTOPped: %d samples, 0 wrong; p99 of 1 MiB read() calls %v vs hedge floor 150ms + healthy p99 %v = %v; %.0f MB/s vs %.0f healthy; healthy again %v after SIGCONT",
		hung.samples, p99(hung.lat).Round(time.Millisecond), p99(base.lat).Round(time.Millisecond), (150*time.Millisecond+p99(base.lat)).Round(time.Millisecond),
		float64(hung.bytes)/hung.elapsed.Seconds()/1e6, float64(base.bytes)/base.elapsed.Seconds()/1e6, back.Round(time.Millisecond)))

	// 4. Corruption through the S3 API on two stores: fragments replaced by
	// other fragments' bytes, and truncated.
	ctx := context.Background()
	swapped, truncated := 0, 0
	s1, s4 := c.store(t, 1), c.store(t, 4)
	keys1, _ := s1.List(ctx, repository.DataPrefix("train"))
	keys4, _ := s4.List(ctx, repository.DataPrefix("train"))
	for i, k := range keys1 {
		other := keys1[(i+1)%len(keys1)]
		size, _ := s1.Stat(ctx, other)
		b := make([]byte, size)
		if s1.ReadAt(ctx, other, b, 0) == nil && s1.Put(ctx, k, b) == nil {
			swapped++
		}
	}
	for _, k := range keys4 {
		size, _ := s4.Stat(ctx, k)
		b := make([]byte, size/2)
		if s4.ReadAt(ctx, k, b, 0) == nil && s4.Put(ctx, k, b) == nil {
			truncated++
		}
	}
	before := checksumFailures(t, mnt)
	corrupt, err := readEpochVerified(t, mnt, src, 7, nil)
	if err != nil {
		t.Fatalf("epoch with corrupt fragments on 2 stores: %v", err)
	}
	csum := checksumFailures(t, mnt) - before
	if csum == 0 {
		t.Fatal("no checksum failures counted while reading swapped fragments")
	}
	r := run(t, 5*time.Minute, nil, "verify", stores, "train")
	if r.code != 1 {
		t.Fatalf("verify of corrupt stores: want exit 1: %v", r)
	}
	damaged := strings.Count(r.stdout, "damaged: ")
	if r := run(t, 5*time.Minute, nil, "repair", stores, "train"); r.code != 0 {
		t.Fatalf("repair: %v", r)
	}
	if r := run(t, 5*time.Minute, nil, "verify", stores, "train"); r.code != 0 {
		t.Fatalf("verify after repair: %v", r)
	}
	report = append(report, fmt.Sprintf("corruption via S3 on 2 stores (%d fragments swapped, %d truncated): %d samples read, 0 wrong, %d checksum failures counted; verify reported %d damaged fragments; repair; verify exit 0",
		swapped, truncated, corrupt.samples, csum, damaged))

	// Secrets never leak into the daemon's argv, log, info.json or stats.json.
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", mp.cmd.Process.Pid))
	for name, b := range map[string][]byte{"cmdline": cmdline, "log": mustRead(t, mp.log),
		"info.json": mustRead(t, filepath.Join(mnt, ".shardfs", "info.json")), "stats.json": mustRead(t, filepath.Join(mnt, ".shardfs", "stats.json"))} {
		if bytes.Contains(b, []byte(miniotest.SecretKey)) {
			t.Fatalf("the secret key appears in the daemon's %s", name)
		}
	}
	for _, line := range report {
		t.Log(line)
	}
	if out := os.Getenv("SHARDFS_BENCH_OUT"); out != "" {
		os.WriteFile(filepath.Join(out, "faults.txt"), []byte(strings.Join(report, "\n")+"\n"), 0o644)
	}
}

// TestBadCredentialsAndManifest: wrong credentials on 2 stores mount degraded
// and name them; on all stores the mount fails fast naming them; a corrupt
// manifest copy on one store falls back to another with a warning.
func TestBadCredentialsAndManifest(t *testing.T) {
	c := startCluster(t, 6)
	src := ingestSynthetic(t, c.urls, 300, "train", 4, 2)
	stores := "--stores=" + strings.Join(c.urls, ",")
	config := func(bad []int, all bool) string {
		creds := map[string]any{"default": map[string]string{"access_key_id": miniotest.AccessKey, "secret_access_key": miniotest.SecretKey}}
		for i, s := range c.servers {
			if all || slices.Contains(bad, i) {
				creds[s.Addr] = map[string]string{"access_key_id": miniotest.AccessKey, "secret_access_key": "wrong-secret-for-test"}
			}
		}
		b, _ := json.Marshal(map[string]any{"credentials": creds})
		p := filepath.Join(t.TempDir(), "config.json")
		os.WriteFile(p, b, 0o600)
		return p
	}
	// Corrupt store 3's manifest copy.
	ctx := context.Background()
	if err := c.store(t, 3).Put(ctx, repository.ManifestKey("train"), []byte("not a manifest")); err != nil {
		t.Fatal(err)
	}

	mp := mountShardfsEnv(t, []string{"SHARDFS_CONFIG=" + config([]int{1, 4}, false)}, stores, "--rank=0", "--batch-size=16", "train")
	if _, err := readEpochVerified(t, mp.dir, src, 0, nil); err != nil {
		t.Fatalf("read with bad credentials on 2 stores: %v", err)
	}
	log := string(mustRead(t, mp.log))
	for _, i := range []int{1, 4} {
		if !strings.Contains(log, c.servers[i].Addr) || !strings.Contains(log, "access denied") {
			t.Fatalf("the log does not name store %d (%s) with access denied:\n%s", i, c.servers[i].Addr, log)
		}
	}
	if !strings.Contains(log, "manifest copy unusable") || !strings.Contains(log, c.servers[3].Addr) {
		t.Fatalf("no warning about store 3's corrupt manifest copy:\n%s", log)
	}
	if strings.Contains(log, "wrong-secret-for-test") || strings.Contains(log, miniotest.SecretKey) {
		t.Fatal("a secret appears in the log")
	}

	mnt := filepath.Join(t.TempDir(), "mnt")
	os.Mkdir(mnt, 0o755)
	t0 := time.Now()
	r := run(t, 2*time.Minute, []string{"SHARDFS_CONFIG=" + config(nil, true)}, "mount", stores, "train", mnt)
	if r.code == 0 || !strings.Contains(r.stderr, "access denied") {
		t.Fatalf("mount with bad credentials everywhere must fail with access denied: %v", r)
	}
	for _, s := range c.servers {
		if !strings.Contains(r.stderr, s.Addr) {
			t.Fatalf("the error does not name %s: %v", s.Addr, r)
		}
	}
	if strings.Contains(r.stderr, "wrong-secret-for-test") {
		t.Fatal("the secret appears in the error")
	}
	t.Logf("mount with wrong credentials on all 6 stores failed after %v", time.Since(t0).Round(time.Millisecond))
	if isMounted(mnt) {
		exec.Command("fusermount3", "-uz", mnt).Run()
		t.Fatal("a failed mount left a mount behind")
	}
}
