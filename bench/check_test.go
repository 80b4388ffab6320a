//go:build benchharness

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/miniotest"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/internal/toxitest"
)

// The performance check CI runs on every change (scripts/perfcheck.sh,
// issue 56): five ratios, each shardfs against a floor or ceiling measured
// in the same run on the same machine, so that the machine's speed and
// load cancel out, compared with a committed baseline of the same ratios.
//
//	window  a cold epoch in --window 4 order (samples/s) against the bare
//	        S3 client's ceiling: 8 MiB GETs, 8 in flight (samples/s)
//	global  a cold epoch in global order (samples/s) against the bare
//	        client's small GETs of the mean sample's size, 64 in flight
//	        (GETs/s)
//	memory  the same epoch.tar read again from the memory cache, 1 MiB
//	        reads, --direct-io (MB/s), against an in-memory go-fuse file of
//	        its size (MB/s): the FUSE floor
//	ingest  the single-pass floor (every source byte read once, and the
//	        coded bytes PUT once, 1 MiB objects, 8 in flight) over the
//	        ingest's wall time; the ingest PUTs more at once, so the ratio
//	        may pass 1
//	depth   a cold epoch in global order with a cache a quarter of the
//	        dataset, at 400 ± 5 ms against 20 ± 5 ms (samples/s): the
//	        prefetch depth's floor is the same epoch at a twentieth of
//	        the latency. Halving the depth (depthFor) halved it: 0.633
//	        (0.425-0.661) against 0.317 (0.294-0.370), 3 runs each
//
// The reads go through toxiproxy at 20 ± 5 ms; the ingest and its floor
// do not. Each ratio is the median of checkReps repetitions, the two sides
// of a repetition measured back to back.

// depthLatencyMS is the slow store's latency in the depth ratio, against
// the 20 ms of the others.
var depthLatencyMS = envInt("SHARDFS_CHECK_DEPTH_MS", 400)

// checkBaselineFile is the committed baseline: the ratios of calibration
// runs on this project's 2-core CI machine, idle and busy.
const checkBaselineFile = "check-baseline.json"

type checkBaseline struct {
	Machine string `json:"machine"`
	// Runs is how many check runs made the baseline, Busy how many of them
	// ran with both cores spun by other processes.
	Runs, Busy int
	// Ratios is, for each ratio, the median and the range of the runs'
	// medians.
	Ratios map[string]checkRange `json:"ratios"`
	// Tolerance: a ratio fails the check when it is below Lo × (1 −
	// Tolerance), clearly under the lowest the calibration saw.
	Tolerance float64 `json:"tolerance"`
	// Tolerances overrides Tolerance for the ratios it names: a ratio
	// whose runs vary less than the others' may be held closer, so that
	// the regression it is there to catch fails it.
	Tolerances map[string]float64 `json:"tolerances,omitempty"`
}

type checkRange struct{ Median, Lo, Hi float64 }

var checkRatios = []string{"window", "global", "memory", "ingest", "depth"}

const checkReps = 3

// TestPerfCheck measures the five ratios and compares them with the
// baseline. SHARDFS_CHECK_OUT=FILE writes the run's medians as JSON (the
// calibration collects them); SHARDFS_CHECK_NO_BASELINE=1 only measures.
func TestPerfCheck(t *testing.T) {
	dir := t.TempDir()
	binary = filepath.Join(dir, "shardfs")
	run(t, "go", "build", "-tags", "shardfs_testhooks", "-o", binary, "../cmd/shardfs")
	start := time.Now()
	got := measureCheck(t, dir)
	t.Logf("measured in %v", time.Since(start).Round(time.Second))
	if out := os.Getenv("SHARDFS_CHECK_OUT"); out != "" {
		b, _ := json.Marshal(got)
		if err := os.WriteFile(out, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if os.Getenv("SHARDFS_CHECK_NO_BASELINE") != "" {
		return
	}
	var base checkBaseline
	b, err := os.ReadFile(checkBaselineFile)
	if err == nil {
		err = json.Unmarshal(b, &base)
	}
	if err != nil {
		t.Fatalf("baseline %s: %v (scripts/perfcheck.sh --calibrate writes it)", checkBaselineFile, err)
	}
	var table strings.Builder
	fmt.Fprintf(&table, "%-8s %8s %26s %8s  %s\n", "ratio", "this run", "baseline median (lo-hi)", "fails <", "")
	var failed []string
	for _, name := range checkRatios {
		br, ok := base.Ratios[name]
		if !ok {
			t.Fatalf("baseline %s has no ratio %q: recalibrate", checkBaselineFile, name)
		}
		tolerance := base.Tolerance
		if v, ok := base.Tolerances[name]; ok {
			tolerance = v
		}
		floor := br.Lo * (1 - tolerance)
		verdict := "ok"
		if got[name] < floor {
			verdict = "SLOWER: below the baseline's spread"
			failed = append(failed, name)
		}
		fmt.Fprintf(&table, "%-8s %8.3f %8.3f (%.3f-%.3f) %8.3f  %s\n", name, got[name], br.Median, br.Lo, br.Hi, floor, verdict)
	}
	t.Logf("performance check against %s (%d runs, %d on busy cores, %s):\n%s", checkBaselineFile, base.Runs, base.Busy, base.Machine, table.String())
	if len(failed) > 0 {
		t.Fatalf("%s fell clearly below the baseline (a ratio, measured against its floor in the same run): find the change that slowed it with scripts/bench.sh --ab REV", strings.Join(failed, ", "))
	}
}

// measureCheck returns each ratio's median over checkReps repetitions.
func measureCheck(t *testing.T, work string) map[string]float64 {
	const samples, batch = 3_000, 64
	src := filepath.Join(work, "src")
	total, err := synth.Write(src, synth.Imbalanced(samples, 10, 0.75, 50_000, 150_000, 17))
	if err != nil {
		t.Fatal(err)
	}
	avgSample := float64(total) / samples
	proxy, stores := proxiedStores(t, "check", "peer")
	ratios := map[string][]float64{}

	// ingest against its single-pass floor, without latency.
	floorStore, err := backend.Open(fmt.Sprintf("http://%s/peer/floor", proxy.Listen),
		backend.OpenOptions{Credentials: &backend.Credentials{AccessKeyID: miniotest.AccessKey, SecretAccessKey: miniotest.SecretKey}})
	if err != nil {
		t.Fatal(err)
	}
	coded := int64(float64(total) * 6 / 4)
	// SHARDFS_CHECK_ONLY=NAME,... measures only those ratios (the
	// dataset is still ingested): for trying a change against one of them.
	want := func(name string) bool {
		only := os.Getenv("SHARDFS_CHECK_ONLY")
		return only == "" || slices.Contains(strings.Split(only, ","), name)
	}
	for rep := range checkReps {
		if rep > 0 && !want("ingest") {
			break
		}
		ingest := secs(func() {
			run(t, binary, "ingest", stores, "--data=4", "--parity=2", src, fmt.Sprintf("check%d", rep))
		})
		floor := secs(func() { singlePass(t, src, floorStore, coded) })
		ratios["ingest"] = append(ratios["ingest"], floor/ingest)
	}

	toxitest.Latency(t, proxy, 20, 5)
	ceil := blobStore(t, proxy)
	n := 0
	mount := func(flags ...string) (*daemon, string) {
		n++
		mnt := filepath.Join(work, fmt.Sprintf("mnt-%d", n))
		args := append([]string{"mount", stores, "--rank=0", fmt.Sprintf("--batch-size=%d", batch)}, flags...)
		d := startMount(t, mnt, exists(filepath.Join(mnt, ".shardfs/info.json")), nil, binary, append(args, "check0", mnt)...)
		return d, filepath.Join(mnt, "epochs/0000/rank-000")
	}
	nb := samples / batch
	for range checkReps {
		if !want("window") && !want("global") && !want("memory") {
			break
		}
		_, large := getRate(t, ceil, "blob", blob, 8<<20, 8, 2*time.Second)
		d, rd := mount("--window=4")
		window := float64(nb*batch) / secs(func() { readBatches(tarBatches(rd, nb)) })
		d.stop()
		ratios["window"] = append(ratios["window"], window/(large/avgSample))

		small, _ := getRate(t, ceil, "blob", blob, int64(avgSample), 64, 2*time.Second)
		d, rd = mount("--window=0", "--direct-io")
		global := float64(nb*batch) / secs(func() { readBatches(tarBatches(rd, nb)) })
		ratios["global"] = append(ratios["global"], global/small)

		epoch := filepath.Join(rd, "epoch.tar")
		fi, err := os.Stat(epoch)
		if err != nil {
			t.Fatal(err)
		}
		// Each side reads its file 4 times, timed: one read of a few
		// hundred MB at GB/s is over too soon to measure.
		const passes = 4
		sequential(t, epoch) // every byte of the epoch into the memory cache
		fromCache := passes * float64(fi.Size()) / secs(func() {
			for range passes {
				sequential(t, epoch)
			}
		})
		d.stop()
		c := filepath.Join(work, fmt.Sprintf("ceiling-%d", n))
		cd := startMount(t, c, exists(filepath.Join(c, "data")), nil, binary, "ceiling-mount", "--size="+fmt.Sprint(fi.Size()), c)
		sequential(t, filepath.Join(c, "data"))
		fuse := passes * float64(fi.Size()) / secs(func() {
			for range passes {
				sequential(t, filepath.Join(c, "data"))
			}
		})
		cd.stop()
		ratios["memory"] = append(ratios["memory"], fromCache/fuse)
	}
	// depth: the prefetch's GETs in flight (Little's law: demand × latency)
	// against a store 20 times slower. With a cache a quarter of the
	// dataset a span joins few neighbours, so a sample costs about a GET of
	// its own and the readers need twenty times the GETs in flight at
	// 400 ms that they need at 20 ms. (At 200 ms a halved depth cost the
	// ratio a third, 0.655 against 0.451: too close to the noise.) A depth that keeps up holds the rate (CPU
	// binds both); a depth that does not falls with the latency.
	quarter := fmt.Sprintf("--cache-size=%d", total/4)
	for range checkReps {
		if !want("depth") {
			break
		}
		d, rd := mount("--window=0", "--direct-io", quarter)
		fast := float64(nb*batch) / secs(func() { readBatches(tarBatches(rd, nb)) })
		d.stop()
		toxitest.Heal(t, proxy)
		toxitest.Latency(t, proxy, depthLatencyMS, 5)
		d, rd = mount("--window=0", "--direct-io", quarter)
		slow := float64(nb*batch) / secs(func() { readBatches(tarBatches(rd, nb)) })
		d.stop()
		toxitest.Heal(t, proxy)
		toxitest.Latency(t, proxy, 20, 5)
		ratios["depth"] = append(ratios["depth"], slow/fast)
	}
	out := map[string]float64{}
	for name, xs := range ratios {
		s := slices.Clone(xs)
		sort.Float64s(s)
		out[name] = s[len(s)/2]
		t.Logf("%s: %.3f (runs %.3f)", name, out[name], xs)
	}
	return out
}

// sequential reads file start to end in 1 MiB reads.
func sequential(t *testing.T, file string) {
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		_, err := f.Read(buf)
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// singlePass is the least any ingest of src must do: read every source
// byte once, and PUT coded bytes (the data and its parity) once, in 1 MiB
// objects, 8 at a time.
func singlePass(t *testing.T, src string, st backend.Store, coded int64) {
	var read int64
	filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			read += int64(len(b))
		}
		return nil
	})
	if read == 0 {
		t.Fatalf("%s: nothing to read", src)
	}
	objects := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			obj := make([]byte, 1<<20)
			for i := range objects {
				if err := st.Put(context.Background(), fmt.Sprintf("obj%06d", i), obj); err != nil {
					t.Errorf("floor PUT: %v", err)
				}
			}
		}()
	}
	for i := range int(coded >> 20) {
		objects <- i
	}
	close(objects)
	wg.Wait()
}
