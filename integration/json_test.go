package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dustin/go-humanize"
)

// Issue 42 item 5: every report (list, versions, verify, plan, doctor,
// stats) also prints --json, for scripts that scraped the text. Each
// report's JSON is parsed, and its numbers are found in the text the
// same command prints.
func TestJSONReportsAgreeWithText(t *testing.T) {
	t.Parallel() // waits more than it computes, asserts bytes, states and hang bounds (main_test.go, parallelTests)
	requireTool(t, "fusermount3")
	c := sharedCluster(t, 3)
	ingestSynthetic(t, c.urls, 400, "train", 2, 1)
	stores := "--stores=" + strings.Join(c.urls, ",")
	both := func(args ...string) (text, js result) {
		t.Helper()
		text = run(t, 2*time.Minute, nil, args...)
		js = run(t, 2*time.Minute, nil, append(args, "--json")...)
		if text.code != js.code {
			t.Fatalf("%s: exit %d as text, %d with --json\n%v\n%v", args[0], text.code, js.code, text, js)
		}
		return text, js
	}
	decode := func(r result, v any) {
		t.Helper()
		if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
			t.Fatalf("not one JSON document: %v\n%v", err, r)
		}
	}

	t.Run("list", func(t *testing.T) {
		text, js := both("list", stores)
		var l struct {
			Datasets []struct {
				Name                 string
				Ingest               string
				Samples, Bytes       int64
				Shards, Data, Parity int
				ManifestCopies       int `json:"manifest_copies"`
				Stores               int
				Margin               *int
			}
		}
		decode(js, &l)
		if len(l.Datasets) != 1 || l.Datasets[0].Name != "train" || l.Datasets[0].Samples != 400 {
			t.Fatalf("list --json: %+v", l)
		}
		d := l.Datasets[0]
		// No healer ran: no margin in the JSON, "- (no healer)" in the text.
		want := fmt.Sprintf(`(?m)^train\s+%s\s+%d\s+%s\s+%d\s+RS\(%d,%d\)\s+%d of %d stores\s+- \(no healer\)$`, d.Ingest, d.Samples, regexp.QuoteMeta(humanize.IBytes(uint64(d.Bytes))), d.Shards, d.Data, d.Parity, d.ManifestCopies, d.Stores)
		if d.Data != 2 || d.Parity != 1 || d.ManifestCopies != 3 || d.Stores != 3 || d.Margin != nil || !regexp.MustCompile(want).MatchString(text.stdout) {
			t.Fatalf("list: the text does not show the JSON's numbers (%s):\n%s", want, text.stdout)
		}
	})

	t.Run("versions", func(t *testing.T) {
		text, js := both("versions", stores, "train")
		var v struct {
			Versions []struct {
				Number, Parent int
				Samples, Bytes int64
				State, Change  string
				CreatedUnix    int64 `json:"created_unix"`
			}
		}
		decode(js, &v)
		if len(v.Versions) != 1 || v.Versions[0].Number != 1 || v.Versions[0].State != "current" || v.Versions[0].Samples != 400 {
			t.Fatalf("versions --json: %+v", v)
		}
		x := v.Versions[0]
		want := fmt.Sprintf(`(?m)^1\s+-\s+%s\s+%d\s+%s\s+current\s+`, time.Unix(x.CreatedUnix, 0).UTC().Format(time.RFC3339), x.Samples, regexp.QuoteMeta(humanize.IBytes(uint64(x.Bytes))))
		if !regexp.MustCompile(want).MatchString(text.stdout) {
			t.Fatalf("versions: the text does not show the JSON's numbers (%s):\n%s", want, text.stdout)
		}
	})

	t.Run("plan", func(t *testing.T) {
		text, js := both("plan", stores, "--world-size=2", "--rank=all", "--epochs=2", "--batch-size=16", "train")
		var p struct {
			Samples    int
			RankEpochs []struct {
				Epoch, Rank, Batches, Samples int
				TVMean                        float64 `json:"tv_mean"`
				TVMax                         float64 `json:"tv_max"`
				GETs                          int     `json:"gets"`
				CompareGETs                   int     `json:"compare_gets"`
			} `json:"rank_epochs"`
			Mix []struct {
				Stratum        string
				Samples        int
				Target, Served float64
			}
		}
		decode(js, &p)
		if p.Samples != 400 || len(p.RankEpochs) != 4 || len(p.Mix) != 6 {
			t.Fatalf("plan --json: %d samples, %d rank-epochs, %d strata; want 400, 4, 6: %s", p.Samples, len(p.RankEpochs), len(p.Mix), js.stdout)
		}
		for _, r := range p.RankEpochs {
			want := fmt.Sprintf(`(?m)^\s+%d\s+%d\s+%d\s+%d\s+%.4f\s+%.4f\s+\S+\s+\S+\s+%d\s+.+\s+%d\s+`, r.Epoch, r.Rank, r.Batches, r.Samples, r.TVMean, r.TVMax, r.GETs, r.CompareGETs)
			if r.Batches != 400/2/16 || !regexp.MustCompile(want).MatchString(text.stdout) {
				t.Fatalf("plan: no text row with the JSON's numbers %+v (%s):\n%s", r, want, text.stdout)
			}
		}
		for _, m := range p.Mix {
			want := fmt.Sprintf(`(?m)^\s*%s\s+%d\s+\S+\s+%.4f\s+%.4f\s*$`, regexp.QuoteMeta(m.Stratum), m.Samples, m.Target, m.Served)
			if !regexp.MustCompile(want).MatchString(text.stdout) {
				t.Fatalf("plan: no class mix row with the JSON's numbers %+v (%s):\n%s", m, want, text.stdout)
			}
		}
	})

	t.Run("doctor", func(t *testing.T) {
		text, js := both("doctor", stores, "train")
		var d struct {
			Ready  bool
			Failed int
			Checks []struct {
				Check  string
				OK     bool
				Detail string
			}
		}
		decode(js, &d)
		if !d.Ready || d.Failed != 0 || len(d.Checks) < 5 {
			t.Fatalf("doctor --json: %+v", d)
		}
		for _, ch := range d.Checks {
			if !ch.OK || !regexp.MustCompile(`(?m)^OK\s+`+regexp.QuoteMeta(ch.Check)+`\s`).MatchString(text.stdout) {
				t.Fatalf("doctor: check %+v not an OK line of the text:\n%s", ch, text.stdout)
			}
		}
		if !strings.Contains(text.stdout, "this node is ready") || strings.Count(text.stdout, "\nOK ")+1 != len(d.Checks) {
			t.Fatalf("doctor: %d checks in the JSON, the text has:\n%s", len(d.Checks), text.stdout)
		}
	})

	t.Run("stats", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "mnt")
		os.Mkdir(dir, 0o755)
		r := run(t, 2*time.Minute, nil, "mount", "--daemon", "--log-file", dir+".log", stores, "--batch-size=16", "train", dir)
		if r.code != 0 {
			t.Fatalf("mount --daemon: %v", r)
		}
		t.Cleanup(func() {
			exec.Command("umount", dir).Run()
			for deadline := time.Now().Add(15 * time.Second); isMounted(dir) && time.Now().Before(deadline); {
				time.Sleep(50 * time.Millisecond)
			}
			exec.Command("fusermount3", "-uz", dir).Run()
		})
		batch := mustRead(t, filepath.Join(dir, "epochs", "0000", "rank-000", "batch-000000.tar"))
		text, js := both("stats", "--count=1", "--interval=100ms", dir)
		lines := strings.Split(strings.TrimSpace(js.stdout), "\n")
		var line struct {
			StoreStates []string `json:"store_states"`
		}
		var total struct {
			Total struct {
				BytesServed int64 `json:"bytes_served"`
			}
		}
		if len(lines) != 2 || json.Unmarshal([]byte(lines[0]), &line) != nil || json.Unmarshal([]byte(lines[1]), &total) != nil {
			t.Fatalf("stats --json --count=1: want an interval line and a totals line:\n%s", js.stdout)
		}
		if len(line.StoreStates) != 3 || total.Total.BytesServed < int64(len(batch)) {
			t.Fatalf("stats --json: %d store states, %d bytes served after reading %d: %s", len(line.StoreStates), total.Total.BytesServed, len(batch), js.stdout)
		}
		want := "): " + humanize.IBytes(uint64(total.Total.BytesServed)) + " served"
		if !strings.Contains(text.stdout, want) {
			t.Fatalf("stats: the text's totals do not show the JSON's %d bytes served (%q):\n%s", total.Total.BytesServed, want, text.stdout)
		}
	})

	// Last: verify of a damaged dataset (one fragment deleted) exits 1 in
	// both forms, and both name the one damaged fragment.
	t.Run("verify", func(t *testing.T) {
		s0 := c.store(t, 0)
		keys, err := s0.List(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		var frag string
		for _, k := range keys {
			if strings.Contains(k, "/data/") || strings.Contains(k, "shard") && !strings.Contains(k, "index") {
				frag = k
				break
			}
		}
		if frag == "" {
			t.Fatalf("no fragment among store 0's objects: %v", keys)
		}
		if err := s0.Delete(t.Context(), frag); err != nil {
			t.Fatal(err)
		}
		text, js := both("verify", stores, "train")
		var v struct {
			State     string
			Samples   int64
			Fragments int
			Damaged   []struct {
				Shard, Fragment, Store int
				Recoverable            bool
			} `json:"damaged_fragments"`
		}
		decode(js, &v)
		if text.code != 1 || v.State != "damaged" || v.Samples != 400 || len(v.Damaged) != 1 || !v.Damaged[0].Recoverable || v.Damaged[0].Store != 0 {
			t.Fatalf("verify --json after deleting %s: %+v\n%v", frag, v, js)
		}
		d := v.Damaged[0]
		for _, want := range []string{
			fmt.Sprintf("dataset train: %d samples,", v.Samples),
			fmt.Sprintf("%d fragments", v.Fragments),
			fmt.Sprintf("damaged: shard %d fragment %d on store %d", d.Shard, d.Fragment, d.Store),
			"DAMAGED: " + strconv.Itoa(len(v.Damaged)) + " fragments",
		} {
			if !strings.Contains(text.stdout, want) {
				t.Fatalf("verify: the text does not say %q:\n%s", want, text.stdout)
			}
		}
	})
}
