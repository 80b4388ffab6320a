package cache

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/shardfs/shardfs/verify"
)

// testSlots makes n samples of random sizes packed back to back into shards of about shardSize.
func testSlots(n int, shardSize int64, seed uint64) ([]Slot, [][]byte) {
	rng := rand.New(rand.NewPCG(seed, 1))
	var slots []Slot
	var data [][]byte
	shard, index, off := 0, 0, int64(0)
	for i := 0; i < n; i++ {
		size := int64(1000 + rng.IntN(60_000))
		if off+size > shardSize && index > 0 {
			shard, index, off = shard+1, 0, 0
		}
		b := make([]byte, size)
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		slots = append(slots, Slot{Shard: shard, Index: index, Off: off, Size: size, Sum: verify.Sum(b)})
		data = append(data, b)
		index++
		off += size
	}
	return slots, data
}

// du is what the tier's files occupy on disk, measured from outside.
func du(t *testing.T, root string) int64 {
	t.Helper()
	var total int64
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && filepath.Ext(p) != "" && (filepath.Ext(p) == ".dat" || filepath.Ext(p) == ".idx") {
			total += fi.Sys().(*syscall.Stat_t).Blocks * 512
		}
		return nil
	})
	return total
}

func TestDiskPutGetAcrossReopen(t *testing.T) {
	root := t.TempDir()
	slots, data := testSlots(200, 1<<20, 1)
	d, err := OpenDisk(root, "ds-ingest1", 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	for i, s := range slots {
		if d.Get(s, buf[:s.Size]) {
			t.Fatalf("sample %d found before it was put", i)
		}
		if !d.Put(s, data[i]) {
			t.Fatalf("put %d", i)
		}
	}
	// No Close: a killed daemon never closes; a new process must still see everything.
	d2, err := OpenDisk(root, "ds-ingest1", 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	for i, s := range slots {
		if !d2.Get(s, buf[:s.Size]) || !bytes.Equal(buf[:s.Size], data[i]) {
			t.Fatalf("sample %d not served back after reopening", i)
		}
	}
	if d2.Hits.Load() != 200 || d2.Corrupt.Load() != 0 {
		t.Fatalf("hits %d corrupt %d, want 200 and 0", d2.Hits.Load(), d2.Corrupt.Load())
	}
	// Another ingest of the dataset is another namespace: nothing of the first shows.
	d3, err := OpenDisk(root, "ds-ingest2", 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	defer d3.Close()
	for i, s := range slots[:20] {
		if d3.Get(s, buf[:s.Size]) {
			t.Fatalf("sample %d of another ingest served", i)
		}
	}
}

func TestDiskCorruptionIsNeverServed(t *testing.T) {
	root := t.TempDir()
	slots, data := testSlots(50, 1<<20, 2)
	d, err := OpenDisk(root, "ns", 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for i, s := range slots {
		d.Put(s, data[i])
	}
	// Flip one byte in the middle of every third sample, behind the tier's back.
	for i := 0; i < len(slots); i += 3 {
		s := slots[i]
		name := filepath.Join(root, TierDir, "ns", fmtShard(s.Shard)+".dat")
		f, err := os.OpenFile(name, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		var b [1]byte
		f.ReadAt(b[:], s.Off+s.Size/2)
		b[0] ^= 0x20
		f.WriteAt(b[:], s.Off+s.Size/2)
		f.Close()
	}
	buf := make([]byte, 64<<10)
	flipped := 0
	for i, s := range slots {
		ok := d.Get(s, buf[:s.Size])
		if i%3 == 0 {
			flipped++
			if ok {
				t.Fatalf("sample %d with a flipped byte was served", i)
			}
			continue
		}
		if !ok || !bytes.Equal(buf[:s.Size], data[i]) {
			t.Fatalf("intact sample %d not served", i)
		}
	}
	if d.Corrupt.Load() != int64(flipped) {
		t.Fatalf("%d corrupt samples counted, %d were flipped", d.Corrupt.Load(), flipped)
	}
	// The re-fetched bytes go back in and are served again.
	d.Put(slots[0], data[0])
	if !d.Get(slots[0], buf[:slots[0].Size]) || !bytes.Equal(buf[:slots[0].Size], data[0]) {
		t.Fatal("a re-fetched sample is not served after it was put back")
	}
}

func fmtShard(s int) string { return fmt.Sprintf("%08d", s) }

func TestDiskNeverExceedsItsLimit(t *testing.T) {
	root := t.TempDir()
	const limit = 20 << 20
	slots, data := testSlots(2000, 2<<20, 3) // ~60 MB of samples: 3x the limit
	a, err := OpenDisk(root, "ns-a", limit)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := OpenDisk(root, "ns-b", limit) // a second mount sharing the directory
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i, s := range slots {
		tier := a
		if i%2 == 1 {
			tier = b
		}
		tier.Put(s, data[i])
		if i%100 == 0 {
			if got := du(t, root); got > limit {
				t.Fatalf("after %d puts the tier holds %d bytes, limit %d", i+1, got, limit)
			}
		}
	}
	if got := du(t, root); got > limit || got < limit/2 {
		t.Fatalf("the tier holds %d bytes, want at most the limit %d and most of it used", got, limit)
	}
	if a.Evictions.Load()+b.Evictions.Load() == 0 {
		t.Fatal("3x the limit written and nothing evicted")
	}
	// What is still there verifies; what was evicted is a miss, never wrong bytes.
	buf := make([]byte, 64<<10)
	hits := 0
	for i, s := range slots {
		tier := a
		if i%2 == 1 {
			tier = b
		}
		if tier.Get(s, buf[:s.Size]) {
			hits++
			if !bytes.Equal(buf[:s.Size], data[i]) {
				t.Fatalf("sample %d: wrong bytes", i)
			}
		}
	}
	if hits == 0 || a.Corrupt.Load()+b.Corrupt.Load() != 0 {
		t.Fatalf("%d hits, %d corrupt after eviction", hits, a.Corrupt.Load()+b.Corrupt.Load())
	}
	// A later mount with a smaller limit shrinks the tier at once.
	c, err := OpenDisk(root, "ns-a", 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if got := du(t, root); got > 16<<20 {
		t.Fatalf("after opening with a 16 MiB limit the tier holds %d bytes", got)
	}
}

// Index objects (metadata format 2) kept in the tier survive a reopen, count
// against the limit with the shards' files, and are evicted like them.
func TestDiskMetaWithinLimit(t *testing.T) {
	root := t.TempDir()
	const limit = 16 << 20
	d, err := OpenDisk(root, "ns", limit)
	if err != nil {
		t.Fatal(err)
	}
	obj := func(i int) []byte { return bytes.Repeat([]byte{byte(i), byte(i >> 8)}, 128<<10) } // 256 KiB
	if !d.PutMeta(7, obj(7)) {
		t.Fatal("PutMeta into an empty tier failed")
	}
	d.Close()
	if d, err = OpenDisk(root, "ns", limit); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if b, ok := d.GetMeta(7); !ok || !bytes.Equal(b, obj(7)) {
		t.Fatalf("after a reopen: %d bytes, held %v", len(b), ok)
	}
	if _, ok := d.GetMeta(8); ok {
		t.Fatal("an index object never stored was found")
	}
	// 3x the limit of index objects: the tier stays within it.
	for i := range 3 * limit / (256 << 10) {
		d.PutMeta(100+i, obj(100+i))
		if got := du(t, root); got > limit {
			t.Fatalf("after %d index objects the tier holds %d bytes, limit %d", i+1, got, limit)
		}
	}
	if d.Evictions.Load() == 0 {
		t.Fatal("3x the limit written and nothing evicted")
	}
	last := 100 + 3*limit/(256<<10) - 1
	if b, ok := d.GetMeta(last); !ok || !bytes.Equal(b, obj(last)) {
		t.Fatalf("the last index object stored: %d bytes, held %v", len(b), ok)
	}
}

// TestDiskOpenFilesBounded: a mount reads and writes samples of more
// shards than it keeps open, from many goroutines at once, and holds at
// most maxOpenShards shards' two files open; every sample is still served
// back whole, with every core busy. It kept every shard it had touched
// open for its life before.
func TestDiskOpenFilesBounded(t *testing.T) {
	defer burnCPU(2 * runtime.NumCPU())()
	root := t.TempDir()
	d, err := OpenDisk(root, "ns", 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	countFDs := func() (int, error) {
		fds, err := os.ReadDir("/proc/self/fd")
		return len(fds), err
	}
	openFDs := func() int {
		n, err := countFDs()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	const shards = 3 * maxOpenShards
	slots := make([]Slot, shards)
	data := make([][]byte, shards)
	for i := range slots {
		data[i] = bytes.Repeat([]byte{byte(i), byte(i >> 8)}, 500+i%7)
		slots[i] = Slot{Shard: i, Index: i % 3, Off: int64(i%5) * 4096, Size: int64(len(data[i])), Sum: verify.Sum(data[i])}
	}
	before := openFDs()
	peak := 0
	// While the goroutines work, a dropped shard's files stay open until
	// the call using them is done: at most one shard more per call in
	// flight than the LRU holds. Sampled as it happens, not only after.
	const goroutines = 8
	var during atomic.Int64
	sample := func() (stop func()) {
		quit, ended := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(ended)
			for {
				select {
				case <-quit:
					return
				case <-time.After(time.Millisecond):
				}
				if n, err := countFDs(); err == nil { // not openFDs: t.Fatal belongs to the test's goroutine
					during.Store(max(during.Load(), int64(n-before)))
				}
			}
		}()
		return func() { close(quit); <-ended }
	}
	for pass := range 2 {
		stopSampling := sample()
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, 8<<10)
				for i := g; i < shards; i += goroutines {
					if pass == 0 && !d.Put(slots[i], data[i]) {
						t.Errorf("put shard %d", i)
					}
					if pass == 1 && (!d.Get(slots[i], buf[:slots[i].Size]) || !bytes.Equal(buf[:slots[i].Size], data[i])) {
						t.Errorf("shard %d's sample not served back whole", i)
					}
				}
			}()
		}
		wg.Wait()
		stopSampling()
		peak = max(peak, openFDs()-before)
	}
	if peak > 2*maxOpenShards {
		t.Fatalf("%d descriptors open after touching %d shards: want at most %d (two a shard, %d shards)", peak, shards, 2*maxOpenShards, maxOpenShards)
	}
	if n := during.Load(); n > 2*(maxOpenShards+goroutines) {
		t.Fatalf("%d descriptors open while %d goroutines touched %d shards: want at most %d (two a shard, %d shards and one more a call in flight)", n, goroutines, shards, 2*(maxOpenShards+goroutines), maxOpenShards)
	}
	t.Logf("descriptors: at most %d while working, %d after", during.Load(), peak)
	if d.Hits.Load() != shards || d.Corrupt.Load() != 0 {
		t.Fatalf("hits %d corrupt %d, want %d and 0", d.Hits.Load(), d.Corrupt.Load(), shards)
	}
}

// TestDiskReadWhileFilesRotate: many goroutines read samples of more shards
// than the tier keeps open, each in its own order, so that one goroutine's
// open closes the files of a shard another is reading at that moment.
// Every read of a sample the tier holds must be served whole: a shard's
// files were closed under a reader before, and its read missed.
func TestDiskReadWhileFilesRotate(t *testing.T) {
	defer burnCPU(runtime.NumCPU())()
	d, err := OpenDisk(t.TempDir(), "ns", 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const shards = maxOpenShards + maxOpenShards/2
	slots := make([]Slot, shards)
	data := make([][]byte, shards)
	for i := range slots {
		data[i] = bytes.Repeat([]byte{byte(i), byte(i >> 8), 7}, 100+i%13)
		slots[i] = Slot{Shard: i, Index: i % 4, Off: int64(i%3) * 4096, Size: int64(len(data[i])), Sum: verify.Sum(data[i])}
		if !d.Put(slots[i], data[i]) {
			t.Fatalf("put shard %d", i)
		}
	}
	const readers, rounds = 16, 3
	var wg sync.WaitGroup
	var missed atomic.Int64
	for g := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 8<<10)
			for r := range rounds {
				for k := range shards {
					i := (k*(2*g+1) + r*97 + g*31) % shards // each reader its own order
					if !d.Get(slots[i], buf[:slots[i].Size]) || !bytes.Equal(buf[:slots[i].Size], data[i]) {
						missed.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	if m := missed.Load(); m != 0 {
		t.Fatalf("%d of %d reads of held samples missed", m, readers*rounds*shards)
	}
	if h, c := d.Hits.Load(), d.Corrupt.Load(); h != readers*rounds*shards || c != 0 {
		t.Fatalf("hits %d corrupt %d, want %d and 0", h, c, readers*rounds*shards)
	}
}
