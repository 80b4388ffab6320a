package integration

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/synth"
)

// A mount fetches its job's first batches as it starts, by default, when
// it can tell which ranks this node reads (issue 57 item 4: the first
// batch within 2x the floor's): one rank shown, or the ranks --rank names.
// A mount that shows every rank of a larger job by default fetches nothing
// until a file is read, and says why and what to give. --prime=false turns
// it off. Priming is seen as bytes fetched ahead with no file read.
func TestPrimeByDefaultWhereTheRanksAreKnown(t *testing.T) {
	_, urls := localStores(t, 3)
	stores := "--stores=" + strings.Join(urls, ",")
	src := writeSource(t, synth.Spec{Counts: []int{60, 30, 10}, MinSize: 20_000, MaxSize: 60_000, Seed: 57})
	if r := run(t, time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", src, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	const primed, notPrimed = "fetching the first batches ahead of the trainer", "not fetching the first batches ahead"
	logOf := func(m *mountProc) string {
		b, _ := os.ReadFile(m.log)
		return string(b)
	}
	// primesWithoutReads waits, bounded, for bytes fetched ahead of a
	// reader that never came: only the stats file is read.
	primesWithoutReads := func(m *mountProc, what string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for readMountStats(t, m.dir).PrefetchBytes == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: nothing fetched 30 s after the mount, no file read; log:\n%s", what, logOf(m))
			}
			time.Sleep(50 * time.Millisecond)
		}
		if !strings.Contains(logOf(m), primed) || strings.Contains(logOf(m), notPrimed) {
			t.Fatalf("%s: the log does not say it primes:\n%s", what, logOf(m))
		}
	}

	one := mountShardfsEnv(t, nil, stores, "--batch-size=8", "ds")
	primesWithoutReads(one, "one rank, default flags")
	named := mountShardfsEnv(t, nil, stores, "--batch-size=8", "--world-size=4", "--rank=1-2", "ds")
	primesWithoutReads(named, "--world-size 4 --rank 1-2")

	for _, c := range []struct {
		args []string
		log  string
	}{
		{[]string{"--world-size=4"}, notPrimed + ": the mount shows all 4 ranks of --world-size"},
		{[]string{"--prime=false"}, ""},
	} {
		m := mountShardfsEnv(t, nil, append([]string{stores, "--batch-size=8"}, append(c.args, "ds")...)...)
		// The mounts that prime fetched within this long; these had as long.
		time.Sleep(time.Second)
		if n := readMountStats(t, m.dir).PrefetchBytes; n != 0 {
			t.Errorf("%v: %d bytes fetched ahead with no file read; want none", c.args, n)
		}
		if l := logOf(m); c.log != "" && !strings.Contains(l, c.log) || strings.Contains(l, primed) {
			t.Errorf("%v: want the log to say %q, and not %q:\n%s", c.args, c.log, primed, l)
		}
	}
}
