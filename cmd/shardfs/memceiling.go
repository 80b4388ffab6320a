package main

import (
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// A stream's memory ceiling: once a stream of records has written its
// first ceilingWarmChunks chunks, the Go runtime's soft memory limit is
// set a little above (ceilingMargin) the most memory Go held while it
// wrote them, so a stream of 5,000,000 records runs in about what its
// first 12,000 or so did.
//
// Why: a stream's live heap is flat in the number of records, but its
// peak RSS is the most the heap reached at any collection, and a long
// stream meets more collections (556 for 1,000,000 WebDataset records at
// --shard-size 512KiB, 11 for 10,000), so its worst moments coincide
// where a short one ends first. runtime/metrics at the largest RSS of
// each, on MinIO: heap objects 5.1-6.8 MB at 10,000 records and 8.9-9.1
// at 1,000,000, with live heaps alike (4.7-6.8 and 6.5 MB). The limit
// makes the collector run early in those moments, where GOGC alone lets
// the heap reach twice what the last collection marked.
//
// The ceiling never makes a stream fail: the limit is soft. Where a
// later chunk needs more (larger records, a slower store holding more in
// flight), the collector would run back to back; when it takes more than
// ceilingGCShare of the CPU over a second, the ceiling rises to a quarter
// above what Go holds then. GOMEMLIMIT, when set, is the user's, and stands.
const (
	ceilingWarmChunks = 3
	// ceilingMargin is the room above that most: at 1.0 the collector
	// took 10-35% more CPU for 1,000,000 records, at 1.1 none (39.4 and
	// 40.0-40.6 MB peak RSS, 41.0 without a ceiling; MinIO, 512KiB).
	ceilingMargin  = 1.1
	ceilingGCShare = 0.15
	ceilingRaise   = 1.25
	// ceilingSample is how often Go's memory is read while the stream
	// warms: the most it held is what the limit is set to.
	ceilingSample = 5 * time.Millisecond
)

// memoryCeiling sets and steers the limit; chunkDone is the stream's
// ingest.Options.ChunkDone.
type memoryCeiling struct {
	found   int64 // the limit before the stream
	log     *slog.Logger
	stopped chan struct{}
	done    sync.WaitGroup

	mu     sync.Mutex
	most   uint64 // Go's memory as the limit counts it, at its most while warming
	limit  int64  // 0 until set
	raises int
}

// goMemory reads Go's memory as its soft limit counts it: everything the
// runtime has mapped, less the heap it has returned to the OS.
func goMemory(s []metrics.Sample) uint64 {
	metrics.Read(s[:2])
	return s[0].Value.Uint64() - s[1].Value.Uint64()
}

func ceilingSamples() []metrics.Sample {
	return []metrics.Sample{
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
		{Name: "/cpu/classes/gc/total:cpu-seconds"},
		{Name: "/cpu/classes/total:cpu-seconds"},
	}
}

// startMemoryCeiling starts watching Go's memory, unless GOMEMLIMIT is
// set (then it returns nil, and chunkDone and stop do nothing).
func startMemoryCeiling(log *slog.Logger) *memoryCeiling {
	if os.Getenv("GOMEMLIMIT") != "" {
		return nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &memoryCeiling{found: debug.SetMemoryLimit(-1), log: log, stopped: make(chan struct{})}
	c.done.Add(1)
	go c.watch()
	return c
}

func (c *memoryCeiling) watch() {
	defer c.done.Done()
	s := ceilingSamples()
	tick := time.NewTicker(ceilingSample)
	defer tick.Stop()
	var lastGC, lastAll float64
	for {
		select {
		case <-c.stopped:
			return
		case <-tick.C:
		}
		used := goMemory(s)
		c.mu.Lock()
		if c.limit == 0 {
			c.most = max(c.most, used)
			c.mu.Unlock()
			continue
		}
		c.mu.Unlock()
		if lastAll == 0 {
			tick.Reset(time.Second) // set: the collector's share is judged a second at a time
		}
		metrics.Read(s[2:])
		gc, all := s[2].Value.Float64(), s[3].Value.Float64()
		if lastAll > 0 && all > lastAll && (gc-lastGC)/(all-lastAll) > ceilingGCShare {
			c.mu.Lock()
			c.limit = int64(float64(max(c.limit, int64(used))) * ceilingRaise)
			c.raises++
			limit := c.limit
			debug.SetMemoryLimit(limit)
			c.mu.Unlock()
			c.log.Debug("memory ceiling raised: the collector took more than its share of the CPU", "limit_bytes", limit, "gc_share", (gc-lastGC)/(all-lastAll))
		}
		lastGC, lastAll = gc, all
	}
}

// chunkDone sets the ceiling once the stream has written its first
// ceilingWarmChunks chunks: a shorter stream never has one.
func (c *memoryCeiling) chunkDone(chunk int) {
	if c == nil || chunk+1 != ceilingWarmChunks {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.most = max(c.most, goMemory(ceilingSamples()))
	c.limit = int64(float64(c.most) * ceilingMargin)
	debug.SetMemoryLimit(c.limit)
	c.log.Debug("memory ceiling set: what the stream's first chunks needed", "limit_bytes", c.limit, "chunks", ceilingWarmChunks)
}

// stop puts back the limit the stream found.
func (c *memoryCeiling) stop() {
	if c == nil {
		return
	}
	close(c.stopped)
	c.done.Wait()
	debug.SetMemoryLimit(c.found)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.limit > 0 {
		c.log.Debug("memory ceiling put back", "limit_bytes", c.limit, "raises", c.raises)
	}
}
