package sandbox

import (
	"path"
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

// ShadowsRunner reports whether p, a file the model patch adds, could
// change what the test runner or Python runs before the tests: a module
// that shadows the runner or the standard library, an import hook, bytecode,
// a native extension, distribution metadata. dirAtBase says whether a
// folder exists at the base commit (a repository's own _pytest package,
// pytest's, is not a shadow); nil counts none as existing.
func ShadowsRunner(p string, dirAtBase func(string) bool) bool {
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
	// A module at the root or under src/: name.py, or a file in name/.
	i := 0
	if len(parts) > 1 && parts[0] == "src" {
		i = 1
	}
	name := strings.TrimSuffix(parts[i], ".py")
	if i == len(parts)-1 && !strings.HasSuffix(parts[i], ".py") {
		return false
	}
	if !shadowName(name) {
		return false
	}
	if i < len(parts)-1 && dirAtBase != nil && dirAtBase(strings.Join(parts[:i+1], "/")) {
		return false
	}
	return true
}

func shadowName(name string) bool {
	for _, m := range runnerModules {
		if name == m {
			return true
		}
	}
	j := sort.SearchStrings(stdlibModules, name)
	return j < len(stdlibModules) && stdlibModules[j] == name
}

// protectFunction is the bash twin of RunnerConfig and ShadowsRunner:
// protected PATH NEW returns 0 when the script must reset PATH (NEW is 1 for
// a file the model patch added).
func protectFunction(base string) string {
	var b strings.Builder
	w := func(s string) { b.WriteString(s + "\n") }
	w("protected() {")
	w(`  local p=$1 b=${1##*/} top rest name`)
	w("  case \"$b\" in " + strings.Join(runnerConfigs, "|") + ") return 0;; esac")
	w(`  [ "$2" = 1 ] || return 1`)
	w("  case \"$b\" in " + strings.Join(shadowFiles, "|") + ") return 0;; esac")
	dirs := make([]string, len(shadowDirs))
	for i, d := range shadowDirs {
		dirs[i] = "*/" + d + "/*"
	}
	w("  case \"/$p\" in " + strings.Join(dirs, "|") + ") return 0;; esac")
	w(`  rest=$p; top=${p%%/*}`)
	w(`  if [ "$top" = src ] && [ "$p" != src ] && [ "${p#src/}" != "$p" ]; then rest=${p#src/}; top=src/${rest%%/*}; fi`)
	w(`  name=${top##*/}`)
	w(`  if [ "$top" = "$p" ]; then case "$name" in *.py) name=${name%.py};; *) return 1;; esac`)
	w("  elif git cat-file -e " + shq(base) + `:"$top" 2>/dev/null; then return 1; fi`)
	all := append(append([]string(nil), runnerModules...), stdlibModules...)
	w("  case \"$name\" in " + strings.Join(all, "|") + ") return 0;; esac")
	w("  return 1")
	w("}")
	return b.String()
}
