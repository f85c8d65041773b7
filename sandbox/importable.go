package sandbox

import (
	"strings"
)

// ImportablePrefix starts the line an image's name probe prints: the
// top-level names its Python imports from outside the work tree, separated
// by spaces.
const ImportablePrefix = "swetui-importable:"

// importableScript lists, for Python 2.7 and every Python 3, the top-level
// names an interpreter imports from outside the work tree (argv[1]): the
// built-in modules, the standard library's (sys.stdlib_module_names where
// there is one), and every module, package and folder of each sys.path
// entry (site-packages, the standard library's folders, what .pth files and
// PYTHONPATH add) that is not inside the work tree. It imports nothing of
// what it lists.
const importableScript = `import os, sys, pkgutil
w = os.path.realpath(sys.argv[1]).rstrip(os.sep) + os.sep
names = set(sys.builtin_module_names)
names.update(getattr(sys, "stdlib_module_names", ()))
for e in sys.path:
    if not e or not os.path.isdir(e):
        continue
    r = os.path.realpath(e)
    if (r + os.sep).startswith(w):
        continue
    for m in pkgutil.iter_modules([e]):
        names.add(m[1])
    try:
        for n in os.listdir(e):
            if os.path.isdir(os.path.join(e, n)):
                names.add(n)
    except OSError:
        pass
sys.stdout.write("` + ImportablePrefix + `" + " ".join(sorted(n for n in names if n)) + "\n")
`

// ImportableProbe is the script of a sandbox that reads an image's
// importable names (ImportableNames reads its log): in workdir, the
// instance's setup (environment activation: the interpreter the tests run
// with), then that Python run from the root with the work tree left out of
// what it lists. It runs in a fresh sandbox of the image, before any patch,
// and always exits 0; an image without Python prints no names.
func ImportableProbe(workdir string, setup []string) string {
	var b strings.Builder
	b.WriteString("#!/bin/bash\n# swetui: the image's importable top-level names (sandbox/importable.go).\n")
	b.WriteString("exec 2>&1 </dev/null\n")
	b.WriteString("cd " + shq(workdir) + " || exit 0\n(\n")
	for _, c := range setup {
		b.WriteString(c + "\n")
	}
	b.WriteString("cd / || exit 0\n")
	b.WriteString("py=$(command -v python3 || command -v python) || { echo 'swetui: no python in the image'; exit 0; }\n")
	b.WriteString(`"$py" -c ` + shq(importableScript) + " " + shq(workdir) + "\n)\nexit 0\n")
	return b.String()
}

// ImportableNames reads the names an ImportableProbe printed in log, those
// that count as modules (ImportableName), sorted; ok says the probe's line
// was there.
func ImportableNames(log string) (names []string, ok bool) {
	for _, line := range strings.Split(log, "\n") {
		rest, found := strings.CutPrefix(strings.TrimSuffix(line, "\r"), ImportablePrefix)
		if !found {
			continue
		}
		ok = true
		names = names[:0]
		for _, n := range strings.Fields(rest) {
			if ImportableName(n) {
				names = append(names, n)
			}
		}
	}
	return names, ok
}
