package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shardfs/shardfs/backend"
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
	c := sharedCluster(t, 3)
	stores := "--stores=" + strings.Join(c.urls, ",")
	// 8 races with the commit in CI, 20 with SHARDFS_SOAK=long.
	rounds := soakCount(20, 8, 4)
	rng := rand.New(rand.NewPCG(23, 1))
	during, after := 0, 0
	// One committer holds on a busy machine too: both cores spin while the
	// part and the commit race.
	stop := burnCPU(2)
	defer stop()
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

// minioFiles lists the files below a MinIO data directory whose path holds
// every one of parts, sorted.
func minioFiles(t *testing.T, dataDir string, parts ...string) []string {
	t.Helper()
	var out []string
	filepath.Walk(dataDir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return nil
		}
		for _, s := range parts {
			if !strings.Contains(p, s) {
				return nil
			}
		}
		out = append(out, p)
		return nil
	})
	return out
}

// flipByte flips the byte at off in file p (off < 0: in the middle), in place.
func flipByte(t *testing.T, p string, off int) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if off < 0 {
		off = len(b) / 2
	}
	b[off] ^= 0xff
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Issue 23 item 5: when MinIO itself finds a flipped byte in its on-disk
// part file it answers 503 SlowDownRead; verify called the store down
// ("run verify again when they are back", exit 3) and repair refused. A
// store that answers is not down: the fragment is reported damaged with
// MinIO's cause, repair rebuilds it, and verify is then clean.
func TestRepairMinIOBitrot(t *testing.T) {
	c := startCluster(t, 3)
	stores := "--stores=" + strings.Join(c.urls, ",")
	src := writeSource(t, synth.Imbalanced(120, 3, 0.7, 20_000, 60_000, 5))
	if r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--shard-size=2MiB", src, "rot"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	// Fragments of a 2 MiB shard are about 1 MiB: MinIO keeps them in part files.
	parts := minioFiles(t, c.servers[1].DataDir, "/rot/data/", "part.1")
	if len(parts) < 2 {
		t.Fatalf("store 1 holds %d part files of fragments, want some", len(parts))
	}
	// MinIO answers a read of a part file that fails its bit-rot check with
	// 503 SlowDownRead, or by cutting the body it has begun (what this build
	// does at both of these offsets).
	flipByte(t, parts[0], 100)
	flipByte(t, parts[len(parts)-1], -1)

	r := run(t, 2*time.Minute, nil, "verify", stores, "rot")
	if r.code != 1 || strings.Contains(r.stdout+r.stderr, "did not answer") || strings.Count(r.stdout, "damaged: shard") != 2 {
		t.Fatalf("verify with MinIO bitrot in two fragments: want exit 1 with both fragments damaged, no store called down: %v", r)
	}
	if strings.Count(r.stdout, "the store answers, but not for this fragment") != 2 {
		t.Fatalf("verify does not name MinIO's answers: %v", r)
	}
	if r := run(t, 2*time.Minute, nil, "repair", stores, "rot"); r.code != 0 || !strings.Contains(r.stdout, "wrote 2 objects") {
		t.Fatalf("repair: %v", r)
	}
	if r := run(t, 2*time.Minute, nil, "verify", stores, "rot"); r.code != 0 {
		t.Fatalf("verify after repair: %v", r)
	}
}

// Issue 23 item 4: with every copy of one shard's index replaced by another
// dataset's and every copy of another's deleted, verify said "could not
// check" (exit 3) and repair wrote nothing, so a shard that had lost a
// fragment stayed one loss from gone. Now verify names the lost indexes
// (exit 2) and repair mends everything else.
func TestLostIndexDoesNotBlockRepair(t *testing.T) {
	c := sharedCluster(t, 3)
	stores := "--stores=" + strings.Join(c.urls, ",")
	common := []string{"ingest", stores, "--data=2", "--parity=1", "--shard-size=128KiB", "--format=2"}
	src := writeSource(t, synth.Imbalanced(200, 3, 0.7, 2_000, 20_000, 8))
	if r := run(t, 2*time.Minute, nil, append(common, src, "ds")...); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	other := writeSource(t, synth.Imbalanced(200, 3, 0.7, 2_000, 20_000, 9))
	if r := run(t, 2*time.Minute, nil, append(common, other, "other")...); r.code != 0 {
		t.Fatalf("ingest other: %v", r)
	}
	ctx := t.Context()
	keyOf := func(s backend.Store, name, kind string, shard int) string {
		keys, err := s.List(ctx, name+"/"+kind+"/")
		if err != nil {
			t.Fatal(err)
		}
		suffix := fmt.Sprintf("/%08d", shard)
		for _, k := range keys {
			if strings.HasSuffix(k, suffix) || strings.Contains(k, suffix+".") {
				return k
			}
		}
		t.Fatalf("no %s of shard %d of %s among %d keys", kind, shard, name, len(keys))
		return ""
	}
	for i := range 3 {
		s := c.store(t, i)
		other := keyOf(s, "other", "index", 5)
		size, err := s.Stat(ctx, other)
		if err != nil {
			t.Fatal(err)
		}
		foreign := make([]byte, size)
		if err := s.ReadAt(ctx, other, foreign, 0); err != nil {
			t.Fatal(err)
		}
		if err := s.Put(ctx, keyOf(s, "ds", "index", 5), foreign); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, keyOf(s, "ds", "index", 7)); err != nil {
			t.Fatal(err)
		}
	}
	// Shard 3 loses one fragment of three: recoverable.
	s0 := c.store(t, 0)
	keys, _ := s0.List(ctx, "ds/data/")
	var frag string
	for _, k := range keys {
		if strings.Contains(k, "/00000003.") {
			frag = k
		}
	}
	if frag == "" {
		t.Fatal("store 0 holds no fragment of shard 3")
	}
	s0.Delete(ctx, frag)

	r := run(t, 2*time.Minute, nil, "verify", stores, "ds")
	if r.code != 2 || !strings.Contains(r.stdout, "LOST INDEX: shard 5") || !strings.Contains(r.stdout, "LOST INDEX: shard 7") ||
		!strings.Contains(r.stdout, "damaged: shard 3 fragment") || !strings.Contains(r.stderr, "[5 7] lost every copy of their index") {
		t.Fatalf("verify: want exit 2 naming the lost indexes of shards 5 and 7 and shard 3's damage: %v", r)
	}
	r = run(t, 2*time.Minute, nil, "repair", stores, "ds")
	if r.code != 2 || !strings.Contains(r.stdout, "wrote 1 objects") || !strings.Contains(r.stderr, "shards [5 7] lost every copy of their index") {
		t.Fatalf("repair: want shard 3's fragment written and exit 2 naming shards 5 and 7: %v", r)
	}
	if _, err := s0.Stat(ctx, frag); err != nil {
		t.Fatalf("shard 3's fragment after repair: %v", err)
	}
	r = run(t, 2*time.Minute, nil, "verify", stores, "ds")
	if r.code != 2 || strings.Contains(r.stdout, "damaged: shard 3") || !strings.Contains(r.stdout, "LOST INDEX: shard 5") {
		t.Fatalf("verify after repair: want only the lost indexes left: %v", r)
	}
}

// Issue 23 item 5: a deleted bucket, or credentials a store refuses, were
// reported as a store that "did not answer … run verify again when they are
// back", for good. Verify names the cause and the fix; repair mends what
// the stores that answer hold.
func TestStoreThatRefusesIsNamed(t *testing.T) {
	c := startCluster(t, 4)
	stores := "--stores=" + strings.Join(c.urls, ",")
	src := writeSource(t, synth.Imbalanced(100, 3, 0.7, 2_000, 20_000, 4))
	if r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=2", "--parity=2", "--shard-size=128KiB", src, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	// Store 0 loses one fragment; store 2's bucket is deleted.
	ctx := t.Context()
	s0 := c.store(t, 0)
	keys, _ := s0.List(ctx, "ds/data/")
	if len(keys) == 0 {
		t.Fatal("no fragments on store 0")
	}
	s0.Delete(ctx, keys[0])
	if err := os.RemoveAll(filepath.Join(c.servers[2].DataDir, "shardfs")); err != nil {
		t.Fatal(err)
	}
	r := run(t, 2*time.Minute, nil, "verify", stores, "ds")
	if r.code != 3 || !strings.Contains(r.stdout+r.stderr, "has no such bucket") || strings.Contains(r.stdout+r.stderr, "did not answer") {
		t.Fatalf("verify with a deleted bucket: want exit 3 naming the missing bucket, not a store that did not answer: %v", r)
	}
	r = run(t, 2*time.Minute, nil, "repair", stores, "ds")
	if r.code != 3 || !strings.Contains(r.stdout, "wrote 1 objects") || !strings.Contains(r.stderr, "has no such bucket") {
		t.Fatalf("repair with a deleted bucket: want store 0's fragment rebuilt and the bucket named: %v", r)
	}
	if _, err := s0.Stat(ctx, keys[0]); err != nil {
		t.Fatalf("store 0's fragment after repair: %v", err)
	}
	// Wrong credentials: refused, and named as such.
	r = run(t, 2*time.Minute, []string{"AWS_SECRET_ACCESS_KEY=wrong-secret"}, "verify", stores, "ds")
	if r.code != 3 || !strings.Contains(r.stdout+r.stderr, "AWS_SECRET_ACCESS_KEY") || strings.Contains(r.stdout+r.stderr, "did not answer") {
		t.Fatalf("verify with wrong credentials: want exit 3 naming the credentials: %v", r)
	}
}

// Issue 23 items 9, 11 and 12: inputs that were accepted without effect,
// with a misleading result, or with a panic.
func TestInputsWithoutEffectOrMisleading(t *testing.T) {
	_, urls := localStores(t, 3)
	stores := "--stores=" + strings.Join(urls, ",")
	for _, name := range []string{"web", "books"} {
		src := writeSource(t, synth.Imbalanced(120, 3, 0.7, 500, 2_000, uint64(len(name))))
		if r := run(t, time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", src, name); r.code != 0 {
			t.Fatalf("ingest %s: %v", name, r)
		}
	}
	t.Run("plan --alpha-schedule", func(t *testing.T) {
		r := run(t, time.Minute, nil, "plan", stores, "--batch-size=8", "--alpha-schedule=0:0,3:1", "--epochs=2", "web")
		if r.code != 0 || !strings.Contains(r.stdout, `alpha-schedule="0:0,3:1"`) || !strings.Contains(r.stdout, "target π ∝ n^0") {
			t.Fatalf("want the plan of the schedule, epoch 0 at alpha 0: %v", r)
		}
	})
	t.Run("huge mix weights", func(t *testing.T) {
		r := run(t, time.Minute, nil, "plan", stores, "--batch-size=8", "--mix=web:1e308,books:1e308")
		if r.code != 0 || !strings.Contains(r.stdout, "shares served: web 50%, books 50%") || strings.Contains(r.stderr, "panic") {
			t.Fatalf("want an even mix, printed: %v", r)
		}
		// Issue 55: info.json showed each weight of 1e308 as
		// 0.1390671161567001 (the weights scaled so their sum is finite).
		mnt := mountShardfs(t, stores, "--batch-size=8", "--mix=web:1e308,books:1e308")
		var info struct {
			Mix struct {
				Parts []struct{ Weight, Share float64 }
			}
		}
		if err := json.Unmarshal(mustRead(t, filepath.Join(mnt, ".shardfs", "info.json")), &info); err != nil {
			t.Fatal(err)
		}
		if p := info.Mix.Parts; len(p) != 2 || p[0].Weight != 1e308 || p[1].Weight != 1e308 || p[0].Share != 0.5 {
			t.Fatalf("info.json of --mix=web:1e308,books:1e308: %+v; want the weights as given, each a share of 0.5", p)
		}
	})
	t.Run("a mix weight too small to serve", func(t *testing.T) {
		r := run(t, time.Minute, nil, "plan", stores, "--batch-size=8", "--mix=web:1,books:1e-300")
		if r.code != 1 || !strings.Contains(r.stderr, "books's weight") || !strings.Contains(r.stderr, "never be served") {
			t.Fatalf("want the mix refused, naming books: %v", r)
		}
	})
	t.Run("mix shares are printed", func(t *testing.T) {
		r := run(t, time.Minute, nil, "plan", stores, "--batch-size=8", "--mix=web:3,books:1")
		if r.code != 0 || !strings.Contains(r.stdout, "shares served: web 75%, books 25%") {
			t.Fatalf("want the normalised mix printed: %v", r)
		}
	})
	t.Run("resume past the last epoch", func(t *testing.T) {
		mnt := t.TempDir()
		t.Cleanup(func() { exec.Command("fusermount3", "-uz", mnt).Run() })
		for _, cmd := range [][]string{
			{"mount", stores, "--batch-size=8", "--epochs=1", "--resume-at=5:0", "web", mnt},
			{"plan", stores, "--batch-size=8", "--epochs=1", "--resume-at=5:0", "web"},
		} {
			r := run(t, time.Minute, nil, cmd...)
			if r.code != 1 || !strings.Contains(r.stderr, "--epochs 6 or more") {
				t.Fatalf("%s: want --resume-at past --epochs refused, saying what to pass: %v", cmd[0], r)
			}
		}
	})
	t.Run("warm --mix", func(t *testing.T) {
		r := run(t, time.Minute, nil, "warm", stores, "--cache-dir="+t.TempDir(), "--mix=web:1,books:1")
		if r.code != 1 || !strings.Contains(r.stderr, "warm does not take --mix") {
			t.Fatalf("want warm --mix refused as such, not an argument count: %v", r)
		}
		if r := run(t, time.Minute, nil, "warm", "--help"); strings.Contains(r.stdout, "--mix") {
			t.Fatalf("warm --help lists --mix: %v", r)
		}
	})
	t.Run("warm says which mount reads what it warmed", func(t *testing.T) {
		r := run(t, time.Minute, nil, "warm", stores, "--cache-dir="+t.TempDir(), "--cache-dir-size=64MiB", "--batch-size=8", "--seed=99", "--world-size=2", "--rank=1", "web")
		if r.code != 0 || !strings.Contains(r.stdout, "ranks 1 read with --seed 99 --world-size 2 --batch-size 8") {
			t.Fatalf("want the order flags of what was warmed: %v", r)
		}
	})
}

// Issue 23 item 12: under load, a plain timeout was reported as "no intact
// manifest of train on any store", which reads like data loss.
func TestTimeoutIsNotDataLoss(t *testing.T) {
	c := startCluster(t, 3)
	stores := "--stores=" + strings.Join(c.urls, ",")
	src := writeSource(t, synth.Imbalanced(60, 3, 0.7, 500, 2_000, 3))
	if r := run(t, time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", src, "train"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	for _, s := range c.servers {
		if err := s.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer s.Signal(syscall.SIGCONT)
	}
	r := run(t, time.Minute, nil, "plan", stores, "--request-timeout=1s", "--batch-size=8", "train")
	if r.code == 0 || strings.Contains(r.stderr, "no intact manifest") || !strings.Contains(r.stderr, "nothing is known to be lost") {
		t.Fatalf("every store hung: want a timeout named as such, not lost data: %v", r)
	}
}

// Issue 23 item 10: localhost:PORT and 127.0.0.1:PORT were accepted as two
// stores, so two fragments of every shard shared one failure domain. Ingest
// writes a probe through each store and refuses stores that see each
// other's, naming both; it leaves no object behind.
func TestStoreAliasesRefused(t *testing.T) {
	c := sharedCluster(t, 2)
	alias := strings.Replace(c.urls[0], "127.0.0.1", "localhost", 1)
	if alias == c.urls[0] {
		t.Fatalf("store URL %s has no 127.0.0.1 to alias", c.urls[0])
	}
	src := writeSource(t, synth.Imbalanced(20, 2, 0.7, 500, 2_000, 3))
	r := run(t, time.Minute, nil, "ingest", "--stores="+strings.Join([]string{c.urls[0], c.urls[1], alias}, ","), "--data=2", "--parity=1", src, "ds")
	if r.code == 0 || !strings.Contains(r.stderr, "stores 0 ("+c.urls[0]+") and 2 ("+alias+") are the same place under two names") {
		t.Fatalf("want the alias refused, naming stores 0 and 2: %v", r)
	}
	for i := range 2 {
		keys, err := c.store(t, i).List(t.Context(), "ds/")
		if err != nil || len(keys) != 0 {
			t.Fatalf("store %d after the refused ingest holds %v (%v), want nothing", i, keys, err)
		}
	}
}

// Issue 23 item 6: SIGTERM or Ctrl-C while a file was open never ended the
// daemon: the unmount failed with EBUSY and a second signal was ignored.
// Now the daemon says what holds the mount and retries; a second signal
// unmounts lazily and exits, leaving no mount behind.
func TestSignalWithAFileOpen(t *testing.T) {
	_, urls := localStores(t, 3)
	stores := "--stores=" + strings.Join(urls, ",")
	src := writeSource(t, synth.Imbalanced(60, 3, 0.7, 500, 2_000, 6))
	if r := run(t, time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", src, "ds"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			mp := mountShardfsEnv(t, nil, stores, "--batch-size=4", "ds")
			f, err := os.Open(filepath.Join(mp.dir, "epochs/0000/rank-000/epoch.tar"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			mp.cmd.Process.Signal(sig)
			// Still up, and saying why, naming this process.
			deadline := time.Now().Add(20 * time.Second)
			var log []byte
			for time.Now().Before(deadline) && !bytes.Contains(log, []byte("the mount is busy")) {
				time.Sleep(100 * time.Millisecond)
				log, _ = os.ReadFile(mp.log)
			}
			if !bytes.Contains(log, []byte("the mount is busy")) || !bytes.Contains(log, []byte(fmt.Sprintf("pid %d", os.Getpid()))) {
				t.Fatalf("after one %v with a file open: want the busy mount and its holder in the log:\n%s", sig, log)
			}
			select {
			case <-mp.exited:
				t.Fatalf("the daemon exited with a file open after one %v", sig)
			default:
			}
			mp.cmd.Process.Signal(sig)
			select {
			case <-mp.exited:
			case <-time.After(20 * time.Second):
				t.Fatalf("the daemon did not exit within 20 s of a second %v", sig)
			}
			if isMounted(mp.dir) {
				t.Fatalf("%s is still mounted after the daemon exited", mp.dir)
			}
			if log, _ = os.ReadFile(mp.log); !bytes.Contains(log, []byte("unmounted lazily")) {
				t.Fatalf("want the lazy unmount logged:\n%s", log)
			}
			// The open file now fails; it never serves bytes.
			if _, err := f.ReadAt(make([]byte, 10), 0); err == nil {
				t.Fatal("a read of a file of the unmounted tree succeeded")
			}
		})
	}
}

// Issue 24: the shipped binary holds no test double. Its packages include
// no fault-injecting store and no FUSE ceiling, and it has neither mount's
// --inject-latency nor the ceiling-mount command; the test build has both.
func TestShippedBinaryHasNoTestDoubles(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "../cmd/shardfs").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "github.com/shardfs/shardfs/backend\n") {
		t.Fatalf("go list -deps ../cmd/shardfs lists no backend: the check reads the wrong thing:\n%s", out)
	}
	for _, double := range []string{"internal/faultstore", "internal/ceiling"} {
		if strings.Contains(string(out), double) {
			t.Errorf("the shipped binary depends on %s", double)
		}
	}
	r := run(t, time.Minute, nil, "mount", "--inject-latency=1ms", "x", t.TempDir())
	if r.code == 0 || !strings.Contains(r.stderr, "unknown flag: --inject-latency") {
		t.Errorf("shipped mount with --inject-latency: %v", r)
	}
	if r := run(t, time.Minute, nil, "ceiling-mount", t.TempDir()); r.code == 0 || !strings.Contains(r.stderr, "unknown command") {
		t.Errorf("shipped ceiling-mount: %v", r)
	}
	if out, err := execBinary(testBinary, "ceiling-mount", "--help").CombinedOutput(); err != nil || !strings.Contains(string(out), "in-memory file") {
		t.Errorf("test build's ceiling-mount --help: %v\n%s", err, out)
	}
}
