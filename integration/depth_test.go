package integration

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/synth"
)

// holdingProxy is a fault proxy in front of stores: it holds every request
// hold before passing it on, and counts the requests in flight through it
// (arrived, not yet answered), as a slow store with endless capacity does.
type holdingProxy struct {
	hold             time.Duration
	inFlight, peak   atomic.Int64
	mu               sync.Mutex
	samples          []int64 // inFlight, every 10 ms while sampling
	stopSampling     chan struct{}
	samplingFinished sync.WaitGroup
}

// front starts a listener that proxies to the host of storeURL and returns
// storeURL through it.
func (h *holdingProxy) front(t *testing.T, storeURL string) string {
	t.Helper()
	u, err := url.Parse(storeURL)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: u.Host})
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 1024}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := h.inFlight.Add(1)
		defer h.inFlight.Add(-1)
		for p := h.peak.Load(); n > p && !h.peak.CompareAndSwap(p, n); p = h.peak.Load() {
		}
		time.Sleep(h.hold)
		rp.ServeHTTP(w, r)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	u.Host = l.Addr().String()
	return u.String()
}

func (h *holdingProxy) sample() {
	h.stopSampling = make(chan struct{})
	h.samplingFinished.Add(1)
	go func() {
		defer h.samplingFinished.Done()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-h.stopSampling:
				return
			case <-t.C:
				h.mu.Lock()
				h.samples = append(h.samples, h.inFlight.Load())
				h.mu.Unlock()
			}
		}
	}()
}

func (h *holdingProxy) stop() []int64 {
	close(h.stopSampling)
	h.samplingFinished.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.samples)
}

// Issue 57, the depth test: against stores that hold every request 200 ms,
// readers that take samples as fast as they come drive the prefetch depth,
// by Little's law, to at least 300 requests in flight — a fixed 64 GETs
// give them 64 ÷ 0.2 s = 320 samples/s, where they ask for thousands —
// and never past --store-concurrency × the stores; the daemon's RSS stays
// within the cache, the in-flight bound and 128 MiB, with both cores busy.
func TestDepthFollowsDemand(t *testing.T) {
	const (
		samples, size = 16_000, 8 << 10
		stores, slots = 6, 64
		cacheSize     = 64 << 20
		inFlightBound = cacheSize / 4 // mount.newReader: min(64 MiB, cache/4)
	)
	c := sharedCluster(t, stores)
	src := writeSource(t, synth.Imbalanced(samples, 10, 0.7, size, size, 57))
	if r := run(t, 3*time.Minute, nil, "ingest", "--stores="+strings.Join(c.urls, ","), "--data=4", "--parity=2", "--shard-size=4MiB", src, "deep"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	h := &holdingProxy{hold: 200 * time.Millisecond}
	var slow []string
	for _, u := range c.urls {
		slow = append(slow, h.front(t, u))
	}
	m := mountShardfsEnv(t, nil, "--stores="+strings.Join(slow, ","), fmt.Sprintf("--store-concurrency=%d", slots),
		fmt.Sprintf("--cache-size=%d", cacheSize), "--batch-size=256", "--read-timeout=2m", "--window=0", "deep") // the global order's depth: a GET a sample
	stopBusy := busyProcesses(t, 2)
	defer stopBusy()

	rank := filepath.Join(m.dir, "epochs", "0000", "rank-000")
	batches := samples / 256
	h.peak.Store(0)
	h.sample()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := next.Add(1) - 1; b < int64(batches); b = next.Add(1) - 1 {
				if _, err := os.ReadFile(filepath.Join(rank, fmt.Sprintf("batch-%06d.tar", b))); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	inFlight := h.stop()
	close(errs)
	for err := range errs {
		t.Fatalf("read: %v", err)
	}
	rss := vmKB(m.cmd.Process.Pid, "VmHWM") << 10
	stopBusy()

	var st struct {
		Depth struct {
			Slots, InFlight, Ceiling int64
			LatencySeconds           float64 `json:"get_latency_seconds"`
			DemandGETs               float64 `json:"demand_gets_per_second"`
		} `json:"prefetch_depth"`
		GETs map[string]int64 `json:"gets_by_kind"`
	}
	if err := json.Unmarshal(mustRead(t, filepath.Join(m.dir, ".shardfs", "stats.json")), &st); err != nil {
		t.Fatal(err)
	}
	sorted := slices.Clone(inFlight)
	slices.Sort(sorted)
	t.Logf("%d samples in %v (%.0f samples/s); requests in flight at the stores: peak %d, median %d, 90th percentile %d; depth %d of ceiling %d at %.3f s a GET and %.0f GETs/s demanded; GETs %v; peak RSS %d MiB",
		batches*256, elapsed.Round(time.Millisecond), float64(batches*256)/elapsed.Seconds(), h.peak.Load(), sorted[len(sorted)/2], sorted[len(sorted)*9/10],
		st.Depth.Slots, st.Depth.Ceiling, st.Depth.LatencySeconds, st.Depth.DemandGETs, st.GETs, rss>>20)
	if p := h.peak.Load(); p < 300 {
		t.Errorf("readers taking samples as fast as they came drove %d requests into flight at most; want at least 300 (200 ms a request)", p)
	}
	if p := h.peak.Load(); p > stores*slots {
		t.Errorf("%d requests in flight at once; --store-concurrency %d × %d stores allows %d", p, slots, stores, stores*slots)
	}
	if st.Depth.Ceiling != stores*slots-32 {
		t.Errorf("stats.json prefetch_depth.ceiling %d; want the stores' slots less the demand reads', %d", st.Depth.Ceiling, stores*slots-32)
	}
	if bound := int64(cacheSize + inFlightBound + 128<<20); rss > bound {
		t.Errorf("peak RSS %d MiB over --cache-size + the in-flight bound + 128 MiB = %d MiB", rss>>20, bound>>20)
	}
}
