package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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
	stores := "--stores=" + strings.Join([]string{"file://" + dir + "/s0", "file://" + dir + "/s1", "file://" + dir + "/s2"}, ",")
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
