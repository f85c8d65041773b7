package sandbox

import (
	"path"
	"slices"
	"sort"
	"strings"
)

// What the code under test could use to judge itself: files that configure
// or shadow the test runner. The eval script resets them after the model
// patch (tracked ones back to the base commit, new ones removed), and
// package reward flags a patch that touches them; both read this one rule.

// runnerConfigs configure pytest, tox or their plugins wherever they sit
// (pytest looks for its ini file upwards from the test files' folder).
var runnerConfigs = []string{"conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini", "setup.cfg", "pyproject.toml"}

// shadowFiles are modules that Python or the runner import from sys.path
// at start-up, and files the import system reads besides sources.
var shadowFiles = []string{"sitecustomize.py", "usercustomize.py", "pytest.py", "_pytest.py", "py.py", "pluggy.py", "*.pth", "*.pyc", "*.pyo", "*.so"}

// shadowDirs are folders whose files a new module would be read from:
// installed-distribution metadata (pytest11 entry points load plugins) and
// bytecode caches.
var shadowDirs = []string{"*.dist-info", "*.egg-info", "__pycache__"}

// runnerModules are the runner's own top-level packages.
var runnerModules = []string{"_pytest", "pytest", "pluggy", "py", "unittest", "nose"}

// stdlibModules are Python 3.11's top-level standard modules
// (sys.stdlib_module_names, private ones left out): a new module of one of
// these names at the repository's root (or under src/, which editable
// installs put on sys.path) shadows the real one for the test runner.
var stdlibModules = []string{
	"abc", "aifc", "antigravity", "argparse", "array", "ast", "asynchat", "asyncio", "asyncore", "atexit", "audioop",
	"base64", "bdb", "binascii", "bisect", "builtins", "bz2", "cProfile", "calendar", "cgi", "cgitb", "chunk", "cmath",
	"cmd", "code", "codecs", "codeop", "collections", "colorsys", "compileall", "concurrent", "configparser",
	"contextlib", "contextvars", "copy", "copyreg", "crypt", "csv", "ctypes", "curses", "dataclasses", "datetime",
	"dbm", "decimal", "difflib", "dis", "distutils", "doctest", "email", "encodings", "ensurepip", "enum", "errno",
	"faulthandler", "fcntl", "filecmp", "fileinput", "fnmatch", "fractions", "ftplib", "functools", "gc", "genericpath",
	"getopt", "getpass", "gettext", "glob", "graphlib", "grp", "gzip", "hashlib", "heapq", "hmac", "html", "http",
	"idlelib", "imaplib", "imghdr", "imp", "importlib", "inspect", "io", "ipaddress", "itertools", "json", "keyword",
	"lib2to3", "linecache", "locale", "logging", "lzma", "mailbox", "mailcap", "marshal", "math", "mimetypes", "mmap",
	"modulefinder", "msilib", "msvcrt", "multiprocessing", "netrc", "nis", "nntplib", "nt", "ntpath", "nturl2path",
	"numbers", "opcode", "operator", "optparse", "os", "ossaudiodev", "pathlib", "pdb", "pickle", "pickletools",
	"pipes", "pkgutil", "platform", "plistlib", "poplib", "posix", "posixpath", "pprint", "profile", "pstats", "pty",
	"pwd", "py_compile", "pyclbr", "pydoc", "pydoc_data", "pyexpat", "queue", "quopri", "random", "re", "readline",
	"reprlib", "resource", "rlcompleter", "runpy", "sched", "secrets", "select", "selectors", "shelve", "shlex",
	"shutil", "signal", "site", "smtpd", "smtplib", "sndhdr", "socket", "socketserver", "spwd", "sqlite3",
	"sre_compile", "sre_constants", "sre_parse", "ssl", "stat", "statistics", "string", "stringprep", "struct",
	"subprocess", "sunau", "symtable", "sys", "sysconfig", "syslog", "tabnanny", "tarfile", "telnetlib", "tempfile",
	"termios", "textwrap", "this", "threading", "time", "timeit", "tkinter", "token", "tokenize", "tomllib", "trace",
	"traceback", "tracemalloc", "tty", "turtle", "turtledemo", "types", "typing", "unicodedata", "unittest", "urllib",
	"uu", "uuid", "venv", "warnings", "wave", "weakref", "webbrowser", "winreg", "winsound", "wsgiref", "xdrlib", "xml",
	"xmlrpc", "zipapp", "zipfile", "zipimport", "zlib", "zoneinfo",
}

// RunnerConfig reports whether p (relative to the repository) configures
// the test runner: it is reset to the base commit whether the model patch
// adds or edits it.
func RunnerConfig(p string) bool {
	b := path.Base(p)
	for _, c := range runnerConfigs {
		if b == c {
			return true
		}
	}
	return false
}

// startupModules are what pytest imports at start-up besides itself, over
// the versions the harness's images hold (its dependencies, and what its
// site set-up imports): a new module of one of these names on sys.path
// runs inside the runner before any test, whatever the image. The image's
// own names (ImportableNames) add the rest: plugins, the environment's
// libraries.
var startupModules = []string{"_distutils_hack", "atomicwrites", "attr", "attrs", "exceptiongroup", "funcsigs",
	"importlib_metadata", "iniconfig", "more_itertools", "packaging", "pathlib2", "pkg_resources", "setuptools", "six",
	"tomli", "wcwidth", "zipp"}

// Shadowing says which new files shadow a module Python or the runner
// would otherwise import from outside the work tree. A start-up import can
// never come from the work tree: a new top-level module or package, in a
// folder the test run puts on sys.path, whose name can be imported from
// elsewhere (the runner, its dependencies, the standard library, or any
// name the image's Python has installed) is removed before the tests and
// flagged. The alternative, starting the tests so that no start-up import
// reads the work tree (python -I, the work tree off sys.path until the
// runner has loaded), changes what the tests see: the harness's commands
// (python -m pytest, runtests.py, bin/test) put the work tree first on
// purpose, and an editable install's .pth does too, so the harness's
// verdicts on real repositories would move. Removing what is new keeps every
// module the repository has of its own where it was.
type Shadowing struct {
	// Names are the image's importable top-level names (ImportableNames);
	// nil counts only the static ones (runner, start-up, standard library).
	Names map[string]bool
	// Folders are the folders (relative to the repository) that the test
	// run puts on sys.path besides the root and src/, which always count.
	Folders []string
	// Own reports whether the repository has a path (at the base commit,
	// or at the commit the image was built at): a module or package it has
	// of its own under the same name in the same folder is no shadow (a
	// module turned into a package, pytest's own _pytest). nil counts none.
	Own func(string) bool
}

// ShadowsRunner reports whether p, a file the model patch adds, could
// change what the test runner or Python runs before the tests, by the
// static rule: a module that shadows the runner, its start-up imports or
// the standard library at the root or under src/, an import hook, bytecode,
// a native extension, distribution metadata. own says whether a path
// exists at the base commit (a repository's own _pytest package, pytest's,
// is not a shadow); nil counts none as existing.
func ShadowsRunner(p string, own func(string) bool) bool {
	return Shadowing{Own: own}.Shadows(p)
}

// Shadows reports whether p, a file the model patch adds, shadows a module
// or changes what runs before the tests (see ShadowsRunner).
func (s Shadowing) Shadows(p string) bool {
	for _, pat := range shadowFiles {
		if ok, _ := path.Match(pat, path.Base(p)); ok {
			return true
		}
	}
	parts := strings.Split(p, "/")
	for _, c := range parts[:len(parts)-1] {
		for _, pat := range shadowDirs {
			if ok, _ := path.Match(pat, c); ok {
				return true
			}
		}
	}
	for _, d := range s.folders() {
		rel := p
		if d != "" {
			var ok bool
			if rel, ok = strings.CutPrefix(p, d+"/"); !ok {
				continue
			}
		}
		top, _, inDir := strings.Cut(rel, "/")
		name := top
		if !inDir {
			if name, _ = strings.CutSuffix(top, ".py"); name == top {
				continue // not a module
			}
		}
		if !s.importable(name) {
			continue
		}
		at := name
		if d != "" {
			at = d + "/" + name
		}
		if s.Own != nil && (s.Own(at) || s.Own(at+".py")) {
			continue
		}
		return true
	}
	return false
}

// folders are the sys.path folders s judges, each once: the root, src/,
// then s.Folders.
func (s Shadowing) folders() []string {
	out := []string{"", "src"}
	for _, f := range s.Folders {
		f = strings.Trim(path.Clean("/"+f), "/")
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

func (s Shadowing) importable(name string) bool {
	return staticName(name) || (s.Names[name] && ImportableName(name))
}

// staticName reports a name that is importable from outside the work tree
// in every image: the runner's, its start-up imports', the standard
// library's.
func staticName(name string) bool {
	if slices.Contains(runnerModules, name) || slices.Contains(startupModules, name) {
		return true
	}
	j := sort.SearchStrings(stdlibModules, name)
	return j < len(stdlibModules) && stdlibModules[j] == name
}

// genericNames are top-level folders that careless distributions install
// into site-packages beside their package: nothing imports them at
// start-up, and a repository adding its own tests/ or docs/ folder is no
// shadow of them.
var genericNames = []string{"benchmark", "benchmarks", "doc", "docs", "example", "examples", "script", "scripts",
	"test", "testing", "tests", "tools"}

// ImportableName reports whether name, read from an image, counts as a
// module a new file could shadow: an identifier, and not one of the
// folders careless distributions install (tests, docs, ...).
func ImportableName(name string) bool {
	if name == "" || slices.Contains(genericNames, name) {
		return false
	}
	for i, r := range name {
		if !(r == '_' || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || (i > 0 && '0' <= r && r <= '9')) {
			return false
		}
	}
	return true
}

// protectFunction is the bash twin of RunnerConfig and Shadowing.Shadows:
// protected PATH NEW returns 0 when the script must reset PATH (NEW is 1 for
// a file the model patch added). The repository's own modules are those of
// base and of $swetui_image_head, the commit the image held (when the
// script sets it); names are the image's importable names; the array
// swetui_path holds the folders the test run puts on sys.path (the root and
// src/; the script adds the test files' folders).
func protectFunction(base string, names []string) string {
	var b strings.Builder
	w := func(s string) { b.WriteString(s + "\n") }
	var l strings.Builder
	for _, n := range names {
		if ImportableName(n) && !staticName(n) {
			l.WriteString(" [" + n + "]=1")
		}
	}
	w("declare -A swetui_names=(" + strings.TrimPrefix(l.String(), " ") + ") # the image's importable names")
	w(`swetui_path=("" src)`)
	w("swetui_own=(" + shq(base) + `); [ -n "${swetui_image_head:-}" ] && swetui_own+=("$swetui_image_head")`)
	w("protected() {")
	w(`  local p=$1 b=${1##*/} d rel top name at c own`)
	w("  case \"$b\" in " + strings.Join(runnerConfigs, "|") + ") return 0;; esac")
	w(`  [ "$2" = 1 ] || return 1`)
	w("  case \"$b\" in " + strings.Join(shadowFiles, "|") + ") return 0;; esac")
	dirs := make([]string, len(shadowDirs))
	for i, d := range shadowDirs {
		dirs[i] = "*/" + d + "/*"
	}
	w("  case \"/$p\" in " + strings.Join(dirs, "|") + ") return 0;; esac")
	w(`  for d in "${swetui_path[@]}"; do`)
	w(`    if [ -z "$d" ]; then rel=$p; elif [ "${p#"$d"/}" != "$p" ]; then rel=${p#"$d"/}; else continue; fi`)
	w(`    top=${rel%%/*}; name=$top`)
	w(`    if [ "$top" = "$rel" ]; then case "$top" in *.py) name=${top%.py};; *) continue;; esac; fi`)
	w(`    [ -n "$name" ] || continue`)
	all := append(append(append([]string(nil), runnerModules...), startupModules...), stdlibModules...)
	w("    case \"$name\" in " + strings.Join(all, "|") + ") ;; *) [ -n \"${swetui_names[$name]:-}\" ] || continue;; esac")
	w(`    at=${d:+$d/}$name; own=`)
	w(`    for c in "${swetui_own[@]}"; do`)
	w(`      if git cat-file -e "$c:$at" 2>/dev/null || git cat-file -e "$c:$at.py" 2>/dev/null; then own=1; break; fi`)
	w(`    done`)
	w(`    [ -n "$own" ] || return 0`)
	w(`  done`)
	w("  return 1")
	w("}")
	return b.String()
}
