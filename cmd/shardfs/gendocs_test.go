package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The command reference in docs/ (docs/cli, docs/man) is what gendocs
// writes from the commands, flags and help of this tree: a change to a
// command or a flag that leaves it stale fails here, naming the pages and
// the command that brings them up to date.
func TestCLIReferenceIsCurrent(t *testing.T) {
	fresh := t.TempDir()
	if err := writeCLIReference(newRoot(), fresh); err != nil {
		t.Fatal(err)
	}
	committed := filepath.Join("..", "..", "docs")
	var stale []string
	for _, sub := range []string{"cli", "man"} {
		names := func(dir string) []string {
			var out []string
			for _, pattern := range []string{"shardfs*.md", "shardfs*.1"} {
				m, _ := filepath.Glob(filepath.Join(dir, sub, pattern))
				for _, f := range m {
					out = append(out, filepath.Base(f))
				}
			}
			slices.Sort(out)
			return out
		}
		want, have := names(fresh), names(committed)
		if len(want) == 0 {
			t.Fatalf("gendocs wrote no page into %s", sub)
		}
		for _, n := range want {
			got, err := os.ReadFile(filepath.Join(committed, sub, n))
			if err != nil {
				stale = append(stale, filepath.Join("docs", sub, n)+" (missing)")
				continue
			}
			if w, _ := os.ReadFile(filepath.Join(fresh, sub, n)); !bytes.Equal(got, w) {
				stale = append(stale, filepath.Join("docs", sub, n))
			}
		}
		for _, n := range have {
			if !slices.Contains(want, n) {
				stale = append(stale, filepath.Join("docs", sub, n)+" (no such command now)")
			}
		}
	}
	if len(stale) > 0 {
		t.Fatalf("the command reference is stale: %v\nbring it up to date with: go run ./cmd/shardfs gendocs docs", stale)
	}
}
