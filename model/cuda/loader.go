package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ebitengine/purego"
)

// The CUDA libraries are loaded at run time (no toolkit at build time):
// the driver (libcuda), cuBLAS and NVRTC. Each is looked for, in order, in
// the folders of model.cuda_libs, of SWETUI_CUDA_LIBS, of LD_LIBRARY_PATH, of CUDA_HOME and
// CUDA_PATH, the usual install folders, the lib folders of NVIDIA's Python
// wheels (what PyTorch installs), and last by bare name through the
// dynamic loader's own search (ldconfig's cache).

// library is one shared library and the file names it goes by.
type library struct {
	what  string // for messages
	names []string
}

var (
	libCUDA   = library{"libcuda (the NVIDIA driver API)", []string{"libcuda.so.1", "libcuda.so"}}
	libCUBLAS = library{"cuBLAS", []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so"}}
	libNVRTC  = library{"NVRTC (the runtime CUDA compiler)", []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}}
)

// systemDirs are the usual install folders; wheelGlobs find the lib
// folders of NVIDIA's pip wheels.
var (
	systemDirs = []string{
		"/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib",
		"/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/x86_64-linux-gnu",
		"/usr/lib64", "/usr/lib", "/usr/lib/wsl/lib", "/opt/cuda/lib64",
	}
	wheelGlobs = []string{
		"/usr/local/lib/python3*/dist-packages/nvidia/*/lib", "/usr/local/lib/python3*/site-packages/nvidia/*/lib",
		"/usr/lib/python3*/dist-packages/nvidia/*/lib", "/opt/conda/lib/python3*/site-packages/nvidia/*/lib",
		"/usr/local/lib/python3*/dist-packages/nvidia/cu*/lib", "/usr/local/lib/python3*/site-packages/nvidia/cu*/lib",
		"/opt/conda/lib/python3*/site-packages/nvidia/cu*/lib",
	}
)

// searchPlace is one source of folders, named for the error message.
type searchPlace struct {
	name string
	dirs []string
	none string // what an empty list means
}

// Loader finds and opens the CUDA libraries.
type Loader struct {
	// ConfigDirs are model.cuda_libs's folders, searched first.
	ConfigDirs []string
	// Env reads the environment (os.Getenv when nil).
	Env func(string) string
	// NoSystem skips the usual folders, the wheels and the bare-name
	// lookup (tests: a machine's own libraries must not answer).
	NoSystem bool
}

func (l *Loader) getenv(k string) string {
	if l.Env != nil {
		return l.Env(k)
	}
	return os.Getenv(k)
}

func splitList(s string) []string {
	var out []string
	for _, d := range filepath.SplitList(s) {
		if d = strings.TrimSpace(d); d != "" {
			out = append(out, d)
		}
	}
	return out
}

func (l *Loader) places() []searchPlace {
	ps := []searchPlace{
		{"model.cuda_libs", l.ConfigDirs, "(none set)"},
		{"SWETUI_CUDA_LIBS", splitList(l.getenv("SWETUI_CUDA_LIBS")), "(none set)"},
		{"LD_LIBRARY_PATH", splitList(l.getenv("LD_LIBRARY_PATH")), "(none set)"},
	}
	var home []string
	for _, k := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if v := l.getenv(k); v != "" {
			home = append(home, filepath.Join(v, "lib64"), filepath.Join(v, "lib"))
		}
	}
	ps = append(ps, searchPlace{"CUDA_HOME/CUDA_PATH", home, "(none set)"})
	if !l.NoSystem {
		var wheels []string
		for _, g := range wheelGlobs {
			m, _ := filepath.Glob(g)
			wheels = append(wheels, m...)
		}
		ps = append(ps, searchPlace{"usual folders", systemDirs, "(none)"},
			searchPlace{"NVIDIA Python wheels", wheels, "(none found: " + strings.Join(wheelGlobs[:2], ", ") + ", ...)"})
	}
	return ps
}

// LibraryError says which library could not be loaded and every place
// that was searched, with what was found there.
type LibraryError struct {
	Library string
	Names   []string
	Tried   []string // one line per place
}

func (e *LibraryError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cuda: %s not found (looked for %s):", e.Library, strings.Join(e.Names, ", "))
	for _, t := range e.Tried {
		b.WriteString("\n  ")
		b.WriteString(t)
	}
	b.WriteString("\n  set model.cuda_libs (or LD_LIBRARY_PATH) to the folder that holds it, or use model.device=cpu")
	return b.String()
}

// open loads the first file of lib found along the search, or returns a
// *LibraryError.
func (l *Loader) open(lib library) (uintptr, string, error) {
	e := &LibraryError{Library: lib.what, Names: lib.names}
	for _, p := range l.places() {
		if len(p.dirs) == 0 {
			e.Tried = append(e.Tried, p.name+": "+p.none)
			continue
		}
		var notes []string
		for _, d := range p.dirs {
			found := false
			for _, n := range lib.names {
				path := filepath.Join(d, n)
				if _, err := os.Stat(path); err != nil {
					continue
				}
				found = true
				h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
				if err == nil {
					return h, path, nil
				}
				notes = append(notes, fmt.Sprintf("%s: %v", path, err))
			}
			if !found {
				notes = append(notes, d+": absent")
			}
		}
		e.Tried = append(e.Tried, p.name+": "+strings.Join(notes, "; "))
	}
	if !l.NoSystem {
		var notes []string
		for _, n := range lib.names {
			h, err := purego.Dlopen(n, purego.RTLD_NOW|purego.RTLD_GLOBAL)
			if err == nil && isEmulator(h) {
				// The emulator (loaded in this process by an earlier open)
				// answers to its soname; it is used only from a folder named.
				notes = append(notes, n+": the CUDA emulator, used only from a folder named in model.cuda_libs or SWETUI_CUDA_LIBS")
				continue
			}
			if err == nil {
				return h, n, nil
			}
			notes = append(notes, fmt.Sprintf("%s: %v", n, err))
		}
		e.Tried = append(e.Tried, "dynamic loader (ldconfig cache): "+strings.Join(notes, "; "))
	}
	return 0, "", e
}

// isEmulator reports whether a loaded library is swetui's CUDA emulator.
func isEmulator(h uintptr) bool {
	_, err := purego.Dlsym(h, "cudaemuReport")
	return err == nil
}

// bind resolves each named symbol of a library into its Go function
// pointer, naming the first one missing.
func bind(h uintptr, lib, path string, fns map[string]any) error {
	for name, fp := range fns {
		sym, err := purego.Dlsym(h, name)
		if err != nil {
			return fmt.Errorf("cuda: %s (%s) lacks %s: %w", lib, path, name, err)
		}
		purego.RegisterFunc(fp, sym)
	}
	return nil
}
