//go:build benchharness

package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/miniotest"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/internal/toxitest"
)

// s3Requests is what a MinIO server has answered so far, by S3 API
// (getobject, headobject, listobjectsv2, ...), from its own Prometheus
// counters: every reader is counted the same way, shardfs and peers alike.
func s3Requests(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/minio/v2/metrics/cluster")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, `minio_s3_requests_total{api="`)
		if !ok {
			continue
		}
		api, after, _ := strings.Cut(rest, `"`)
		f := strings.Fields(after)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			out[api] += v
		}
	}
	return out
}

// settledRequests reads the counters once they hold every request made
// before the call: MinIO refreshes them at most every 10 s, so it reads
// twice, 11 s apart and after 11 s, until two reads agree (at most 60 s).
func settledRequests(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	time.Sleep(11 * time.Second)
	prev := s3Requests(t, addr)
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		time.Sleep(11 * time.Second)
		now := s3Requests(t, addr)
		if fmt.Sprint(now) == fmt.Sprint(prev) {
			return now
		}
		prev = now
	}
	return prev
}

// requestDelta is what was asked of the store between two readings: GETs,
// and every request (HEAD and LIST bill too).
func requestDelta(before, after map[string]float64) (gets, all float64) {
	for api, v := range after {
		d := v - before[api]
		all += d
		if api == "getobject" {
			gets += d
		}
	}
	return gets, all
}

// requestsPerEpoch: what reading an epoch costs in requests, for shardfs in
// both orders, the FUSE peers, and a MosaicML-style reader that downloads
// whole 64 MiB shard files. One MinIO behind one toxiproxy at 20 ± 5 ms, as
// in the latency regime, counting its own requests by API. Issue 46 item 3.
func requestsPerEpoch(t *testing.T, r *report, work string) {
	const (
		samples     = 4_000
		batch       = 64
		peerBatches = 16
		shardBytes  = 64 << 20
		per1kGETs   = 0.0004 // S3 Standard, USD
	)
	os.Setenv("MINIO_PROMETHEUS_AUTH_TYPE", "public") // the MinIO started next serves its metrics unauthenticated
	src := filepath.Join(work, "requests-src")
	total, err := synth.Write(src, synth.Imbalanced(samples, 10, 0.75, 50_000, 150_000, 13))
	if err != nil {
		t.Fatal(err)
	}
	avgSample := float64(total) / samples
	srv := miniotest.Start(t, "store0", "store1", "store2", "store3", "store4", "store5", "peer")
	os.Unsetenv("MINIO_PROMETHEUS_AUTH_TYPE")
	proxy := toxitest.Start(t).Proxy("minio-requests", srv.Addr)
	var urls []string
	for i := range 6 {
		urls = append(urls, fmt.Sprintf("http://%s/store%d/ds", proxy.Listen, i))
	}
	stores := "--stores=" + strings.Join(urls, ",")
	run(t, binary, "ingest", stores, "--data=4", "--parity=2", src, "req")
	for _, kv := range [][2]string{{"RCLONE_CONFIG_PEER_TYPE", "s3"}, {"RCLONE_CONFIG_PEER_PROVIDER", "Minio"}, {"RCLONE_CONFIG_PEER_ENDPOINT", "http://" + proxy.Listen},
		{"RCLONE_CONFIG_PEER_ACCESS_KEY_ID", miniotest.AccessKey}, {"RCLONE_CONFIG_PEER_SECRET_ACCESS_KEY", miniotest.SecretKey}} {
		os.Setenv(kv[0], kv[1])
	}
	run(t, "rclone", "copy", "--transfers=8", src, "peer:peer/req")
	// MosaicML-style shards: the samples packed into 64 MiB objects.
	mds, err := backend.Open(fmt.Sprintf("http://%s/peer/mds", proxy.Listen),
		backend.OpenOptions{Credentials: &backend.Credentials{AccessKeyID: miniotest.AccessKey, SecretAccessKey: miniotest.SecretKey}})
	if err != nil {
		t.Fatal(err)
	}
	var shardSizes []int
	var buf []byte
	flush := func() {
		if len(buf) == 0 {
			return
		}
		if err := mds.Put(context.Background(), fmt.Sprintf("shard.%05d.mds", len(shardSizes)), buf); err != nil {
			t.Fatal(err)
		}
		shardSizes = append(shardSizes, len(buf))
		buf = nil
	}
	filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := os.ReadFile(p)
			if len(buf)+len(b) > shardBytes {
				flush()
			}
			buf = append(buf, b...)
		}
		return nil
	})
	flush()

	toxitest.Heal(t, proxy)
	toxitest.Latency(t, proxy, 20, 5)
	m := filepath.Join(work, "requests-order")
	d := startMount(t, m, exists(filepath.Join(m, ".shardfs/info.json")), nil, binary, "mount", stores, "--rank=0", "--batch-size=64", "req", m)
	order := batchesOf(t, filepath.Join(m, "epochs/0000/rank-000/index.csv"), "")
	d.stop()
	nb := len(order)

	type row struct {
		name, note    string
		getsPerGB     stat
		reqPerGB      stat
		kinds         map[string]int64 // shardfs's own count, last repetition
		predictedGETs int64
	}
	var rows []row
	n := 0
	// measure runs read reps times and returns GETs and all requests per GB
	// of sample bytes read, as MinIO counted them.
	last := settledRequests(t, srv.Addr)
	measure := func(read func(i int) float64) (stat, stat) {
		var gets, all []float64
		for i := 0; i < reps; i++ {
			before := last
			moved := read(i)
			last = settledRequests(t, srv.Addr)
			g, a := requestDelta(before, last)
			gets = append(gets, g/(moved/1e9))
			all = append(all, a/(moved/1e9))
		}
		return summarize(gets), summarize(all)
	}
	var plan struct {
		Job []struct {
			GETs        int64 `json:"gets"`
			CompareGETs int64 `json:"compare_gets"`
		} `json:"job_epochs"`
	}
	out := run(t, binary, "plan", stores, "--json", "--world-size=1", "--batch-size=64", "--compare-window=4", "req")
	if err := json.Unmarshal([]byte(out), &plan); err != nil || len(plan.Job) == 0 {
		t.Fatalf("plan --json: %v\n%s", err, out)
	}
	for _, mode := range []struct {
		name, window string
		predicted    int64
	}{{"shardfs, global order", "0", plan.Job[0].GETs}, {"shardfs, --window 4", "4", plan.Job[0].CompareGETs}} {
		rw := row{name: mode.name, note: "rank 0's whole epoch 0 (W=1)", predictedGETs: mode.predicted}
		rw.getsPerGB, rw.reqPerGB = measure(func(i int) float64 {
			n++
			mnt := filepath.Join(work, fmt.Sprintf("requests-sfs-%d", n))
			d := startMount(t, mnt, exists(filepath.Join(mnt, ".shardfs/info.json")), nil, binary, "mount", stores, "--rank=0", "--batch-size=64", "--window="+mode.window, "req", mnt)
			defer d.stop()
			readBatches(tarBatches(filepath.Join(mnt, "epochs/0000/rank-000"), nb))
			var st struct {
				Kinds map[string]int64 `json:"gets_by_kind"`
			}
			json.Unmarshal(mustReadFile(t, filepath.Join(mnt, ".shardfs/stats.json")), &st)
			rw.kinds = st.Kinds
			return float64(nb*batch) * avgSample
		})
		rows = append(rows, rw)
	}
	peerFiles := func(root string) [][]string {
		out := make([][]string, peerBatches)
		for i, b := range order[:peerBatches] {
			for _, k := range b {
				out[i] = append(out[i], filepath.Join(root, k))
			}
		}
		return out
	}
	for _, p := range []struct {
		name string
		cmd  func(m string) (string, []string)
	}{
		{"rclone mount, cache off", func(m string) (string, []string) {
			return "rclone", []string{"mount", "peer:peer/req", m, "--read-only", "--vfs-cache-mode=off"}
		}},
		{"s3fs", func(m string) (string, []string) {
			pw := m + ".passwd"
			os.WriteFile(pw, []byte(miniotest.AccessKey+":"+miniotest.SecretKey), 0o600)
			return "s3fs", []string{"peer:/req", m, "-f", "-o", "url=http://" + proxy.Listen, "-o", "use_path_request_style", "-o", "passwd_file=" + pw, "-o", "ro"}
		}},
	} {
		rw := row{name: p.name, note: fmt.Sprintf("the first %d batches of the same order, as files", peerBatches)}
		rw.getsPerGB, rw.reqPerGB = measure(func(i int) float64 {
			n++
			mnt := filepath.Join(work, fmt.Sprintf("requests-peer-%d", n))
			name, args := p.cmd(mnt)
			d := startMount(t, mnt, exists(filepath.Join(mnt, "class00")), nil, name, args...)
			defer d.stop()
			readBatches(peerFiles(mnt))
			return float64(peerBatches*batch) * avgSample
		})
		rows = append(rows, rw)
	}
	rw := row{name: "MosaicML-style shard download", note: fmt.Sprintf("every 64 MiB shard file (%d) downloaded whole, as a node reading the whole epoch does", len(shardSizes))}
	rw.getsPerGB, rw.reqPerGB = measure(func(i int) float64 {
		var moved float64
		for s, size := range shardSizes {
			b := make([]byte, size)
			if err := mds.ReadAt(context.Background(), fmt.Sprintf("shard.%05d.mds", s), b, 0); err != nil {
				t.Fatal(err)
			}
			moved += float64(size)
		}
		return moved
	})
	rows = append(rows, rw)
	toxitest.Heal(t, proxy)

	r.printf("## Requests per epoch: GETs per GB read, and dollars\n\n")
	r.printf("Object stores bill per request: S3 Standard charges about $%.4f per 1,000 GETs. The same %d samples of 50–150 kB (%.0f MB) on one MinIO behind one toxiproxy at 20 ± 5 ms; MinIO's own request counters (`minio_s3_requests_total`, by API) count every reader alike. Per GB of sample bytes read; \"all requests\" adds HEAD and LIST, which bill too. Dollars per TB read are GETs only, at $%.4f per 1,000.\n\n",
		per1kGETs, samples, float64(total)/1e6, per1kGETs)
	r.printf("| reader | what it read | GETs per GB | all requests per GB | $ per TB read | shardfs's own count, by kind | `plan`'s prediction, GETs per GB |\n|---|---|---|---|---|---|---|\n")
	for _, rw := range rows {
		kinds, predicted := "-", "-"
		if rw.kinds != nil {
			kinds = fmt.Sprintf("%d demand, %d prefetch, %d hedge, %d degraded", rw.kinds["demand"], rw.kinds["prefetch"], rw.kinds["hedge"], rw.kinds["degraded"])
			predicted = fmt.Sprintf("%.0f", float64(rw.predictedGETs)/(float64(nb*batch)*avgSample/1e9))
		}
		r.printf("| %s | %s | %s | %s | %.2f | %s | %s |\n", rw.name, rw.note, rw.getsPerGB, rw.reqPerGB, rw.getsPerGB.med*1000*per1kGETs/1000, kinds, predicted)
	}
	r.printf("\n")
}
