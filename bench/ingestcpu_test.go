//go:build benchharness

package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/miniotest"
)

// ingestCPU measures where the cores go when records are ingested from
// WebDataset shards on MinIO, beside rclone's copy of the same shards
// between two remotes of the same server (issue 41's throughput target):
// the CPU seconds per GB of source of the MinIO process and of the tool
// itself, and so the rate two cores allow at that cost. Both saturate the
// two cores, so a tool's rate follows its total CPU per GB.
func ingestCPU(t *testing.T, r *report, work string) {
	srv := miniotest.Start(t, "store0", "store1", "store2", "store3", "store4", "store5", "peer")
	for _, remote := range []string{"PEER", "PEER2"} {
		for k, v := range map[string]string{"TYPE": "s3", "PROVIDER": "Minio", "ENDPOINT": "http://" + srv.Addr, "ACCESS_KEY_ID": miniotest.AccessKey, "SECRET_ACCESS_KEY": miniotest.SecretKey} {
			os.Setenv("RCLONE_CONFIG_"+remote+"_"+k, v)
		}
	}
	const n = 100_000
	src := filepath.Join(work, fmt.Sprintf("ingestcpu-%d", n))
	run(t, "/usr/bin/python3", "../examples/make_webdataset.py", src, strconv.Itoa(n/500), strconv.Itoa(n), "3")
	var total int64
	entries, _ := os.ReadDir(src)
	for _, e := range entries {
		if fi, err := e.Info(); err == nil {
			total += fi.Size()
		}
	}
	prefix := "src/ingestcpu"
	run(t, "rclone", "copy", "--transfers=8", src, "peer:peer/"+prefix)
	gb := float64(total) / 1e9

	type tool struct {
		name       string
		before     func()
		args       func(rep int) []string
		rate       []float64
		minio, own []float64
	}
	ingestFrom := func(from, name string, extra ...string) func(int) []string {
		return func(rep int) []string {
			return append(append([]string{binary, "ingest", storesOn(srv), "--data=4", "--parity=2", "--shard-size=4MiB", "--strata=source", "--bins=aesthetic=4"}, extra...),
				from, fmt.Sprintf("%s%d", name, rep))
		}
	}
	ingestArgs := func(extra ...string) func(int) []string {
		return ingestFrom("http://"+srv.Addr+"/peer/"+prefix, "cpu", extra...)
	}
	got := filepath.Join(work, "ingestcpu-got")
	tools := []*tool{
		{name: "`rclone copy --transfers 8`", before: func() { run(t, "rclone", "purge", "peer2:peer/dst") },
			args: func(int) []string {
				return []string{"rclone", "copy", "--transfers=8", "peer:peer/" + prefix, "peer2:peer/dst"}
			}},
		{name: "`shardfs ingest`", args: ingestArgs()},
		{name: "`shardfs ingest --dry-run` (the scan alone)", args: ingestArgs("--dry-run")},
		// The two halves of what any ingest of these shards must ask of
		// the store, measured apart: every source byte read once, and
		// the fragments written (RS(4,2): 1.5 bytes a source byte).
		{name: "`rclone copy --transfers 8` from MinIO to a local directory (MinIO reads each source byte once)",
			before: func() { os.RemoveAll(got) },
			args: func(int) []string {
				return []string{"rclone", "copy", "--transfers=8", "peer:peer/" + prefix, got}
			}},
		{name: "`shardfs ingest` from the local shards (MinIO stores the fragments, reads nothing)", args: ingestFrom(src, "cpulocal")},
	}
	for rep := range reps {
		for _, tl := range tools {
			if tl.before != nil {
				tl.before()
			}
			args := tl.args(rep)
			cmd := exec.Command(args[0], args[1:]...)
			cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+miniotest.AccessKey, "AWS_SECRET_ACCESS_KEY="+miniotest.SecretKey)
			before := procTimes()
			t0 := time.Now()
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v: %v\n%s", args, err, out)
			}
			tl.rate = append(tl.rate, float64(total)/1e6/time.Since(t0).Seconds())
			tl.minio = append(tl.minio, cpuDelta(before, procTimes(), roleOf)["MinIO"]/gb)
			tl.own = append(tl.own, (cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime()).Seconds()/gb)
		}
	}
	r.printf("## Records: where the cores go in an ingest from shards on MinIO (issue 41)\n\n%d image-text records (%.0f MB in %d WebDataset shards, `examples/make_webdataset.py`: small members, so most of a shard is tar headers and padding) on one MinIO process; `shardfs ingest` writes RS(4,2) into 6 buckets of the same process (`--strata source --bins aesthetic=4 --shard-size 4MiB`), rclone copies the shards between two remotes of it. CPU seconds per GB of source (user + system) of the MinIO process and of the tool; the tools run one after the other, repetitions interleaved.\n\n", n, float64(total)/1e6, len(entries))
	r.printf("| | MB/s | MinIO CPU s/GB | the tool's CPU s/GB | total CPU s/GB | MB/s two cores allow at this cost |\n|---|---|---|---|---|---|\n")
	for _, tl := range tools {
		var tot []float64
		for i := range tl.minio {
			tot = append(tot, tl.minio[i]+tl.own[i])
		}
		ts := summarize(tot)
		r.printf("| %s | %s | %s | %s | %s | %.0f |\n", tl.name, summarize(tl.rate), fmt1(summarize(tl.minio)), fmt1(summarize(tl.own)), fmt1(ts), 2/ts.med*1e3)
	}
	rc, sc := summarize(tools[0].rate), summarize(tools[2].rate)
	r.printf("\nratio ingest / rclone %.2f×, scan alone / rclone %.2f×. For 1.5× rclone here, an ingest's total must be at most two thirds of rclone's CPU per GB.\n\n", summarize(tools[1].rate).med/rc.med, sc.med/rc.med)
	// The store's floor: an ingest that read each source byte once and
	// spent no CPU of its own would still cost MinIO the read of the
	// source and the writes of the fragments. With both tools bound by
	// the same two cores, rclone's total over that floor bounds the ratio
	// any ingest of RS(4,2) can reach against rclone on this machine.
	var rcTotal []float64
	for i := range tools[0].minio {
		rcTotal = append(rcTotal, tools[0].minio[i]+tools[0].own[i])
	}
	read, write := summarize(tools[3].minio).med, summarize(tools[4].minio).med
	r.printf("The store's floor: MinIO spends %.1f CPU s per GB reading the source once and %.1f storing its fragments, %.1f in all, before the ingest spends any CPU of its own; rclone's copy costs %.1f in all. So an ingest that read the source once and cost nothing itself would reach at most %.2f× rclone on this machine.\n\n",
		read, write, read+write, summarize(rcTotal).med, summarize(rcTotal).med/(read+write))
}

func fmt1(s stat) string { return fmt.Sprintf("%.1f (%.1f–%.1f)", s.med, s.lo, s.hi) }
