package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"testing"
)

// layout is pure: it starts no goroutine, in its code or its tests.
// scripts/test.sh leaves it out of the -race pass on that ground (there is
// nothing to race); a goroutine added here must bring it back.
func TestLayoutStartsNoGoroutine(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("layout's files: %v (%d)", err, len(files))
	}
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if g, ok := n.(*ast.GoStmt); ok {
				t.Errorf("%s: a go statement; layout is pure, and scripts/test.sh runs it without -race: move the concurrency out, or run layout under -race again", fset.Position(g.Pos()))
			}
			return true
		})
	}
}
