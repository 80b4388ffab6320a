//go:build benchharness

package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
	proxy, stores := proxiedStores(t, "minio", "peer")
	run(t, binary, "ingest", stores, "--data=4", "--parity=2", src, "epochs")
	for _, kv := range [][2]string{{"RCLONE_CONFIG_PEER_TYPE", "s3"}, {"RCLONE_CONFIG_PEER_PROVIDER", "Minio"}, {"RCLONE_CONFIG_PEER_ENDPOINT", "http://" + proxy.Listen},
		{"RCLONE_CONFIG_PEER_ACCESS_KEY_ID", miniotest.AccessKey}, {"RCLONE_CONFIG_PEER_SECRET_ACCESS_KEY", miniotest.SecretKey}} {
		os.Setenv(kv[0], kv[1])
	}
	run(t, "rclone", "copy", "--transfers=8", src, "peer:peer/ds")
	toxitest.Latency(t, proxy, latencyMS, jitterMS)

	type row struct {
		name   string
		epochs []stat
	}
	var rows []row
	collect := func(name string, f func(rep int) []float64) row {
		var runs [][]float64
		for i := 0; i < reps; i++ {
			runs = append(runs, f(i))
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
		return rw
	}
	// ordersOf is each epoch's batches of rank 0, as source-relative paths.
	ordersOf := func(tag string, order []string) [][][]string {
		m := filepath.Join(work, "epochs-order-"+tag)
		d := startMount(t, m, exists(filepath.Join(m, ".shardfs/info.json")), nil, binary, append(append([]string{"mount", stores}, order...), "epochs", m)...)
		defer d.stop()
		var out [][][]string
		for e := 0; e < epochs; e++ {
			out = append(out, batchesOf(t, filepath.Join(m, fmt.Sprintf("epochs/%04d/rank-000/index.csv", e)), ""))
		}
		return out
	}
	under := func(root string, orders [][][]string, e int) [][]string {
		out := make([][]string, len(orders[e]))
		for i, b := range orders[e] {
			for _, k := range b {
				out[i] = append(out[i], filepath.Join(root, k))
			}
		}
		return out
	}
	// shardfsRow reads the epochs through a mount with the disk tier, fresh
	// for every repetition; after, with remount, it reads epoch 0 again on
	// a new mount over the same tier.
	type extras struct{ rss, disk, remount []float64 }
	shardfsRow := func(name, tag string, order []string, nb, perBatch int, ex *extras) row {
		return collect(name, func(rep int) []float64 {
			cacheDir := filepath.Join(work, fmt.Sprintf("epochs-cache-%s-%d", tag, rep))
			args := append(append([]string{"mount", stores, fmt.Sprintf("--cache-size=%d", cacheSize), "--cache-dir=" + cacheDir, "--cache-dir-size=" + cacheDirMax}, order...), "epochs")
			mnt := filepath.Join(work, fmt.Sprintf("epochs-sfs-%s-%d", tag, rep))
			d := startMount(t, mnt, exists(filepath.Join(mnt, ".shardfs/info.json")), nil, binary, append(args, mnt)...)
			var out []float64
			for e := 0; e < epochs; e++ {
				rd := filepath.Join(mnt, fmt.Sprintf("epochs/%04d/rank-000", e))
				out = append(out, float64(nb*perBatch)/secs(func() { readBatches(tarBatches(rd, nb)) }))
			}
			peak := d.peakRSS()
			d.stop()
			if ex != nil {
				ex.rss = append(ex.rss, float64(peak)/(1<<20))
				ex.disk = append(ex.disk, float64(duBytes(cacheDir))/(1<<20))
				d = startMount(t, mnt, exists(filepath.Join(mnt, ".shardfs/info.json")), nil, binary, append(args, mnt)...)
				rd := filepath.Join(mnt, "epochs/0000/rank-000")
				ex.remount = append(ex.remount, float64(nb*perBatch)/secs(func() { readBatches(tarBatches(rd, nb)) }))
				d.stop()
			}
			os.RemoveAll(cacheDir)
			return out
		})
	}
	filesRow := func(name string, orders [][][]string) row {
		return collect(name, func(int) []float64 {
			var out []float64
			for e := 0; e < epochs; e++ {
				out = append(out, readBatches(under(src, orders, e)))
			}
			return out
		})
	}

	// One rank reading the whole dataset: the tier must hold all of it.
	order := []string{"--rank=0", "--batch-size=64", fmt.Sprintf("--epochs=%d", epochs), "--seed=3"}
	orders := ordersOf("all", order)
	nb := len(orders[0])
	var exPlain, exDirect extras
	sfs := shardfsRow("shardfs, disk tier, one rank reads the dataset", "all", order, nb, 64, &exPlain)
	sfsDirect := shardfsRow("shardfs, disk tier, one rank reads the dataset, --direct-io", "all-dio", append(slices.Clone(order), "--direct-io"), nb, 64, &exDirect)
	rc := collect("rclone mount, --vfs-cache-mode full", func(rep int) []float64 {
		mnt := filepath.Join(work, fmt.Sprintf("epochs-rclone-%d", rep))
		d := startMount(t, mnt, exists(filepath.Join(mnt, "class00")), nil, "rclone", "mount", "peer:peer/ds", mnt, "--read-only",
			"--vfs-cache-mode=full", "--cache-dir="+mnt+".cache")
		var out []float64
		for e := 0; e < epochs; e++ {
			out = append(out, readBatches(under(mnt, orders, e)))
		}
		d.stop()
		os.RemoveAll(mnt + ".cache")
		return out
	})
	ceil := filesRow("the same samples as files on local disk (ceiling)", orders)

	// Rank 0 of 4: without --affinity it reads a different quarter every
	// epoch; with it, the same shards, so its tier needs only a quarter.
	var aff, noAff, affCeil row
	for _, a := range []bool{false, true} {
		o := append(slices.Clone(order), "--world-size=4", "--direct-io")
		name, tag := "shardfs, disk tier, --direct-io, rank 0 of 4", "w4"
		if a {
			o, name, tag = append(o, "--affinity"), name+", --affinity", "w4aff"
		}
		ords := ordersOf(tag, o)
		per := len(ords[0][0])
		rw := shardfsRow(name, tag, o, len(ords[0]), per, nil)
		if a {
			aff = rw
			affCeil = filesRow("rank 0 of 4, --affinity: the same samples as files (ceiling)", ords)
		} else {
			noAff = rw
		}
	}

	// The FUSE ceiling: an in-memory go-fuse file with shardfs's mount
	// settings, read by the same 8 threads in slices of one batch's size.
	ceilMnt := filepath.Join(work, "epochs-fuse-ceiling")
	batchBytes := total / int64(nb)
	fuseCeil := repeat(func() float64 {
		cd := startMount(t, ceilMnt, exists(filepath.Join(ceilMnt, "data")), nil, binary, "ceiling-mount", fmt.Sprintf("--size=%d", batchBytes*int64(nb)), ceilMnt)
		defer cd.stop()
		return float64(nb*64) / secs(func() { readRanges(filepath.Join(ceilMnt, "data"), slices.Repeat([]int64{batchBytes}, nb)) })
	})

	r.printf("## Epochs beyond RAM (samples/s per epoch, 8 reader threads, %d ms ± %d ms per response through toxiproxy for every reader)\n\n", latencyMS, jitterMS)
	r.printf("Dataset: %d samples, %.0f MB, %.1f× the mount's `--cache-size` of %d MiB; `--cache-dir-size %s`. One rank reads %d batches of 64 per epoch; \"rank 0 of 4\" rows read a quarter of it.\n\n",
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
	r.printf("\n| target (medians) | measured | goal |\n|---|---|---|\n")
	for _, v := range []struct {
		name string
		rw   row
		ex   extras
	}{{"shardfs", sfs, exPlain}, {"shardfs --direct-io", sfsDirect, exDirect}} {
		for e := 1; e < epochs; e++ {
			r.printf("| %s epoch %d / rclone's second pass | %.2f× | ≥ 3× |\n", v.name, e, v.rw.epochs[e].med/rc.epochs[1].med)
			r.printf("| %s epoch %d / local-disk files | %.2f× | ≥ 0.8× |\n", v.name, e, v.rw.epochs[e].med/ceil.epochs[e].med)
		}
		r.printf("| %s epoch 1 / FUSE ceiling (in-memory go-fuse file, same readers and sizes: %s samples/s) | %.2f× | (bound of a page-cached FUSE mount) |\n", v.name, fuseCeil, v.rw.epochs[1].med/fuseCeil.med)
		rm := summarize(v.ex.remount)
		r.printf("| %s after a remount, epoch 0: %s samples/s / its epoch 1 | %.2f× | ≈ 1× |\n", v.name, rm, rm.med/v.rw.epochs[1].med)
		rs, ds := summarize(v.ex.rss), summarize(v.ex.disk)
		r.printf("| %s peak RSS MiB | %s | ≤ %d (cache + 256) |\n", v.name, rs, cacheSize>>20+256)
		r.printf("| %s disk tier use MiB | %s | ≤ %s |\n", v.name, ds, cacheDirMax)
	}
	for e := 1; e < epochs; e++ {
		r.printf("| rank 0 of 4, epoch %d: --affinity / without | %.2f× | > 1× |\n", e, aff.epochs[e].med/noAff.epochs[e].med)
		r.printf("| rank 0 of 4, epoch %d: --affinity / its local-disk files | %.2f× | ≥ 0.8× |\n", e, aff.epochs[e].med/affCeil.epochs[e].med)
	}
	r.printf("\n")
	r.printf("![epochs](docs/bench/epochs.png)\n\n")
}
