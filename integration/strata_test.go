package integration

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// timeListing writes n samples and a .jsonl listing of them with a label,
// a timestamp over 2025 (later months hold more samples), a skewed numeric
// field and a note. It returns the listing and, per key, its bytes and
// its fields.
func timeListing(t *testing.T, n int) (string, map[string][]byte, map[string]map[string]string) {
	t.Helper()
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(27, 9))
	var lines []string
	content := map[string][]byte{}
	fields := map[string]map[string]string{}
	for i := range n {
		key := fmt.Sprintf("s/%04d.bin", i)
		b := make([]byte, 200+rng.IntN(3000))
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		if err := os.MkdirAll(filepath.Join(dir, "s"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, key), b, 0o644); err != nil {
			t.Fatal(err)
		}
		content[key] = b
		// Month m with weight m+1; the length is log-normal, so its top
		// quantile range spans a long tail.
		month := int(math.Sqrt(rng.Float64()*144)) % 12
		ts := time.Date(2025, time.Month(month+1), 1+rng.IntN(28), rng.IntN(24), 0, 0, 0, time.UTC)
		length := int(math.Exp(4 + 1.5*rng.NormFloat64()))
		label := fmt.Sprintf("c%d", rng.IntN(3))
		f := map[string]string{"label": label, "time": ts.Format(time.RFC3339), "len": strconv.Itoa(length), "note": fmt.Sprintf("n%d", i%5)}
		fields[key] = f
		lines = append(lines, fmt.Sprintf(`{"path": %q, "label": %q, "time": %q, "len": %d, "note": %q}`, key, label, f["time"], length, f["note"]))
	}
	p := filepath.Join(dir, "list.jsonl")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p, content, fields
}

// TestTimeStrataOnMinIO: a .jsonl listing with a label, a timestamp and a
// skewed number is ingested into MinIO with --time-bucket and --bins and
// mounted with --recency-half-life. Every batch of every rank holds each
// stratum (label x month x length range) within floor..ceil of B·π_c, π_c ∝
// n_c·2^(-age/half-life), counted from the tar's .cls members and checked
// against index.csv; every byte is the source's; index.csv and the
// samples' extended attributes show the listing's fields.
func TestTimeStrataOnMinIO(t *testing.T) {
	requireTool(t, "fusermount3")
	c := sharedCluster(t, 3)
	listing, content, fields := timeListing(t, 600)
	for _, format := range []string{"1", "2"} {
		t.Run("format"+format, func(t *testing.T) { timeStrata(t, c, format, listing, content, fields) })
	}
}

func timeStrata(t *testing.T, c *cluster, format, listing string, content map[string][]byte, fields map[string]map[string]string) {
	stores := "--stores=" + strings.Join(c.urls, ",")
	name := "logs" + format
	r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--shard-size=256KiB", "--format="+format, "--time-bucket=time=30d", "--bins=len=4", listing, name)
	if r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	const B, W, halfLife = 24, 2, 60 * 86400
	mnt := mountShardfs(t, stores, fmt.Sprintf("--batch-size=%d", B), fmt.Sprintf("--world-size=%d", W), "--rank=all", "--epochs=2", "--recency-half-life=60d", name)

	var info struct {
		Order struct {
			HalfLife string `json:"recency_half_life"`
		} `json:"order"`
		Dataset struct {
			NumStrata int      `json:"num_strata"`
			Fields    []string `json:"fields"`
			Derived   []struct {
				Field  string    `json:"field"`
				Bucket int64     `json:"bucket_seconds"`
				Edges  []float64 `json:"bin_edges"`
			} `json:"derived"`
			LabelFields []string `json:"label_fields"`
			Classes     []string `json:"classes"`
			Strata      []struct {
				Name   string   `json:"name"`
				Labels []string `json:"labels"`
				Count  int      `json:"count"`
			} `json:"strata"`
		} `json:"dataset"`
	}
	if err := json.Unmarshal(mustRead(t, filepath.Join(mnt, ".shardfs", "info.json")), &info); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(info.Dataset.LabelFields, ","); got != "label,time,len" {
		t.Fatalf("label fields %q, want label,time,len", got)
	}
	d := info.Dataset
	// The label is what a model learns: 3 classes, while the strata it is
	// balanced by are label x month x length range.
	if got := strings.Join(d.Classes, ","); got != "c0,c1,c2" {
		t.Fatalf("info.json classes %q, want c0,c1,c2 (the label's values, not the %d strata)", got, len(d.Strata))
	}
	classOf := map[string]int{}
	for i, c := range d.Classes {
		classOf[c] = i
	}
	if info.Order.HalfLife != "60d" || d.NumStrata != len(d.Strata) || strings.Join(d.Fields, ",") != "label,len,note,time" ||
		len(d.Derived) != 2 || d.Derived[0].Field != "time" || d.Derived[0].Bucket != 30*86400 || d.Derived[1].Field != "len" || len(d.Derived[1].Edges) != 5 {
		t.Fatalf("info.json: half-life %q, %d strata of %d, fields %v, derived %+v", info.Order.HalfLife, d.NumStrata, len(d.Strata), d.Fields, d.Derived)
	}
	// The targets, computed here from info.json's strata: π_c ∝ n_c·2^(-age/h).
	pi := make([]float64, len(info.Dataset.Strata))
	newest := int64(math.MinInt64)
	starts := make([]int64, len(pi))
	total := 0
	for i, st := range info.Dataset.Strata {
		ts, err := time.Parse(time.DateOnly, st.Labels[1])
		if err != nil {
			t.Fatalf("stratum %q: time label %q: %v", st.Name, st.Labels[1], err)
		}
		if ts.Unix()%(30*86400) != 0 {
			t.Fatalf("stratum %q: bucket %s is not a 30-day bucket from Unix 0", st.Name, st.Labels[1])
		}
		starts[i] = ts.Unix()
		newest = max(newest, ts.Unix())
		total += st.Count
	}
	if total != len(content) || len(pi) < 12 {
		t.Fatalf("strata hold %d samples in %d strata, want %d in at least 12", total, len(pi), len(content))
	}
	sum := 0.0
	for i, st := range info.Dataset.Strata {
		pi[i] = float64(st.Count) * math.Exp2(-float64(newest-starts[i])/halfLife)
		sum += pi[i]
	}
	for i := range pi {
		pi[i] /= sum
	}
	byName := map[string]int{}
	for i, st := range info.Dataset.Strata {
		byName[st.Name] = i
	}
	batches := 0
	for e := 0; e < 2; e++ {
		// Per time bucket, the fewest and most samples a batch of this epoch holds.
		bucketLo, bucketHi := map[string]int{}, map[string]int{}
		for rank := 0; rank < W; rank++ {
			rdir := filepath.Join(mnt, "epochs", fmt.Sprintf("%04d", e), fmt.Sprintf("rank-%03d", rank))
			idx, err := csv.NewReader(strings.NewReader(string(mustRead(t, filepath.Join(rdir, "index.csv"))))).ReadAll()
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(idx[0], ","); got != "position,batch,key,stratum,size,alpha,label,len,note,time" {
				t.Fatalf("index.csv header %q", got)
			}
			rows := idx[1:]
			for _, row := range rows {
				f := fields[row[2]]
				if f == nil || row[6] != f["label"] || row[7] != f["len"] || row[8] != f["note"] || row[9] != f["time"] {
					t.Fatalf("index.csv row %v: fields differ from the listing's %v", row, f)
				}
			}
			for b := 0; b*B < len(rows); b++ {
				members := tarMembers(t, mustRead(t, filepath.Join(rdir, fmt.Sprintf("batch-%06d.tar", b))))
				if len(members) != 2*B {
					t.Fatalf("epoch %d rank %d batch %d: %d members, want %d", e, rank, b, len(members), 2*B)
				}
				counts := make([]int, len(pi))
				for k := 0; k < B; k++ {
					row := rows[b*B+k]
					if want := content[row[2]]; string(members[2*k]) != string(want) {
						t.Fatalf("epoch %d rank %d batch %d member %d (%s): %d bytes differ from the source's %d", e, rank, b, k, row[2], len(members[2*k]), len(want))
					}
					// .cls is the class of the sample's label, never its stratum.
					cls, err := strconv.Atoi(string(members[2*k+1]))
					if label := fields[row[2]]["label"]; err != nil || cls != classOf[label] {
						t.Fatalf("member %s: .cls %q, want %d (label %s; stratum %s is #%d)", row[2], members[2*k+1], classOf[label], label, row[3], byName[row[3]])
					}
					counts[byName[row[3]]]++
				}
				perBucket := map[string]int{}
				for s, n := range counts {
					lo, hi := math.Floor(B*pi[s]-1e-9), math.Ceil(B*pi[s]+1e-9)
					if float64(n) < lo || float64(n) > hi {
						t.Fatalf("epoch %d rank %d batch %d: stratum %s has %d, target %.3f (%v..%v)", e, rank, b, info.Dataset.Strata[s].Name, n, B*pi[s], lo, hi)
					}
					perBucket[info.Dataset.Strata[s].Labels[1]] += n
				}
				for _, st := range info.Dataset.Strata {
					m := st.Labels[1]
					if _, ok := bucketLo[m]; !ok || perBucket[m] < bucketLo[m] {
						bucketLo[m] = perBucket[m]
					}
					bucketHi[m] = max(bucketHi[m], perBucket[m])
				}
				batches++
			}
		}
		// Every batch holds each month within one sample of every other
		// batch: every month in every batch once its share reaches one.
		for m, lo := range bucketLo {
			if bucketHi[m]-lo > 1 {
				t.Fatalf("epoch %d: batches hold %d to %d samples of the month %s", e, lo, bucketHi[m], m)
			}
		}
	}
	if batches < 2*W*(len(content)/B/W)-2*W {
		t.Fatalf("checked %d batches", batches)
	}
	// The samples/ view shows each sample's fields as extended attributes.
	for key, f := range fields {
		st := info.Dataset.Strata[0].Name
		for _, s := range info.Dataset.Strata {
			// The stratum is label+bucket+range; find the sample under it.
			if _, err := os.Stat(filepath.Join(mnt, "samples", s.Name, key)); err == nil {
				st = s.Name
			}
		}
		buf := make([]byte, 64)
		n, err := syscall.Getxattr(filepath.Join(mnt, "samples", st, key), "user.shardfs.len", buf)
		if err != nil || string(buf[:n]) != f["len"] {
			t.Fatalf("samples/%s/%s: user.shardfs.len = %q, %v; want %q", st, key, buf[:max(n, 0)], err, f["len"])
		}
		break // one sample: each lookup above lists every stratum
	}
	// The Python loader's targets are the labels' classes.
	if format == "2" {
		requireTorch(t)
		lines := runPython(t, "testdata/labels.py", mnt, "0", strconv.Itoa(W))
		if len(lines) < 2 || lines[0][0] != "classes" || lines[0][1] != "3" || lines[0][2] != "c0,c1,c2" {
			t.Fatalf("loader.classes(): %v, want the 3 classes c0,c1,c2", lines[:min(1, len(lines))])
		}
		for _, l := range lines[1:] {
			// A member's stem is its key without the extension, "~n" marking a repeat.
			key := strings.SplitN(l[1], "~", 2)[0] + ".bin"
			if want := fields[key]["label"]; l[0] != "target" || want == "" || l[2] != want {
				t.Fatalf("loader: sample %s has target %s, want its label %s", l[1], l[2], want)
			}
		}
		if len(lines)-1 < len(content)/W/2 {
			t.Fatalf("loader read %d samples of rank 0's epoch 0", len(lines)-1)
		}
	}
	r = run(t, time.Minute, nil, "plan", stores, "--batch-size=24", "--recency-half-life=60d", name)
	for _, want := range []string{"strata: ", "time: 12 values, time buckets of 30d", "len: 4 values, bins", "field len, epoch 0", "field time, epoch 0", "uniform shuffle"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Fatalf("plan does not say %q: %v", want, r)
		}
	}
}

// Bad fields and time flags are refused with the line or the flag, and
// ingest nothing.
func TestTimeStrataRefusals(t *testing.T) {
	_, urls := localStores(t, 3)
	stores := "--stores=" + strings.Join(urls, ",")
	listing, _, _ := timeListing(t, 40)
	b, _ := os.ReadFile(listing)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for _, tc := range []struct {
		name, line string
		flags      []string
		want       string
	}{
		{"timestamp", strings.Replace(lines[6], `"time": "2025`, `"time": "late 2025`, 1), []string{"--time-bucket=time=30d"}, "line 7"},
		{"number", strings.Replace(lines[6], `"len": `, `"len": "long", "x": `, 1), []string{"--bins=len=4"}, "line 7"},
		{"missing", strings.Replace(lines[6], `"len": `, `"x": `, 1), []string{"--bins=len=4"}, `line 7 (s/0006.bin): no value for field "len"`},
	} {
		bad := append(append([]string{}, lines[:6]...), tc.line)
		bad = append(bad, lines[7:]...)
		p := filepath.Join(filepath.Dir(listing), tc.name+".jsonl")
		os.WriteFile(p, []byte(strings.Join(bad, "\n")+"\n"), 0o644)
		r := run(t, time.Minute, nil, append(append([]string{"ingest", stores, "--data=2", "--parity=1"}, tc.flags...), p, "bad")...)
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Fatalf("%s: want a refusal naming %q: %v", tc.name, tc.want, r)
		}
	}
	if r := run(t, time.Minute, nil, "list", stores); strings.Contains(r.stdout, "bad") {
		t.Fatalf("a refused ingest left a dataset: %v", r)
	}
	if r := run(t, time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--time-bucket=time=30d", listing, "logs"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--recency-half-life=0d"}, "--recency-half-life 0d: must be at least 1s"},
		{[]string{"--recency-half-life=-5d"}, "--recency-half-life"},
		{[]string{"--time-window=1d", "--as-of=2025-01-01T00:00:00Z"}, "holds no sample"},
		{[]string{"--time-window-step=30d"}, "give --time-window too"},
		{[]string{"--time-window=60d", "--window=2"}, "leave out --window"},
	} {
		r := run(t, time.Minute, nil, append(append([]string{"plan", stores, "--batch-size=4"}, tc.flags...), "logs")...)
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Fatalf("plan %v: want a refusal saying %q: %v", tc.flags, tc.want, r)
		}
	}
}

// A distributed ingest of a listing with fields, in both metadata
// formats, commits the fields and derived strata of a single-process
// ingest: plan --emit index (every row with its fields) is byte for byte
// the same.
func TestTimeStrataDistributed(t *testing.T) {
	_, urls := localStores(t, 3)
	stores := "--stores=" + strings.Join(urls, ",")
	listing, _, _ := timeListing(t, 300)
	for _, format := range []string{"1", "2"} {
		common := []string{stores, "--data=2", "--parity=1", "--shard-size=64KiB", "--format=" + format, "--time-bucket=time=30d", "--bins=len=3"}
		single, dist := "single"+format, "dist"+format
		if r := run(t, 2*time.Minute, nil, append(append([]string{"ingest"}, common...), listing, single)...); r.code != 0 {
			t.Fatalf("ingest: %v", r)
		}
		for i := 0; i < 3; i++ {
			if r := run(t, 2*time.Minute, nil, append(append([]string{"ingest"}, common...), fmt.Sprintf("--part=%d/3", i), "--job=j"+format, listing, dist)...); r.code != 0 {
				t.Fatalf("part %d/3: %v", i, r)
			}
		}
		if r := run(t, 2*time.Minute, nil, "commit", stores, dist); r.code != 0 {
			t.Fatalf("commit: %v", r)
		}
		emit := func(name string) string {
			r := run(t, time.Minute, nil, "plan", stores, "--emit=index", "--batch-size=16", "--recency-half-life=45d", name)
			if r.code != 0 {
				t.Fatalf("plan --emit index %s: %v", name, r)
			}
			return r.stdout
		}
		a, b := emit(single), emit(dist)
		if a != b || !strings.HasPrefix(a, "position,batch,key,stratum,size,alpha,label,len,note,time\n") || strings.Count(a, "\n") < 200 {
			t.Fatalf("format %s: the distributed ingest's index.csv differs from the single one's:\n%.600s\n---\n%.600s", format, a, b)
		}
	}
}
