package main

import (
	"math"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// The memory ceiling is set at the most Go's memory reached while the
// stream wrote its first ceilingWarmChunks chunks (and ceilingMargin
// above it), and not before the
// last of them; a later chunk that needs more raises it (the collector
// runs back to back, past its share of the CPU, until it does); stop
// puts back the limit it found; with GOMEMLIMIT set there is none.
func TestMemoryCeiling(t *testing.T) {
	found := debug.SetMemoryLimit(math.MaxInt64)
	defer debug.SetMemoryLimit(found)
	t.Setenv("GOMEMLIMIT", "")

	c := startMemoryCeiling(nil)
	// The first chunks hold 64 MiB live, seen by the watcher.
	warm := make([]byte, 64<<20)
	for i := range warm {
		warm[i] = byte(i)
	}
	deadline := time.Now().Add(30 * time.Second) // a hang bound
	for {
		c.mu.Lock()
		most := c.most
		c.mu.Unlock()
		if most >= 64<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watcher saw %d bytes at most, with 64 MiB live", most)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for chunk := range ceilingWarmChunks - 1 {
		c.chunkDone(chunk)
		if limit := debug.SetMemoryLimit(-1); limit != math.MaxInt64 {
			t.Fatalf("a limit of %d bytes after chunk %d of %d", limit, chunk, ceilingWarmChunks)
		}
	}
	c.chunkDone(ceilingWarmChunks - 1)
	set := debug.SetMemoryLimit(-1)
	c.mu.Lock()
	most := c.most
	c.mu.Unlock()
	if set != int64(float64(most)*ceilingMargin) || most < 64<<20 || set > 1<<30 {
		t.Fatalf("the ceiling is %d bytes, want %.2f times the %d the first chunks held at most (64 MiB live)", set, ceilingMargin, most)
	}
	c.chunkDone(ceilingWarmChunks) // later chunks leave it
	if again := debug.SetMemoryLimit(-1); again != set {
		t.Fatalf("the ceiling moved from %d to %d at a later chunk", set, again)
	}
	runtime.KeepAlive(warm)

	// A later chunk holds twice the ceiling live and allocates on: the
	// collector runs back to back until the ceiling rises.
	later := make([][]byte, 0, 2*set/(1<<20))
	for range cap(later) {
		later = append(later, make([]byte, 1<<20))
	}
	deadline = time.Now().Add(60 * time.Second)
	var sink []byte
	for raised := set; raised == set; raised = debug.SetMemoryLimit(-1) {
		if time.Now().After(deadline) {
			t.Fatalf("the ceiling stayed at %d bytes for 60 s with %d live", set, len(later)<<20)
		}
		for range 64 {
			sink = make([]byte, 64<<10)
		}
		time.Sleep(time.Millisecond)
	}
	runtime.KeepAlive(later)
	runtime.KeepAlive(sink)
	c.mu.Lock()
	raises, limit := c.raises, c.limit
	c.mu.Unlock()
	if raises < 1 || limit <= set || debug.SetMemoryLimit(-1) != limit {
		t.Fatalf("%d raises, ceiling %d (set at %d, the runtime's %d)", raises, limit, set, debug.SetMemoryLimit(-1))
	}

	c.stop()
	if after := debug.SetMemoryLimit(-1); after != math.MaxInt64 {
		t.Fatalf("after the stream the limit is %d, want the %d it found", after, int64(math.MaxInt64))
	}

	t.Setenv("GOMEMLIMIT", "1GiB")
	c = startMemoryCeiling(nil)
	for chunk := range ceilingWarmChunks + 1 {
		c.chunkDone(chunk)
	}
	c.stop()
	if limit := debug.SetMemoryLimit(-1); limit != math.MaxInt64 {
		t.Fatalf("with GOMEMLIMIT set, the stream set a limit of %d", limit)
	}
}
