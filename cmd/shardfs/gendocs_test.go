package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
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

// Every relative link of the README and of docs/*.md reaches a file, and
// every #anchor into a Markdown page a heading of it: the docs were split
// out of one README, and a page moved or a heading renamed must not leave
// a link that goes nowhere.
func TestDocsLinksResolve(t *testing.T) {
	repo := filepath.Join("..", "..")
	pages, _ := filepath.Glob(filepath.Join(repo, "docs", "*.md"))
	pages = append(pages, filepath.Join(repo, "README.md"))
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if regexp.MustCompile(`^[a-z]+:`).MatchString(target) {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := page
			if path != "" {
				dest = filepath.Join(filepath.Dir(page), path)
			}
			if _, err := os.Stat(dest); err != nil {
				t.Errorf("%s links to %s, which is not there", page, target)
				continue
			}
			if anchor != "" && strings.HasSuffix(dest, ".md") && !slices.Contains(headingAnchors(t, dest), anchor) {
				t.Errorf("%s links to %s: %s has no heading with that anchor", page, target, dest)
			}
		}
	}
}

// headingAnchors are the anchors GitHub gives the headings of a Markdown
// page: lower case, punctuation dropped, spaces as hyphens.
func headingAnchors(t *testing.T, page string) []string {
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	drop := regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "#") {
			h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(l, "#")))
			out = append(out, strings.ReplaceAll(drop.ReplaceAllString(h, ""), " ", "-"))
		}
	}
	return out
}
