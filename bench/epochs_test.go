//go:build benchharness

package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/shardfs/shardfs/internal/miniotest"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/internal/toxitest"
)

// duBytes is what the files below dir occupy on disk.
func duBytes(dir string) int64 {
	var total int64
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			total += fi.Sys().(*syscall.Stat_t).Blocks * 512
		}
		return nil
	})
	return total
}

// epochsBeyondRAM is the regime of real training runs: the object store is
// 20 ms ± 5 ms away (toxiproxy in front of MinIO, for every reader), the
// dataset is several times the mount's memory, and the run lasts several
// epochs. Readers: shardfs with the disk tier (and after a remount),
// rclone mount with its full VFS disk cache, and the same samples as files
// on local disk, the ceiling. Samples/s per epoch, 8 reader threads.
func epochsBeyondRAM(t *testing.T, r *report, work string) {
	const (
		cacheSize   = 64 << 20
		cacheDirMax = "1GiB"
		epochs      = 3
		latencyMS   = 20
		jitterMS    = 5
	)
	src := filepath.Join(work, "epochs-src")
	total, err := synth.Write(src, synth.Imbalanced(4_000, 10, 0.75, 50_000, 150_000, 11))
	if err != nil {
		t.Fatal(err)
	}
	srv := miniotest.Start(t, "store0", "store1", "store2", "store3", "store4", "store5", "peer")
	tp := toxitest.Start(t)
	proxy := tp.Proxy("minio", srv.Addr)
	var urls []string
	for i := 0; i < 6; i++ {
		urls = append(urls, fmt.Sprintf("http://%s/store%d/ds", proxy.Listen, i))
	}
	stores := "--stores=" + strings.Join(urls, ",")
	run(t, binary, "ingest", stores, "--data=4", "--parity=2", src, "epochs")
	for _, kv := range [][2]string{{"RCLONE_CONFIG_PEER_TYPE", "s3"}, {"RCLONE_CONFIG_PEER_PROVIDER", "Minio"}, {"RCLONE_CONFIG_PEER_ENDPOINT", "http://" + proxy.Listen},
		{"RCLONE_CONFIG_PEER_ACCESS_KEY_ID", miniotest.AccessKey}, {"RCLONE_CONFIG_PEER_SECRET_ACCESS_KEY", miniotest.SecretKey}} {
		os.Setenv(kv[0], kv[1])
	}
	run(t, "rclone", "copy", "--transfers=8", src, "peer:peer/ds")
	toxitest.Latency(t, proxy, latencyMS, jitterMS)

	order := []string{"--rank=0", "--batch-size=64", fmt.Sprintf("--epochs=%d", epochs), "--seed=3"}
	// The order of each epoch, as source-relative paths, for the file readers.
	m := filepath.Join(work, "epochs-order")
	d := startMount(t, m, exists(filepath.Join(m, ".shardfs/info.json")), nil, binary, append(append([]string{"mount", stores}, order...), "epochs", m)...)
	var orders [][][]string
	for e := 0; e < epochs; e++ {
		orders = append(orders, batchesOf(t, filepath.Join(m, fmt.Sprintf("epochs/%04d/rank-000/index.csv", e)), ""))
	}
	d.stop()
	under := func(root string, e int) [][]string {
		out := make([][]string, len(orders[e]))
		for i, b := range orders[e] {
			for _, k := range b {
				out[i] = append(out[i], filepath.Join(root, k))
			}
		}
		return out
	}
	nb := len(orders[0])
	type row struct {
		name   string
		epochs []stat
	}
	var rows []row
	collect := func(name string, f func() []float64) {
		var runs [][]float64
		for i := 0; i < reps; i++ {
			runs = append(runs, f())
		}
		rw := row{name: name}
		for e := range runs[0] {
			var xs []float64
			for _, rn := range runs {
				xs = append(xs, rn[e])
			}
			rw.epochs = append(rw.epochs, summarize(xs))
		}
		rows = append(rows, rw)
	}

	var rss, disk, remount []float64
	collect("shardfs, --cache-size 64MiB --cache-dir (disk tier)", func() []float64 {
		cacheDir := filepath.Join(work, fmt.Sprintf("epochs-cache-%d", len(rss)))
		args := append(append([]string{"mount", stores, fmt.Sprintf("--cache-size=%d", cacheSize), "--cache-dir=" + cacheDir, "--cache-dir-size=" + cacheDirMax}, order...), "epochs")
		mnt := filepath.Join(work, fmt.Sprintf("epochs-sfs-%d", len(rss)))
		d := startMount(t, mnt, exists(filepath.Join(mnt, ".shardfs/info.json")), nil, binary, append(args, mnt)...)
		var out []float64
		for e := 0; e < epochs; e++ {
			rd := filepath.Join(mnt, fmt.Sprintf("epochs/%04d/rank-000", e))
			out = append(out, float64(nb*64)/secs(func() { readBatches(tarBatches(rd, nb)) }))
		}
		rss = append(rss, float64(d.peakRSS())/(1<<20))
		d.stop()
		disk = append(disk, float64(duBytes(cacheDir))/(1<<20))
		// Remount on the same disk tier: the first epoch again.
		d = startMount(t, mnt, exists(filepath.Join(mnt, ".shardfs/info.json")), nil, binary, append(args, mnt)...)
		rd := filepath.Join(mnt, "epochs/0000/rank-000")
		remount = append(remount, float64(nb*64)/secs(func() { readBatches(tarBatches(rd, nb)) }))
		d.stop()
		return out
	})
	collect("rclone mount, --vfs-cache-mode full", func() []float64 {
		mnt := filepath.Join(work, fmt.Sprintf("epochs-rclone-%d", len(rows)))
		d := startMount(t, mnt, exists(filepath.Join(mnt, "class00")), nil, "rclone", "mount", "peer:peer/ds", mnt, "--read-only",
			"--vfs-cache-mode=full", "--cache-dir="+mnt+".cache")
		var out []float64
		for e := 0; e < epochs; e++ {
			out = append(out, readBatches(under(mnt, e)))
		}
		d.stop()
		os.RemoveAll(mnt + ".cache")
		return out
	})
	collect("the same samples as files on local disk (ceiling)", func() []float64 {
		var out []float64
		for e := 0; e < epochs; e++ {
			out = append(out, readBatches(under(src, e)))
		}
		return out
	})

	sfs, rc, ceil := rows[0], rows[1], rows[2]
	r.printf("## Epochs beyond RAM (samples/s per epoch, 8 reader threads, %d ms ± %d ms per response through toxiproxy for every reader)\n\n", latencyMS, jitterMS)
	r.printf("Dataset: %d samples, %.0f MB, %.1f× the mount's `--cache-size` of %d MiB; `--cache-dir-size %s`. One rank reads %d batches of 64 per epoch.\n\n",
		4_000, float64(total)/1e6, float64(total)/cacheSize, cacheSize>>20, cacheDirMax, nb)
	r.printf("| reader |")
	for e := 0; e < epochs; e++ {
		r.printf(" epoch %d |", e)
	}
	r.printf("\n|---|")
	for e := 0; e < epochs; e++ {
		r.printf("---|")
	}
	r.printf("\n")
	var ch chart
	ch.title, ch.ylabel, ch.file = "Epochs beyond RAM at 20 ms", "samples/s", "epochs.png"
	for _, rw := range rows {
		r.printf("| %s |", rw.name)
		for _, s := range rw.epochs {
			r.printf(" %s |", s)
		}
		r.printf("\n")
		ch.add(rw.name, rw.epochs...)
	}
	for e := 0; e < epochs; e++ {
		ch.series = append(ch.series, fmt.Sprintf("epoch %d", e))
	}
	r.charts = append(r.charts, ch)
	rm := summarize(remount)
	r.printf("\n| target (medians) | measured | goal |\n|---|---|---|\n")
	for e := 1; e < epochs; e++ {
		r.printf("| shardfs epoch %d / rclone's second pass | %.2f× | ≥ 3× |\n", e, sfs.epochs[e].med/rc.epochs[1].med)
		r.printf("| shardfs epoch %d / local-disk files | %.2f× | ≥ 0.8× |\n", e, sfs.epochs[e].med/ceil.epochs[e].med)
	}
	r.printf("| shardfs after a remount, epoch 0: %s samples/s / its epoch 1 | %.2f× | ≈ 1× |\n", rm, rm.med/sfs.epochs[1].med)
	rs, ds := summarize(rss), summarize(disk)
	r.printf("| shardfs peak RSS MiB | %s | ≤ %d (cache + 256) |\n", rs, cacheSize>>20+256)
	r.printf("| disk tier use MiB | %s | ≤ %s |\n\n", ds, cacheDirMax)
	r.printf("![epochs](docs/bench/epochs.png)\n\n")
}
