package integration

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/synth"
)

// Issue 23 item 3: sizes that come straight from a flag are bounded before
// anything is allocated (each of these took gigabytes, or the process).
func TestFlagsCannotAskForUnboundedMemory(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"every rank of a huge world", []string{"--world-size=2000000000", "--rank=all", "--tail=pad"}, "at most 65536"},
		{"a huge range of ranks", []string{"--world-size=2000000000", "--rank=0-1999999999"}, "more than 65536 ranks"},
		{"a padded batch larger than the epoch", []string{"--world-size=4", "--batch-size=2000000000", "--tail=pad"}, "--batch-size 2000000000 is larger than an epoch"},
		{"an epoch size past int32", []string{"--epoch-size=3000000000"}, "epoch size 3000000000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, time.Minute, []string{"GOMEMLIMIT=1GiB"}, append([]string{"plan", "--synthetic=1000"}, tc.args...)...)
			if r.code != 1 || !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stderr, "goroutine") {
				t.Fatalf("want exit 1 naming %q, no panic: %v", tc.want, r)
			}
		})
	}
}

// rewriteContent changes every file under dir in place, keeping its size,
// so a listing of keys, sizes and labels is the same as before.
func rewriteContent(t *testing.T, dir string) {
	t.Helper()
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for i := range b {
			b[i] ^= 0x5a
		}
		return os.WriteFile(p, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Issue 23 item 1: a part rerun over changed content (same keys and sizes,
// so the same ingest id) while commit ran wrote into the fragments being
// committed, and verify then found 9 of 25 shards lost. Twenty times, with
// random timing, a changed part 0 races the commit: the part never writes
// into those fragments, verify exits 0 each time, and commit's result names
// what happened. After the commit, a rerun over changed content is refused
// with a message that says what to do; over the same content it has
// nothing to do.
func TestRerunPartNeverWritesIntoACommit(t *testing.T) {
	c := startCluster(t, 3)
	stores := "--stores=" + strings.Join(c.urls, ",")
	rounds := 20
	if testing.Short() {
		rounds = 4
	}
	rng := rand.New(rand.NewPCG(23, 1))
	during, after := 0, 0
	for round := range rounds {
		name := fmt.Sprintf("race%02d", round)
		format := []string{"--format=1", "--format=2"}[round%2]
		src := writeSource(t, synth.Imbalanced(240, 4, 0.7, 2_000, 30_000, uint64(round)))
		common := []string{stores, "--data=2", "--parity=1", "--shard-size=256KiB", "--seed=3", format, "--job=j2"}
		part := func(i int) []string {
			return append(append(append([]string{"ingest"}, common...), fmt.Sprintf("--part=%d/3", i)), src, name)
		}
		for i := range 3 {
			if r := run(t, 2*time.Minute, nil, part(i)...); r.code != 0 {
				t.Fatalf("round %d part %d/3: %v", round, i, r)
			}
		}
		rewriteContent(t, src)
		var wg sync.WaitGroup
		var commitRes, partRes result
		wg.Add(2)
		delay := time.Duration(rng.IntN(400)) * time.Millisecond
		go func() { defer wg.Done(); commitRes = run(t, 2*time.Minute, nil, "commit", stores, name) }()
		go func() { defer wg.Done(); time.Sleep(delay); partRes = run(t, 2*time.Minute, nil, part(0)...) }()
		wg.Wait()
		if commitRes.code != 0 {
			t.Fatalf("round %d: commit: %v", round, commitRes)
		}
		if partRes.code == 0 || !strings.Contains(partRes.stderr, "--job") {
			t.Fatalf("round %d (part %v after commit started): the rerun part over changed content was not refused, naming --job: %v", round, delay, partRes)
		}
		if r := run(t, 2*time.Minute, nil, "verify", stores, name); r.code != 0 {
			t.Fatalf("round %d (part %v after commit started): verify after the race: %v\npart: %v", round, delay, r, partRes)
		}
		if strings.Contains(partRes.stderr, "differs from what was committed") {
			after++
		} else {
			during++
		}
		if round == rounds-1 {
			t.Logf("%d rounds: the part was refused %d times before the commit was visible to it, %d times after", rounds, during, after)
		}
		if round > 0 {
			continue
		}
		// After the commit: changed content is refused, saying what to do,
		// and nothing is written.
		r := run(t, 2*time.Minute, nil, part(1)...)
		if r.code == 0 || !strings.Contains(r.stderr, "differs from what was committed") || !strings.Contains(r.stderr, "--force") {
			t.Fatalf("a rerun over changed content after the commit: want a refusal saying what to do: %v", r)
		}
		if r := run(t, 2*time.Minute, nil, "verify", stores, name); r.code != 0 {
			t.Fatalf("verify after the refused rerun: %v", r)
		}
		// The same content as committed: nothing to do, exit 0.
		rewriteContent(t, src) // back to the committed bytes
		if r := run(t, 2*time.Minute, nil, part(2)...); r.code != 0 || !strings.Contains(r.stdout+r.stderr, "nothing to do") {
			t.Fatalf("a rerun over the committed content: want nothing to do: %v", r)
		}
		// And commit has nothing left to do: no stray part record.
		if r := run(t, 2*time.Minute, nil, "commit", stores, name); r.code != 0 || !strings.Contains(r.stdout+r.stderr, "nothing to do") {
			t.Fatalf("commit after the reruns: %v", r)
		}
	}
}
