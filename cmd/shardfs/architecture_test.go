package main

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Issue 42 item 6: docs/ARCHITECTURE.md said imports run down its table,
// and four edges (dataset→erasure, ingest→dataset, ingest→erasure,
// metrics→erasure) ran up it. This holds the table to the code: every
// import of one of the table's packages by another, in non-test files,
// points to a row below.
func TestArchitectureTableMatchesImports(t *testing.T) {
	doc, err := os.ReadFile("../../docs/ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z/]+)` \\|")
	rank := map[string]int{}
	var order []string
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		rank[m[1]] = len(order)
		order = append(order, m[1])
	}
	if len(order) < 10 {
		t.Fatalf("found %d rows in the package table: %v", len(order), order)
	}
	const module = "github.com/shardfs/shardfs/"
	edges := 0
	for _, pkg := range order {
		files, _ := filepath.Glob(filepath.Join("../..", pkg, "*.go"))
		if len(files) == 0 {
			t.Errorf("table row %s: no such package", pkg)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range af.Imports {
				path := strings.Trim(imp.Path.Value, `"`)
				dep, ok := strings.CutPrefix(path, module)
				if !ok {
					continue
				}
				r, listed := rank[dep]
				if !listed {
					continue // internal/ helpers
				}
				edges++
				if r <= rank[pkg] {
					t.Errorf("%s imports %s, a row above it in docs/ARCHITECTURE.md's table (%s)", pkg, dep, f)
				}
			}
		}
	}
	if edges < 20 {
		t.Fatalf("only %d imports between the table's packages: the parse is wrong", edges)
	}
}

// Every Go file docs/ARCHITECTURE.md names is there: a path from the
// repository's root (cmd/shardfs/orderflags.go), or a file name in its
// table row's package (`keys.go` in dataset's row), or, in the prose, a
// file of some package. (It holds names to files, not claims to their
// contents: the order's flags had moved from plan.go to orderflags.go, and
// plan.go is still there.)
func TestArchitectureNamesFilesThatExist(t *testing.T) {
	doc, err := os.ReadFile("../../docs/ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	anywhere := map[string]bool{}
	filepath.WalkDir("../..", func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".go") {
			anywhere[filepath.Base(p)] = true
		}
		return nil
	})
	named := regexp.MustCompile("`([A-Za-z0-9_/.-]+\\.go)`")
	row := regexp.MustCompile("^\\| `([a-z/]+)` \\|")
	checked := 0
	for n, line := range strings.Split(string(doc), "\n") {
		pkg := ""
		if m := row.FindStringSubmatch(line); m != nil {
			pkg = m[1]
		}
		for _, m := range named.FindAllStringSubmatch(line, -1) {
			f := m[1]
			checked++
			switch {
			case strings.Contains(f, "/"):
				if _, err := os.Stat(filepath.Join("../..", f)); err != nil {
					t.Errorf("docs/ARCHITECTURE.md line %d names %s, which is not there", n+1, f)
				}
			case pkg != "":
				if _, err := os.Stat(filepath.Join("../..", pkg, f)); err != nil {
					t.Errorf("docs/ARCHITECTURE.md line %d puts %s in %s, which has no such file", n+1, f, pkg)
				}
			case !anywhere[f]:
				t.Errorf("docs/ARCHITECTURE.md line %d names %s, which no package has", n+1, f)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d Go files named in docs/ARCHITECTURE.md: the parse is wrong", checked)
	}
}

// Issue 58 item 2: "verified" was three rules in three rooms (block CRCs in
// erasure, sample CRCs in a closure dataset passed to erasure, and the disk
// tier's own CRC table in cache). It is one rule in verify: no other
// package's code computes a checksum of its own.
func TestOnlyVerifyComputesChecksums(t *testing.T) {
	files, err := filepath.Glob("../../*/*.go")
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob("../../*/*/*.go")
	files = append(files, more...)
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || filepath.Base(filepath.Dir(f)) == "verify" {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range af.Imports {
			switch p := strings.Trim(imp.Path.Value, `"`); p {
			case "hash/crc32", "hash/crc64", "hash/adler32":
				t.Errorf("%s imports %s: checksums are verify's (verify.Sum, verify.Bytes, verify.Blocks)", f, p)
			}
		}
	}
	if checked < 100 {
		t.Fatalf("checked %d files: the glob is wrong", checked)
	}
}
