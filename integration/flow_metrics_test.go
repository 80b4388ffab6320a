package integration

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/internal/toxitest"
)

// flowStats is the part of stats.json the flow tests read.
type flowStats struct {
	BytesServed        int64   `json:"bytes_served"`
	BytesFetched       int64   `json:"bytes_fetched"`
	ReadAmplification  float64 `json:"read_amplification"`
	CacheEvictedUnread int64   `json:"cache_evicted_unread"`
	Anomalies          []struct {
		Kind, Subject, Reason string
	} `json:"anomalies"`
	AnomaliesFired map[string]int64 `json:"anomalies_fired"`
	Ranks          []struct {
		Rank          int   `json:"rank"`
		Epoch         int64 `json:"epoch"`
		BatchesServed int64 `json:"batches_served"`
		LeadChecks    int64 `json:"lead_checks"`
		LeadZero      int64 `json:"lead_zero_checks"`
	} `json:"ranks"`
	Stores []flowStore `json:"stores"`
}

type flowStore struct {
	Bytes    int64 `json:"bytes"`
	Requests int64 `json:"requests"`
	Degraded int64 `json:"degraded_reads"`
}

func readFlowStats(t *testing.T, mp *mountProc) flowStats {
	t.Helper()
	var s flowStats
	if err := json.Unmarshal(mustRead(t, filepath.Join(mp.dir, ".shardfs", "stats.json")), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// settledFlowStats reads the mount's stats once its stores' counts stop
// changing from one second to the next (at most 20 s).
func settledFlowStats(t *testing.T, mp *mountProc) flowStats {
	t.Helper()
	var got flowStats
	for settle := time.Now(); ; time.Sleep(time.Second) {
		prev := got
		got = readFlowStats(t, mp)
		if prev.Stores != nil && slices.Equal(prev.Stores, got.Stores) || time.Since(settle) > 20*time.Second {
			return got
		}
	}
}

// active lists the anomalies of s as kind/subject.
func (s flowStats) active() []string {
	var out []string
	for _, a := range s.Anomalies {
		out = append(out, a.Kind+"/"+a.Subject)
	}
	return out
}

// scalar is the value of an unlabelled series in a scrape (-1: absent).
func scalar(text, name string) float64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// proxiedDataset ingests spec as dataset "ds", RS(2,1), onto three MinIO
// stores behind toxiproxy, and returns them and their --stores flag.
func proxiedDataset(t *testing.T, spec synth.Spec, shardSize string) (*proxiedCluster, string) {
	t.Helper()
	pc := startProxiedCluster(t, 3)
	stores := "--stores=" + strings.Join(pc.urls, ",")
	if r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--shard-size="+shardSize, writeSource(t, spec), "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	return pc, stores
}

// batchFiles lists a rank-epoch directory's batch files.
func batchFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "batch-") {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

// Issue 29 item 1, the counters, each driven by real traffic through
// toxiproxy to three MinIO stores and checked against what was read:
//   - per rank: the epoch read and every batch served;
//   - FUSE op latency by op: every read, open, release, lookup and readdir timed;
//   - bytes fetched against bytes served;
//   - hedges by reason: a store that does not answer is hedged for
//     no_first_byte, one whose bytes trickle for stalled;
//   - degraded reads by store: with one store cut, every degraded read
//     rebuilt that store's fragments, and no other's.
func TestFlowMetricsLive(t *testing.T) {
	pc, stores := proxiedDataset(t, synth.Imbalanced(800, 4, 0.6, 20_000, 60_000, 37), "1MiB")
	// A cache smaller than the dataset, so later epochs fetch again.
	mp := mountShardfsEnv(t, nil, stores, "--world-size=2", "--rank=all", "--batch-size=10", "--cache-size=16MiB", "--metrics-addr=127.0.0.1:0", "ds")
	rankDir := func(e, r int) string {
		return filepath.Join(mp.dir, "epochs", fmt.Sprintf("%04d", e), fmt.Sprintf("rank-%03d", r))
	}
	var served [2]int
	for r := range 2 {
		files := batchFiles(t, rankDir(0, r))
		for _, f := range files {
			mustRead(t, f)
		}
		served[r] = len(files)
	}
	text := scrape(t, mp)
	for r := range 2 {
		if got := sample(text, "shardfs_rank_batches_served_total", "rank", strconv.Itoa(r)); got != float64(served[r]) {
			t.Fatalf("rank %d: %v batches served, %d batch files read whole", r, got, served[r])
		}
		if got := sample(text, "shardfs_rank_epoch", "rank", strconv.Itoa(r)); got != 0 {
			t.Fatalf("rank %d: epoch %v, want 0", r, got)
		}
	}
	// Half of rank 0's epoch 1: its epoch moves on, and half its batches are served.
	files := batchFiles(t, rankDir(1, 0))
	for _, f := range files[:len(files)/2] {
		mustRead(t, f)
	}
	text = scrape(t, mp)
	if got := sample(text, "shardfs_rank_epoch", "rank", "0"); got != 1 {
		t.Fatalf("rank 0's epoch %v after reading epoch 1, want 1", got)
	}
	if got, want := sample(text, "shardfs_rank_batches_served_total", "rank", "0"), float64(served[0]+len(files)/2); got != want {
		t.Fatalf("rank 0: %v batches served, want %v", got, want)
	}
	reads := scalar(text, "shardfs_reads_total")
	if n := sample(text, "shardfs_fuse_op_seconds_count", "op", "read"); n < reads || reads <= 0 {
		t.Fatalf("%v FUSE reads timed, %v reads served: every read reaches FUSE", n, reads)
	}
	opened := float64(served[0] + served[1] + len(files)/2)
	if n := sample(text, "shardfs_fuse_op_seconds_count", "op", "open"); n < opened {
		t.Fatalf("%v open ops timed, for %v batch files opened", n, opened)
	}
	// The kernel sends RELEASE after close(2) has returned, so the last one
	// may still be on its way: wait for it, bounded, rather than race it.
	released := func() float64 { return sample(scrape(t, mp), "shardfs_fuse_op_seconds_count", "op", "release") }
	deadline := time.Now().Add(10 * time.Second)
	n := released()
	for n < opened && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		n = released()
	}
	if n < opened {
		t.Fatalf("%v release ops timed 10 s after the last close, for %v batch files opened", n, opened)
	}
	// readdirplus looks the entries up itself: lookups are of the directories on the way.
	if n := sample(text, "shardfs_fuse_op_seconds_count", "op", "lookup"); n < 5 {
		t.Fatalf("%v lookups timed, for epochs/, 0000/, 0001/ and two rank directories", n)
	}
	if n := sample(text, "shardfs_fuse_op_seconds_count", "op", "readdirplus") + sample(text, "shardfs_fuse_op_seconds_count", "op", "readdir"); n < 3 {
		t.Fatalf("%v directory reads timed, for 3 directories listed", n)
	}
	st := readFlowStats(t, mp)
	var fetched int64
	for _, s := range st.Stores {
		fetched += s.Bytes
	}
	if st.BytesFetched != fetched || scalar(text, "shardfs_bytes_fetched_total") <= 0 {
		t.Fatalf("bytes fetched %d, the stores served %d", st.BytesFetched, fetched)
	}
	if st.ReadAmplification < 0.8 || st.ReadAmplification > 1.5 {
		t.Fatalf("read amplification %.2f (%d fetched, %d served) reading each sample once, healthy", st.ReadAmplification, st.BytesFetched, st.BytesServed)
	}

	// Store 1 answers nothing for 2 s (the hedge floor is 150 ms): hedged,
	// for no first byte. Then it answers at once and trickles its bytes at
	// 2 KB/s: hedged, for stalled.
	for i, c := range []struct {
		toxic  func()
		reason string
	}{
		{func() { toxitest.Latency(t, pc.proxies[1], 2000, 0) }, "no_first_byte"},
		{func() { toxitest.Bandwidth(t, pc.proxies[1], 2) }, "stalled"},
	} {
		c.toxic()
		before := readFlowStats(t, mp).Stores
		start := time.Now()
		for _, f := range batchFiles(t, rankDir(2+i, 0))[:3] {
			mustRead(t, f)
		}
		took := time.Since(start)
		toxitest.Heal(t, pc.proxies[1])
		if text := scrape(t, mp); sample(text, "shardfs_hedges_total", "reason", c.reason) <= 0 {
			// What the stores were asked while store 1 was slowed, and the
			// hedges by every reason: a failure here says whether the reads
			// reached store 1 at all (CI at 74dc407, once, beside the suite).
			after := readFlowStats(t, mp).Stores
			var asked []int64
			for s := range after {
				asked = append(asked, after[s].Requests-before[s].Requests)
			}
			t.Fatalf("no hedge for %s around store 1: the 3 files took %v; requests to each store meanwhile %v; hedges %v no_first_byte, %v stalled",
				c.reason, took.Round(time.Millisecond), asked, sample(text, "shardfs_hedges_total", "reason", "no_first_byte"), sample(text, "shardfs_hedges_total", "reason", "stalled"))
		}
	}
	text = scrape(t, mp)
	if total, a, b := scalar(text, "shardfs_hedged_reads_total"), sample(text, "shardfs_hedges_total", "reason", "no_first_byte"), sample(text, "shardfs_hedges_total", "reason", "stalled"); total != a+b {
		t.Fatalf("%v hedged reads, %v + %v by reason", total, a, b)
	}
	// Store 2 cut: degraded reads rebuild its fragments, and only its.
	// The count starts once the reads before have settled: prefetch ahead
	// of the last hedged read goes on a moment, and a read of store 1 begun
	// while it trickled could be rebuilt after the cut (CI, 2026-12-01:
	// store 1's fragments rebuilt 2 times in this phase, on a machine
	// running the rest of the suite beside it).
	before := settledFlowStats(t, mp)
	if err := pc.proxies[2].Disable(); err != nil {
		t.Fatal(err)
	}
	for _, f := range batchFiles(t, rankDir(4, 0))[:5] {
		mustRead(t, f)
	}
	// Prefetch ahead of the last read goes on a moment: compare once it stopped.
	after := settledFlowStats(t, mp)
	text = scrape(t, mp)
	if err := pc.proxies[2].Enable(); err != nil {
		t.Fatal(err)
	}
	for i, u := range pc.urls {
		d := after.Stores[i].Degraded - before.Stores[i].Degraded
		if got := sample(text, "shardfs_store_degraded_reads_total", "store", u); got != float64(after.Stores[i].Degraded) {
			t.Fatalf("store %d: gauge %v, stats.json %d", i, got, after.Stores[i].Degraded)
		}
		if i == 2 && d <= 0 || i != 2 && d != 0 {
			t.Fatalf("with store 2 cut, degraded reads rebuilt store %d's fragments %d times (stores: %+v)", i, d, after.Stores)
		}
	}
	r := run(t, time.Minute, nil, "stats", "--count=1", "--interval=100ms", mp.dir)
	for _, want := range []string{"store 2 (" + pc.urls[2] + ") in", "rank 0: epoch 4, ", "rank 1: epoch 0, 40 batches served", "× the bytes served"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Fatalf("shardfs stats does not say %q: %v\n%s", want, r, r.stdout)
		}
	}
	t.Logf("batches served %v, amplification %.2f, hedges %v no_first_byte + %v stalled, store 2 rebuilt %d times",
		served, st.ReadAmplification, sample(text, "shardfs_hedges_total", "reason", "no_first_byte"),
		sample(text, "shardfs_hedges_total", "reason", "stalled"), after.Stores[2].Degraded-before.Stores[2].Degraded)
}

// loopEpochs reads rank's epochs batch by batch, pausing pause after each
// batch, until stop is called.
func loopEpochs(mp *mountProc, rank int, pause time.Duration) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for e := 0; ; e++ {
			dir := filepath.Join(mp.dir, "epochs", fmt.Sprintf("%04d", e), fmt.Sprintf("rank-%03d", rank))
			ents, _ := os.ReadDir(dir)
			for _, ent := range ents {
				if !strings.HasPrefix(ent.Name(), "batch-") {
					continue
				}
				select {
				case <-quit:
					return
				default:
				}
				os.ReadFile(filepath.Join(dir, ent.Name()))
				time.Sleep(pause)
			}
		}
	}()
	return func() { close(quit); <-done }
}

// waitAnomaly polls stats.json until want is active, for at most limit.
func waitAnomaly(t *testing.T, mp *mountProc, want string, limit time.Duration) (flowStats, time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		st := readFlowStats(t, mp)
		if slices.Contains(st.active(), want) {
			return st, time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("no %s after %v; anomalies %v, stats:\n%s", want, limit, st.active(), mustRead(t, filepath.Join(mp.dir, ".shardfs", "stats.json")))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// Issue 29 item 3, the rank anomalies on real traffic through toxiproxy
// (40 ms, and 250 KB/s per connection, on each store). Rank 0's reader takes a second per
// batch, as a trainer computing does: the prefetcher keeps ahead of it and
// it hardly waits. Rank 1's reader reads as fast as it can, faster than the
// stores deliver: it waits on most reads. Rank 1, and only rank 1, is named
// as starving, and its lead as at zero; once rank 1 slows down too, both
// clear.
func TestRankAnomaliesLive(t *testing.T) {
	pc, stores := proxiedDataset(t, synth.Imbalanced(1600, 4, 0.6, 20_000, 60_000, 41), "1MiB")
	for _, p := range pc.proxies {
		toxitest.Latency(t, p, 40, 0)
		toxitest.Bandwidth(t, p, 250)
	}
	mp := mountShardfsEnv(t, nil, stores, "--world-size=2", "--rank=all", "--batch-size=8", "--cache-size=16MiB", "--metrics-addr=127.0.0.1:0", "ds")
	stop0 := loopEpochs(mp, 0, time.Second)
	defer func() { stop0() }()
	stop1 := loopEpochs(mp, 1, 0)
	// Rank 1's two anomalies, each seen active, in either order, and rank
	// 0's never, at every look. lead_at_zero/1 may come first (CI: active
	// before starving_rank/1 fired at 22 s) and clear before starving
	// does (CI: fired twice, never active at a look made after
	// starving_rank/1 was seen): waiting for one, then the other, missed
	// it. The bounds are the two waits' before, 60 s and 90 s, in all.
	seen := map[string]time.Duration{}
	var st flowStats
	var text string
	start := time.Now()
	for len(seen) < 2 {
		st = readFlowStats(t, mp)
		for _, a := range st.active() {
			if a == "starving_rank/0" || a == "lead_at_zero/0" {
				t.Fatalf("rank 0, which hardly waits, named: %v", st.active())
			}
			if _, ok := seen[a]; !ok && (a == "starving_rank/1" || a == "lead_at_zero/1") {
				seen[a] = time.Since(start)
				t.Logf("%s after %v; anomalies %v", a, seen[a].Round(100*time.Millisecond), st.active())
				if a == "starving_rank/1" {
					text = scrape(t, mp)
					if !regexp.MustCompile(`(?m)^shardfs_anomaly\{kind="starving_rank",subject="1"\} 1$`).MatchString(text) {
						t.Fatal("no shardfs_anomaly gauge at 1 for starving rank 1")
					}
				}
			}
		}
		if len(seen) < 2 && time.Since(start) > 150*time.Second {
			t.Fatalf("after 150 s, of rank 1's starving_rank and lead_at_zero only %v seen; anomalies %v, stats:\n%s", seen, st.active(), mustRead(t, filepath.Join(mp.dir, ".shardfs", "stats.json")))
		}
		time.Sleep(250 * time.Millisecond)
	}
	// The paced rank has its next batch ready in most checks, the other in
	// few, judged over 20 checks or more of each: the anomalies can fire
	// before that many are made (CI: lead_at_zero/1 was already active
	// when starving_rank/1 fired at 22 s, and rank 0 had 17 checks).
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		enough := len(st.Ranks) > 0
		for _, r := range st.Ranks {
			enough = enough && r.LeadChecks >= 20
		}
		if enough || time.Now().After(deadline) {
			break
		}
		st = readFlowStats(t, mp)
	}
	for _, r := range st.Ranks {
		short := float64(r.LeadZero) / float64(max(r.LeadChecks, 1))
		t.Logf("rank %d: %d of %d lead checks short of the next batch", r.Rank, r.LeadZero, r.LeadChecks)
		if r.LeadChecks < 20 || r.Rank == 0 && short > 0.5 || r.Rank == 1 && short < 0.5 {
			t.Fatalf("rank %d: %d of %d lead checks short of the next batch", r.Rank, r.LeadZero, r.LeadChecks)
		}
	}
	if lead := sample(text, "shardfs_rank_prefetch_lead_bytes", "rank", "0"); lead <= 0 {
		t.Fatalf("paced rank 0 has %v bytes ready ahead", lead)
	}
	if r := run(t, time.Minute, nil, "stats", "--count=1", "--interval=100ms", mp.dir); r.code != 0 || !strings.Contains(r.stdout, "anomaly starving_rank since") || !strings.Contains(r.stdout, "rank 1: epoch") {
		t.Fatalf("shardfs stats does not show the starving rank: %v", r)
	}
	// Rank 1 takes its time too: both clear within the window.
	stop1()
	stop1 = loopEpochs(mp, 1, time.Second)
	defer func() { stop1() }()
	start = time.Now()
	for {
		a := readFlowStats(t, mp).active()
		if !slices.ContainsFunc(a, func(s string) bool {
			return strings.HasPrefix(s, "starving_rank/") || strings.HasPrefix(s, "lead_at_zero/")
		}) {
			break
		}
		if time.Since(start) > 60*time.Second {
			t.Fatalf("60 s after rank 1 slowed down, anomalies %v", a)
		}
		time.Sleep(time.Second)
	}
	t.Logf("cleared %v after rank 1 slowed down", time.Since(start).Round(time.Second))
}

// Issue 29 items 1 and 3: thrash. Eight readers of one rank-epoch each
// read its batch files in a random order of their own (a loader that
// shuffles files the order already shuffled), sharing a 16 MiB cache for a
// 64 MB epoch: what the prefetcher fetched ahead of each file opened is
// evicted for the next jump before it is read. The evicted-unread counter
// moves, and the thrash anomaly names the cache. With a cache larger than
// the dataset, the same readers leave the counter at zero.
func TestThrashLive(t *testing.T) {
	pc, stores := proxiedDataset(t, synth.Imbalanced(1600, 4, 0.6, 20_000, 60_000, 43), "1MiB")
	jumping := func(mp *mountProc) (stop func()) {
		quit := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), 43))
				for e := 0; ; e++ {
					files := batchFiles(t, filepath.Join(mp.dir, "epochs", fmt.Sprintf("%04d", e), "rank-000"))
					for _, i := range rng.Perm(len(files)) {
						select {
						case <-quit:
							return
						default:
						}
						if _, err := os.ReadFile(files[i]); err != nil {
							t.Error(err)
							return
						}
					}
				}
			}()
		}
		return func() { close(quit); wg.Wait() }
	}
	for _, p := range pc.proxies {
		toxitest.Latency(t, p, 10, 0)
	}
	small := mountShardfsEnv(t, nil, stores, "--batch-size=8", "--cache-size=16MiB", "--metrics-addr=127.0.0.1:0", "ds")
	stop := jumping(small)
	st, took := waitAnomaly(t, small, "thrash/cache", 60*time.Second)
	stop()
	text := scrape(t, small)
	if got := scalar(text, "shardfs_cache_evicted_unread_total"); got < float64(st.CacheEvictedUnread) || st.CacheEvictedUnread < 64 {
		t.Fatalf("evicted unread: %v in /metrics, %d in stats.json before it", got, st.CacheEvictedUnread)
	}
	t.Logf("thrash named after %v: %d chunks evicted unread of %v added; amplification %.2f", took.Round(100*time.Millisecond),
		st.CacheEvictedUnread, scalar(text, "shardfs_cache_inserted_total"), st.ReadAmplification)

	large := mountShardfsEnv(t, nil, stores, "--batch-size=8", "--cache-size=256MiB", "--metrics-addr=127.0.0.1:0", "ds")
	stop = jumping(large)
	time.Sleep(15 * time.Second)
	stop()
	if st := readFlowStats(t, large); st.CacheEvictedUnread != 0 || st.AnomaliesFired["thrash"] != 0 || st.BytesServed == 0 {
		t.Fatalf("a cache larger than the dataset: %d chunks evicted unread, %d thrash anomalies, %d bytes served", st.CacheEvictedUnread, st.AnomaliesFired["thrash"], st.BytesServed)
	}
}
