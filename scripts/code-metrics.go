//go:build ignore

// code-metrics measures the shape of the code from the code itself (scripts/code-metrics.sh
// runs it): packages, the longest function and those over the limit, and the import arrows
// that point from a service package into another service package or from a mechanism into a
// service. It reads the files as they are (every build tag's), so the numbers do not depend on
// the Ceph release built for.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// wiring packages put the services together: importing them all is their job.
var wiring = []string{"cmd/", "internal/driver", "e2e/"}

type fn struct {
	pos   string
	name  string
	lines int
}

type pkg struct {
	dir     string
	imports map[string]bool // module-relative directories
	service bool            // embeds a generated Unimplemented…Server: it serves a gRPC service
}

// tree is what the files say: packages by module-relative directory, and every function.
type tree struct {
	pkgs map[string]*pkg
	fns  []fn
}

func main() {
	limit := flag.Int("limit", 80, "report functions longer than this many lines")
	tests := flag.Bool("tests", false, "count _test.go files too")
	extra := flag.String("services", "internal/nodefence", "comma-separated packages that are services without a gRPC server of their own (the out-of-service fencer is a leader-elected controller)")
	flag.Parse()

	module, err := modulePath("go.mod")
	if err != nil {
		fail(err)
	}
	t, err := read(module, *tests)
	if err != nil {
		fail(err)
	}
	services := t.services(*extra)
	svcToSvc, upward := t.arrows(services)

	what := "code"
	if *tests {
		what = "code and tests"
	}
	sort.Slice(t.fns, func(i, j int) bool { return t.fns[i].lines > t.fns[j].lines })
	fmt.Printf("%-41s%d\n", "functions ("+what+")", len(t.fns))
	if len(t.fns) > 0 {
		fmt.Printf("%-41s%d lines: %s %s\n", "longest function", t.fns[0].lines, t.fns[0].pos, t.fns[0].name)
	}
	var over []fn
	for _, f := range t.fns {
		if f.lines > *limit {
			over = append(over, f)
		}
	}
	fmt.Printf("%-41s%d\n", fmt.Sprintf("functions over %d lines", *limit), len(over))
	for _, f := range over {
		fmt.Printf("  %4d  %s %s\n", f.lines, f.pos, f.name)
	}
	fmt.Printf("%-41s%d: %s\n", "service packages", len(services), strings.Join(services, " "))
	list("service → service imports", svcToSvc)
	list("mechanism → service imports (upward)", upward)
}

func list(what string, items []string) {
	fmt.Printf("%-41s%d\n", what, len(items))
	for _, a := range items {
		fmt.Println("  " + a)
	}
}

// read parses every Go file of the module below the current directory.
func read(module string, tests bool) (*tree, error) {
	t := &tree{pkgs: map[string]*pkg{}}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// scripts/tools holds modules of their own; testdata is no package
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor" || path == "scripts/tools" || path == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || (!tests && strings.HasSuffix(path, "_test.go")) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil || ignored(f) {
			return err
		}
		t.add(fset, module, path, f)
		return nil
	})
	return t, err
}

// add counts one file's imports, functions and served gRPC services.
func (t *tree) add(fset *token.FileSet, module, path string, f *ast.File) {
	dir := filepath.Dir(path)
	p := t.pkgs[dir]
	if p == nil {
		p = &pkg{dir: dir, imports: map[string]bool{}}
		t.pkgs[dir] = p
	}
	for _, im := range f.Imports {
		ip, _ := strconv.Unquote(im.Path.Value)
		if rel, ok := strings.CutPrefix(ip, module+"/"); ok {
			p.imports[rel] = true
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		if fl, ok := n.(*ast.Field); ok && len(fl.Names) == 0 && embedsUnimplemented(fl.Type) {
			p.service = true
		}
		return true
	})
	for _, decl := range f.Decls {
		if d, ok := decl.(*ast.FuncDecl); ok && d.Body != nil {
			start, end := fset.Position(d.Pos()), fset.Position(d.End())
			t.fns = append(t.fns, fn{pos: fmt.Sprintf("%s:%d", path, start.Line), name: funcName(d), lines: end.Line - start.Line + 1})
		}
	}
}

// services are the packages that serve a gRPC service, but the wiring, and extra.
func (t *tree) services(extra string) []string {
	var out []string
	for dir, p := range t.pkgs {
		if p.service && !isWiring(dir) {
			out = append(out, dir)
		}
	}
	for _, s := range strings.Split(extra, ",") {
		if s = strings.TrimSpace(s); s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

// arrows are the imports of a service package by another service package, and by a package
// that is no service (a mechanism), the wiring's left out.
func (t *tree) arrows(services []string) (svcToSvc, upward []string) {
	dirs := make([]string, 0, len(t.pkgs))
	for dir := range t.pkgs {
		dirs = append(dirs, dir)
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
		if isWiring(dir) {
			continue
		}
		var targets []string
		for imp := range t.pkgs[dir].imports {
			if slices.Contains(services, imp) && imp != dir {
				targets = append(targets, imp)
			}
		}
		sort.Strings(targets)
		for _, imp := range targets {
			if slices.Contains(services, dir) {
				svcToSvc = append(svcToSvc, dir+" → "+imp)
			} else {
				upward = append(upward, dir+" → "+imp)
			}
		}
	}
	return svcToSvc, upward
}

// ignored reports a file that builds under no tag (//go:build ignore), such as this one.
func ignored(f *ast.File) bool {
	for _, cg := range f.Comments {
		if cg.Pos() > f.Package {
			break
		}
		for _, c := range cg.List {
			if strings.TrimSpace(c.Text) == "//go:build ignore" {
				return true
			}
		}
	}
	return false
}

// embedsUnimplemented: protoc-gen-go-grpc's servers are served by embedding
// Unimplemented<Service>Server.
func embedsUnimplemented(e ast.Expr) bool {
	if sel, ok := e.(*ast.SelectorExpr); ok {
		e = sel.Sel
	}
	id, ok := e.(*ast.Ident)
	return ok && strings.HasPrefix(id.Name, "Unimplemented") && strings.HasSuffix(id.Name, "Server")
}

func isWiring(dir string) bool {
	for _, w := range wiring {
		if dir == strings.TrimSuffix(w, "/") || strings.HasPrefix(dir, w) {
			return true
		}
	}
	return false
}

func funcName(d *ast.FuncDecl) string {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return d.Name.Name
	}
	t := d.Recv.List[0].Type
	star := ""
	if s, ok := t.(*ast.StarExpr); ok {
		t, star = s.X, "*"
	}
	if ix, ok := t.(*ast.IndexExpr); ok {
		t = ix.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return "(" + star + id.Name + ")." + d.Name.Name
	}
	return d.Name.Name
}

func modulePath(gomod string) (string, error) {
	f, err := os.Open(gomod)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.TrimSpace(m), nil
		}
	}
	return "", fmt.Errorf("%s names no module", gomod)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "code-metrics:", err)
	os.Exit(1)
}
