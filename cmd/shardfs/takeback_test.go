package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A command run on file:// stores that were not there left an empty
// directory behind for each (list, verify, a refused ingest): it now
// leaves the stores as it found them, unless it wrote to them; and a
// directory that was there, empty or not, stays.
func TestCommandsLeaveStoresAsFound(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	fresh := func(n int) (string, string) {
		var urls []string
		top := filepath.Join(base, "fresh", filepath.Base(t.TempDir()))
		for i := range n {
			urls = append(urls, "file://"+filepath.Join(top, "stores", string(rune('a'+i))))
		}
		return top, "--stores=" + strings.Join(urls, ",")
	}
	gone := func(what, top string) {
		t.Helper()
		if _, err := os.Stat(top); !os.IsNotExist(err) {
			t.Errorf("%s left %s (%v)", what, top, err)
		}
	}
	top, stores := fresh(3)
	execute(ctx, []string{"list", stores})
	gone("list", top)
	top, stores = fresh(3)
	if err := execute(ctx, []string{"verify", stores, "nothing"}); err == nil {
		t.Fatal("verify of a dataset no store holds: no error")
	}
	gone("verify", top)

	src := filepath.Join(base, "src", "cat")
	os.MkdirAll(src, 0o755)
	os.WriteFile(filepath.Join(src, "a.bin"), []byte("bytes"), 0o644)
	top, stores = fresh(3)
	if err := execute(ctx, []string{"ingest", stores, "--data=2", "--parity=1", "--log-level=error", filepath.Dir(src), "ds"}); err != nil {
		t.Fatal(err)
	}
	if err := execute(ctx, []string{"verify", stores, "ds"}); err != nil {
		t.Fatalf("the stores an ingest wrote: %v", err)
	}

	// Directories that were there stay, empty or not.
	here := filepath.Join(base, "here")
	os.MkdirAll(filepath.Join(here, "a"), 0o755)
	os.MkdirAll(filepath.Join(here, "b", "empty"), 0o755)
	execute(ctx, []string{"list", "--stores=file://" + filepath.Join(here, "a") + ",file://" + filepath.Join(here, "b")})
	for _, d := range []string{"a", "b/empty"} {
		if _, err := os.Stat(filepath.Join(here, d)); err != nil {
			t.Errorf("a directory that was there: %v", err)
		}
	}
}
