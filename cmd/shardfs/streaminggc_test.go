package main

import (
	"runtime/debug"
	"testing"
)

// TestStreamingGCUnlessGOGCIsSet: a stream's ingest runs the collector at
// 75% heap growth and then puts back the setting it found; with GOGC set,
// the user's setting stands.
func TestStreamingGCUnlessGOGCIsSet(t *testing.T) {
	found := debug.SetGCPercent(100)
	defer debug.SetGCPercent(found)

	t.Setenv("GOGC", "")
	undo := streamingGC()
	if during := debug.SetGCPercent(75); during != 75 {
		t.Errorf("GOGC unset: the collector runs at %d%% during the stream, want 75%%", during)
	}
	undo()
	if after := debug.SetGCPercent(100); after != 100 {
		t.Errorf("GOGC unset: %d%% after the stream, want the 100%% it found", after)
	}

	t.Setenv("GOGC", "200")
	debug.SetGCPercent(200)
	undo = streamingGC()
	if during := debug.SetGCPercent(200); during != 200 {
		t.Errorf("GOGC=200: the collector runs at %d%% during the stream, want the user's 200%%", during)
	}
	undo()
}
