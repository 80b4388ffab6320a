package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/miniotest"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/repository"
)

// TestIngestVerifyRepairMinIO ingests an imbalanced dataset into six MinIO
// processes with RS(4,2), deletes every fragment on two of them, and requires
// verify to report the damage, repair to rebuild it, and verify to pass.
func TestIngestVerifyRepairMinIO(t *testing.T) {
	c := sharedCluster(t, 6)
	src := t.TempDir()
	total, err := synth.Write(src, synth.Imbalanced(1500, 8, 0.6, 20_000, 120_000, 3))
	if err != nil {
		t.Fatal(err)
	}
	stores := "--stores=" + strings.Join(c.urls, ",")

	r := run(t, 5*time.Minute, nil, "ingest", stores, "--data=4", "--parity=2", "--shard-size=8MiB", src, "train")
	if r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	if !strings.Contains(r.stdout, "committed train: 1500 samples in 8 strata") {
		t.Fatalf("ingest summary missing: %v", r)
	}
	t.Logf("ingest of %d MB into 6 MinIO processes: %.1f MB/s (wall clock of the whole command)", total/1e6, float64(total)/1e6/r.elapsed.Seconds())

	if r := run(t, 5*time.Minute, nil, "verify", stores, "train"); r.code != 0 || !strings.Contains(r.stdout, "OK:") {
		t.Fatalf("verify of a fresh dataset: %v", r)
	}
	if r := run(t, time.Minute, nil, "ingest", stores, "--data=4", "--parity=2", src, "train"); r.code == 0 || !strings.Contains(r.stderr, "--force") {
		t.Fatalf("re-ingest without --force must refuse and name --force: %v", r)
	}

	// Lose two stores' fragments (m = 2).
	ctx := context.Background()
	deleted := 0
	for _, i := range []int{1, 4} {
		s := c.store(t, i)
		keys, err := s.List(ctx, repository.DataPrefix("train"))
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if err := s.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
			deleted++
		}
	}
	r = run(t, 5*time.Minute, nil, "verify", stores, "train")
	if r.code != 1 {
		t.Fatalf("verify after losing 2 stores: want exit 1 (damaged, recoverable): %v", r)
	}
	if got := len(regexp.MustCompile(`damaged: shard \d+ fragment \d+ on store [14] .*\[recoverable\]`).FindAllString(r.stdout, -1)); got != deleted {
		t.Fatalf("verify reported %d damaged fragments on stores 1 and 4, %d were deleted: %v", got, deleted, r)
	}
	if r := run(t, 5*time.Minute, nil, "repair", stores, "train"); r.code != 0 {
		t.Fatalf("repair: %v", r)
	}
	if r := run(t, 5*time.Minute, nil, "verify", stores, "train"); r.code != 0 || !strings.Contains(r.stdout, "OK:") {
		t.Fatalf("verify after repair: %v", r)
	}

	// A third lost store is past m: verify says unrecoverable, repair writes nothing.
	for _, i := range []int{0, 2, 5} {
		s := c.store(t, i)
		keys, _ := s.List(ctx, repository.DataPrefix("train"))
		for _, k := range keys {
			s.Delete(ctx, k)
		}
	}
	if r := run(t, 5*time.Minute, nil, "verify", stores, "train"); r.code != 2 || !strings.Contains(r.stdout, "UNRECOVERABLE") {
		t.Fatalf("verify with 3 stores lost: want exit 2: %v", r)
	}
	before, _ := c.store(t, 3).List(ctx, "train/")
	if r := run(t, 5*time.Minute, nil, "repair", stores, "train"); r.code != 2 {
		t.Fatalf("repair of an unrecoverable dataset: want exit 2: %v", r)
	}
	for _, i := range []int{0, 2, 5} {
		if keys, _ := c.store(t, i).List(ctx, repository.DataPrefix("train")); len(keys) != 0 {
			t.Fatalf("repair wrote %d objects to store %d of an unrecoverable dataset", len(keys), i)
		}
	}
	if after, _ := c.store(t, 3).List(ctx, "train/"); len(after) != len(before) {
		t.Fatalf("repair changed store 3: %d objects before, %d after", len(before), len(after))
	}
}

// TestIngestBadInput covers the errors a user meets first.
func TestIngestBadInput(t *testing.T) {
	c := startCluster(t, 3)
	src := t.TempDir()
	if _, err := synth.Write(src, synth.Spec{Counts: []int{5, 3}, MinSize: 100, MaxSize: 200, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	stores := "--stores=" + strings.Join(c.urls, ",")
	empty := t.TempDir()
	listing := filepath.Join(t.TempDir(), "list.csv")
	os.WriteFile(listing, []byte("path,label\n../etc/passwd,x\n"), 0o644)
	dupDir := t.TempDir()
	os.WriteFile(filepath.Join(dupDir, "a.bin"), []byte("sample"), 0o644)
	dup := filepath.Join(dupDir, "dup.csv")
	os.WriteFile(dup, []byte("a.bin,x\na.bin,y\n"), 0o644)

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"wrong store count", []string{"ingest", stores, "--data=4", "--parity=2", src, "x"}, "k+m = 6"},
		{"k < 1", []string{"ingest", stores, "--data=0", "--parity=3", src, "x"}, "--data 0"},
		{"m < 0", []string{"ingest", stores, "--data=4", "--parity=-1", src, "x"}, "--parity -1"},
		{"empty source", []string{"ingest", stores, "--data=2", "--parity=1", empty, "x"}, "no samples found"},
		{"dotdot key", []string{"ingest", stores, "--data=2", "--parity=1", listing, "x"}, `".."`},
		{"duplicate key", []string{"ingest", stores, "--data=2", "--parity=1", dup, "x"}, "duplicate key"},
		{"missing bucket, not to be created", []string{"ingest", "--no-create-buckets", "--stores=" + strings.Replace(strings.Join(c.urls, ","), "/shardfs/", "/nobucket/", 1), "--data=2", "--parity=1", src, "x"}, "bucket does not exist"},
		{"credentials in URL", []string{"ingest", "--stores=http://user:hunter2@127.0.0.1:1/b,x,y", "--data=2", "--parity=1", src, "x"}, "credentials in URLs are refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, time.Minute, nil, tc.args...)
			if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("want failure mentioning %q: %v", tc.want, r)
			}
			if strings.Contains(r.stderr+r.stdout, "hunter2") || strings.Contains(r.stderr+r.stdout, miniotest.SecretKey) {
				t.Fatalf("output leaks a secret: %v", r)
			}
		})
	}
	t.Run("missing bucket is created", func(t *testing.T) {
		urls := strings.Replace(strings.Join(c.urls, ","), "/shardfs/", "/newbucket/", 1)
		r := run(t, 2*time.Minute, nil, "ingest", "--stores="+urls, "--data=2", "--parity=1", src, "fresh")
		if r.code != 0 || !strings.Contains(r.stdout, "created the bucket of store 0") || strings.Contains(r.stdout, "store 1,") {
			t.Fatalf("ingest into a missing bucket: want it created (store 0 only) and the ingest done: %v", r)
		}
		if v := run(t, 2*time.Minute, nil, "verify", "--stores="+urls, "fresh"); v.code != 0 {
			t.Fatalf("verify after ingest into a created bucket: %v", v)
		}
		// Run again: the bucket exists now, and nothing says it was made.
		r = run(t, 2*time.Minute, nil, "ingest", "--stores="+urls, "--data=2", "--parity=1", "--force", src, "fresh")
		if r.code != 0 || strings.Contains(r.stdout, "created the bucket") {
			t.Fatalf("second ingest: %v", r)
		}
	})
	t.Run("wrong credentials", func(t *testing.T) {
		r := run(t, time.Minute, []string{"AWS_SECRET_ACCESS_KEY=not-the-secret"}, "ingest", stores, "--data=2", "--parity=1", src, "x")
		if r.code == 0 || !strings.Contains(r.stderr, "access denied") || !strings.Contains(r.stderr, c.urls[0][len("http://"):len("http://")+10]) {
			t.Fatalf("want access denied naming the store: %v", r)
		}
		if strings.Contains(r.stderr, "not-the-secret") {
			t.Fatalf("secret leaked: %v", r)
		}
	})
	t.Run("store down", func(t *testing.T) {
		c.servers[2].Kill()
		r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", src, "down")
		if r.code == 0 || !strings.Contains(r.stderr, c.servers[2].Addr) {
			t.Fatalf("want failure naming store %s: %v", c.servers[2].Addr, r)
		}
		c.servers[2].Restart()
		if r := run(t, 2*time.Minute, nil, "verify", stores, "down"); r.code != 3 || !strings.Contains(r.stderr, "not found") {
			t.Fatalf("a failed ingest must leave no dataset: %v", r)
		}
		if r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", src, "down"); r.code != 0 {
			t.Fatalf("rerun after the store came back: %v", r)
		}
	})
}

// TestKillDuringIngest kills the ingest with SIGKILL at several moments; the
// dataset must then be invisible or fully verifiable, and a rerun must succeed.
func TestKillDuringIngest(t *testing.T) {
	c := sharedCluster(t, 3)
	src := t.TempDir()
	if _, err := synth.Write(src, synth.Imbalanced(400, 5, 0.7, 20_000, 80_000, 9)); err != nil {
		t.Fatal(err)
	}
	stores := "--stores=" + strings.Join(c.urls, ",")
	full := run(t, 2*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--shard-size=1MiB", src, "timing")
	if full.code != 0 {
		t.Fatalf("uninterrupted ingest: %v", full)
	}
	// Kill moments spread over the span of an uninterrupted run (and a bit past it).
	rng := rand.New(rand.NewPCG(20, 26))
	// 8 kill moments in CI, 20 with SHARDFS_SOAK=long.
	n := soakCount(20, 8, 4)
	invisible, committed := 0, 0
	for i := 0; i < n; i++ {
		after := time.Duration(rng.Int64N(int64(full.elapsed) * 6 / 5))
		name := fmt.Sprintf("killed%02d", i)
		cmd := execShardfs("ingest", stores, "--data=2", "--parity=1", "--shard-size=1MiB", src, name)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(after)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		r := run(t, 2*time.Minute, nil, "verify", stores, name)
		switch {
		case r.code == 0:
			committed++
		case r.code == 3 && strings.Contains(r.stderr, "not found"):
			invisible++
		default:
			t.Fatalf("killed after %v: dataset is neither invisible nor intact: %v", after, r)
		}
		if r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--shard-size=1MiB", "--force", src, name); r.code != 0 {
			t.Fatalf("rerun after kill: %v", r)
		}
		if r := run(t, 2*time.Minute, nil, "verify", stores, name); r.code != 0 {
			t.Fatalf("verify after rerun: %v", r)
		}
	}
	t.Logf("%d kills over a %v ingest: %d left no dataset, %d had committed an intact one, 0 half", n, full.elapsed.Round(time.Millisecond), invisible, committed)
}
