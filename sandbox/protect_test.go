package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestShadowing: which new files shadow a module importable from outside
// the work tree, by folder on sys.path, name and what the repository has
// of its own.
func TestShadowing(t *testing.T) {
	image := map[string]bool{"hypothesis": true, "requests": true, "numpy": true, "calc": true, "tests": true, "docs": true, "google": true}
	atBase := map[string]bool{"calc.py": true, "src/_pytest": true, "src/numpy": true, "lib/requests.py": true}
	own := func(p string) bool { return atBase[p] }
	tests := []struct {
		path    string
		static  bool // ShadowsRunner: no image names, no test folders
		inImage bool // with the image's names and tests/ on sys.path
	}{
		// What pytest imports at start-up, in every image.
		{"iniconfig.py", true, true},
		{"attr.py", true, true},
		{"attr/__init__.py", true, true},
		{"src/iniconfig.py", true, true},
		{"packaging/version.py", true, true},
		{"pluggy/__init__.py", true, true},
		{"pytest.py", true, true},
		{"sitecustomize.py", true, true},
		{"pkg/x.pth", true, true},
		// The standard library.
		{"inspect.py", true, true},
		{"json/__init__.py", true, true},
		// The image's names: plugins and libraries.
		{"hypothesis.py", false, true},
		{"hypothesis/__init__.py", false, true},
		{"src/requests/api.py", false, true},
		{"google/__init__.py", false, true},
		// A folder the test run puts on sys.path.
		{"tests/iniconfig.py", false, true},
		{"tests/hypothesis/__init__.py", false, true},
		{"tests/helpers.py", false, false},
		{"tests/sub/iniconfig.py", false, false},
		// Not on sys.path: a module inside a package.
		{"pkg/iniconfig.py", false, false},
		{"pkg/hypothesis.py", false, false},
		// The repository's own: the same name in the same folder at base.
		{"calc/__init__.py", false, false},      // calc.py turned into a package
		{"src/_pytest/new.py", false, false},    // pytest's own
		{"src/numpy/core/new.py", false, false}, // numpy's own
		{"src/calc.py", false, true},            // not in src/ at base
		{"requests/api.py", false, true},        // lib/ is not on sys.path
		// Names careless distributions install, and names that are no module.
		{"tests/__init__.py", false, false},
		{"docs/conf.py", false, false},
		{"README", false, false},
		{"hypothesis.txt", false, false},
		{"new_module.py", false, false},
	}
	s := Shadowing{Names: image, Folders: []string{"tests", "tests/"}, Own: own}
	for _, tt := range tests {
		if got := ShadowsRunner(tt.path, own); got != tt.static {
			t.Errorf("ShadowsRunner(%q) = %v, want %v", tt.path, got, tt.static)
		}
		if got := s.Shadows(tt.path); got != tt.inImage {
			t.Errorf("with the image's names, Shadows(%q) = %v, want %v", tt.path, got, tt.inImage)
		}
	}
}

// TestImportableNames reads a probe's line: identifiers only, without the
// folders careless distributions install.
func TestImportableNames(t *testing.T) {
	log := "conda activated\n" + ImportablePrefix + "_pytest attr docs hypothesis my-dist.dist-info __pycache__ 3rd tests zipp\nbye\n"
	got, ok := ImportableNames(log)
	want := []string{"_pytest", "attr", "hypothesis", "__pycache__", "zipp"}
	if !ok || !slices.Equal(got, want) {
		t.Errorf("ImportableNames = %v %v, want %v", got, ok, want)
	}
	if got, ok := ImportableNames("swetui: no python in the image\n"); ok || len(got) != 0 {
		t.Errorf("no probe line: %v %v", got, ok)
	}
}

// TestEvalScriptRemovesShadows: the prepare script removes each new module
// that shadows an importable one (the static names, the image's, in the
// root, src/ and the test files' folder on sys.path), says so on its own
// lines, and leaves the repository's own modules and new modules of other
// names alone.
func TestEvalScriptRemovesShadows(t *testing.T) {
	base := map[string]string{"calc.py": "x = 1\n", "tests/test_calc.py": "def test_x():\n    pass\n",
		"pkg/__init__.py": "", "src/own/__init__.py": ""}
	dir := t.TempDir()
	write := func(files map[string]string) {
		for name, body := range files {
			p := filepath.Join(dir, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(base)
	git(t, dir, "init", "-q")
	git(t, dir, "add", "-A")
	git(t, dir, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "base")
	head := strings.TrimSpace(git(t, dir, "rev-parse", "HEAD"))
	added := map[string]bool{ // path: removed
		"iniconfig.py":             true,
		"attr/__init__.py":         true,
		"src/pluggy/__init__.py":   true,
		"hypothesis.py":            true, // the image's
		"tests/iniconfig.py":       true, // tests/ is on sys.path
		"tests/helpers.py":         false,
		"pkg/iniconfig.py":         false, // inside a package
		"calc/__init__.py":         false, // the repository's own name
		"src/own/new.py":           false,
		"new_module.py":            false,
		"docs/conf.py":             false,
		"tests/hypothesis/util.py": true,
	}
	files := map[string]string{}
	for p := range added {
		files[p] = "import sys\n"
	}
	write(files)
	git(t, dir, "add", "-A")
	patch := git(t, dir, "diff", "--cached", "--binary")
	git(t, dir, "reset", "-q", "--hard", head)
	git(t, dir, "clean", "-qfdx")
	mp := filepath.Join(t.TempDir(), "model.patch")
	if err := os.WriteFile(mp, []byte(patch), 0o644); err != nil {
		t.Fatal(err)
	}
	sc := EvalScript(ScriptSpec{Workdir: dir, BaseCommit: head, ModelPatchPath: mp, TestCmd: "true",
		Importable: []string{"hypothesis", "docs", "tests"}, TestPaths: []string{"tests/test_calc.py"}})
	log, exit := runOnHost(t, sc)
	if exit != 0 {
		t.Fatalf("exit %d\n%s", exit, log)
	}
	o := ParseOutput(log, sc.Nonce)
	shadowed := strings.Split(o.Shadowed, "\n")
	for p, removed := range added {
		_, err := os.Stat(filepath.Join(dir, p))
		if exists := err == nil; exists == removed {
			t.Errorf("%s: exists %v afterwards, want removed %v\n%s", p, exists, removed, log)
		}
		if slices.Contains(shadowed, p) != removed {
			t.Errorf("%s: reported shadowed %v, want %v (reported %q)", p, !removed, removed, o.Shadowed)
		}
	}
}
