// Package gostmt checks that a package starts no goroutine: scripts/test.sh
// runs such packages without -race (there is nothing to race), and each
// holds a test that calls None, so that a goroutine added there brings
// the package back under -race.
package gostmt

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"testing"
)

// None fails t for every go statement in the Go files of dir, its tests
// included.
func None(t testing.TB, dir string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("the Go files of %s: %v (%d)", dir, err, len(files))
	}
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if g, ok := n.(*ast.GoStmt); ok {
				t.Errorf("%s: a go statement, in a package scripts/test.sh runs without -race: move the concurrency out, or run the package under -race again", fset.Position(g.Pos()))
			}
			return true
		})
	}
}
