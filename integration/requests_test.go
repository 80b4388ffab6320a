package integration

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// getCounts is what stats.json says of the GETs a mount sent.
type getCounts struct {
	BytesServed int64            `json:"bytes_served"`
	ByKind      map[string]int64 `json:"gets_by_kind"`
	BytesByKind map[string]int64 `json:"get_bytes_by_kind"`
	Stores      []struct {
		Requests int64 `json:"requests"`
		Bytes    int64 `json:"bytes"`
	} `json:"stores"`
}

func readGETs(t *testing.T, mnt string) getCounts {
	t.Helper()
	var g getCounts
	if err := json.Unmarshal(mustRead(t, filepath.Join(mnt, ".shardfs/stats.json")), &g); err != nil {
		t.Fatal(err)
	}
	var kinds, stores int64
	for _, n := range g.ByKind {
		kinds += n
	}
	for _, s := range g.Stores {
		stores += s.Requests
	}
	if kinds != stores || len(g.ByKind) != 4 {
		t.Fatalf("gets_by_kind %v add up to %d, the stores counted %d requests", g.ByKind, kinds, stores)
	}
	return g
}

// Issue 46 item 3: a mount counts every GET it sends by why. With prefetch
// off, a whole epoch is demand GETs; with it on, most are prefetch; with a
// store stopped, the rebuilds are degraded. The kinds add up to the
// stores' requests, and stats prints them per GB served.
func TestGETsByKind(t *testing.T) {
	c := startCluster(t, 6)
	ingestSynthetic(t, c.urls, 600, "train", 4, 2)
	stores := "--stores=" + strings.Join(c.urls, ",")
	read := func(mnt string) {
		t.Helper()
		if b := mustRead(t, filepath.Join(mnt, "epochs/0000/rank-000/epoch.tar")); len(b) == 0 {
			t.Fatal("empty epoch.tar")
		}
	}

	demand := mountShardfs(t, stores, "--batch-size=16", "--no-prefetch", "train")
	read(demand)
	g := readGETs(t, demand)
	if g.ByKind["demand"] == 0 || g.ByKind["prefetch"] != 0 || g.ByKind["degraded"] != 0 {
		t.Fatalf("--no-prefetch, all stores up: %v; want demand GETs only", g.ByKind)
	}

	ahead := mountShardfs(t, stores, "--batch-size=16", "train")
	read(ahead)
	g = readGETs(t, ahead)
	if g.ByKind["prefetch"] == 0 || g.BytesByKind["prefetch"] == 0 {
		t.Fatalf("prefetch on: %v; want prefetch GETs", g.ByKind)
	}
	st := run(t, time.Minute, nil, "stats", "--count=1", "--interval=100ms", ahead)
	if m := regexp.MustCompile(`(?m)^GETs to the stores: (\d+) \(\d+ demand, (\d+) prefetch, \d+ hedge, \d+ degraded\); \d+ per GB served$`).FindStringSubmatch(st.stdout); st.code != 0 || m == nil || m[2] == "0" {
		t.Fatalf("stats: want a line of GETs by kind: %v", st)
	}

	c.servers[1].Kill()
	down := mountShardfs(t, stores, "--batch-size=16", "--no-prefetch", "--seed=3", "train")
	read(down)
	g = readGETs(t, down)
	if g.ByKind["degraded"] == 0 {
		t.Fatalf("a store stopped: %v; want degraded GETs", g.ByKind)
	}
	t.Logf("a store stopped: GETs by kind %v for %d bytes served", g.ByKind, g.BytesServed)
}
