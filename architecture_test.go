package main

import (
	"go/build"
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
