package cache

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"
)

// vmFlags returns the VmFlags of the mapping of this process that holds
// address p, from /proc/self/smaps.
func vmFlags(t *testing.T, p uintptr) []string {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) > 0 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			lo, hi, _ := strings.Cut(fields[0], "-")
			a, err1 := strconv.ParseUint(lo, 16, 64)
			b, err2 := strconv.ParseUint(hi, 16, 64)
			in = err1 == nil && err2 == nil && uintptr(a) <= p && p < uintptr(b)
			continue
		}
		if in && fields[0] == "VmFlags:" {
			return fields[1:]
		}
	}
	t.Fatalf("no mapping of this process holds %#x", p)
	return nil
}

// startHugePages puts the process back in the time before any cache
// evicted, as a fresh mount's, whatever the tests before did.
func startHugePages() {
	hugeAdvice.mu.Lock()
	hugeAdvice.over = false
	hugeAdvice.mu.Unlock()
}

// A chunk's buffer made fresh by Alloc lies in memory advised for huge
// pages, so the kernel may back it 2 MiB at a time; a spare buffer is
// reused as it is.
func TestFreshBufferIsAdvisedForHugePages(t *testing.T) {
	startHugePages()
	c := New(64<<20, nil)
	for _, n := range []int{48 << 10, 1 << 20, 5 << 20} {
		b := c.Alloc(n)
		for _, p := range []uintptr{uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&b[n-1]))} {
			if flags := vmFlags(t, p); !contains(flags, "hg") {
				t.Errorf("a fresh buffer of %d bytes at %#x: its mapping's VmFlags are %v, want hg (MADV_HUGEPAGE)", n, p, flags)
			}
		}
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// thpMode is the kernel's transparent huge page mode: always, madvise or
// never.
func thpMode(t *testing.T) string {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return "never"
	}
	s := string(b)
	i, j := strings.Index(s, "["), strings.Index(s, "]")
	if i < 0 || j < i {
		t.Fatalf("transparent_hugepage/enabled: %q", s)
	}
	return s[i+1 : j]
}

// Filling fresh buffers faults them in huge pages, not 4 KiB pages: 64 MiB
// written through Alloc's buffers takes far fewer minor faults than its
// 16,384 pages. Each fault cost 14 µs on the VM the suite runs on.
//
// It runs in a process of its own, whose heap is fresh: in the suite's
// process, the heap the tests before had freed was handed out again, some
// of it split into 4 KiB pages when the runtime returned part of a huge
// page, and the count swung from 144 to 3,424 alone and reached 4,113 in
// CI (the bound is 4,096). A fresh mount's cache fills a fresh heap.
func TestFillingFreshBuffersFaultsInHugePages(t *testing.T) {
	if mode := thpMode(t); mode == "never" {
		t.Skipf("this kernel's transparent huge pages are off (%q): the advice changes nothing here", mode)
	}
	if os.Getenv("SHARDFS_FRESH_HEAP_CHILD") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFillingFreshBuffersFaultsInHugePages$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "SHARDFS_FRESH_HEAP_CHILD=1")
		out, err := cmd.CombinedOutput()
		t.Logf("in a process of its own:\n%s", out)
		if err != nil {
			t.Fatalf("the fresh-heap run failed: %v", err)
		}
		if !strings.Contains(string(out), "--- PASS: TestFillingFreshBuffersFaultsInHugePages") {
			t.Fatal("the fresh-heap run did not run the test")
		}
		return
	}
	startHugePages()
	c := New(1<<30, nil)
	const n, count = 1 << 20, 64
	bufs := make([][]byte, 0, count)
	zero, err := os.Open("/dev/zero")
	if err != nil {
		t.Fatal(err)
	}
	defer zero.Close()
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	for range count {
		b := c.Alloc(n)
		// The kernel writes the buffer, as a GET's socket read does in a
		// mount; a raw read(2), so that under -race the detector's
		// shadow of b is not touched and counted too.
		for got := 0; got < n; {
			r, _, errno := syscall.Syscall(syscall.SYS_READ, zero.Fd(), uintptr(unsafe.Pointer(&b[got])), uintptr(n-got))
			if errno != 0 || r == 0 {
				t.Fatalf("read /dev/zero: %v", errno)
			}
			got += int(r)
		}
		bufs = append(bufs, b)
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	pages := int64(n * count / os.Getpagesize())
	faults := after.Minflt - before.Minflt
	t.Logf("%d minor faults writing %d pages", faults, pages)
	if faults > pages/4 {
		t.Errorf("writing %d fresh buffers of %d bytes took %d minor faults, want at most %d (a quarter of their %d pages): they are not backed by huge pages", count, n, faults, pages/4, pages)
	}
	for _, b := range bufs {
		c.Free(b)
	}
}

// The first eviction ends the advice: the regions advised while the cache
// filled are advised MADV_NOHUGEPAGE (VmFlags "nh", not "hg"), and a buffer
// made after lies in memory not advised for huge pages. A cache that churns
// reuses its heap, which the runtime returns to the kernel in part; advised
// for good, each reuse there faulted a whole 2 MiB page back in (the epochs
// bench, 47f8eaf).
func TestFirstEvictionEndsHugePages(t *testing.T) {
	startHugePages()
	const n = 1 << 20
	c := New(8*n, nil)
	put := func(i int, b []byte) {
		k := Key{Sample: int64(i)}
		c.Claim([]Key{k}, func(Key) int64 { return int64(len(b)) })
		c.Fill(k, b)
	}
	var filled [][]byte
	for i := range 8 {
		b := c.Alloc(n)
		filled = append(filled, b)
		put(i, b)
	}
	for _, b := range filled {
		if flags := vmFlags(t, uintptr(unsafe.Pointer(&b[0]))); !contains(flags, "hg") {
			t.Fatalf("a buffer made while the cache filled: VmFlags %v, want hg", flags)
		}
	}
	if c.Evictions.Load() != 0 {
		t.Fatalf("%d evictions filling the cache to its budget, want none", c.Evictions.Load())
	}
	for i := 8; c.Evictions.Load() == 0; i++ {
		if i > 64 {
			t.Fatalf("no eviction after %d chunks of %d bytes in a cache of %d", i, n, 8*n)
		}
		put(i, c.Alloc(n))
	}
	for _, b := range filled {
		if flags := vmFlags(t, uintptr(unsafe.Pointer(&b[0]))); contains(flags, "hg") || !contains(flags, "nh") {
			t.Errorf("a buffer made while the cache filled, after the first eviction: VmFlags %v, want nh and not hg", flags)
		}
	}
	// A buffer made now, larger than any spare, is new memory: not advised.
	fresh := c.Alloc(4 * n)
	for _, p := range []uintptr{uintptr(unsafe.Pointer(&fresh[0])), uintptr(unsafe.Pointer(&fresh[len(fresh)-1]))} {
		if flags := vmFlags(t, p); contains(flags, "hg") {
			t.Errorf("a buffer made after the first eviction at %#x: VmFlags %v, want no hg", p, flags)
		}
	}
	c.Free(fresh)
}
