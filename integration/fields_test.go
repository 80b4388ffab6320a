package integration

import (
	"bufio"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Issue 60: a WebDataset set stratified the way people describe their
// data, --label label --strata source --bins aesthetic=4 --time-bucket
// timestamp=30d, makes hundreds of strata, most of one or two samples. The
// ingest's warning says what each order gives; plan predicts each field's
// per-batch deviation; and the mount serves exactly that: every batch of
// rank 0 of 8 within one sample of each label's and each source's share,
// the mean deviation per field as plan printed it (to its 2 decimals).
func TestManyFieldsPlanMatchesMount(t *testing.T) {
	requireTool(t, "fusermount3")
	_, urls := localStores(t, 3)
	stores := "--stores=" + strings.Join(urls, ",")
	dir := filepath.Join(t.TempDir(), "wds")
	os.MkdirAll(dir, 0o755)
	rng := rand.New(rand.NewPCG(60, 1))
	labels := []string{"cat", "dog", "bird", "fish", "frog", "fox", "owl", "bee"}
	sources := []string{"web", "books", "news", "code", "forum"}
	pick := func(w []float64) int {
		s := 0.0
		for _, x := range w {
			s += x
		}
		u := rng.Float64() * s
		for i, x := range w {
			if u < x {
				return i
			}
			u -= x
		}
		return len(w) - 1
	}
	const n = 2000
	for s := range 4 {
		var members [][2]string
		for k := range n / 4 {
			key := fmt.Sprintf("%d%04d", s, k)
			label := labels[pick([]float64{1, 1.0 / 2, 1.0 / 3, 1.0 / 4, 1.0 / 5, 1.0 / 6, 1.0 / 7, 1.0 / 8})]
			source := sources[pick([]float64{50, 25, 13, 8, 4})]
			stamp := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(rng.IntN(330*24)) * time.Hour).Format(time.RFC3339)
			members = append(members, [2]string{key + ".bin", strings.Repeat("x", 50+k%40)},
				[2]string{key + ".json", fmt.Sprintf(`{"label": %q, "source": %q, "aesthetic": %.3f, "timestamp": %q}`, label, source, rng.Float64()*10, stamp)})
		}
		writeTar(t, filepath.Join(dir, fmt.Sprintf("s%d.tar", s)), members...)
	}
	r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--label=label", "--strata=source", "--bins=aesthetic=4", "--time-bucket=timestamp=30d", dir, "many")
	if r.code != 0 || !strings.Contains(r.stdout+r.stderr, "hold a single sample") ||
		!strings.Contains(r.stdout+r.stderr, "the default order (version 5 and later, which reads such a dataset in the global order) still holds every batch within one sample of its share of each label and each source") {
		t.Fatalf("ingest: want a commit and the sparse strata's warning, naming what version 5 gives: %v", r)
	}
	t.Logf("ingest: %s", strings.TrimSpace(r.stdout+r.stderr))
	order := []string{"--world-size=8", "--batch-size=32"}
	r = run(t, 2*time.Minute, nil, append(append([]string{"plan", stores}, order...), "many")...)
	if r.code != 0 {
		t.Fatalf("plan: %v", r)
	}
	deviation := regexp.MustCompile(`^field (\S+), per-batch deviation .*: mean ([0-9.]+) max ([0-9.]+) samples; uniform shuffle mean ([0-9.]+) max ([0-9.]+)`)
	planned := map[string]float64{}
	for _, line := range strings.Split(r.stdout, "\n") {
		if m := deviation.FindStringSubmatch(line); m != nil {
			planned[m[1]], _ = strconv.ParseFloat(m[2], 64)
			t.Logf("plan: %s", line)
		}
	}
	fields := []string{"label", "source", "timestamp", "aesthetic"} // as ingest orders them: the label, --strata, then the derived
	for _, f := range fields {
		if _, ok := planned[f]; !ok {
			t.Fatalf("plan printed no per-batch deviation of field %s:\n%s", f, r.stdout)
		}
	}
	mnt := mountShardfs(t, append(append([]string{stores}, order...), "--rank=0", "--epochs=1", "many")...)
	f, err := os.Open(filepath.Join(mnt, "epochs", "0000", "rank-000", "index.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Each served sample's stratum, as its labels in the fields' order.
	var batches [][][]string
	sc := bufio.NewScanner(f)
	sc.Scan()
	header := strings.Split(sc.Text(), ",")
	batchCol, stratumCol := indexOf(header, "batch"), indexOf(header, "stratum")
	if batchCol < 0 || stratumCol < 0 {
		t.Fatalf("index.csv header %v: no batch or stratum column", header)
	}
	for sc.Scan() {
		row := strings.Split(sc.Text(), ",")
		b, _ := strconv.Atoi(row[batchCol])
		for len(batches) <= b {
			batches = append(batches, nil)
		}
		batches[b] = append(batches[b], strings.Split(row[stratumCol], "+"))
	}
	if len(batches) != n/32/8 {
		t.Fatalf("rank 0 served %d batches, want %d", len(batches), n/32/8)
	}
	// Targets: each value's share of the dataset (α = 1), counted from the
	// order of W = 1, B = 1, which lists every sample once.
	total := make([]map[string]int, len(fields))
	for j := range total {
		total[j] = map[string]int{}
	}
	all := run(t, time.Minute, nil, "plan", stores, "--emit=index", "--epoch=0", "--rank=0", "--world-size=1", "--batch-size=1", "many")
	if all.code != 0 {
		t.Fatalf("plan --emit index of every sample: %v", all)
	}
	lines := strings.Split(strings.TrimSpace(all.stdout), "\n")[1:]
	for _, l := range lines {
		for j, v := range strings.Split(strings.Split(l, ",")[stratumCol], "+") {
			total[j][v]++
		}
	}
	if len(lines) != n {
		t.Fatalf("the order of W=1, B=1 lists %d samples, want %d", len(lines), n)
	}
	for j, name := range fields {
		sum, count, worst := 0.0, 0, 0.0
		for b, batch := range batches {
			held := map[string]int{}
			for _, labels := range batch {
				held[labels[j]]++
			}
			for v, x := range total[j] {
				d := math.Abs(float64(held[v]) - 32*float64(x)/n)
				sum += d
				count++
				worst = max(worst, d)
				if j < 2 && d > 1 {
					t.Errorf("batch %d holds %d of %s %s, target %.2f: more than one sample off", b, held[v], name, v, 32*float64(x)/n)
				}
			}
		}
		mean := sum / float64(count)
		t.Logf("field %s: the mount's batches deviate %.4f mean, %.2f max; plan said %.2f", name, mean, worst, planned[name])
		if math.Abs(mean-planned[name]) > 0.05 {
			t.Errorf("field %s: the mount's mean per-batch deviation %.4f, plan predicted %.2f", name, mean, planned[name])
		}
	}
}

func indexOf(xs []string, x string) int {
	for i, y := range xs {
		if y == x {
			return i
		}
	}
	return -1
}
