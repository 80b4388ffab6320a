//go:build benchharness

package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/internal/toxitest"
)

// cpuFloors measures, in one run, the least CPU a FUSE daemon on this
// machine can spend per GB it serves, beside what shardfs spends on the
// same bytes, both as multiples of the bare minio-go client (issue 25's
// unit). The floors are made of parts measured here:
//   - the FUSE floor: the ceiling mount serving the same reads from memory
//     with --direct-io, one copy into the kernel's buffer and nothing else;
//   - the disk-tier floor: the ceiling mount serving them from a
//     page-cached file, one pread into the kernel's buffer and CRC32C over
//     it, the least the tier can do and still check every byte;
//   - receiving the bytes: at least the bare client's cost;
//   - first touch: a cache that grows writes each byte it keeps into memory
//     no process has touched, one page fault per 4 KiB, measured by
//     firstTouch.
//
// Every daemon runs alone, so its CPU is the "shardfs daemon" role's.
func cpuFloors(t *testing.T, r *report, work string) {
	const samples = 4_000
	src := filepath.Join(work, "floors-src")
	total, err := synth.Write(src, synth.Imbalanced(samples, 10, 0.75, 50_000, 150_000, 13))
	if err != nil {
		t.Fatal(err)
	}
	proxy, stores := proxiedStores(t, "minio-floors", "peer")
	run(t, binary, "ingest", stores, "--data=4", "--parity=2", src, "lat")
	ceilStore := blobStore(t, proxy)
	toxitest.Latency(t, proxy, 20, 5)
	defer toxitest.Heal(t, proxy)

	// The epoch every reader reads: rank 0's batch tars, and their sizes,
	// which the ceilings read as slices of one file of the same length.
	mnt := filepath.Join(work, "floors-order")
	d := startMount(t, mnt, exists(filepath.Join(mnt, ".shardfs/info.json")), nil, binary, "mount", stores, "--rank=0", "--batch-size=64", "lat", mnt)
	tars, _ := filepath.Glob(filepath.Join(mnt, "epochs/0000/rank-000/batch-*.tar"))
	var sizes []int64
	var epochBytes int64
	for _, f := range tars {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, fi.Size())
		epochBytes += fi.Size()
	}
	d.stop()
	nb := len(sizes)
	if nb == 0 {
		t.Fatal("rank 0 has no batches")
	}
	moved := float64(epochBytes)
	// The disk-tier floor's file: the epoch's length, in the page cache.
	tierFile := filepath.Join(work, "floors-tier-file")
	if err := os.WriteFile(tierFile, make([]byte, epochBytes), 0o644); err != nil {
		t.Fatal(err)
	}

	var bare, bareSmall, cold, global, mem, disk, diskAgain, steady, fuseMem, fuseFile cpuUse
	var fetched, smallGet []float64
	n := 0
	mountShardfs := func(flags ...string) (*daemon, string) {
		n++
		mnt := filepath.Join(work, fmt.Sprintf("floors-sfs-%d", n))
		// A later flag wins: "--window=0" reads the global order.
		args := append(append([]string{"mount", stores, "--rank=0", "--batch-size=64", "--window=4", "--direct-io"}, flags...), "lat", mnt)
		return startMount(t, mnt, exists(filepath.Join(mnt, ".shardfs/info.json")), nil, binary, args...), mnt
	}
	timed := func(c *cpuUse, bytes float64, read func()) {
		before := procTimes()
		read()
		c.add(before, procTimes(), bytes)
	}
	epoch := func(mnt string, e int) func() {
		return func() { readBatches(tarBatches(filepath.Join(mnt, fmt.Sprintf("epochs/%04d/rank-000", e)), nb)) }
	}
	ceiling := func(c *cpuUse, flags ...string) {
		n++
		mnt := filepath.Join(work, fmt.Sprintf("floors-ceiling-%d", n))
		args := append([]string{"ceiling-mount", "--direct-io", fmt.Sprintf("--size=%d", epochBytes)}, flags...)
		d := startMount(t, mnt, exists(filepath.Join(mnt, "data")), nil, binary, append(args, mnt)...)
		defer d.stop()
		// Once untimed, as shardfs's daemon has served reads before its
		// from-memory epoch: what a fresh process pays once (its first
		// buffers) is not a cost per GB.
		readRanges(filepath.Join(mnt, "data"), sizes)
		timed(c, moved, func() { readRanges(filepath.Join(mnt, "data"), sizes) })
	}
	for i := 0; i < reps; i++ {
		before := procTimes()
		_, rate := getRate(t, ceilStore, "blob", blob, 8<<20, 8, 3*time.Second)
		bare.add(before, procTimes(), rate*3)
		// Cold with the cache growing, then the same epoch from memory.
		d, mnt := mountShardfs()
		timed(&cold, moved, epoch(mnt, 0))
		timed(&mem, moved, epoch(mnt, 0))
		d.stop()
		d, mnt = mountShardfs("--window=0")
		timed(&global, moved, epoch(mnt, 0))
		fetchedBytes, gets := storeTraffic(t, mnt)
		d.stop()
		// The global order reads a sample's fragments, not 8 MiB: the bare
		// client receiving GETs of the size the global order's had.
		getSize := int64(fetchedBytes) / max(gets, 1)
		before = procTimes()
		_, rate = getRate(t, ceilStore, "blob", blob, getSize, 64, 3*time.Second)
		bareSmall.add(before, procTimes(), rate*3)
		smallGet = append(smallGet, float64(getSize))
		// The disk tier: filled by one mount, read by the next.
		tier := filepath.Join(work, fmt.Sprintf("floors-tier-%d", i))
		d, mnt = mountShardfs("--cache-dir=" + tier)
		epoch(mnt, 0)()
		d.stop()
		d, mnt = mountShardfs("--cache-dir=" + tier)
		timed(&disk, moved, epoch(mnt, 0))
		timed(&diskAgain, moved, epoch(mnt, 0))
		d.stop()
		// The steady state: the dataset 3× the cache, epoch 1 after epoch 0.
		d, mnt = mountShardfs("--cache-size=128MiB", "--epochs=2")
		epoch(mnt, 0)()
		b0 := storeBytesOf(t, mnt)
		timed(&steady, moved, epoch(mnt, 1))
		fetched = append(fetched, 100*(storeBytesOf(t, mnt)-b0)/moved)
		d.stop()
		// The floors, read the same way.
		ceiling(&fuseMem)
		ceiling(&fuseFile, "--from="+tierFile)
	}
	touch := repeat(func() float64 { return firstTouch(t) })

	const daemonRole = "shardfs daemon"
	b := bare.perGB("reader")
	fuse, file := fuseMem.perGB(daemonRole), fuseFile.perGB(daemonRole)
	r.leadf("## What the daemon cannot go below: CPU floors per GB served, at 20 ms\n\n")
	r.leadf("Issue 25's targets are multiples of the bare minio-go client's CPU per GB (%s samples, %.0f MB, RS(4,2) over 6 buckets of one MinIO behind toxiproxy at 20 ± 5 ms; rank 0's %d batch tars read by 8 threads, `--window 4 --direct-io`; %d repetitions, CPU summed over them). Each floor is built from parts measured in this run:\n\n", fmt.Sprint(samples), float64(total)/1e6, nb, reps)
	r.leadf("- **bare client**: minio-go receiving 8 MiB GETs through the same proxy, 8 in flight: %.2f CPU s per GB (%.2f in the kernel, %.0f minor faults per GB).\n", b, bare.sysPerGB("reader"), bare.faultsPerGB("reader"))
	r.leadf("- **bare client, small GETs**: the same, with GETs of the global order's mean GET size (%.0f kB), 64 in flight: %.2f CPU s per GB (%.2f in the kernel).\n", summarize(smallGet).med/1e3, bareSmall.perGB("reader"), bareSmall.sysPerGB("reader"))
	r.leadf("- **FUSE floor**: the ceiling mount (`ceiling-mount --direct-io`) serving the same %d reads of the same sizes from memory, one copy into the kernel's buffer and nothing else: %.2f CPU s per GB (%.2f in the kernel, %.0f minor faults per GB).\n", nb, fuse, fuseMem.sysPerGB(daemonRole), fuseMem.faultsPerGB(daemonRole))
	r.leadf("- **disk-tier floor**: the same mount serving a page-cached file of the epoch's length, one pread into the kernel's buffer and CRC32C over it per read: %.2f CPU s per GB (%.2f in the kernel).\n", file, fuseFile.sysPerGB(daemonRole))
	r.leadf("- **first touch**: writing memory no process has touched, %.2f (%.2f–%.2f) CPU s per GB (256 MiB, page by page). A cache that grows pays it once per byte it keeps, whether at start or as it fills.\n\n", touch.med, touch.lo, touch.hi)
	r.leadf("| | target | floor, CPU s per GB | floor × the bare client | shardfs, CPU s per GB | shardfs × the bare client | shardfs / floor | minor faults per GB, shardfs |\n|---|---|---|---|---|---|---|---|\n")
	for _, row := range []struct {
		name, parts string
		target, fl  float64
		c           *cpuUse
	}{
		{"from memory", "FUSE floor", 0.3, fuse, &mem},
		{"from the disk tier, the first epoch after a remount", "disk-tier floor", 1, file, &disk},
		{"from the disk tier, the same mount's next epoch", "disk-tier floor", 1, file, &diskAgain},
		{"steady state (3× the cache, epoch 1)", "bare client + FUSE floor", 2, b + fuse, &steady},
		{"cold, --window 4, the cache growing", "bare client + FUSE floor + first touch", 2.5, b + fuse + touch.med, &cold},
		{"cold, global order, the cache growing", "bare client at its GET size + FUSE floor + first touch", 4, bareSmall.perGB("reader") + fuse + touch.med, &global},
	} {
		s := row.c.perGB(daemonRole)
		verdict := ""
		if row.fl/b > row.target {
			verdict = " (floor above the target)"
		}
		r.leadf("| %s | ≤ %.1f× | %.2f (%s) | %.2f×%s | %.2f | %.2f× | %.2f× | %.0f |\n", row.name, row.target, row.fl, row.parts, row.fl/b, verdict, s, s/b, s/row.fl, row.c.faultsPerGB(daemonRole))
	}
	r.leadf("\nSteady state: %s of the epoch's bytes fetched from the stores.\n\n", summarize(fetched).pct2())
}

// readRanges reads consecutive ranges of file of the given sizes with 8
// threads, range i by thread i%8 in one ReadAt each, as readBatches reads
// batch files whole. Each thread reuses one buffer.
func readRanges(file string, sizes []int64) {
	offs := make([]int64, len(sizes))
	for i := 1; i < len(sizes); i++ {
		offs[i] = offs[i-1] + sizes[i-1]
	}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := os.Open(file)
			if err != nil {
				panic(err)
			}
			defer f.Close()
			buf := make([]byte, slices.Max(sizes))
			for i := w; i < len(sizes); i += 8 {
				if _, err := f.ReadAt(buf[:sizes[i]], offs[i]); err != nil {
					panic(fmt.Sprintf("read %s: %v", file, err))
				}
			}
		}()
	}
	wg.Wait()
}
