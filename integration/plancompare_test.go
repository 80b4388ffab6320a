package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// shardfs plan compares the order asked for with the other locality: a
// window of --compare-window shards when the order is global, the global
// order when it is a window. The comparison must not inherit an option
// its mode refuses: plan --feedback was refused with a message naming
// options that were not given (the window comparison kept --feedback).
// Every option that re-weights the global order is planned here, each
// alone, and must plan both orders.
func TestPlanComparesWithEveryOrderOption(t *testing.T) {
	t.Parallel() // file:// stores: waits on its processes only
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.MkdirAll(src, 0o755)
	var listing strings.Builder
	listing.WriteString("path,label,time\n")
	for i := range 240 {
		name := fmt.Sprintf("f%04d.bin", i)
		if err := os.WriteFile(filepath.Join(src, name), []byte(strings.Repeat(string(rune('a'+i%26)), 100+i)), 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&listing, "%s,l%d,%d\n", name, i%3, 1_700_000_000+86400*(i%120))
	}
	if err := os.WriteFile(filepath.Join(src, "list.csv"), []byte(listing.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	stores := fileStores(dir)
	if r := run(t, time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--shard-size=4KiB", "--label-fields=label", "--time-bucket=time=30d", filepath.Join(src, "list.csv"), "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	// The strata are label x 30-day bucket; the report names the first
	// plan lists, and the others count as the mean of those given.
	var strata struct{ Mix []struct{ Stratum string } }
	if r := run(t, time.Minute, nil, "plan", stores, "--json", "--batch-size=8", "ds"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &strata) != nil || len(strata.Mix) < 6 {
		t.Fatalf("plan: %v", r)
	}
	report := filepath.Join(dir, "report.json")
	if err := os.WriteFile(report, []byte(fmt.Sprintf(`{%q: 2}`, strata.Mix[0].Stratum)), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := run(t, time.Minute, nil, "report", stores, "--run=r1", "--epoch=0", "ds", report); r.code != 0 {
		t.Fatalf("report: %v", r)
	}
	for _, c := range []struct {
		flags   []string
		compare int // the comparison's window
	}{
		{nil, 8},
		{[]string{"--feedback=eg", "--run=r1"}, 8},
		{[]string{"--min-share=0.01"}, 8},
		{[]string{"--alpha=0"}, 8},
		{[]string{"--alpha-schedule=0:0,1:1"}, 8},
		{[]string{"--preset=decoupled:2"}, 8},
		{[]string{"--recency-half-life=60d"}, 8},
		{[]string{"--time-window=90d"}, 8},
		{[]string{"--epoch-size=100"}, 8},
		{[]string{"--affinity", "--world-size=2"}, 8},
		{[]string{"--resume-at=1:3"}, 8},
		{[]string{"--window=2"}, 0},
	} {
		args := append([]string{"plan", stores, "--json", "--batch-size=8", "--epochs=2", "ds"}, c.flags...)
		r := run(t, time.Minute, nil, args...)
		if r.code != 0 {
			t.Errorf("plan %s: exit %d: %s", strings.Join(c.flags, " "), r.code, r.stderr)
			continue
		}
		var rep struct {
			CompareWindow int `json:"compare_window"`
			RankEpochs    []struct {
				Epoch, Samples int
			} `json:"rank_epochs"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("plan %s: %v\n%s", strings.Join(c.flags, " "), err, r.stdout)
		}
		if rep.CompareWindow != c.compare || len(rep.RankEpochs) != 2 || rep.RankEpochs[0].Samples == 0 {
			t.Errorf("plan %s: compared with window %d over %d rank-epochs (%+v); want window %d over 2", strings.Join(c.flags, " "), rep.CompareWindow, len(rep.RankEpochs), rep.RankEpochs, c.compare)
		}
	}
}

// plan's own numbers are refused, each naming its flag, when out of range:
// --lookahead 0 spun forever at 100% CPU and ignored SIGTERM, --lookahead
// -1 and --synthetic-time-buckets -2 panicked, and --compare-window -1 was
// refused as "--window -1". Every case must end at once with exit 1.
func TestPlanRefusesBadNumbers(t *testing.T) {
	t.Parallel() // file:// stores: waits on its processes only
	_, _, stores := smallFileDataset(t)
	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"ds", "--lookahead=0"}, "--lookahead 0"},
		{[]string{"ds", "--lookahead=-1"}, "--lookahead -1"},
		{[]string{"ds", "--compare-window=0"}, "--compare-window 0"},
		{[]string{"ds", "--compare-window=-1"}, "--compare-window -1"},
		{[]string{"ds", "--emit=index", "--epoch=-1"}, "--epoch -1"},
		{[]string{"--synthetic=-5"}, "--synthetic -5"},
		{[]string{"--synthetic=1000", "--synthetic-time-buckets=-2"}, "--synthetic-time-buckets -2"},
		{[]string{"--synthetic=1000", "--synthetic-time-buckets=100000"}, "--synthetic-time-buckets 100000"},
	} {
		r := run(t, 30*time.Second, nil, append([]string{"plan", stores, "--batch-size=8"}, c.args...)...)
		if r.code != 1 || !strings.HasPrefix(r.stderr, "shardfs: "+c.flag+":") || strings.Contains(r.stderr, "goroutine") {
			t.Errorf("plan %s: want exit 1 and a message that starts with %q, got exit %d:\n%s", strings.Join(c.args, " "), c.flag+":", r.code, r.stderr)
		}
	}
}

// Every number a command takes (an int, uint, float or duration flag,
// found in its --help) is tried at -1 and 0: a command may refuse it or
// run, but never panic or spin (plan --lookahead did both). Found by
// trying plan's; the sweep covers every command that ends by itself.
func TestNumericFlagsNeverPanicOrHang(t *testing.T) {
	t.Parallel() // file:// stores: waits on its processes only
	dir, src, stores := smallFileDataset(t)
	report := filepath.Join(dir, "report.json")
	os.WriteFile(report, []byte(`{"c0": 1}`), 0o644)
	flagLine := regexp.MustCompile(`(?m)^\s+(?:-[a-z], )?(--[a-z0-9-]+) (?:int|uint|float|duration)\b`)
	commands := map[string][]string{
		"plan":     {"ds", "--batch-size=8"},
		"warm":     {"ds", "--cache-dir=" + filepath.Join(dir, "tier"), "--batch-size=8"},
		"ingest":   {"--data=2", "--parity=1", "--dry-run", src, "other"},
		"verify":   {"ds"},
		"repair":   {"ds"},
		"gc":       {"ds", "--keep-last=1"},
		"versions": {"ds"},
		"list":     nil,
		"report":   {"--run=r9", "--epoch=3", "ds", report},
		"rollback": {"ds", "--to=1"},
		"commit":   {"ds"},
		"migrate":  {"ds", "--to-stores=" + strings.Join([]string{"file://" + dir + "/m0", "file://" + dir + "/m1", "file://" + dir + "/m2"}, ",")},
		"delete":   {"absent", "--yes"},
	}
	tried := 0
	for cmd, args := range commands {
		help := run(t, time.Minute, nil, cmd, "--help")
		for _, m := range flagLine.FindAllStringSubmatch(help.stdout, -1) {
			for _, v := range []string{"-1", "0"} {
				r := run(t, 30*time.Second, nil, append(append([]string{cmd, stores}, args...), m[1]+"="+v)...)
				tried++
				if r.code > 3 || strings.Contains(r.stderr, "goroutine ") || strings.Contains(r.stderr, "panic") {
					t.Errorf("shardfs %s %s=%s: exit %d:\n%s", cmd, m[1], v, r.code, r.stderr)
				}
			}
		}
	}
	if tried < 60 {
		t.Fatalf("tried %d values: the flags were not found in --help", tried)
	}
	t.Logf("%d commands, %d values tried", len(commands), tried)
}

// smallFileDataset ingests dataset ds, 3 classes of 20 small files (src),
// RS(2,1) into 3 file:// stores under dir, and returns dir, src and the
// --stores flag.
// fileStores is the --stores flag of three file:// stores under dir, for
// RS(2,1).
func fileStores(dir string) string {
	return "--stores=" + strings.Join([]string{"file://" + dir + "/s0", "file://" + dir + "/s1", "file://" + dir + "/s2"}, ",")
}

func smallFileDataset(t *testing.T) (dir, src, stores string) {
	t.Helper()
	dir = t.TempDir()
	src = filepath.Join(dir, "src")
	for c := range 3 {
		os.MkdirAll(filepath.Join(src, fmt.Sprintf("c%d", c)), 0o755)
		for i := range 20 {
			if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("c%d/s%d.bin", c, i)), []byte(strings.Repeat("x", 50+i)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	stores = fileStores(dir)
	if r := run(t, time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", src, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	return dir, src, stores
}
