package cuda

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestParseDevice(t *testing.T) {
	cases := []struct {
		spec    string
		kind    string
		ordinal int
		ok      bool
	}{
		{"cpu", "cpu", 0, true},
		{"cuda", "cuda", 0, true},
		{"cuda:3", "cuda", 3, true},
		{" cuda:0 ", "cuda", 0, true},
		{"cuda:", "", 0, false},
		{"cuda:-1", "", 0, false},
		{"gpu", "", 0, false},
		{"", "", 0, false},
	}
	for _, tc := range cases {
		kind, n, err := ParseDevice(tc.spec)
		if (err == nil) != tc.ok || kind != tc.kind || n != tc.ordinal {
			t.Errorf("ParseDevice(%q) = %q, %d, %v", tc.spec, kind, n, err)
		}
	}
}

func TestParseDevices(t *testing.T) {
	cases := []struct {
		spec     string
		kind     string
		ordinals []int
		all, ok  bool
	}{
		{"cpu", "cpu", nil, false, true},
		{"cuda", "cuda", []int{0}, false, true},
		{"cuda:3", "cuda", []int{3}, false, true},
		{"cuda:all", "cuda", nil, true, true},
		{"cuda:2,0", "cuda", []int{2, 0}, false, true},
		{"cuda:0, 1", "cuda", []int{0, 1}, false, true},
		{"cuda:0,0", "", nil, false, false},
		{"cuda:0,", "", nil, false, false},
		{"cuda:0,-1", "", nil, false, false},
		{"cuda:al", "", nil, false, false},
	}
	for _, tc := range cases {
		kind, ords, all, err := ParseDevices(tc.spec)
		if (err == nil) != tc.ok || kind != tc.kind || fmt.Sprint(ords) != fmt.Sprint(tc.ordinals) || all != tc.all {
			t.Errorf("ParseDevices(%q) = %q, %v, %v, %v", tc.spec, kind, ords, all, err)
		}
	}
}

// TestLoaderNamesEveryPlace: a missing driver is reported with each place
// searched, in order, and a file that is there but will not load with the
// loader's own reason.
func TestLoaderNamesEveryPlace(t *testing.T) {
	cfgDir, envA, envB, home := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(envB, "libcuda.so.1"), []byte("not a library"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"LD_LIBRARY_PATH": envA + ":" + envB, "CUDA_HOME": home}
	l := &Loader{ConfigDirs: []string{cfgDir}, Env: func(k string) string { return env[k] }, NoSystem: true}
	_, _, err := l.open(libCUDA)
	var le *LibraryError
	if !errors.As(err, &le) {
		t.Fatalf("error %v is not a *LibraryError", err)
	}
	msg := err.Error()
	for _, want := range []string{
		"libcuda (the NVIDIA driver API) not found", "libcuda.so.1",
		"model.cuda_libs: " + cfgDir + ": absent",
		"LD_LIBRARY_PATH: " + envA + ": absent; " + filepath.Join(envB, "libcuda.so.1") + ": ",
		"CUDA_HOME/CUDA_PATH: " + filepath.Join(home, "lib64") + ": absent",
		"set model.cuda_libs (or LD_LIBRARY_PATH)",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if i, j := strings.Index(msg, "model.cuda_libs:"), strings.Index(msg, "LD_LIBRARY_PATH:"); i < 0 || j < i {
		t.Errorf("config folders are not searched first:\n%s", msg)
	}

	env = map[string]string{}
	_, _, err = (&Loader{Env: func(k string) string { return env[k] }, NoSystem: true}).open(libNVRTC)
	for _, want := range []string{"model.cuda_libs: (none set)", "LD_LIBRARY_PATH: (none set)", "libnvrtc.so.13"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}

// TestOpenCUDAWithoutGPU: model.device=cuda on a machine without a GPU
// fails with the loader's error (or the driver's, where a driver is
// installed without a device) rather than anything later.
func TestOpenCUDAWithoutGPU(t *testing.T) {
	d, err := Open(context.Background(), "cuda", []string{t.TempDir()})
	if err == nil {
		d.Close()
		t.Skip("this machine has a usable GPU")
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "model.device=cuda: cuda: ") {
		t.Errorf("error does not name the setting: %s", msg)
	}
	var le *LibraryError
	if errors.As(err, &le) {
		for _, want := range []string{"not found", "model.cuda_libs", "LD_LIBRARY_PATH", "usual folders", "/usr/local/cuda/lib64", "dynamic loader"} {
			if !strings.Contains(msg, want) {
				t.Errorf("error lacks %q:\n%s", want, msg)
			}
		}
	} else if !strings.Contains(msg, "cuInit") && !strings.Contains(msg, "GPU") {
		t.Errorf("a driver without a GPU should fail at cuInit or the device count: %s", msg)
	}
	if _, err := Open(context.Background(), "tpu", nil); err == nil || !strings.Contains(err.Error(), "cuda:N") {
		t.Errorf("Open(tpu) = %v", err)
	}
}

// TestKernelSourceMatchesLaunches: kernels.cu is embedded once, and every
// kernel the CUDA device launches exists in it with as many parameters as
// the launch passes. Nothing here compiles CUDA, so this is what catches
// a renamed kernel or a dropped argument before a GPU run does.
func TestKernelSourceMatchesLaunches(t *testing.T) {
	embeds := 0
	files, _ := filepath.Glob("*.go")
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		embeds += strings.Count(string(b), "//go:embed kernels.cu")
	}
	if embeds != 1 {
		t.Errorf("kernels.cu is embedded %d times, want once", embeds)
	}
	if !strings.Contains(kernelSource, `extern "C" __global__ void attn_fwd(`) {
		t.Fatal("the embedded source lacks attn_fwd")
	}
	params := map[string]int{}
	re := regexp.MustCompile(`(?s)extern "C" __global__ void (\w+)\(([^)]*)\)`)
	for _, m := range re.FindAllStringSubmatch(kernelSource, -1) {
		params[m[1]] = strings.Count(m[2], ",") + 1
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "cudadev_kernels.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	launched := 0
	ast.Inspect(f, func(n ast.Node) bool {
		fn, ok := n.(*ast.FuncDecl)
		if !ok {
			return true
		}
		// Kernel names held in a variable: every literal assigned to it.
		var names []string
		ast.Inspect(fn, func(n ast.Node) bool {
			if as, ok := n.(*ast.AssignStmt); ok && len(as.Lhs) == 1 {
				if id, ok := as.Lhs[0].(*ast.Ident); ok && id.Name == "name" {
					if lit, ok := as.Rhs[0].(*ast.BasicLit); ok {
						s, _ := strconv.Unquote(lit.Value)
						names = append(names, s)
					}
				}
			}
			return true
		})
		ast.Inspect(fn, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "launch" || len(call.Args) < 5 {
				return true
			}
			var ks []string
			switch a := call.Args[2].(type) {
			case *ast.BasicLit:
				s, _ := strconv.Unquote(a.Value)
				ks = []string{s}
			case *ast.Ident:
				ks = names
			}
			for _, k := range ks {
				launched++
				want, ok := params[k]
				if !ok {
					t.Errorf("%s launches %q, which kernels.cu does not define", fn.Name.Name, k)
				} else if got := len(call.Args) - 5; got != want {
					t.Errorf("%s launches %s with %d arguments, kernels.cu declares %d", fn.Name.Name, k, got, want)
				}
			}
			return true
		})
		return false
	})
	if launched < 25 {
		t.Errorf("found %d launches in cudadev_kernels.go; the parser missed some", launched)
	}
}
