package cache

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Issue 55 item 4: --cache-dir is the user's directory too (a typo,
// $HOME, a CSI volume attribute), and the daemon runs as root. Before the
// fix the tier's first reservation deleted every *.tmp under it, and
// eviction every *.idx, *.meta and *.dat anywhere under it. Files of every
// name the tier uses, planted beside it, below it, inside a directory
// shaped like a namespace, behind a link inside the tier's own directory,
// and with the tier's own names outside it, survive a full cycle: fill
// past the limit (evicting), close, reopen (restart), fill again.
func TestDiskTouchesOnlyItsOwnFiles(t *testing.T) {
	cacheDir := t.TempDir()
	elsewhere := t.TempDir() // a link inside the tier points here
	plant := map[string]string{}
	for _, dir := range []string{cacheDir, filepath.Join(cacheDir, "ns"), filepath.Join(cacheDir, "projects", "deep"), elsewhere} {
		for _, name := range []string{"notes.tmp", "00000001.meta.77.tmp", "model.idx", "00000000.idx", "00000000.dat", "00000001.meta", "data.dat", "run.meta", ".usage", ".lock", ".usage.tmp"} {
			plant[filepath.Join(dir, name)] = "the user's " + name + " in " + dir
		}
	}
	for p, body := range plant {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sums := func() map[string][32]byte {
		out := map[string][32]byte{}
		for _, root := range []string{cacheDir, elsewhere} {
			filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
				if err == nil && e.Type().IsRegular() && !strings.HasPrefix(p, filepath.Join(cacheDir, TierDir)+"/") {
					b, _ := os.ReadFile(p)
					out[p] = sha256.Sum256(b)
				}
				return nil
			})
		}
		return out
	}
	before := sums()
	if len(before) != len(plant) {
		t.Fatalf("planted %d files, found %d", len(plant), len(before))
	}

	const limit = 16 << 20
	slots, data := testSlots(900, 4<<20, 55) // about 27 MiB: the limit is passed, and eviction runs
	evictions := int64(0)
	for round := range 2 {
		d, err := OpenDisk(cacheDir, "ns", limit)
		if err != nil {
			t.Fatal(err)
		}
		if round == 0 {
			// A link inside the tier's own directory, named as a namespace,
			// to the user's files elsewhere: never followed.
			os.MkdirAll(filepath.Join(cacheDir, TierDir), 0o755)
			if err := os.Symlink(elsewhere, filepath.Join(cacheDir, TierDir, "linked")); err != nil {
				t.Fatal(err)
			}
		}
		for i, s := range slots {
			d.Put(s, data[i])
			if i%50 == 0 {
				d.PutMeta(s.Shard, []byte("index object"))
			}
		}
		evictions += d.Evictions.Load()
		d.Close()
		// Read back through a fresh open (the tier keeps files it opened
		// before an eviction unlinked them for up to a second).
		d, err = OpenDisk(cacheDir, "ns", limit)
		if err != nil {
			t.Fatal(err)
		}
		held := 0
		buf := make([]byte, 64<<10)
		for i, s := range slots {
			if d.Get(s, buf[:s.Size]) {
				if string(buf[:s.Size]) != string(data[i]) {
					t.Fatalf("round %d: sample %d served other bytes", round, i)
				}
				held++
			}
		}
		d.Close()
		if held == 0 || held == len(slots) {
			t.Fatalf("round %d: the tier holds %d of %d samples; want some, not all (the limit is below the data)", round, held, len(slots))
		}
	}
	if evictions == 0 {
		t.Fatal("no eviction ran: the test did not exercise it")
	}
	after := sums()
	for p, sum := range before {
		got, ok := after[p]
		if !ok {
			t.Errorf("the user's %s was deleted", p)
		} else if got != sum {
			t.Errorf("the user's %s was changed", p)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("the tier wrote %s, outside %s", p, filepath.Join(cacheDir, TierDir))
		}
	}
}

// A directory named as the tier's, which shardfs did not make (no mark)
// and which holds files, is refused, named, and left as it is.
func TestDiskRefusesATierDirItDidNotMake(t *testing.T) {
	cacheDir := t.TempDir()
	theirs := filepath.Join(cacheDir, TierDir)
	if err := os.MkdirAll(filepath.Join(theirs, "ns"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(theirs, "ns", "00000000.idx"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := OpenDisk(cacheDir, "ns", 16<<20)
	if err == nil || !strings.Contains(err.Error(), theirs) || !strings.Contains(err.Error(), "choose another --cache-dir") {
		t.Fatalf("OpenDisk on a foreign %s: %v; want it refused, named, with the fix", TierDir, err)
	}
	if b, err := os.ReadFile(filepath.Join(theirs, "ns", "00000000.idx")); err != nil || string(b) != "mine" {
		t.Fatalf("the foreign file is now %q (%v)", b, err)
	}
	// A file in the tier's place: refused too.
	other := t.TempDir()
	os.WriteFile(filepath.Join(other, TierDir), []byte("x"), 0o644)
	if _, err := OpenDisk(other, "ns", 16<<20); err == nil || !strings.Contains(err.Error(), "is not a directory") {
		t.Fatalf("OpenDisk with a file named %s in the way: %v", TierDir, err)
	}
}

// Mounts that share a fresh --cache-dir and start together each find the
// tier's directory made by another, maybe before its mark or already with
// its lock: every one opens it. A CI run failed TestDiskBoundThreeProcesses
// when a second process listed the directory after the first had written
// its mark and lock but read the mark before it was there ("holds files
// (.lock among them) but not shardfs's mark"). Many rounds of goroutines at
// once, each round on a fresh directory; the mark is whole in every round.
func TestDiskFirstOpensRaceEachOther(t *testing.T) {
	rounds, openers := 200, 8
	if testing.Short() {
		rounds = 50
	}
	for r := range rounds {
		cacheDir := t.TempDir()
		var wg sync.WaitGroup
		errs := make([]error, openers)
		start := make(chan struct{})
		for i := range openers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				d, err := OpenDisk(cacheDir, fmt.Sprintf("ns%d", i%3), 16<<20)
				if err == nil {
					err = d.Close()
				}
				errs[i] = err
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: opener %d of %d on a fresh --cache-dir: %v", r, i, openers, err)
			}
		}
		if b, err := os.ReadFile(filepath.Join(cacheDir, TierDir, tierMark)); err != nil || string(b) != tierMarkText {
			t.Fatalf("round %d: the mark is %q (%v)", r, b, err)
		}
	}
}
