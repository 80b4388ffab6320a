package integration

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/internal/toxitest"
)

// scrape returns the /metrics text of the mount whose log names its URL.
func scrape(t *testing.T, mp *mountProc) string {
	t.Helper()
	m := regexp.MustCompile(`url=(http://127\.0\.0\.1:\d+/metrics)`).FindStringSubmatch(string(mustRead(t, mp.log)))
	if m == nil {
		t.Fatalf("no metrics URL in the log:\n%s", mustRead(t, mp.log))
	}
	resp, err := http.Get(m[1])
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// sample is the value of the series name{label="value"} in a scrape (-1: absent).
func sample(text, name, label, value string) float64 {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\{` + label + `="` + regexp.QuoteMeta(value) + `"\} (\S+)$`)
	m := re.FindStringSubmatch(text)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// Issue 29 item 1: latency where it is spent, driven by real traffic. One
// of three MinIO stores is slowed by 120 ms through toxiproxy: its time to
// first byte is the highest, by far; every successful GET of every store
// is in its GET-time histogram; every read of each rank's files is in the
// read-wait histogram of that rank.
func TestLatencyHistograms(t *testing.T) {
	pc := startProxiedCluster(t, 3)
	stores := "--stores=" + strings.Join(pc.urls, ",")
	src := writeSource(t, synth.Imbalanced(240, 4, 0.6, 4_000, 40_000, 29))
	if r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--shard-size=512KiB", src, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	toxitest.Latency(t, pc.proxies[1], 120, 0)
	mp := mountShardfsEnv(t, nil, stores, "--world-size=2", "--rank=all", "--batch-size=8", "--epochs=1", "--metrics-addr=127.0.0.1:0", "ds")
	for rank := 0; rank < 2; rank++ {
		mustRead(t, filepath.Join(mp.dir, "epochs", "0000", fmt.Sprintf("rank-%03d", rank), "epoch.tar"))
	}
	text := scrape(t, mp)
	mean := make([]float64, 3)
	for i, u := range pc.urls {
		n := sample(text, "shardfs_store_first_byte_seconds_count", "store", u)
		sum := sample(text, "shardfs_store_first_byte_seconds_sum", "store", u)
		gets := sample(text, "shardfs_store_get_seconds_count", "store", u)
		reqs := sample(text, "shardfs_backend_requests_total", "store", u)
		errs := sample(text, "shardfs_backend_errors_total", "store", u)
		if n <= 0 || gets <= 0 || gets != reqs-errs {
			t.Fatalf("store %d: %v first-byte observations, %v GET times, %v requests, %v errors: every successful GET must be timed\n%s", i, n, gets, reqs, errs, text)
		}
		mean[i] = sum / n
	}
	if mean[1] < 0.1 || mean[1] < 3*max(mean[0], mean[2]) {
		t.Fatalf("mean time to first byte per store %v: the store slowed by 120 ms must stand out", mean)
	}
	reads := -1.0
	if m := regexp.MustCompile(`(?m)^shardfs_reads_total (\S+)$`).FindStringSubmatch(text); m != nil {
		reads, _ = strconv.ParseFloat(m[1], 64)
	}
	waits := 0.0
	for rank := 0; rank < 2; rank++ {
		n := sample(text, "shardfs_read_wait_seconds_count", "rank", strconv.Itoa(rank))
		if n <= 0 {
			t.Fatalf("rank %d: no read in its read-wait histogram\n%s", rank, text)
		}
		waits += n
	}
	if waits != reads {
		t.Fatalf("%v reads in the read-wait histograms, %v reads served", waits, reads)
	}
	t.Logf("mean time to first byte per store: %.4f %.4f %.4f s", mean[0], mean[1], mean[2])
}
