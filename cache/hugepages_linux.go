package cache

import (
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugeRegion is the span of heap one piece of advice covers: the chunk the
// Go runtime maps its heap in (4 MiB, aligned), two huge pages.
const hugeRegion = 4 << 20

// hugeAdvice is this process's advice on its heap: the regions advised for
// huge pages while no cache had evicted, and whether that time is over.
// It is the process's, not a cache's, because the heap is: the regions a
// cache's buffers lie in are reused by every other allocation once freed.
var hugeAdvice struct {
	mu      sync.Mutex
	over    bool
	regions map[uintptr]struct{}
}

// adviseHugePages asks the kernel to back the heap around b, a buffer just
// made for a chunk of a cache that has never evicted, with transparent huge
// pages (madvise MADV_HUGEPAGE). Once any cache has evicted
// (endHugePages), it does nothing.
//
// Why: b is new memory, and the first write into it (a GET's body read from
// the socket) faults it in one 4 KiB page at a time. On the 2-core VM the
// suite runs on, a fault cost 14 µs: new memory touched page by page came
// in at 293 MB/s, and at 14.5 GB/s in 2 MiB pages. A mount filling its cache
// spent a third of its CPU or more in those faults: the trainer bench's
// 400 MB epoch took 110,562 faults and 4.6 CPU s, and 31,653 faults and 2.7
// CPU s with this advice. The spare buffers (spare.go) spare a cache that
// has filled; this spares the filling, which is all of a cold epoch that
// the cache holds. Go's runtime does not ask for huge pages for its heap,
// and most distributions set THP to "madvise", so without the advice the
// heap gets 4 KiB pages.
//
// Why only while no cache has evicted: advised for good (47f8eaf, reverted
// in 2f693d2), a cache smaller than its dataset lost time. Its evicted
// chunks' memory goes back to the heap, the runtime returns free pages of
// it to the kernel, and the next allocation there faulted a whole 2 MiB page
// back in, zeroed, for a buffer that needed less: the epochs bench's one
// rank's first epoch fell from 0.93× to 0.77× of local disk. Advised only
// while filling, the same bench gave 0.92× (its tree before, in the run
// after it: 0.73×), and the cold-cache bench's rates rose in every case
// (bench/ANALYSIS.md, 2026-12-03).
//
// The advice changes how memory is backed, never what it holds, so it is
// safe on memory the runtime owns; the runtime's own release of free pages
// (MADV_DONTNEED) still works, splitting a huge page where it must. Where
// THP is "never", or not built into the kernel, the call does nothing and
// its error is ignored. The cost: a huge page is backed whole once any byte
// of it is touched, so the heap around the cache's buffers may hold up to
// 2 MiB more than it touched at each end of a run of them.
func adviseHugePages(b []byte) {
	if cap(b) == 0 {
		return
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	hugeAdvice.mu.Lock()
	defer hugeAdvice.mu.Unlock()
	if hugeAdvice.over {
		return
	}
	if hugeAdvice.regions == nil {
		hugeAdvice.regions = map[uintptr]struct{}{}
	}
	for base := p &^ (hugeRegion - 1); base < p+uintptr(cap(b)); base += hugeRegion {
		if _, done := hugeAdvice.regions[base]; !done {
			hugeAdvice.regions[base] = struct{}{}
			unix.Syscall(unix.SYS_MADVISE, base, hugeRegion, unix.MADV_HUGEPAGE)
		}
	}
}

// endHugePages ends the advice, for good, when a cache first evicts: the
// regions advised are advised MADV_NOHUGEPAGE, so that memory the runtime
// returns to the kernel there and later reuses comes back 4 KiB at a time,
// as in a heap never advised. The huge pages already backing them stay
// until the runtime returns part of one. It is called once per cache, from
// its first eviction; it takes no cache's lock, so it may run outside them.
func endHugePages() {
	hugeAdvice.mu.Lock()
	defer hugeAdvice.mu.Unlock()
	if hugeAdvice.over {
		return
	}
	hugeAdvice.over = true
	for base := range hugeAdvice.regions {
		unix.Syscall(unix.SYS_MADVISE, base, hugeRegion, unix.MADV_NOHUGEPAGE)
	}
	hugeAdvice.regions = nil
}
