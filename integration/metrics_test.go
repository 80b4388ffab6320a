package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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

	// Issue 29 item 2: shard hotness and the spread over stores.
	var st struct {
		HotShards []struct {
			Shard int   `json:"shard"`
			Bytes int64 `json:"bytes"`
		} `json:"hot_shards"`
		ShardsRead int     `json:"shards_read"`
		StoreSkew  float64 `json:"store_skew"`
		Stores     []struct {
			Bytes int64 `json:"bytes"`
		} `json:"stores"`
	}
	var info struct {
		Dataset struct {
			Shards int `json:"shards"`
		} `json:"dataset"`
	}
	if err := json.Unmarshal(mustRead(t, filepath.Join(mp.dir, ".shardfs", "stats.json")), &st); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(mustRead(t, filepath.Join(mp.dir, ".shardfs", "info.json")), &info); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, s := range st.Stores {
		total += s.Bytes
	}
	if st.ShardsRead != info.Dataset.Shards || len(st.HotShards) != min(5, st.ShardsRead) {
		t.Fatalf("%d shards read of %d, %d listed hot: every rank of the epoch reads every shard", st.ShardsRead, info.Dataset.Shards, len(st.HotShards))
	}
	for i, h := range st.HotShards {
		if h.Shard < 0 || h.Shard >= info.Dataset.Shards || i > 0 && h.Bytes > st.HotShards[i-1].Bytes {
			t.Fatalf("hot shards %+v: not shards of the dataset, most read first", st.HotShards)
		}
	}
	if top := st.HotShards[0].Bytes; float64(top) < float64(total)/float64(st.ShardsRead) {
		t.Fatalf("the hottest shard's %d bytes are below the mean %d of %d bytes over %d shards", top, total/int64(st.ShardsRead), total, st.ShardsRead)
	}
	if st.StoreSkew < 1 || st.StoreSkew > 3 {
		t.Fatalf("store skew %v: most bytes over the mean of 3 stores is 1..3", st.StoreSkew)
	}
	if g := regexp.MustCompile(`(?m)^shardfs_store_read_skew (\S+)$`).FindStringSubmatch(scrape(t, mp)); g == nil {
		t.Fatal("no shardfs_store_read_skew gauge")
	}
	r := run(t, time.Minute, nil, "stats", "--count=1", "--interval=100ms", mp.dir)
	if want := fmt.Sprintf("hottest of %d shards read: %d (", st.ShardsRead, st.HotShards[0].Shard); r.code != 0 || !strings.Contains(r.stdout, want) {
		t.Fatalf("shardfs stats does not say %q: %v", want, r)
	}
}

// Issue 29 item 3: the slow-store anomaly on real traffic. A reader reads
// epoch after epoch (a cache smaller than the dataset keeps the GETs
// coming) from three MinIO stores behind toxiproxy. Healthy: no anomaly.
// Store 1 slowed by 150 ms: within 30 s stats.json names it as a slow
// store, and so do the gauge and shardfs stats. Healed: the anomaly clears.
func TestSlowStoreAnomalyLive(t *testing.T) {
	pc := startProxiedCluster(t, 3)
	stores := "--stores=" + strings.Join(pc.urls, ",")
	src := writeSource(t, synth.Imbalanced(500, 4, 0.6, 20_000, 80_000, 31))
	if r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--shard-size=2MiB", src, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	mp := mountShardfsEnv(t, nil, stores, "--batch-size=16", "--cache-size=16MiB", "--metrics-addr=127.0.0.1:0", "ds")
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := 0; ; e++ {
			select {
			case <-stop:
				return
			default:
			}
			os.ReadFile(filepath.Join(mp.dir, "epochs", fmt.Sprintf("%04d", e), "rank-000", "epoch.tar"))
		}
	}()
	defer func() { close(stop); <-done }()
	anomalies := func() []string {
		var st struct {
			Anomalies []struct {
				Kind, Subject string
			} `json:"anomalies"`
		}
		if err := json.Unmarshal(mustRead(t, filepath.Join(mp.dir, ".shardfs", "stats.json")), &st); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, a := range st.Anomalies {
			out = append(out, a.Kind+" "+a.Subject)
		}
		return out
	}
	for range 8 {
		if a := anomalies(); len(a) != 0 {
			t.Fatalf("healthy stores raised %v", a)
		}
		time.Sleep(time.Second)
	}
	toxitest.Latency(t, pc.proxies[1], 150, 0)
	start := time.Now()
	want := "slow_store " + pc.urls[1]
	for !slices.Contains(anomalies(), want) {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("30 s after store 1 slowed by 150 ms, anomalies are %v; want %q", anomalies(), want)
		}
		time.Sleep(500 * time.Millisecond)
	}
	fired := time.Since(start)
	if a := anomalies(); len(a) != 1 {
		t.Fatalf("anomalies %v: only store 1 is slow", a)
	}
	if !regexp.MustCompile(`(?m)^shardfs_anomaly\{kind="slow_store",subject="` + regexp.QuoteMeta(pc.urls[1]) + `"\} 1$`).MatchString(scrape(t, mp)) {
		t.Fatal("no shardfs_anomaly gauge at 1 for the slow store")
	}
	if r := run(t, time.Minute, nil, "stats", "--count=1", "--interval=100ms", mp.dir); r.code != 0 || !strings.Contains(r.stdout, "anomaly slow_store since") || !strings.Contains(r.stdout, pc.urls[1]) {
		t.Fatalf("shardfs stats does not name the slow store: %v", r)
	}
	if err := pc.proxies[1].RemoveToxic("latency"); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	for len(anomalies()) != 0 {
		if time.Since(start) > 45*time.Second {
			t.Fatalf("45 s after store 1 healed, anomalies are %v", anomalies())
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("slow store named %v after it slowed, cleared %v after it healed", fired.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
}
