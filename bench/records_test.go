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
	cmd := exec.Command("/usr/bin/time", append([]string{"-v", name}, args...)...)
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+miniotest.AccessKey, "AWS_SECRET_ACCESS_KEY="+miniotest.SecretKey)
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	secs = time.Since(t0).Seconds()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	m := regexp.MustCompile(`Maximum resident set size \(kbytes\): (\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("/usr/bin/time printed no peak RSS:\n%s", out)
	}
	kb, _ := strconv.ParseFloat(string(m[1]), 64)
	return secs, kb / 1024
}

// records measures ingest from WebDataset shards (image-text pairs made
// by examples/make_webdataset.py) into six MinIO stores, RS(4,2), against
// rclone copy --transfers 8 of the same shards to one bucket, and the
// ingest's peak RSS at 10,000 and 100,000 records: memory should follow
// what is in flight, not the number of records.
func records(t *testing.T, r *report, work string) {
	srv := miniotest.Start(t, "store0", "store1", "store2", "store3", "store4", "store5", "peer")
	stores := storesOn(srv)
	for _, e := range []string{"RCLONE_CONFIG_PEER_TYPE=s3", "RCLONE_CONFIG_PEER_PROVIDER=Minio", "RCLONE_CONFIG_PEER_ENDPOINT=http://" + srv.Addr,
		"RCLONE_CONFIG_PEER_ACCESS_KEY_ID=" + miniotest.AccessKey, "RCLONE_CONFIG_PEER_SECRET_ACCESS_KEY=" + miniotest.SecretKey} {
		kv := strings.SplitN(e, "=", 2)
		os.Setenv(kv[0], kv[1])
	}
	r.printf("## Records: ingest from WebDataset shards\n\nImage-text pairs (a small JPEG, a caption and a .json each) made by `examples/make_webdataset.py`, ingested from local shards into 6 MinIO buckets RS(4,2) with `--strata source --bins aesthetic=4 --shard-size 4MiB` (so both sizes have as many shards in flight, and peak RSS compares what the records cost), against `rclone copy --transfers 8` of the same shards to one bucket. MB/s of source bytes; peak RSS from `/usr/bin/time -v`.\n\n")
	r.printf("| records | source MB | `shardfs ingest` MB/s | `rclone copy` MB/s | ratio ingest / rclone | ingest peak RSS MB |\n|---|---|---|---|---|---|\n")
	for _, n := range []int{10_000, 100_000} {
		src := filepath.Join(work, fmt.Sprintf("wds-%d", n))
		run(t, "/usr/bin/python3", "../examples/make_webdataset.py", src, strconv.Itoa(max(4, n/500)), strconv.Itoa(n), "3")
		var total int64
		entries, _ := os.ReadDir(src)
		for _, e := range entries {
			if fi, err := e.Info(); err == nil {
				total += fi.Size()
			}
		}
		var rss []float64
		ingest := repeat(func() float64 {
			secs, mb := maxRSS(t, binary, "ingest", stores, "--data=4", "--parity=2", "--force", "--shard-size=4MiB", "--strata=source", "--bins=aesthetic=4", src, fmt.Sprintf("pairs%d", n))
			rss = append(rss, mb)
			return float64(total) / 1e6 / secs
		})
		copyRate := repeat(func() float64 {
			run(t, "rclone", "purge", "peer:peer/wds")
			t0 := time.Now()
			run(t, "rclone", "copy", "--transfers=8", src, "peer:peer/wds")
			return float64(total) / 1e6 / time.Since(t0).Seconds()
		})
		r.printf("| %d | %.0f | %s | %s | %.2f× | %s |\n", n, float64(total)/1e6, ingest, copyRate, ingest.med/copyRate.med, summarize(rss))
	}
	r.printf("\n")
}
