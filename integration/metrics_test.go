package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
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

// metricsURL is the /metrics URL the mount logs once it serves it.
func metricsURL(t *testing.T, mp *mountProc) string {
	t.Helper()
	re := regexp.MustCompile(`url=(http://127\.0\.0\.1:\d+/metrics)`)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if m := re.FindStringSubmatch(string(mustRead(t, mp.log))); m != nil {
			return m[1]
		}
	}
	t.Fatalf("no metrics URL in the log after 10 s:\n%s", mustRead(t, mp.log))
	return ""
}

// scrape returns the /metrics text of the mount.
func scrape(t *testing.T, mp *mountProc) string {
	t.Helper()
	resp, err := http.Get(metricsURL(t, mp))
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
	pc, stores := proxiedDataset(t, synth.Imbalanced(240, 4, 0.6, 4_000, 40_000, 29), "512KiB")
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
	// The 120 ms the proxy adds to store 1 adds to its time to first byte:
	// it must stand out by most of it. (It was 3x the others' mean, which
	// failed on a loaded machine where the others took 57 ms and store 1
	// 158 ms: load adds to every store alike, the proxy's delay to one.)
	if mean[1] < 0.1 || mean[1]-max(mean[0], mean[2]) < 0.08 {
		t.Fatalf("mean time to first byte per store %v: the store slowed by 120 ms must stand out by 80 ms or more", mean)
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
	var hot int64
	for _, h := range st.HotShards {
		hot += h.Bytes
	}
	if hot <= 0 || hot > total {
		t.Fatalf("the hottest shards hold %d bytes of the %d the stores served", hot, total)
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

// readingMount mounts a 500-sample dataset on three MinIO stores behind
// toxiproxy, with a cache smaller than the dataset so that every epoch
// reads from the stores, and Prometheus metrics on.
func readingMount(t *testing.T, seed uint64) (*proxiedCluster, *mountProc) {
	t.Helper()
	pc, stores := proxiedDataset(t, synth.Imbalanced(500, 4, 0.6, 20_000, 80_000, seed), "2MiB")
	return pc, mountShardfsEnv(t, nil, stores, "--batch-size=16", "--cache-size=16MiB", "--metrics-addr=127.0.0.1:0", "ds")
}

// readEpochs reads rank 0's epochs one after another until the returned
// stop is called.
func readEpochs(mp *mountProc) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for e := 0; ; e++ {
			select {
			case <-quit:
				return
			default:
			}
			os.ReadFile(filepath.Join(mp.dir, "epochs", fmt.Sprintf("%04d", e), "rank-000", "epoch.tar"))
		}
	}()
	return func() { close(quit); <-done }
}

// Issue 29 item 3: the slow-store anomaly on real traffic. A reader reads
// epoch after epoch (a cache smaller than the dataset keeps the GETs
// coming) from three MinIO stores behind toxiproxy. Healthy: no anomaly
// about a store. (The reader reads flat out, faster than the stores
// deliver, which lead_at_zero may rightly say about rank 0: that is not
// this test's subject.) Store 1 slowed by 150 ms: within 30 s stats.json
// names it as a slow store, and so do the gauge and shardfs stats.
// Healed: the anomaly clears.
func TestSlowStoreAnomalyLive(t *testing.T) {
	pc, mp := readingMount(t, 31)
	defer readEpochs(mp)()
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
			if a.Kind != "lead_at_zero" {
				out = append(out, a.Kind+" "+a.Subject)
			}
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

// freePort returns a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// promQuery runs an instant query on a Prometheus server and returns its
// result's series.
func promQuery(t *testing.T, base, q string) []map[string]any {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Result []map[string]any `json:"result"`
		} `json:"data"`
		Error string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.Status != "success" {
		t.Fatalf("query %q: %v %s %s", q, err, r.Status, r.Error)
	}
	return r.Data.Result
}

// prometheus is a Debian Prometheus server that scrapes one target every
// second under the shipped alert rules.
type prometheus struct {
	base, dir string
}

// startPrometheus starts Prometheus on a free loopback port, scraping
// target (host:port) with examples/monitoring/shardfs-alerts.yml; it is
// killed in t.Cleanup.
func startPrometheus(t *testing.T, target string) *prometheus {
	t.Helper()
	bin := requireTool(t, "prometheus")
	dir := t.TempDir()
	rules, err := filepath.Abs("../examples/monitoring/shardfs-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - %s\nscrape_configs:\n  - job_name: shardfs\n    static_configs:\n      - targets: ['%s']\n", rules, target)
	os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644)
	port := freePort(t)
	srv := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port))
	logf, _ := os.Create(filepath.Join(dir, "prometheus.log"))
	srv.Stdout, srv.Stderr = logf, logf
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait(); logf.Close() })
	return &prometheus{base: fmt.Sprintf("http://127.0.0.1:%d", port), dir: dir}
}

func (p *prometheus) logText() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "prometheus.log"))
	return string(b)
}

// promAlert is one alert Prometheus holds active (pending or firing).
type promAlert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

// get decodes the JSON answer of an API path into out; it leaves out as
// it is while Prometheus is not up yet.
func (p *prometheus) get(path string, out any) {
	resp, err := http.Get(p.base + path)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	json.NewDecoder(resp.Body).Decode(out)
}

// alerts are the active alerts.
func (p *prometheus) alerts() []promAlert {
	var a struct {
		Data struct {
			Alerts []promAlert `json:"alerts"`
		} `json:"data"`
	}
	p.get("/api/v1/alerts", &a)
	return a.Data.Alerts
}

// series counts the series an instant query returns.
func (p *prometheus) series(q string) int {
	var r struct {
		Data struct {
			Result []any `json:"result"`
		} `json:"data"`
	}
	p.get("/api/v1/query?query="+url.QueryEscape(q), &r)
	return len(r.Data.Result)
}

// Issue 29 item 4: Debian's Prometheus server scrapes a real mount that
// reads through toxiproxy, with the shipped alert rules. With one store
// slowed, ShardfsSlowStore fires and names that store; every query of the
// shipped dashboard returns series (checked over Prometheus's HTTP API).
func TestPrometheusScrapesAMount(t *testing.T) {
	pc, mp := readingMount(t, 33)
	target := strings.TrimSuffix(strings.TrimPrefix(metricsURL(t, mp), "http://"), "/metrics")
	prom := startPrometheus(t, target)

	defer readEpochs(mp)()
	toxitest.Latency(t, pc.proxies[2], 150, 0)
	start := time.Now()
	var named string
	for named == "" {
		if time.Since(start) > 3*time.Minute {
			t.Fatalf("ShardfsSlowStore did not fire in 3 minutes; stats:\n%s\nprometheus log:\n%s", mustRead(t, filepath.Join(mp.dir, ".shardfs", "stats.json")), prom.logText())
		}
		time.Sleep(2 * time.Second)
		for _, al := range prom.alerts() {
			if al.Labels["alertname"] == "ShardfsSlowStore" && al.State == "firing" {
				named = al.Labels["subject"]
			}
		}
	}
	if named != pc.urls[2] {
		t.Fatalf("ShardfsSlowStore names %q, the slow store is %q", named, pc.urls[2])
	}
	t.Logf("ShardfsSlowStore fired %v after store 2 slowed, naming it", time.Since(start).Round(time.Second))
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(mustRead(t, "../examples/monitoring/shardfs-dashboard.json"), &dash); err != nil {
		t.Fatal(err)
	}
	queries := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			if len(promQuery(t, prom.base, tg.Expr)) == 0 {
				t.Errorf("dashboard panel %q: query %q returns no series", p.Title, tg.Expr)
			}
			queries++
		}
	}
	if queries < 10 {
		t.Fatalf("the dashboard has %d queries", queries)
	}
}
