//go:build benchharness

package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/miniotest"
)

// maxRSS runs name with args under /usr/bin/time -v and returns its wall
// seconds and peak resident set in MB.
func maxRSS(t *testing.T, name string, args ...string) (secs, mb float64) {
	t.Helper()
	secs, mb, _ = timeV(t, name, args...)
	return secs, mb
}

// timeV runs name with args under /usr/bin/time -v and returns its wall
// seconds, its peak resident set in MB and its CPU seconds (user and
// system).
func timeV(t *testing.T, name string, args ...string) (secs, mb, cpu float64) {
	t.Helper()
	secs, mb, cpu, _ = timeVOut(t, name, args...)
	return secs, mb, cpu
}

// timeVOut is timeV, and what the command printed.
func timeVOut(t *testing.T, name string, args ...string) (secs, mb, cpu float64, out []byte) {
	t.Helper()
	cmd := exec.Command("/usr/bin/time", append([]string{"-v", name}, args...)...)
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+miniotest.AccessKey, "AWS_SECRET_ACCESS_KEY="+miniotest.SecretKey)
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	secs = time.Since(t0).Seconds()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	field := func(re string) float64 {
		m := regexp.MustCompile(re).FindSubmatch(out)
		if m == nil {
			t.Fatalf("/usr/bin/time printed no %s:\n%s", re, out)
		}
		x, _ := strconv.ParseFloat(string(m[1]), 64)
		return x
	}
	mb = field(`Maximum resident set size \(kbytes\): (\d+)`) / 1024
	cpu = field(`User time \(seconds\): ([\d.]+)`) + field(`System time \(seconds\): ([\d.]+)`)
	return secs, mb, cpu, out
}

// records measures ingest from WebDataset shards (image-text pairs made
// by examples/make_webdataset.py) into six MinIO stores, RS(4,2), against
// rclone copy --transfers 8 of the same shards to one bucket, and the
// ingest's peak RSS at 10,000 and 100,000 records: memory should follow
// what is in flight, not the number of records.
func records(t *testing.T, r *report, work string) {
	srv := miniotest.Start(t, "store0", "store1", "store2", "store3", "store4", "store5", "peer")
	stores := storesOn(srv)
	// Two rclone remotes on the same server: a copy from one to the other
	// streams through rclone, as a copy between two clouds does, where a
	// copy within one remote would be a server-side copy.
	for _, remote := range []string{"PEER", "PEER2"} {
		for _, e := range []string{"TYPE=s3", "PROVIDER=Minio", "ENDPOINT=http://" + srv.Addr, "ACCESS_KEY_ID=" + miniotest.AccessKey, "SECRET_ACCESS_KEY=" + miniotest.SecretKey} {
			kv := strings.SplitN(e, "=", 2)
			os.Setenv("RCLONE_CONFIG_"+remote+"_"+kv[0], kv[1])
		}
	}
	r.printf("## Records: ingest from WebDataset shards\n\nImage-text pairs (a small JPEG, a caption and a .json each) made by `examples/make_webdataset.py`, ingested (each repetition a first ingest, under a new name) from local shards into 6 MinIO buckets RS(4,2) with `--strata source --bins aesthetic=4 --shard-size 4MiB` (shards of 4 MiB of members, read in windows of 16 MiB; most of a source shard is tar headers and padding, so the 10,000 records' 7 MiB of members are one window, and their peak RSS holds less in flight than the 100,000 records'; the last table compares the two at equal bytes in flight), against `rclone copy --transfers 8` of the same shards to one bucket; then from the same shards on MinIO (ingest reads them over S3; rclone copies them between two remotes on the server, so the bytes pass through it, as between two clouds). MB/s of source bytes; peak RSS from `/usr/bin/time -v`. `--dry-run` is the scan alone: every record's header and .json member read once, which must come before the first shard is placed (the strata, the quantile bins and the fields are the whole source's), and which the upload then reads again; so it bounds what any ingest of this design can reach.\n\n")
	r.printf("| records | source MB | `shardfs ingest` MB/s | `shardfs ingest --dry-run` MB/s | `rclone copy` MB/s | ratio ingest / rclone | ratio dry run / rclone | ingest peak RSS MB |\n|---|---|---|---|---|---|---|---|\n")
	type rssRow struct {
		n   int
		src string
	}
	var rssRows []rssRow
	for _, n := range []int{10_000, 100_000} {
		src := filepath.Join(work, fmt.Sprintf("wds-%d", n))
		rssRows = append(rssRows, rssRow{n, src})
		run(t, "/usr/bin/python3", "../examples/make_webdataset.py", src, strconv.Itoa(max(4, n/500)), strconv.Itoa(n), "3")
		var total int64
		entries, _ := os.ReadDir(src)
		for _, e := range entries {
			if fi, err := e.Info(); err == nil {
				total += fi.Size()
			}
		}
		// Each repetition is a first ingest, under a name of its own: a
		// --force would also read the replaced version's manifest.
		reps := 0
		var rss []float64
		ingest := repeat(func() float64 {
			reps++
			secs, mb := maxRSS(t, binary, "ingest", stores, "--data=4", "--parity=2", "--shard-size=4MiB", "--strata=source", "--bins=aesthetic=4", src, fmt.Sprintf("pairs%d-%d", n, reps))
			rss = append(rss, mb)
			return float64(total) / 1e6 / secs
		})
		scanRate := repeat(func() float64 {
			secs, _ := maxRSS(t, binary, "ingest", stores, "--data=4", "--parity=2", "--dry-run", "--shard-size=4MiB", "--strata=source", "--bins=aesthetic=4", src, fmt.Sprintf("pairs%d", n))
			return float64(total) / 1e6 / secs
		})
		copyRate := repeat(func() float64 {
			run(t, "rclone", "purge", "peer:peer/wds")
			t0 := time.Now()
			run(t, "rclone", "copy", "--transfers=8", src, "peer:peer/wds")
			return float64(total) / 1e6 / time.Since(t0).Seconds()
		})
		r.printf("| %d, local shards | %.0f | %s | %s | %s | %.2f× | %.2f× | %s |\n", n, float64(total)/1e6, ingest, scanRate, copyRate, ingest.med/copyRate.med, scanRate.med/copyRate.med, summarize(rss))

		// The same shards on the store (as the issue asks: shards on
		// MinIO), read by ingest over S3, and copied by rclone from one
		// remote to the other.
		prefix := fmt.Sprintf("src/wds-%d", n)
		run(t, "rclone", "copy", "--transfers=8", src, "peer:peer/"+prefix)
		rss = nil
		ingestS3 := repeat(func() float64 {
			reps++
			secs, mb := maxRSS(t, binary, "ingest", stores, "--data=4", "--parity=2", "--shard-size=4MiB", "--strata=source", "--bins=aesthetic=4",
				"http://"+srv.Addr+"/peer/"+prefix, fmt.Sprintf("s3pairs%d-%d", n, reps))
			rss = append(rss, mb)
			return float64(total) / 1e6 / secs
		})
		scanS3 := repeat(func() float64 {
			secs, _ := maxRSS(t, binary, "ingest", stores, "--data=4", "--parity=2", "--dry-run", "--shard-size=4MiB", "--strata=source", "--bins=aesthetic=4",
				"http://"+srv.Addr+"/peer/"+prefix, fmt.Sprintf("s3pairs%d", n))
			return float64(total) / 1e6 / secs
		})
		copyS3 := repeat(func() float64 {
			run(t, "rclone", "purge", "peer2:peer/dst")
			t0 := time.Now()
			run(t, "rclone", "copy", "--transfers=8", "peer:peer/"+prefix, "peer2:peer/dst")
			return float64(total) / 1e6 / time.Since(t0).Seconds()
		})
		r.printf("| %d, shards on MinIO | %.0f | %s | %s | %s | %.2f× | %.2f× | %s |\n", n, float64(total)/1e6, ingestS3, scanS3, copyS3, ingestS3.med/copyS3.med, scanS3.med/copyS3.med, summarize(rss))
	}
	// Peak RSS at equal bytes in flight: shards of 512 KiB are read in
	// windows of 2 MiB, which both sizes fill several times, so what
	// differs is what the records themselves cost.
	r.printf("\nPeak RSS at equal bytes in flight (`--shard-size 512KiB`: windows of 2 MiB of members, which both sizes fill several times), from local shards:\n\n| records | ingest peak RSS MB | MB a 10,000 records more |\n|---|---|---|\n")
	var meds []float64
	for _, row := range rssRows {
		var rss []float64
		for rep := range reps {
			_, mb := maxRSS(t, binary, "ingest", stores, "--data=4", "--parity=2", "--shard-size=512KiB", "--strata=source", "--bins=aesthetic=4", row.src, fmt.Sprintf("rss%d-%d", row.n, rep))
			rss = append(rss, mb)
		}
		st := summarize(rss)
		meds = append(meds, st.med)
		per := "-"
		if len(meds) == 2 {
			per = fmt.Sprintf("%.1f", (meds[1]-meds[0])/float64(rssRows[1].n-rssRows[0].n)*10_000)
		}
		r.printf("| %d | %s | %s |\n", row.n, st, per)
	}
	r.printf("\n")
}
