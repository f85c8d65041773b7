package main

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/swetui/swetui"

// packagesOfOurs maps each package of the module (its path under the
// module, "main" for the root) to the packages of ours it imports, as the
// default build reads them (no test files, no build tags).
func packagesOfOurs(t *testing.T) map[string][]string {
	t.Helper()
	pkgs := map[string][]string{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		p, err := build.ImportDir(path, 0)
		if err != nil {
			return nil // no Go files for this build
		}
		key := filepath.ToSlash(path)
		if key == "." {
			key = "main"
		}
		var ours []string
		for _, imp := range p.Imports {
			if rest, ok := strings.CutPrefix(imp, module+"/"); ok {
				ours = append(ours, rest)
			}
		}
		pkgs[key] = ours
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

var backticked = regexp.MustCompile("`([^`]+)`")

// TestArchitectureTableIsTrue: docs/ARCHITECTURE.md's package table names
// every package, and each row's imports are the package's own.
func TestArchitectureTableIsTrue(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	pkgs := packagesOfOurs(t)
	rows := map[string]string{} // package -> the whole row
	order := map[string]int{}   // package -> its row's place, top to bottom
	named := map[string]bool{}  // packages named anywhere in the table
	inTable := false
	for i, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "| package | owns | imports of ours |") {
			inTable = true
			continue
		}
		if !inTable {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 3 || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") {
			continue
		}
		key := strings.Trim(strings.TrimSpace(cells[0]), "`")
		rows[key] = line
		order[key] = len(order)
		for _, m := range backticked.FindAllStringSubmatch(line, -1) {
			named[m[1]] = true
			if key == "internal/*" {
				named["internal/"+m[1]] = true
			}
		}
		if key == "internal/*" {
			continue
		}
		imports, ok := pkgs[key]
		if !ok {
			t.Errorf("docs/ARCHITECTURE.md:%d: package %s has a row but no Go files", i+1, key)
			continue
		}
		var listed []string
		for _, m := range backticked.FindAllStringSubmatch(cells[2], -1) {
			if _, isPkg := pkgs[m[1]]; isPkg {
				listed = append(listed, m[1])
			}
		}
		slices.Sort(listed)
		slices.Sort(imports)
		if !slices.Equal(listed, imports) {
			t.Errorf("docs/ARCHITECTURE.md:%d: %s imports %q, the table says %q", i+1, key, imports, listed)
		}
	}
	if len(rows) == 0 {
		t.Fatal("docs/ARCHITECTURE.md has no package table")
	}
	// Imports go one way, down the table: no arrow up, so no cycle.
	for p, imports := range pkgs {
		at, ok := order[p]
		if !ok {
			continue
		}
		for _, q := range imports {
			if below, ok := order[q]; ok && below <= at {
				t.Errorf("docs/ARCHITECTURE.md: %s imports %s, whose row is above its own: imports go down the table", p, q)
			}
		}
	}
	// Every package has a row, but for the internal ones and the helpers of
	// tests (servetest), which are named in the row of what they serve.
	for p := range pkgs {
		_, hasRow := rows[p]
		helper := strings.HasPrefix(p, "internal/") || strings.HasSuffix(p, "test")
		switch {
		case helper && !named[p]:
			t.Errorf("package %s is not named in docs/ARCHITECTURE.md's package table", p)
		case !helper && !hasRow:
			t.Errorf("package %s has no row in docs/ARCHITECTURE.md's package table", p)
		}
	}
}

// TestRunFolderHasOneOwner: the names inside a run's folder are spelled in
// history (RunDir) alone; every other package asks it for the path.
func TestRunFolderHasOneOwner(t *testing.T) {
	spelled := regexp.MustCompile(`"(checkpoints|sft-partial|exports|events\.jsonl|metrics\.jsonl|rollouts\.jsonl)"|Join\([^)]*OutDir, "(sft|tokenizer\.json)"\)`)
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "history") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := spelled.FindString(line); m != "" && !strings.HasPrefix(strings.TrimSpace(line), "//") {
				t.Errorf("%s:%d spells the run folder's %s: ask history.RunDir", path, i+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// exportedOf returns the exported top-level names (types, funcs, vars,
// consts) of the package in dir, test files left out.
func exportedOf(t *testing.T, dir string) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if d.Recv == nil {
						names[d.Name.Name] = true
					}
				case *ast.GenDecl:
					for _, s := range d.Specs {
						switch s := s.(type) {
						case *ast.TypeSpec:
							names[s.Name.Name] = true
						case *ast.ValueSpec:
							for _, n := range s.Names {
								names[n.Name] = true
							}
						}
					}
				}
			}
		}
	}
	return names
}

// TestArchitectureNamesExist: every `pkg.Name` docs/ARCHITECTURE.md names,
// pkg one of ours (by its last path element), is declared there; every
// event type and every port of train is on the page.
func TestArchitectureNamesExist(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	dirs := map[string]string{} // last element -> folder
	for p := range packagesOfOurs(t) {
		if p != "main" {
			dirs[p[strings.LastIndex(p, "/")+1:]] = p
		}
	}
	exported := map[string]map[string]bool{}
	for i, line := range strings.Split(page, "\n") {
		for _, m := range regexp.MustCompile("`([a-z]+)\\.([A-Z][A-Za-z0-9]*)").FindAllStringSubmatch(line, -1) {
			dir, ours := dirs[m[1]]
			if !ours {
				continue // tea.Cmd, gorgonia.Read: not ours
			}
			if exported[dir] == nil {
				exported[dir] = exportedOf(t, dir)
			}
			if !exported[dir][m[2]] {
				t.Errorf("docs/ARCHITECTURE.md:%d names %s.%s, which %s does not declare", i+1, m[1], m[2], dir)
			}
		}
	}
	// Every event type (a type with the event method) and every port (an
	// interface of train/ports.go) is named on the page.
	fset := token.NewFileSet()
	evs, err := parser.ParseDir(fset, "event", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range evs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "event" && fn.Recv != nil {
					name := fmt.Sprint(fn.Recv.List[0].Type)
					if !namedOn(page, "event", name) {
						t.Errorf("docs/ARCHITECTURE.md does not name the event %s", name)
					}
				}
			}
		}
	}
	ports, err := parser.ParseFile(fset, filepath.Join("train", "ports.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ports.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, s := range g.Specs {
			if ts, ok := s.(*ast.TypeSpec); ok && ts.Name.IsExported() {
				if _, isInterface := ts.Type.(*ast.InterfaceType); isInterface && !namedOn(page, "train", ts.Name.Name) {
					t.Errorf("docs/ARCHITECTURE.md does not name train's port %s", ts.Name.Name)
				}
			}
		}
	}
}

// namedOn reports whether page names pkg's name in code: `Name...` or
// `pkg.Name...`.
func namedOn(page, pkg, name string) bool {
	return regexp.MustCompile("`(" + pkg + `\.)?` + name + `[^A-Za-z0-9_]`).MatchString(page)
}
