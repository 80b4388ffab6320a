//go:build benchharness

package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/miniotest"
)

func storesOn(s *miniotest.Server) string {
	var u []string
	for i := 0; i < 6; i++ {
		u = append(u, s.URL(fmt.Sprintf("store%d/ds", i)))
	}
	return "--stores=" + strings.Join(u, ",")
}

// batchesOf returns the rank-0 epoch-0 order as batches of source paths (from index.csv).
func batchesOf(t *testing.T, indexCSV, root string) [][]string {
	f, err := os.Open(indexCSV)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, _ := csv.NewReader(f).ReadAll()
	var out [][]string
	for _, r := range rows[1:] {
		b := atoi(r[1])
		for len(out) <= b {
			out = append(out, nil)
		}
		out[b] = append(out[b], filepath.Join(root, r[2]))
	}
	return out
}

func atoi(s string) int { var n int; fmt.Sscan(s, &n); return n }

// readBatches reads batches with 8 threads, batch b by thread b%8 in order,
// as a DataLoader with 8 workers does, and returns samples/s.
func readBatches(batches [][]string) float64 {
	samples := 0
	for _, b := range batches {
		samples += len(b)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := w; b < len(batches); b += 8 {
				for _, f := range batches[b] {
					if _, err := os.ReadFile(f); err != nil {
						panic(fmt.Sprintf("read %s: %v", f, err))
					}
				}
			}
		}()
	}
	wg.Wait()
	return float64(samples) / time.Since(start).Seconds()
}

// tarBatches lists a rank dir's batch tars as one-file batches.
func tarBatches(rankDir string, n int) [][]string {
	var out [][]string
	for b := 0; b < n; b++ {
		out = append(out, []string{filepath.Join(rankDir, fmt.Sprintf("batch-%06d.tar", b))})
	}
	return out
}

func loader(t *testing.T, r *report, work, src string, total int64) {
	buckets := []string{"store0", "store1", "store2", "store3", "store4", "store5", "peer"}
	srv := miniotest.Start(t, buckets...)
	stores := storesOn(srv)

	// Ingest vs rclone copy of the same files to one bucket.
	rcEnv := []string{"RCLONE_CONFIG_PEER_TYPE=s3", "RCLONE_CONFIG_PEER_PROVIDER=Minio", "RCLONE_CONFIG_PEER_ENDPOINT=http://" + srv.Addr,
		"RCLONE_CONFIG_PEER_ACCESS_KEY_ID=" + miniotest.AccessKey, "RCLONE_CONFIG_PEER_SECRET_ACCESS_KEY=" + miniotest.SecretKey}
	for _, e := range rcEnv {
		kv := strings.SplitN(e, "=", 2)
		os.Setenv(kv[0], kv[1])
	}
	ingest := repeat(func() float64 {
		t0 := time.Now()
		run(t, binary, "ingest", stores, "--data=4", "--parity=2", "--force", src, "ds")
		return float64(total) / 1e6 / time.Since(t0).Seconds()
	})
	// Distributed ingest: N processes, one part each, then commit; the
	// whole wall time, commit included.
	parts := func(n int) stat {
		return repeat(func() float64 {
			name := fmt.Sprintf("parts%d", n)
			t0 := time.Now()
			var wg sync.WaitGroup
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					run(t, binary, "ingest", stores, "--data=4", "--parity=2", "--force", fmt.Sprintf("--part=%d/%d", i, n), "--job="+t0.String(), src, name)
				}()
			}
			wg.Wait()
			run(t, binary, "commit", stores, "--force", name)
			return float64(total) / 1e6 / time.Since(t0).Seconds()
		})
	}
	parts1, parts4 := parts(1), parts(4)
	copyRate := repeat(func() float64 {
		run(t, "rclone", "purge", "peer:peer/ds")
		t0 := time.Now()
		run(t, "rclone", "copy", "--transfers=8", src, "peer:peer/ds")
		return float64(total) / 1e6 / time.Since(t0).Seconds()
	})

	// The order every reader follows: rank 0 of W=1, batches of 64.
	mnt := filepath.Join(work, "order")
	d := startMount(t, mnt, exists(filepath.Join(mnt, ".shardfs/info.json")), nil, binary, "mount", stores, "--rank=0", "--batch-size=64", "ds", mnt)
	order := batchesOf(t, filepath.Join(mnt, "epochs/0000/rank-000/index.csv"), "")
	d.stop()
	nb := len(order)
	rel := func(root string) [][]string {
		out := make([][]string, len(order))
		for i, b := range order {
			for _, k := range b {
				out[i] = append(out[i], filepath.Join(root, k))
			}
		}
		return out
	}

	type row struct {
		name       string
		cold, warm stat
	}
	var rows []row

	// tmpfs: the same files in memory, same order.
	tmp := filepath.Join(work, "tmpfs")
	os.MkdirAll(tmp, 0o755)
	if err := syscall.Mount("tmpfs", tmp, "tmpfs", 0, "size=3g"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	defer syscall.Unmount(tmp, 0)
	run(t, "cp", "-r", src+"/.", tmp)
	tmpfs := repeat(func() float64 { return readBatches(rel(tmp)) })
	rows = append(rows, row{"tmpfs (files, same order)", tmpfs, tmpfs})

	// shardfs batch tars, global order and window mode, cold and warm.
	for _, mode := range []struct{ name, flag string }{{"shardfs batch tars, global order", "--window=0"}, {"shardfs batch tars, --window 4", "--window=4"}} {
		var cold, warm []float64
		for i := 0; i < reps; i++ {
			m := filepath.Join(work, fmt.Sprintf("sfs%d", i))
			d := startMount(t, m, exists(filepath.Join(m, ".shardfs/info.json")), nil, binary, "mount", stores, "--rank=0", "--batch-size=64", mode.flag, "ds", m)
			rd := filepath.Join(m, "epochs/0000/rank-000")
			cold = append(cold, float64(nb*64)/secs(func() { readBatches(tarBatches(rd, nb)) }))
			warm = append(warm, float64(nb*64)/secs(func() { readBatches(tarBatches(rd, nb)) }))
			d.stop()
		}
		rows = append(rows, row{mode.name, summarize(cold), summarize(warm)})
	}

	// Peers on the bucket holding the same samples as objects.
	peers := []struct {
		name string
		cmd  func(m string) (string, []string)
	}{
		{"rclone mount, cache off", func(m string) (string, []string) {
			return "rclone", []string{"mount", "peer:peer/ds", m, "--read-only", "--vfs-cache-mode=off"}
		}},
		{"rclone mount, --vfs-cache-mode full", func(m string) (string, []string) {
			return "rclone", []string{"mount", "peer:peer/ds", m, "--read-only", "--vfs-cache-mode=full", "--cache-dir=" + m + ".cache"}
		}},
		{"s3fs", func(m string) (string, []string) {
			pw := m + ".passwd"
			os.WriteFile(pw, []byte(miniotest.AccessKey+":"+miniotest.SecretKey), 0o600)
			return "s3fs", []string{"peer:/ds", m, "-f", "-o", "url=http://" + srv.Addr, "-o", "use_path_request_style", "-o", "passwd_file=" + pw, "-o", "ro"}
		}},
	}
	for pi, p := range peers {
		var cold, warm []float64
		for i := 0; i < reps; i++ {
			m := filepath.Join(work, fmt.Sprintf("peer%d-%d", pi, i))
			name, args := p.cmd(m)
			d := startMount(t, m, exists(filepath.Join(m, "class00")), nil, name, args...)
			cold = append(cold, readBatches(rel(m)))
			warm = append(warm, readBatches(rel(m)))
			d.stop()
		}
		rows = append(rows, row{p.name, summarize(cold), summarize(warm)})
	}

	best := 0.0
	for _, rw := range rows[3:] {
		best = max(best, rw.cold.med)
	}
	r.printf("## Loader throughput (samples/s, 8 reader threads)\n\n| reader | cold | warm | cold / best peer cold | warm / tmpfs |\n|---|---|---|---|---|\n")
	var ch chart
	ch.title, ch.ylabel, ch.file = "Loader throughput, 8 threads", "samples/s", "loader.png"
	for _, rw := range rows {
		r.printf("| %s | %s | %s | %.2f× | %.2f× |\n", rw.name, rw.cold, rw.warm, rw.cold.med/best, rw.warm.med/tmpfs.med)
		ch.add(rw.name, rw.cold, rw.warm)
	}
	ch.series = []string{"cold", "warm"}
	r.charts = append(r.charts, ch)
	r.printf("\n![loader](docs/bench/loader.png)\n\n")
	r.printf("## Ingest (MB/s of sample data)\n\n| | MB/s |\n|---|---|\n| `shardfs ingest` RS(4,2) into 6 buckets (writes 1.5× the bytes) | %s |\n| `shardfs ingest --part 0/1` + `commit` (reads every fragment back) | %s |\n| 4 processes `--part I/4` in parallel + `commit` | %s |\n| `rclone copy --transfers 8` to one bucket | %s |\n| ratio ingest / rclone | %.2f× |\n| 4 processes / 1 process (`--part`) | %.2f× |\n\n",
		ingest, parts1, parts4, copyRate, ingest.med/copyRate.med, parts4.med/parts1.med)

	// Memory: peak RSS over an epoch larger than the cache.
	r.printf("\n## Memory (peak RSS of the mount over one %.0f MB epoch)\n\n| --cache-size | peak RSS MiB | over cache MiB |\n|---|---|---|\n", float64(total)/1e6)
	for _, cs := range []int64{64, 256, 1024} {
		var rss []float64
		for i := 0; i < reps; i++ {
			m := filepath.Join(work, fmt.Sprintf("mem%d-%d", cs, i))
			d := startMount(t, m, exists(filepath.Join(m, ".shardfs/info.json")), nil, binary, "mount", stores, "--rank=0", "--batch-size=64", fmt.Sprintf("--cache-size=%dMiB", cs), "ds", m)
			readBatches(tarBatches(filepath.Join(m, "epochs/0000/rank-000"), nb))
			rss = append(rss, float64(d.peakRSS())/(1<<20))
			d.stop()
		}
		s := summarize(rss)
		r.printf("| %d MiB | %s | %.0f |\n", cs, s, s.med-float64(cs))
	}
	r.printf("\n")
}

// fuseCeiling runs fio on a warm epoch.tar and on an in-memory go-fuse file
// of the same size. Each repetition reads for fioSeconds, looping over the
// file: one pass over the ~1 GB epoch takes well under a second at these
// rates, and runs that short measured fio's start-up (single passes of the
// in-memory file ranged 3,434–6,029 MB/s in one run). shardfs and the
// ceiling alternate, so drift on a noisy machine falls on both.
func fuseCeiling(t *testing.T, r *report, work, src string) {
	srv := miniotest.Start(t, "store0", "store1", "store2", "store3", "store4", "store5")
	stores := storesOn(srv)
	run(t, binary, "ingest", stores, "--data=4", "--parity=2", src, "ds")
	m := filepath.Join(work, "fio")
	d := startMount(t, m, exists(filepath.Join(m, ".shardfs/info.json")), nil, binary, "mount", stores, "--rank=0", "--batch-size=64", "ds", m)
	epoch := filepath.Join(m, "epochs/0000/rank-000/epoch.tar")
	fi, err := os.Stat(epoch)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(epoch); err != nil { // warm
		t.Fatal(err)
	}
	c := filepath.Join(work, "ceiling")
	cd := startMount(t, c, exists(filepath.Join(c, "data")), nil, binary, "ceiling-mount", "--size="+fmt.Sprint(fi.Size()), c)
	if _, err := os.ReadFile(filepath.Join(c, "data")); err != nil {
		t.Fatal(err)
	}
	const fioSeconds = 5
	r.printf("## FUSE ceiling (fio sequential 1 MiB reads of a warm %.0f MB file, %d s per repetition, MB/s)\n\n| | shardfs epoch.tar | in-memory go-fuse file | ratio |\n|---|---|---|---|\n", float64(fi.Size())/1e6, fioSeconds)
	for _, cfg := range []struct {
		name string
		args []string
	}{
		{"psync", []string{"--ioengine=psync"}},
		{"libaio, direct=1, iodepth 16", []string{"--ioengine=libaio", "--direct=1", "--iodepth=16"}},
	} {
		args := append([]string{"--name=seq", "--rw=read", "--bs=1M", "--size=" + fmt.Sprint(fi.Size()), "--time_based", fmt.Sprintf("--runtime=%d", fioSeconds)}, cfg.args...)
		var s, cl []float64
		for range reps {
			s = append(s, fioBW(t, append(args, "--filename="+epoch)...))
			cl = append(cl, fioBW(t, append(args, "--filename="+filepath.Join(c, "data"))...))
		}
		ss, cs := summarize(s), summarize(cl)
		r.printf("| %s | %s | %s | %.2f× |\n", cfg.name, ss, cs, ss.med/cs.med)
	}
	r.printf("\n")
	cd.stop()
	d.stop()
}

func secs(f func()) float64 {
	t0 := time.Now()
	f()
	return time.Since(t0).Seconds()
}

// stalls runs a simulated trainer: one reader, fixed compute per batch of 64,
// store latency injected, prefetch on and off. Stall fraction = time the
// daemon's reads waited on the backend / wall time.
func stalls(t *testing.T, r *report, work, src string) {
	srv := miniotest.Start(t, "store0", "store1", "store2", "store3", "store4", "store5")
	stores := storesOn(srv)
	run(t, binary, "ingest", stores, "--data=4", "--parity=2", src, "ds")
	const compute = 100 * time.Millisecond
	r.printf("## Stalls (simulated trainer: %v compute per batch of 64, one reader)\n\n| store latency | prefetch on | prefetch off | batches (on / off) |\n|---|---|---|---|\n", compute)
	var ch chart
	ch.title, ch.ylabel, ch.file, ch.series = "Stall fraction of wall time", "percent", "stalls.png", []string{"prefetch on", "prefetch off"}
	for _, lat := range []string{"0ms", "10ms±5ms", "50ms±25ms"} {
		var res [2]stat
		var counts [2]int
		for k, on := range []bool{true, false} {
			limit := 1 << 30
			if !on {
				limit = 8 // without prefetch each batch waits seconds: a few batches suffice
			}
			res[k] = repeat(func() float64 {
				m := filepath.Join(work, fmt.Sprintf("stall-%d", time.Now().UnixNano()))
				args := []string{"mount", stores, "--rank=0", "--batch-size=64", "--cache-size=512MiB", "--inject-latency=" + lat}
				if !on {
					args = append(args, "--no-prefetch")
				}
				d := startMount(t, m, exists(filepath.Join(m, ".shardfs/info.json")), nil, binary, append(args, "ds", m)...)
				defer d.stop()
				before := stallSeconds(t, m)
				rd := filepath.Join(m, "epochs/0000/rank-000")
				t0 := time.Now()
				n := 0
				for b := 0; b < limit; b++ {
					if _, err := os.ReadFile(filepath.Join(rd, fmt.Sprintf("batch-%06d.tar", b))); err != nil {
						break
					}
					n++
					time.Sleep(compute)
				}
				counts[k] = n
				return (stallSeconds(t, m) - before) / time.Since(t0).Seconds()
			})
		}
		r.printf("| %s | %s | %s | %d / %d |\n", lat, res[0].pct(), res[1].pct(), counts[0], counts[1])
		ch.add(lat, stat{100 * res[0].med, 100 * res[0].lo, 100 * res[0].hi}, stat{100 * res[1].med, 100 * res[1].lo, 100 * res[1].hi})
	}
	r.charts = append(r.charts, ch)
	r.printf("\nWith prefetch off the stall fraction can exceed 100%%: the kernel's read-ahead keeps several reads waiting at once, and their waits add up.\n\n![stalls](docs/bench/stalls.png)\n\n")
}

func stallSeconds(t *testing.T, mnt string) float64 {
	var s struct {
		StallSeconds float64 `json:"stall_seconds"`
	}
	b, _ := os.ReadFile(filepath.Join(mnt, ".shardfs/stats.json"))
	json.Unmarshal(b, &s)
	return s.StallSeconds
}

// degraded measures cold epoch throughput with 0, 1 and 2 of 6 MinIO processes killed.
func degraded(t *testing.T, r *report, work, src string) {
	var servers []*miniotest.Server
	var urls []string
	for i := 0; i < 6; i++ {
		s := miniotest.Start(t, "bucket")
		servers = append(servers, s)
		urls = append(urls, s.URL("bucket/ds"))
	}
	stores := "--stores=" + strings.Join(urls, ",")
	run(t, binary, "ingest", stores, "--data=4", "--parity=2", src, "ds")
	r.printf("## Degraded reads (cold epoch, 8 threads, 6 MinIO processes, RS(4,2))\n\n| stores killed | samples/s | ratio to healthy |\n|---|---|---|\n")
	var healthy float64
	var ch chart
	ch.title, ch.ylabel, ch.file, ch.series = "Cold epoch throughput with stores killed", "samples/s", "degraded.png", []string{"samples/s"}
	for _, lost := range []int{0, 1, 2} {
		for i := 0; i < lost; i++ {
			servers[i*3].Kill()
		}
		s := repeat(func() float64 {
			m := filepath.Join(work, fmt.Sprintf("deg-%d", time.Now().UnixNano()))
			d := startMount(t, m, exists(filepath.Join(m, ".shardfs/info.json")), nil, binary, "mount", stores, "--rank=0", "--batch-size=64", "ds", m)
			defer d.stop()
			rd := filepath.Join(m, "epochs/0000/rank-000")
			entries, _ := os.ReadDir(rd)
			nb := len(entries) - 2
			return float64(nb*64) / secs(func() { readBatches(tarBatches(rd, nb)) })
		})
		if lost == 0 {
			healthy = s.med
		}
		r.printf("| %d | %s | %.2f× |\n", lost, s, s.med/healthy)
		ch.add(fmt.Sprintf("%d killed", lost), s)
		for i := 0; i < lost; i++ {
			servers[i*3].Restart()
		}
	}
	r.charts = append(r.charts, ch)
	r.printf("\n![degraded](docs/bench/degraded.png)\n\n")
}
