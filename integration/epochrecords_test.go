package integration

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/miniotest"
	"github.com/shardfs/shardfs/repository"
)

// recordEpochChild is a process of its own that records one epoch of run
// "u" of dataset "ds" (repository.RecordEpoch, as a --follow mount does), so
// the test can kill it with SIGKILL: TestMain runs it instead of the tests
// when SHARDFS_TEST_RECORD_EPOCH is set. It prints the version that
// counts for the epoch, and exits 1 with the error when there is none.
func recordEpochChild() int {
	epoch, _ := strconv.Atoi(os.Getenv("SHARDFS_TEST_EPOCH"))
	version, _ := strconv.Atoi(os.Getenv("SHARDFS_TEST_VERSION"))
	var stores []backend.Store
	for _, u := range strings.Split(os.Getenv("SHARDFS_TEST_STORES"), ",") {
		s, err := backend.Open(u, backend.OpenOptions{Credentials: &backend.Credentials{AccessKeyID: miniotest.AccessKey, SecretAccessKey: miniotest.SecretKey}})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		stores = append(stores, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := repository.RecordEpoch(ctx, stores, "ds", "u", epoch, func() (int, error) { return version, nil }, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("version %d\n", r.Version)
	return 0
}

// Epoch records (mount --follow) under random kills and random store
// failures. Each epoch, a recorder process is killed (SIGKILL) at a random
// moment while 0 to 3 of the 6 stores fail at random moments (3 is more
// than the data's RS(4,2) survives, but the log is a majority protocol of
// its own: it must stay safe, and with 3 down a killed recorder leaves
// copies short of a majority, for the next one to adopt); then, the stores
// back, a second recorder with another version runs to the end.
// Whatever each step left, readers that see different stores (every set of
// 5 of the 6, and all 6) take the same record, or none yet; a recorder
// that returned says the version every reader takes, the first's if it
// returned; and the second always returns, settling any split the first
// and the failures left.
func TestEpochRecordsUnderFailures(t *testing.T) {
	c := startCluster(t, 6)
	rng := rand.New(rand.NewPCG(73, 11))
	recorder := func(epoch, version int) (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "SHARDFS_TEST_RECORD_EPOCH=1", "SHARDFS_TEST_STORES="+strings.Join(c.urls, ","),
			fmt.Sprintf("SHARDFS_TEST_EPOCH=%d", epoch), fmt.Sprintf("SHARDFS_TEST_VERSION=%d", version))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		return cmd, &out
	}
	returned := func(out *bytes.Buffer) int {
		var v int
		if _, err := fmt.Sscanf(out.String(), "version %d", &v); err != nil {
			return 0
		}
		return v
	}
	// readers takes the version each view of the stores reads (0: none
	// counts yet), and fails the test if two views take different ones.
	readers := func(epoch int, when string) int {
		all := c.clients(t)
		taken := 0
		for skip := -1; skip < len(all); skip++ {
			view := slices.Clone(all)
			if skip >= 0 {
				view[skip] = deadStore{all[skip]}
			}
			got, err := repository.ReadEpochRecord(context.Background(), view, "ds", "u", epoch)
			if got == nil {
				continue
			}
			if err != nil {
				t.Fatalf("epoch %d %s: a record with an error: %+v %v", epoch, when, got, err)
			}
			if taken != 0 && got.Version != taken {
				t.Fatalf("epoch %d %s: readers took versions %d and %d", epoch, when, taken, got.Version)
			}
			taken = got.Version
		}
		return taken
	}
	firstReturned := 0
	// A recorder is killed at a moment drawn over the longest a whole one
	// took, so that kills fall before, during and after its writes.
	window := 150 * time.Millisecond
	// 10 epochs (each a kill of the first recorder and two stores cut) in
	// CI, 24 with SHARDFS_SOAK=long.
	epochs := soakCount(24, 10, 6)
	adopted := 0
	for epoch := range epochs {
		first, out := recorder(epoch, 1+epoch)
		if err := first.Start(); err != nil {
			t.Fatal(err)
		}
		down := rng.Perm(6)[:rng.IntN(4)]
		for _, d := range down {
			time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond)
			c.servers[d].Kill()
		}
		time.Sleep(time.Duration(rng.Int64N(int64(window))))
		first.Process.Kill()
		first.Wait()
		v1 := returned(out)
		if v1 != 0 {
			firstReturned++
		}
		during := readers(epoch, "with stores down")
		if v1 != 0 && during != 0 && during != v1 {
			t.Fatalf("epoch %d: the first recorder returned version %d, readers took %d", epoch, v1, during)
		}
		for _, d := range down {
			c.servers[d].Restart()
		}
		second, out2 := recorder(epoch, 100+epoch)
		t0 := time.Now()
		err := second.Run()
		window = max(window, time.Since(t0))
		if err != nil {
			t.Fatalf("epoch %d: the second recorder, every store up, failed: %v\n%s", epoch, err, out2)
		}
		v2 := returned(out2)
		if v1 != 0 && v2 != v1 {
			t.Fatalf("epoch %d: the first recorder returned version %d, the second %d", epoch, v1, v2)
		}
		if during != 0 && v2 != during {
			t.Fatalf("epoch %d: readers took version %d with stores down, the second recorder returned %d", epoch, during, v2)
		}
		if after := readers(epoch, "after"); after != v2 {
			t.Fatalf("epoch %d: the second recorder returned version %d, readers take %d", epoch, v2, after)
		}
		if during == 0 && v2 == 1+epoch {
			adopted++ // the first was killed part way, short of a majority
		}
		t.Logf("epoch %d: stores %v failed, the first recorder returned %d, readers took %d meanwhile; the second returned %d in %v", epoch, down, v1, during, v2, window.Round(time.Millisecond))
	}
	t.Logf("%d of %d first recorders returned before they were killed; %d left copies short of a majority that the second adopted", firstReturned, epochs, adopted)
}
