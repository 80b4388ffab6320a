//go:build benchharness

package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/miniotest"
	"github.com/shardfs/shardfs/internal/synth"
)

// fuseRequestSizes measures what FUSE requests of 1, 4 and 16 MiB buy
// (issue 46 item 4): the kernel splits a read into requests of at most
// max_read bytes, each a trip through /dev/fuse, and gcsfuse documents
// raising it (fs.fuse.max_pages_limit). For each size, in one run:
//   - the FUSE floor: the ceiling mount (memory, --direct-io) read with dd
//     in 16 MiB direct reads, one after another: the daemon's CPU per GB
//     and wall time per GB;
//   - its memory: the daemon's peak RSS while 4 such readers run at once;
//   - shardfs from memory: rank 0's epoch.tar of a warm mount
//     (--direct-io, a cache that holds it), read the same way.
//
// It raises fs.fuse.max_pages_limit to 4096 pages for the run and puts the
// machine's value back after.
func fuseRequestSizes(t *testing.T, r *report, work string) {
	const limitFile = "/proc/sys/fs/fuse/max_pages_limit"
	old, err := os.ReadFile(limitFile)
	if err != nil {
		r.printf("## FUSE request sizes\n\nNot measured: this kernel has no %s (Linux 6.13 and later), so FUSE requests stay at 1 MiB.\n\n", limitFile)
		return
	}
	if err := os.WriteFile(limitFile, []byte("4096"), 0o644); err != nil {
		t.Fatalf("raising %s: %v", limitFile, err)
	}
	defer os.WriteFile(limitFile, old, 0o644)

	const fileSize = 1 << 30
	src := filepath.Join(work, "fusereq-src")
	total, err := synth.Write(src, synth.Imbalanced(3_000, 10, 0.75, 50_000, 150_000, 17))
	if err != nil {
		t.Fatal(err)
	}
	srv := miniotest.Start(t, "store0", "store1", "store2", "store3", "store4", "store5")
	var urls []string
	for i := range 6 {
		urls = append(urls, fmt.Sprintf("http://%s/store%d/ds", srv.Addr, i))
	}
	stores := "--stores=" + strings.Join(urls, ",")
	run(t, binary, "ingest", stores, "--data=4", "--parity=2", src, "req")

	type row struct{ ceilCPU, ceilWall, ceilRSS, shCPU, shWall stat }
	sizes := []int{1, 4, 16}
	rows := map[int]row{}
	for _, mib := range sizes {
		var ceilCPU, ceilWall, ceilRSS, shCPU, shWall []float64
		for rep := range reps {
			// The floor.
			mnt := filepath.Join(work, fmt.Sprintf("fusereq-ceil-%d-%d", mib, rep))
			d := startMount(t, mnt, exists(filepath.Join(mnt, "data")), nil, binary, "ceiling-mount", "--direct-io",
				fmt.Sprintf("--size=%d", fileSize), fmt.Sprintf("--max-request-kb=%d", mib<<10), mnt)
			cpu, wall := ddCPU(t, d.cmd.Process.Pid, filepath.Join(mnt, "data"), 4)
			ceilCPU, ceilWall = append(ceilCPU, cpu/(4*fileSize/1e9)), append(ceilWall, wall/(4*fileSize/1e9))
			before := d.peakRSS()
			var ps []*exec.Cmd
			for range 4 {
				c := exec.Command("dd", "if="+filepath.Join(mnt, "data"), "of=/dev/null", "bs=16M", "iflag=direct", "status=none")
				if err := c.Start(); err != nil {
					t.Fatal(err)
				}
				ps = append(ps, c)
			}
			for _, c := range ps {
				if err := c.Wait(); err != nil {
					t.Fatal(err)
				}
			}
			ceilRSS = append(ceilRSS, float64(d.peakRSS()-before)/(1<<20))
			d.stop()

			// shardfs, warm.
			smnt := filepath.Join(work, fmt.Sprintf("fusereq-shardfs-%d-%d", mib, rep))
			sd := startMount(t, smnt, exists(filepath.Join(smnt, ".shardfs/info.json")), nil, binary, "mount", stores, "--direct-io",
				"--cache-size=2GiB", "--world-size=1", fmt.Sprintf("--fuse-max-request=%dMiB", mib), "req", smnt)
			tar := filepath.Join(smnt, "epochs/0000/rank-000/epoch.tar")
			fi, err := os.Stat(tar)
			if err != nil {
				t.Fatal(err)
			}
			ddCPU(t, sd.cmd.Process.Pid, tar, 1) // cold: fills the cache
			cpu, wall = ddCPU(t, sd.cmd.Process.Pid, tar, 3)
			gb := 3 * float64(fi.Size()) / 1e9
			shCPU, shWall = append(shCPU, cpu/gb), append(shWall, wall/gb)
			sd.stop()
		}
		rows[mib] = row{summarize(ceilCPU), summarize(ceilWall), summarize(ceilRSS), summarize(shCPU), summarize(shWall)}
	}
	f2 := func(s stat) string { return fmt.Sprintf("%.3f (%.3f–%.3f)", s.med, s.lo, s.hi) }
	r.printf("## FUSE request sizes: 1, 4 and 16 MiB\n\n")
	r.printf("The kernel splits a read into FUSE requests of at most `max_read` bytes (go-fuse's MaxWrite; shardfs mount `--fuse-max-request`, 1 MiB by default), each a trip through /dev/fuse; above 1 MiB it needs `sysctl -w fs.fuse.max_pages_limit=4096`, raised for this run. Reads: dd, 16 MiB direct reads one after another. FUSE floor: the ceiling mount serving a %d MiB file from memory with --direct-io, 4 passes; its memory: the daemon's peak RSS growth while 4 such dd run at once. shardfs: rank 0's epoch.tar (%.0f MB of %d samples, RS(4,2) on 6 buckets of one MinIO, no added latency) from a warm mount's memory cache (`--direct-io --cache-size 2GiB`), 3 passes after one cold one. %d repetitions; CPU is the daemon's (user + system).\n\n",
		fileSize>>20, float64(total)/1e6, 3_000, reps)
	r.printf("| request size | FUSE floor, daemon CPU s per GB | floor, wall s per GB | floor, daemon RSS growth with 4 readers, MiB | shardfs warm, daemon CPU s per GB | shardfs warm, wall s per GB |\n|---|---|---|---|---|---|\n")
	for _, mib := range sizes {
		x := rows[mib]
		r.printf("| %d MiB | %s | %s | %.0f (%.0f–%.0f) | %s | %s |\n", mib, f2(x.ceilCPU), f2(x.ceilWall), x.ceilRSS.med, x.ceilRSS.lo, x.ceilRSS.hi, f2(x.shCPU), f2(x.shWall))
	}
	a, b := rows[1], rows[16]
	r.printf("\n16 MiB against 1 MiB, this run: the floor's daemon CPU per GB ×%.2f, shardfs's ×%.2f; the floor's memory with 4 readers %.0f MiB against %.0f.\n\n",
		b.ceilCPU.med/a.ceilCPU.med, b.shCPU.med/a.shCPU.med, b.ceilRSS.med, a.ceilRSS.med)
}

// ddCPU reads file with dd (16 MiB direct reads) passes times and returns
// the CPU seconds pid spent meanwhile and the wall seconds taken.
func ddCPU(t *testing.T, pid int, file string, passes int) (cpu, wall float64) {
	t.Helper()
	c0 := procCPU(t, pid)
	start := time.Now()
	for range passes {
		if out, err := exec.Command("dd", "if="+file, "of=/dev/null", "bs=16M", "iflag=direct", "status=none").CombinedOutput(); err != nil {
			t.Fatalf("dd %s: %v\n%s", file, err, out)
		}
	}
	return procCPU(t, pid) - c0, time.Since(start).Seconds()
}

// procStat returns the fields of pid's /proc stat after the command name
// (which may hold spaces, in parentheses): the stat's third field on.
func procStat(t *testing.T, pid int) []string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
}

// procCPU is pid's user + system CPU seconds.
func procCPU(t *testing.T, pid int) float64 {
	t.Helper()
	f := procStat(t, pid)
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / 100 // USER_HZ
}

// procMinorFaults is the minor page faults of process pid so far: each a
// first touch of memory (or a page the kernel took back), which costs CPU
// that procCPU counts as system time.
func procMinorFaults(t *testing.T, pid int) float64 {
	t.Helper()
	n, _ := strconv.ParseFloat(procStat(t, pid)[7], 64) // minflt, the stat's tenth field
	return n
}
