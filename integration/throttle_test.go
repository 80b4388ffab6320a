package integration

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// throttler is a fault proxy in front of one MinIO server: it answers a
// share of the requests itself, as a throttling S3 does (503 SlowDown, or
// 500 InternalError), and forwards the rest untouched (the Host header
// too, so the client's signature holds).
type throttler struct {
	rate    atomic.Int64 // per million requests answered with an error
	refused atomic.Int64
	total   atomic.Int64
	mu      sync.Mutex
	rng     *rand.Rand
	addr    string
}

func startThrottler(t *testing.T, upstream string, seed uint64) *throttler {
	t.Helper()
	th := &throttler{rng: rand.New(rand.NewPCG(seed, 40))}
	target, _ := url.Parse("http://" + upstream)
	proxy := httputil.NewSingleHostReverseProxy(target)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	th.addr = l.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		th.total.Add(1)
		th.mu.Lock()
		x, pick := th.rng.Int64N(1_000_000), th.rng.IntN(2)
		th.mu.Unlock()
		if x < th.rate.Load() {
			th.refused.Add(1)
			code, status, msg := "SlowDown", http.StatusServiceUnavailable, "Please reduce your request rate."
			if pick == 1 {
				code, status, msg = "InternalError", http.StatusInternalServerError, "We encountered an internal error, please try again."
			}
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(status)
			if r.Method != http.MethodHead {
				fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>%s</Message><Resource>%s</Resource><RequestId>throttler</RequestId></Error>`, code, msg, r.URL.Path)
			}
			return
		}
		proxy.ServeHTTP(w, r)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return th
}

// Issue 40 item 6: S3's 503 SlowDown and 500 were never retried: with 30%
// SlowDown on every store the mount failed its access check, and reads
// returned EIO. Now each store's requests are retried with a jittered
// backoff within the read deadline: at 20% and at 50% of requests refused
// on every store (half SlowDown, half InternalError), the mount comes up
// and every epoch reads byte for byte, with no EIO; the refusals are
// counted by store in stats.json.
func TestThrottledStoresReadByteForByte(t *testing.T) {
	requireTool(t, "fusermount3")
	c := startCluster(t, 6)
	src := ingestSynthetic(t, c.urls, 400, "train", 4, 2)
	var ths []*throttler
	var urls []string
	for i, s := range c.servers {
		th := startThrottler(t, s.Addr, uint64(i))
		ths = append(ths, th)
		urls = append(urls, "http://"+th.addr+"/shardfs/ds")
	}
	for _, pct := range []int{20, 50} {
		for _, th := range ths {
			th.rate.Store(int64(pct) * 10_000)
			th.refused.Store(0)
			th.total.Store(0)
		}
		mp := mountShardfsEnv(t, nil, "--stores="+strings.Join(urls, ","), "--rank=0", "--world-size=1", "--batch-size=32",
			"--epochs=2", "--cache-size=16MiB", "--read-timeout=20s", "train")
		samples := 0
		for e := range 2 {
			res, err := readEpochVerified(t, mp.dir, src, e, nil)
			if err != nil {
				t.Fatalf("%d%% refused on every store: epoch %d: %v", pct, e, err)
			}
			samples += res.samples
		}
		var refused, total int64
		for _, th := range ths {
			refused += th.refused.Load()
			total += th.total.Load()
		}
		var counted int64
		for _, s := range readThrottleStats(t, mp.dir) {
			counted += s
		}
		if refused == 0 || counted == 0 || counted > refused {
			t.Fatalf("%d%%: the proxies refused %d requests, the mount counted %d", pct, refused, counted)
		}
		t.Logf("%d%% refused on every store: 2 epochs, %d samples, 0 wrong, 0 EIO; %d of %d requests refused, %d counted by the mount", pct, samples, refused, total, counted)
		mp.cmd.Process.Signal(syscall.SIGTERM)
		<-mp.exited
	}
}

// readThrottleStats is each store's count of requests refused for load,
// from the mount's stats.json.
func readThrottleStats(t *testing.T, mnt string) []int64 {
	t.Helper()
	var s struct {
		Stores []struct {
			Throttled int64 `json:"throttled"`
		} `json:"stores"`
	}
	if err := json.Unmarshal(mustRead(t, filepath.Join(mnt, ".shardfs", "stats.json")), &s); err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, st := range s.Stores {
		out = append(out, st.Throttled)
	}
	return out
}
