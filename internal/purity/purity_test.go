package purity

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/kvrouter/kvrouter/"

// core lists the pure packages. Each must be found by go list and have
// Go files to read: a renamed or moved package fails the test until the
// list follows it.
var core = []string{
	"internal/kvhash",
	"internal/index",
	"internal/sequences",
	"internal/scheduler",
	"internal/mocker",
	"internal/eventplane/recovery/stream",
	"internal/eventplane/vllmzmq/batchseq",
	"internal/replica/core",
	"internal/fleet",
	"internal/timeline",
	"internal/admission",
	"internal/timemodel",
	"internal/affinity",
}

// forbidden are the imports that mean I/O or processes.
var forbidden = map[string]bool{"net": true, "os": true, "os/exec": true, "syscall": true}

// trustedStd are standard packages that import a forbidden package only
// for the process's own needs, never on a core package's behalf: fmt's
// Print functions write to os.Stdout (core packages use Sprintf and
// Errorf), time loads zone files for LoadLocation, and the runtime's
// internal packages. The walk does not descend into them.
func trustedStd(p string) bool {
	return p == "fmt" || p == "time" || strings.HasPrefix(p, "internal/") || strings.HasPrefix(p, "runtime")
}

// exempt are non-standard dependencies allowed despite a forbidden
// import, with the reason.
var exempt = map[string]string{
	// xxh3 (kvhash) detects AVX2/AVX-512 with it; its only os use is
	// os.Exit in the opt-in Flags helper, which nothing calls.
	"github.com/klauspost/cpuid/v2": "CPU feature detection; os only in the unused Flags helper",
}

// banned are the time functions that read the clock or start timers.
var banned = map[string]bool{"Now": true, "Since": true, "Until": true, "After": true, "AfterFunc": true,
	"NewTimer": true, "NewTicker": true, "Tick": true, "Sleep": true}

type listed struct {
	ImportPath     string
	Dir            string
	Standard       bool
	Imports        []string
	GoFiles        []string
	CgoFiles       []string
	IgnoredGoFiles []string
	Error          *struct{ Err string }
}

// goList returns `go list -deps -json` of pkgs, by import path.
func goList(t *testing.T, pkgs []string) map[string]*listed {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-json"}, pkgs...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	all := map[string]*listed{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding go list output: %v", err)
		}
		all[p.ImportPath] = &p
	}
	return all
}

// corePackages returns the import paths to check.
func corePackages() []string {
	pkgs := make([]string, len(core))
	for i, c := range core {
		pkgs[i] = module + c
	}
	return pkgs
}

// TestCoreImportsNoIO walks each core package's import graph.
func TestCoreImportsNoIO(t *testing.T) {
	pkgs := corePackages()
	all := goList(t, pkgs)
	for _, p := range pkgs {
		lp := all[p]
		if lp == nil || lp.Error != nil || len(lp.GoFiles) == 0 {
			t.Errorf("%s: not found by go list (%+v)", p, lp)
			continue
		}
		for _, chain := range impure(all, p) {
			t.Errorf("%s imports %s", strings.TrimPrefix(p, module), strings.Join(chain, " → "))
		}
	}
}

// impure returns, for each forbidden package reachable from p outside
// the trusted standard packages and exemptions, one import chain to it.
func impure(all map[string]*listed, p string) [][]string {
	var found [][]string
	seen := map[string]bool{p: true}
	var walk func(chain []string)
	walk = func(chain []string) {
		lp := all[chain[len(chain)-1]]
		if lp == nil {
			return
		}
		for _, imp := range lp.Imports {
			if seen[imp] {
				continue
			}
			seen[imp] = true
			next := append(slices.Clone(chain), imp)
			switch dep := all[imp]; {
			case forbidden[imp]:
				found = append(found, next[1:])
			case dep == nil, exempt[imp] != "":
			case dep.Standard && trustedStd(imp):
			default:
				walk(next)
			}
		}
	}
	walk([]string{p})
	return found
}

// TestCoreReadsNoClockStartsNoGoroutine reads each core package's own
// non-test files, for every platform.
func TestCoreReadsNoClockStartsNoGoroutine(t *testing.T) {
	pkgs := corePackages()
	all := goList(t, pkgs)
	for _, p := range pkgs {
		lp := all[p]
		if lp == nil || lp.Dir == "" {
			t.Errorf("%s: not found by go list", p)
			continue
		}
		built := slices.Concat(lp.GoFiles, lp.CgoFiles)
		var other []string
		for _, f := range lp.IgnoredGoFiles {
			if !strings.HasSuffix(f, "_test.go") {
				other = append(other, f)
			}
		}
		if len(built) == 0 {
			t.Errorf("%s: no Go files parsed", p)
			continue
		}
		// The files of this build are checked together; each file for
		// another platform on its own (it may redeclare their names).
		sets := [][]string{built}
		for _, f := range other {
			sets = append(sets, []string{f})
		}
		n := 0
		for _, set := range sets {
			var srcs []source
			for _, f := range set {
				b, err := os.ReadFile(filepath.Join(lp.Dir, f))
				if err != nil {
					t.Fatal(err)
				}
				srcs = append(srcs, source{name: filepath.Join(lp.Dir, f), text: b})
			}
			vs, err := violations(srcs)
			if err != nil {
				t.Errorf("%s: %v", p, err)
			}
			for _, v := range vs {
				t.Errorf("%s: %s", strings.TrimPrefix(p, module), v)
			}
			n += len(srcs)
		}
		t.Logf("%s: %d files read", strings.TrimPrefix(p, module), n)
	}
}

type source struct {
	name string
	text []byte
}

// violations parses one package's files and reports every use of a
// banned time function (the time import resolved by go/types, whatever
// its local name, shadowing respected), every dot import of time and
// every go statement, as "file:line: what".
func violations(srcs []source) ([]string, error) {
	fset := token.NewFileSet()
	var files []*ast.File
	for _, s := range srcs {
		f, err := parser.ParseFile(fset, s.name, s.text, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return nil, errors.New("no files")
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: stubImporter{}, Error: func(error) {}}
	_, _ = conf.Check(files[0].Name.Name, fset, files, info) // errors expected: imports are stubs
	var out []string
	report := func(pos token.Pos, format string, args ...any) {
		p := fset.Position(pos)
		out = append(out, fmt.Sprintf("%s:%d: %s", filepath.Base(p.Filename), p.Line, fmt.Sprintf(format, args...)))
	}
	for _, f := range files {
		for _, imp := range f.Imports {
			if imp.Path.Value == `"time"` && imp.Name != nil && imp.Name.Name == "." {
				report(imp.Pos(), "dot import of time")
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				report(n.Pos(), "go statement")
			case *ast.SelectorExpr:
				id, ok := n.X.(*ast.Ident)
				if !ok {
					break
				}
				if pn, ok := info.Uses[id].(*types.PkgName); ok && pn.Imported().Path() == "time" && banned[n.Sel.Name] {
					report(n.Pos(), "%s.%s (time.%s)", id.Name, n.Sel.Name, n.Sel.Name)
				}
			}
			return true
		})
	}
	return out, nil
}

var majorVersion = regexp.MustCompile(`^v[0-9]+$`)

// stubImporter returns an empty package for every path: the check needs
// only to know which package an import name denotes, not its contents.
type stubImporter struct{}

func (stubImporter) Import(p string) (*types.Package, error) {
	name := path.Base(p)
	if majorVersion.MatchString(name) {
		name = path.Base(path.Dir(p))
	}
	pkg := types.NewPackage(p, strings.ReplaceAll(name, "-", "_"))
	pkg.MarkComplete()
	return pkg, nil
}

// TestViolationsFinds checks the checker on worked examples: what it
// must flag and what it must not.
func TestViolationsFinds(t *testing.T) {
	for _, c := range []struct {
		name, src string
		want      []string
	}{
		{"plain", `package p; import "time"; func f() time.Time { return time.Now() }`, []string{"a.go:1: time.Now (time.Now)"}},
		{"renamed", "package p\nimport clock \"time\"\nvar _ = clock.Since\nfunc f() { clock.Sleep(1) }",
			[]string{"a.go:3: clock.Since (time.Since)", "a.go:4: clock.Sleep (time.Sleep)"}},
		{"all", `package p; import "time"; var _ = []any{time.Now, time.Since, time.Until, time.After, time.AfterFunc, time.NewTimer, time.NewTicker, time.Tick, time.Sleep}`, nil},
		{"go statement", "package p\nfunc f() {\n\tgo f()\n}", []string{"a.go:3: go statement"}},
		{"dot import", "package p\nimport . \"time\"\nvar _ = Duration(0)", []string{"a.go:2: dot import of time"}},
		{"shadowed", `package p; import "time"; type c struct{}; func (c) Now() int { return 0 }; func f(d time.Duration) int { time := c{}; return time.Now() }`, nil},
		{"methods and pure functions", `package p; import "time"; func f(a, b time.Time) bool { return a.After(b) && time.Unix(0, 0).Before(a) && time.Duration(1) > 0 }`, nil},
		{"another package named time", `package p; import time "example.com/clock"; var _ = time.Now`, nil},
		{"a local package called time", `package p; import "example.com/x/time"; var _ = time.Now`, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := violations([]source{{name: "a.go", text: []byte(c.src)}})
			if err != nil {
				t.Fatal(err)
			}
			if c.name == "all" {
				if len(got) != len(banned) {
					t.Fatalf("flagged %d of %d banned functions: %q", len(got), len(banned), got)
				}
				return
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
}

// TestImpureFindsChains checks the import walk on a small graph.
func TestImpureFindsChains(t *testing.T) {
	g := map[string]*listed{
		"core":                          {Imports: []string{"fmt", "example.com/dep", "github.com/klauspost/cpuid/v2", "net/http"}},
		"fmt":                           {Standard: true, Imports: []string{"os"}},
		"example.com/dep":               {Imports: []string{"syscall"}},
		"github.com/klauspost/cpuid/v2": {Imports: []string{"os"}},
		"net/http":                      {Standard: true, Imports: []string{"net"}},
		"net":                           {Standard: true},
		"os":                            {Standard: true},
		"syscall":                       {Standard: true},
	}
	got := impure(g, "core")
	want := [][]string{{"example.com/dep", "syscall"}, {"net/http", "net"}}
	if !slices.EqualFunc(got, want, slices.Equal[[]string]) {
		t.Fatalf("impure = %q, want %q", got, want)
	}
}
