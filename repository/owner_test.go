package repository_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The stores' owner is this package: outside it (and backend, which
// implements the stores), no package code writes, creates or deletes an
// object, takes a lock, or spells a key. TestOnlyRepositoryTouchesTheStores
// type-checks every package of the module and names each place that does;
// TestOwnerCheckCatches shows that the check finds each kind of breach.

const module = "github.com/shardfs/shardfs"

// owners may touch the stores directly.
var owners = []string{module + "/repository", module + "/backend"}

// writeMethods change what a store holds (backend.Store).
var writeMethods = []string{"Put", "Create", "Delete"}

// keyLiteral matches a string that spells part of the key layout
// (keys.go): a dataset's object after its name.
var keyLiteral = regexp.MustCompile(`(^|[A-Za-z0-9_.-]|%s|%v|%q)/(data|index|group|versions|leases|parts|heal|runs|probe|gc)/|/(manifest|identity|lock)(\.pending)?$`)

// runtimeMetric holds the names of the Go runtime's metrics
// (runtime/metrics), which are not keys: "/cpu/classes/gc/total:cpu-seconds"
// matched keyLiteral (cmd/shardfs's memory ceiling reads it).
var runtimeMetric = func() map[string]bool {
	names := map[string]bool{}
	for _, d := range metrics.All() {
		names[d.Name] = true
	}
	return names
}()

type goPackage struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Export     string
	Standard   bool
}

// exportData lists the module's packages and the compiler's export data of
// every package they import, built by go list.
func exportData(t *testing.T) (mine []goPackage, export map[string]string) {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-export", "-deps", "-json=ImportPath,Dir,GoFiles,Export,Standard", "../...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, stderr.String())
	}
	export = map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p goPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		export[p.ImportPath] = p.Export
		if strings.HasPrefix(p.ImportPath, module+"/") || p.ImportPath == module {
			mine = append(mine, p)
		}
	}
	return mine, export
}

// breach is one place package code touches the stores past their owner.
type breach struct {
	pos  token.Position
	what string
}

func (b breach) String() string {
	return fmt.Sprintf("%s:%d: %s", filepath.Base(b.pos.Filename), b.pos.Line, b.what)
}

// checker type-checks packages against export data and finds breaches.
type checker struct {
	fset  *token.FileSet
	imp   types.Importer
	store *types.Interface
}

func newChecker(t *testing.T, export map[string]string) *checker {
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := export[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	backend, err := imp.Import(module + "/backend")
	if err != nil {
		t.Fatal(err)
	}
	store := backend.Scope().Lookup("Store").Type().Underlying().(*types.Interface)
	return &checker{fset: fset, imp: imp, store: store}
}

// check type-checks the files of package path (given by name, or as
// source when src is set) and returns its breaches.
func (c *checker) check(t *testing.T, path string, files []string, src map[string]string) []breach {
	t.Helper()
	var parsed []*ast.File
	for _, f := range files {
		var s any
		if src != nil {
			s = src[f]
		}
		af, err := parser.ParseFile(c.fset, f, s, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, af)
	}
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	conf := types.Config{Importer: c.imp}
	if _, err := conf.Check(path, c.fset, parsed, info); err != nil {
		t.Fatalf("type-check %s: %v", path, err)
	}
	var out []breach
	for _, af := range parsed {
		// imports are not keys
		imports := map[*ast.BasicLit]bool{}
		for _, is := range af.Imports {
			imports[is.Path] = true
		}
		for _, d := range af.Decls {
			decorator := false
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv != nil && len(fd.Recv.List) == 1 {
				// A Store's own method forwarding to the store it wraps
				// (a decorator) is not a write of its own.
				if tv, ok := info.Types[fd.Recv.List[0].Type]; ok && c.implementsStore(tv.Type) {
					decorator = true
				}
			}
			ast.Inspect(d, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.BasicLit:
					if n.Kind == token.STRING && !imports[n] {
						if s, err := strconv.Unquote(n.Value); err == nil && keyLiteral.MatchString(s) && !runtimeMetric[s] {
							out = append(out, breach{c.fset.Position(n.Pos()), fmt.Sprintf("spells a key: %s", n.Value)})
						}
					}
				case *ast.SelectorExpr:
					if sel, ok := info.Selections[n]; ok && sel.Kind() == types.MethodVal {
						if !decorator && slices.Contains(writeMethods, n.Sel.Name) && c.implementsStore(sel.Recv()) {
							out = append(out, breach{c.fset.Position(n.Pos()), fmt.Sprintf("calls %s on a store", n.Sel.Name)})
						}
						return true
					}
					obj := info.Uses[n.Sel]
					fn, ok := obj.(*types.Func)
					if !ok || fn.Pkg() == nil || fn.Pkg().Path() != module+"/repository" {
						return true
					}
					switch name := fn.Name(); {
					case name == "AcquireLock":
						out = append(out, breach{c.fset.Position(n.Pos()), "takes a lock with repository.AcquireLock"})
					case strings.HasSuffix(name, "Key") || strings.HasSuffix(name, "Prefix"):
						out = append(out, breach{c.fset.Position(n.Pos()), fmt.Sprintf("spells a key with repository.%s", name)})
					}
				}
				return true
			})
		}
	}
	return out
}

func (c *checker) implementsStore(t types.Type) bool {
	return types.Implements(t, c.store) || types.Implements(types.NewPointer(t), c.store)
}

func TestOnlyRepositoryTouchesTheStores(t *testing.T) {
	mine, export := exportData(t)
	c := newChecker(t, export)
	var all []string
	checked := 0
	for _, p := range mine {
		if slices.ContainsFunc(owners, func(o string) bool { return p.ImportPath == o || strings.HasPrefix(p.ImportPath, o+"/") }) {
			continue
		}
		var files []string
		for _, f := range p.GoFiles {
			files = append(files, filepath.Join(p.Dir, f))
		}
		if len(files) == 0 {
			continue
		}
		checked++
		for _, b := range c.check(t, p.ImportPath, files, nil) {
			all = append(all, strings.TrimPrefix(p.ImportPath, module+"/")+"/"+b.String())
		}
	}
	if checked < 15 {
		t.Fatalf("checked %d packages: the module's packages were not found", checked)
	}
	if len(all) > 0 {
		t.Errorf("package code outside repository touches the stores (give repository the operation, and call it):\n  %s", strings.Join(all, "\n  "))
	}
	t.Logf("%d packages checked", checked)
}

// TestOwnerCheckCatches feeds the check a package that breaches each rule
// once, and one that only forwards as a decorator does.
func TestOwnerCheckCatches(t *testing.T) {
	_, export := exportData(t)
	c := newChecker(t, export)
	src := map[string]string{"probe.go": `package probe

import (
	"context"
	"fmt"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/repository"
)

func touch(ctx context.Context, s backend.Store, local *backend.Local) {
	s.Put(ctx, "x", nil)
	local.Delete(ctx, "x")
	s.Create(ctx, repository.ManifestKey("ds"), nil)
	repository.AcquireLock(ctx, nil, "ds", "id", repository.LockOptions{})
	_ = fmt.Sprintf("%s/data/%s", "ds", "id")
	_ = "ds/manifest"
	_ = "file:///data/store0 is a store URL, not a key"
	s.Stat(ctx, "reads are not writes")
}

type wrap struct{ backend.Store }

func (w wrap) Put(ctx context.Context, key string, data []byte) error { return w.Store.Put(ctx, key, data) }
`}
	got := c.check(t, module+"/probe", []string{"probe.go"}, src)
	var lines []string
	for _, b := range got {
		lines = append(lines, b.String())
	}
	want := []string{
		"probe.go:12: calls Put on a store",
		"probe.go:13: calls Delete on a store",
		"probe.go:14: calls Create on a store",
		"probe.go:14: spells a key with repository.ManifestKey",
		"probe.go:15: takes a lock with repository.AcquireLock",
		`probe.go:16: spells a key: "%s/data/%s"`,
		`probe.go:17: spells a key: "ds/manifest"`,
	}
	if !slices.Equal(lines, want) {
		t.Errorf("the check found:\n  %s\nwant:\n  %s", strings.Join(lines, "\n  "), strings.Join(want, "\n  "))
	}
}
