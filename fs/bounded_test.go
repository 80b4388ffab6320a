package fs_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/internal/testds"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/metrics"
)

// peakRSS is this process's high-water resident set (VmHWM), in bytes: the
// mount runs in it, so what a listing costs the daemon shows here.
func peakRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}

// currentRSS is this process's resident set now (VmRSS), or 0.
func currentRSS() int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// countEntries lists dir in chunks and counts its entries, keeping none, so
// the test's own memory does not grow with the listing.
func countEntries(t *testing.T, dir string) int {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		return -1
	}
	defer f.Close()
	n := 0
	for {
		names, err := f.Readdirnames(256)
		n += len(names)
		if err != nil || len(names) == 0 {
			return n
		}
	}
}

// Issue 23 item 3: any reader could kill the daemon. With open-ended epochs
// a lookup of epochs/99999999 made the next listing of epochs/ allocate an
// entry for every epoch below it (792 MB, then out of memory). Random huge
// names are looked up in every directory of the mount, then every directory
// is listed by several goroutines and ls processes at once, with both cores
// busy: the process's peak RSS grows by a bounded amount, and every listing
// is bounded in length.
func TestHugeNamesThenListingsStayBounded(t *testing.T) {
	requireFUSE(t)
	met := metrics.New(make([]string, 6))
	ds := testds.New(t, synth.Spec{Counts: []int{40, 20, 9}, MinSize: 100, MaxSize: 2000, Seed: 5}, met)
	mnt := mountTree(t, ds, met, 0, []int{0, 1}, layout.Params{Seed: 1, World: 2, Batch: 4, Alpha: 1})

	dirs := []string{".", ".shardfs", "samples", "epochs", "epochs/0000", "epochs/0000/rank-000"}
	classes, err := os.ReadDir(filepath.Join(mnt, "samples"))
	if err != nil || len(classes) != 3 {
		t.Fatalf("samples/: %d classes, %v", len(classes), err)
	}
	for _, c := range classes {
		dirs = append(dirs, "samples/"+c.Name())
	}
	before := peakRSS(t)
	// On the code this test was written against, the listings below took the
	// process past 21 GB: stop it well before it takes the machine.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if rss := currentRSS(); rss > before+(1<<30) {
				fmt.Fprintf(os.Stderr, "TestHugeNamesThenListingsStayBounded: RSS %d MiB, more than 1 GiB over the %d MiB before the lookups; unmounting and exiting\n", rss>>20, before>>20)
				exec.Command("fusermount3", "-uz", mnt).Run()
				os.Exit(3)
			}
		}
	}()
	rng := rand.New(rand.NewPCG(23, 3))
	huge := func() string {
		switch rng.IntN(3) {
		case 0:
			return strconv.FormatUint(rng.Uint64N(1e12), 10)
		case 1:
			return strconv.FormatUint(99999999-rng.Uint64N(1000), 10)
		default:
			return fmt.Sprintf("%0*d", 4+rng.IntN(12), rng.Uint64N(1e15))
		}
	}
	looked := 0
	for i := 0; i < 400; i++ {
		d := dirs[rng.IntN(len(dirs))]
		var name string
		switch rng.IntN(4) {
		case 0:
			name = huge()
		case 1:
			name = "rank-" + huge()
		case 2:
			name = "batch-" + huge() + ".tar"
		default:
			name = strings.Repeat("9", 1+rng.IntN(200))
		}
		if _, err := os.Stat(filepath.Join(mnt, d, name)); err == nil {
			looked++
			if d == "epochs" {
				dirs = append(dirs, "epochs/"+name, "epochs/"+name+"/rank-001")
			}
		}
	}
	if looked == 0 {
		t.Fatal("no huge epoch number opened: the test looks up nothing that exists")
	}
	for _, d := range dirs {
		n := countEntries(t, filepath.Join(mnt, d))
		if n < 0 || n > 20_000 {
			t.Errorf("listing %s: %d entries", d, n)
		}
	}
	if got := countEntries(t, filepath.Join(mnt, "epochs")); got < 5 {
		t.Errorf("epochs/ lists %d entries, want at least the first 5", got)
	}
	grown := peakRSS(t) - before
	t.Logf("%d huge names opened, %d directories listed; peak RSS grew by %d MiB", looked, len(dirs), grown>>20)
	if grown > 64<<20 {
		t.Fatalf("peak RSS grew by %d MiB after huge lookups and listings, want at most 64 MiB", grown>>20)
	}

	// Again, every directory listed by four goroutines here and three ls
	// processes at once, with both cores kept busy by other work: the peak
	// grows by a bound of its own, whatever was looked up.
	beforeAtOnce := peakRSS(t)
	stopBurn := make(chan struct{})
	for range 2 * runtime.NumCPU() {
		go func() {
			for x := 0; ; x++ {
				select {
				case <-stopBurn:
					return
				default:
				}
			}
		}()
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, d := range dirs {
				n := countEntries(t, filepath.Join(mnt, d))
				if n < 0 || n > 20_000 {
					t.Errorf("listing %s: %d entries", d, n)
				}
			}
		}()
	}
	var lsOut [3]bytes.Buffer
	var lsErr [3]error
	for p := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			args := []string{"-f"}
			for _, d := range dirs {
				args = append(args, filepath.Join(mnt, d))
			}
			cmd := exec.Command("ls", args...)
			cmd.Stdout = &lsOut[p]
			lsErr[p] = cmd.Run()
		}()
	}
	wg.Wait()
	close(stopBurn)
	for p := range 3 {
		if lsErr[p] != nil || lsOut[p].Len() == 0 {
			t.Errorf("ls process %d: %v, %d bytes listed", p, lsErr[p], lsOut[p].Len())
		}
	}
	grown = peakRSS(t) - beforeAtOnce
	t.Logf("listed at once by 4 goroutines and 3 ls processes on busy cores: peak RSS grew by %d MiB more", grown>>20)
	if grown > 64<<20 {
		t.Fatalf("peak RSS grew by %d MiB more while the listings ran at once, want at most 64 MiB", grown>>20)
	}
	// The mount still answers.
	if _, err := os.ReadFile(filepath.Join(mnt, "epochs/0000/rank-000/index.csv")); err != nil {
		t.Fatal(err)
	}
}
