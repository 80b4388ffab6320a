//go:build benchharness

package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/synth"
)

// coldCache is issue 57's 2-core scenario: a cold epoch read by 16 threads
// (rank 0's batch tars, batches of 256) from 12,000 samples of 48 KiB (590
// MB), RS(4,2) on one MinIO behind toxiproxy, a fresh mount per case.
//
//   - cache size: a memory cache a quarter of the dataset against one that
//     holds it all, in global order and in --window 4, at 20 ms;
//   - latency: 0, 20, 50 and 100 ms (± 5 ms but at 0), each order, with
//     the cache that holds the dataset.
//
// Each case also reports the stores' GETs per sample and the prefetch
// depth the mount reached (stats.json), and the CPU time of MinIO,
// toxiproxy and the mount per sample: on 2 cores they share the cores, and
// the stores' CPU per GET times the GETs a sample needs bounds the rate
// whatever the mount does (the floor printed under the first table).
func coldCache(t *testing.T, r *report, work string) {
	const samples, batch, size = 12_000, 256, 48 << 10
	src := filepath.Join(work, "coldcache-src")
	total, err := synth.Write(src, synth.Imbalanced(samples, 10, 0.75, size, size, 57))
	if err != nil {
		t.Fatal(err)
	}
	proxy, stores, pids := proxiedCluster(t, "coldcache")
	run(t, binary, "ingest", stores, "--data=4", "--parity=2", src, "cold")
	all, quarter := fmt.Sprint(4*total), fmt.Sprint(total/4)
	nb := samples / batch
	latency := -1
	setLatency := func(ms int) {
		if ms == latency {
			return
		}
		proxy.RemoveToxic("latency")
		if ms > 0 {
			if _, err := proxy.AddToxic("latency", "latency", "downstream", 1, map[string]any{"latency": ms, "jitter": 5}); err != nil {
				t.Fatal(err)
			}
		}
		latency = ms
	}
	type outcome struct {
		rate, getsPerSample, depth float64
		amplification              float64    // bytes fetched ÷ bytes served (stats.json)
		cpu                        [3]float64 // CPU seconds a sample: MinIO, toxiproxy, the mount
		faults                     float64    // the mount's minor page faults a sample
	}
	n := 0
	epoch := func(order, cache string, ms int) outcome {
		setLatency(ms)
		n++
		mnt := filepath.Join(work, fmt.Sprintf("coldcache-%d", n))
		args := []string{"mount", stores, "--rank=0", fmt.Sprintf("--batch-size=%d", batch), "--cache-size=" + cache}
		if order == "window" {
			args = append(args, "--window=4")
		} else {
			args = append(args, "--window=0") // the global order, not the automatic window
		}
		d := startMount(t, mnt, exists(filepath.Join(mnt, ".shardfs/info.json")), nil, binary, append(args, "cold", mnt)...)
		defer d.stop()
		rd := filepath.Join(mnt, "epochs/0000/rank-000")
		procs := []int{pids.minio, pids.toxiproxy, d.cmd.Process.Pid}
		var cpu0 [3]float64
		for i, pid := range procs {
			cpu0[i] = procCPU(t, pid)
		}
		faults0 := procMinorFaults(t, d.cmd.Process.Pid)
		start := time.Now()
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for b := w; b < nb; b += 16 {
					if _, err := os.ReadFile(filepath.Join(rd, fmt.Sprintf("batch-%06d.tar", b))); err != nil {
						t.Errorf("read: %v", err)
						return
					}
				}
			}()
		}
		wg.Wait()
		rate := float64(nb*batch) / time.Since(start).Seconds()
		var cpu [3]float64
		for i, pid := range procs {
			cpu[i] = (procCPU(t, pid) - cpu0[i]) / float64(nb*batch)
		}
		faults := (procMinorFaults(t, d.cmd.Process.Pid) - faults0) / float64(nb*batch)
		var st struct {
			Amplification float64          `json:"read_amplification"`
			GETs          map[string]int64 `json:"gets_by_kind"`
			Depth         struct {
				Slots float64 `json:"slots"`
			} `json:"prefetch_depth"`
		}
		if b, err := os.ReadFile(filepath.Join(mnt, ".shardfs/stats.json")); err == nil {
			json.Unmarshal(b, &st)
		}
		var gets int64
		for _, g := range st.GETs {
			gets += g
		}
		return outcome{rate, float64(gets) / float64(nb*batch), st.Depth.Slots, st.Amplification, cpu, faults}
	}
	measure := func(order, cache string, ms int) (rate stat, last outcome) {
		rate = repeat(func() float64 { last = epoch(order, cache, ms); return last.rate })
		return rate, last
	}
	cpuMS := func(o outcome) string {
		return fmt.Sprintf("%.2f, %.2f, %.2f", 1e3*o.cpu[0], 1e3*o.cpu[1], 1e3*o.cpu[2])
	}

	r.printf("\n## A cold epoch when the dataset is bigger than the cache, and as latency grows (issue 57)\n\n")
	r.printf("%d samples of 48 KiB (%.0f MB), RS(4,2) on one MinIO behind toxiproxy; 16 threads read rank 0's batch tars (batches of %d), a fresh mount per case, one epoch read first and not counted, the two cache sizes alternating repetition by repetition. GETs/sample, bytes fetched ÷ bytes served and the prefetch depth are the last repetition's (stats.json).\n\n", samples, float64(total)/1e6, batch)
	r.printf("| order, 20 ms | cache holds it all (samples/s) | cache a quarter of it | quarter ÷ all | GETs/sample all, quarter | fetched ÷ served all, quarter | depth all, quarter | CPU ms/sample all: MinIO, toxiproxy, mount | the same, quarter | the mount's minor page faults a sample, all, quarter |\n|---|---|---|---|---|---|---|---|---|---|\n")
	var floor []string
	// The first epoch of a run read at 0.4-0.7x the median of its case
	// (2026-12-03, in every run: the global order's whole cache at
	// 1,795-2,242 samples/s against medians of 3,088-3,479), and this
	// machine's speed drifted by as much within one run. So one epoch is
	// read first and not counted, and the two cache sizes alternate,
	// repetition by repetition: a drift then weighs on both sides of the
	// ratio, not on whichever ran later.
	epoch("global", all, 20)
	for _, order := range []string{"global", "window"} {
		var as, qs []float64
		var oa, oq outcome
		for range reps {
			oa = epoch(order, all, 20)
			oq = epoch(order, quarter, 20)
			as, qs = append(as, oa.rate), append(qs, oq.rate)
		}
		a, q := summarize(as), summarize(qs)
		r.printf("| %s | %s | %s | **%.2f×** | %.2f, %.2f | %.2f, %.2f | %.0f, %.0f | %s | %s | %.1f, %.1f |\n", order, a, q, q.med/a.med, oa.getsPerSample, oq.getsPerSample, oa.amplification, oq.amplification, oa.depth, oq.depth, cpuMS(oa), cpuMS(oq), oa.faults, oq.faults)
		// The stores' and the proxy's CPU per GET in the quarter's case,
		// and what it allows on this machine's cores at the quarter's
		// GETs per sample, the mount's own CPU counted as nothing.
		perGET := (oq.cpu[0] + oq.cpu[1]) / oq.getsPerSample
		ceiling := float64(runtime.NumCPU()) / (oq.getsPerSample * perGET)
		floor = append(floor, fmt.Sprintf("%s: %.2f ms a GET, so at most %.0f samples/s (%.2f× the cache holding it all)", order, 1e3*perGET, ceiling, ceiling/a.med))
	}
	r.printf("\nMinIO's and toxiproxy's CPU per GET with the quarter cache, and the rate their CPU alone allows on %d cores at that case's GETs per sample, if the mount cost nothing: %s.\n", runtime.NumCPU(), strings.Join(floor, "; "))
	r.printf("\n| order, cache holds it all | 0 ms | 20 ms | 50 ms | 100 ms | 50 ÷ 0 | 100 ÷ 0 |\n|---|---|---|---|---|---|---|\n")
	for _, order := range []string{"global", "window"} {
		var rates []stat
		for _, lat := range []int{0, 20, 50, 100} {
			s, _ := measure(order, all, lat)
			rates = append(rates, s)
		}
		r.printf("| %s | %s | %s | %s | %s | **%.2f×** | **%.2f×** |\n", order, rates[0], rates[1], rates[2], rates[3], rates[2].med/rates[0].med, rates[3].med/rates[0].med)
	}
	setLatency(0)
}
