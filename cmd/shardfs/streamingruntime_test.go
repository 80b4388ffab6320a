package main

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/shardfs/shardfs/ingest"
)

// TestStreamingRuntimeUnlessSet: a stream's ingest runs the collector at
// 75% heap growth and samples no heap profile, and then puts back the
// settings it found; with GOGC set, the user's collector setting stands,
// and with SHARDFS_MEM_PROFILE or GODEBUG's memprofilerate set, the
// profile is sampled.
func TestStreamingRuntimeUnlessSet(t *testing.T) {
	found := debug.SetGCPercent(100)
	defer debug.SetGCPercent(found)
	foundRate := runtime.MemProfileRate
	defer func() { runtime.MemProfileRate = foundRate }()
	runtime.MemProfileRate = 512 << 10

	t.Setenv("GOGC", "")
	t.Setenv("SHARDFS_MEM_PROFILE", "")
	t.Setenv("GODEBUG", "")
	undo := streamingRuntime(&ingest.Options{})
	if during := debug.SetGCPercent(75); during != 75 {
		t.Errorf("GOGC unset: the collector runs at %d%% during the stream, want 75%%", during)
	}
	if runtime.MemProfileRate != 0 {
		t.Errorf("heap profile sampled every %d bytes during the stream, want none", runtime.MemProfileRate)
	}
	undo()
	if after := debug.SetGCPercent(100); after != 100 {
		t.Errorf("GOGC unset: %d%% after the stream, want the 100%% it found", after)
	}
	if runtime.MemProfileRate != 512<<10 {
		t.Errorf("heap profile sampled every %d bytes after the stream, want the %d it found", runtime.MemProfileRate, 512<<10)
	}

	t.Setenv("GOGC", "200")
	debug.SetGCPercent(200)
	for _, env := range [][2]string{{"SHARDFS_MEM_PROFILE", "/tmp/heap.prof"}, {"GODEBUG", "memprofilerate=1"}} {
		t.Setenv(env[0], env[1])
		undo = streamingRuntime(&ingest.Options{})
		if during := debug.SetGCPercent(200); during != 200 {
			t.Errorf("GOGC=200: the collector runs at %d%% during the stream, want the user's 200%%", during)
		}
		if runtime.MemProfileRate != 512<<10 {
			t.Errorf("%s=%s: heap profile sampled every %d bytes during the stream, want %d as before", env[0], env[1], runtime.MemProfileRate, 512<<10)
		}
		undo()
		t.Setenv(env[0], "")
	}
}
