package cuda

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

// The CUDA emulator's own tests: that it runs the real kernels (a mutated
// kernels.cu fails the GPU tests), and that it refuses what a GPU refuses.

// SWETUI_TEST_KERNELS replaces the embedded kernels.cu in this test
// binary: the mutation tests run the GPU tests on a changed copy in a
// child process.
func init() {
	if p := os.Getenv("SWETUI_TEST_KERNELS"); p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			panic(err)
		}
		kernelSource = string(b)
	}
}

// emulatorLibs is the folder of the built emulator (make cuda-emu). CI
// must have it; elsewhere the tests that need it skip.
func emulatorLibs(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "build", "cudaemu"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"libcuda.so.1", "libnvrtc.so.12", "libcublas.so.12", "libnccl.so.2"} {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("the CUDA emulator is not built (%v): make cuda-emu (make test builds it)", err)
			}
			t.Skip("the CUDA emulator is not built: make cuda-emu (make test builds it)")
		}
	}
	return dir
}

// TestEmulatorCatchesMutations: each mutation of kernels.cu that the issue
// names makes the kernel test fail on the emulator, by the check that
// should catch it.
func TestEmulatorCatchesMutations(t *testing.T) {
	libs := emulatorLibs(t)
	if testing.Short() {
		t.Skip("three child runs of the kernel test")
	}
	src, err := os.ReadFile("kernels.cu")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, old, new string
		want           []string
	}{
		{"GRID_STRIDE one past the end", "i < (n); i +=", "i <= (n); i +=",
			[]string{"memcheck: kernel embed: invalid read", "past the end of a"}},
		{"block_sum without its second barrier",
			"if (l == 0) sh[w] = v;\n  __syncthreads();\n  v = l < nw ? sh[l] : 0.f;",
			"if (l == 0) sh[w] = v;\n  v = l < nw ? sh[l] : 0.f;",
			[]string{"racecheck: kernel rmsnorm"}},
		{"swiglu_bwd's (1 - s) flipped", "(1.f - s)", "(s - 1.f)",
			[]string{"swiglu (f32) output", "relative error"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.Count(string(src), tc.old) != 1 {
				t.Fatalf("kernels.cu no longer holds %q once: update the mutation", tc.old)
			}
			path := filepath.Join(t.TempDir(), "kernels.cu")
			if err := os.WriteFile(path, []byte(strings.Replace(string(src), tc.old, tc.new, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestGPUKernelsMatchCPU$", "-test.count=1")
			cmd.Env = append(os.Environ(), "SWETUI_TEST_KERNELS="+path, "SWETUI_GPU=0", "SWETUI_CUDA_LIBS="+libs,
				"XDG_CACHE_HOME="+t.TempDir())
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the kernel test passed on the mutated kernels:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("the failure does not say %q:\n%s", w, tail(string(out), 3000))
				}
			}
		})
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// TestEmulatorRefusesWhatAGPURefuses: launch limits, a thread without a
// current context, foreign and freed pointers, a compile error and too
// much shared memory, each with the CUDA result a GPU gives.
func TestEmulatorRefusesWhatAGPURefuses(t *testing.T) {
	d := openCUDAAt(t, []string{emulatorLibs(t)})
	if !d.info.Emulated || !strings.Contains(d.Info().String(), "not a GPU") {
		t.Fatalf("the emulator does not name itself: %v", d.Info())
	}
	drv := &d.L.drv
	var fn uintptr
	var m *module
	err := d.Do(func() error {
		var err error
		if m, err = d.module(F32, 64); err != nil {
			return err
		}
		if r := drv.cuModuleGetFunction(&fn, m.h, cbytes("add_into")); r != 0 {
			t.Fatalf("cuModuleGetFunction: %s", d.L.drvErr(r))
		}
		var none uintptr
		if r := drv.cuModuleGetFunction(&none, m.h, cbytes("no_such_kernel")); r != 500 {
			t.Errorf("an unknown kernel: CUresult %d, want CUDA_ERROR_NOT_FOUND (500)", r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var x, y Tensor
	if err := d.Do(func() error {
		var err error
		if x, err = d.Alloc(F32, 100); err != nil {
			return err
		}
		y, err = d.Alloc(F32, 100)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	n := uint64(100)
	launch := func(gx, bx, by uint32, a ...uint64) int32 {
		ptrs := make([]unsafe.Pointer, len(a))
		for i := range a {
			ptrs[i] = unsafe.Pointer(&a[i])
		}
		var r int32
		_ = d.Do(func() error {
			r = drv.cuLaunchKernel(fn, gx, 1, 1, bx, by, 1, 0, 0, unsafe.Pointer(&ptrs[0]), nil)
			return nil
		})
		return r
	}
	for _, tc := range []struct {
		name   string
		gx, bx uint32
		by     uint32
		want   int32
	}{
		{"1024 threads", 1, 1024, 1, 0},
		{"1025 threads", 1, 1025, 1, 1},
		{"32x33 threads", 1, 32, 33, 1},
		{"grid 0", 0, 32, 1, 1},
	} {
		if r := launch(tc.gx, tc.bx, tc.by, uint64(x.ptr), uint64(y.ptr), n); r != tc.want {
			t.Errorf("launch of %s: CUresult %d, want %d", tc.name, r, tc.want)
		}
	}
	// A thread with no current context.
	done := make(chan int32)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var p uintptr
		drv.cuCtxSetCurrent(0) // a thread Do used before keeps its context, as in the driver
		done <- drv.cuMemAlloc(&p, 64)
	}()
	if r := <-done; r != 201 {
		t.Errorf("cuMemAlloc from a thread with no current context: CUresult %d, want CUDA_ERROR_INVALID_CONTEXT (201)", r)
	}
	// Pointers the emulator did not hand out, or freed: errors, not crashes.
	host := make([]float32, 4)
	_ = d.Do(func() error {
		if r := drv.cuMemFree(uintptr(unsafe.Pointer(&host[0]))); r != 1 {
			t.Errorf("cuMemFree of host memory: CUresult %d, want CUDA_ERROR_INVALID_VALUE (1)", r)
		}
		if r := drv.cuMemcpyHtoD(x.ptr+396, unsafe.Pointer(&host[0]), 8); r != 1 {
			t.Errorf("a copy past the end of an allocation: CUresult %d, want 1", r)
		}
		return nil
	})
	// A launch reading freed memory poisons the context, as a fault does.
	_ = d.Do(func() error { d.Free(y); return nil })
	if r := launch(1, 128, 1, uint64(x.ptr), uint64(y.ptr), n); r != 700 {
		t.Errorf("a launch on freed memory: CUresult %d, want CUDA_ERROR_ILLEGAL_ADDRESS (700)", r)
	}
	err = d.Do(func() error { return nil })
	if err == nil || !strings.Contains(err.Error(), "CUDA_ERROR_ILLEGAL_ADDRESS") || !strings.Contains(err.Error(), "add_into") {
		t.Errorf("the next synchronisation: %v, want the sticky fault naming add_into", err)
	}
}

// TestEmulatedNVRTCRefuses: a compile error comes back through the
// program log, as NVRTC's does, and so does a block's static shared
// memory past 48 KiB (ptxas refuses it).
func TestEmulatedNVRTCRefuses(t *testing.T) {
	d := openCUDAAt(t, []string{emulatorLibs(t)})
	saved := kernelSource
	t.Cleanup(func() { kernelSource = saved })
	for _, tc := range []struct{ name, src, want string }{
		{"syntax", "extern \"C\" __global__ void k(float* x) { x[0] = undefined_name; }\n", "undefined_name"},
		{"shared", "extern \"C\" __global__ void k(float* x) { __shared__ float big[13000]; big[threadIdx.x] = 1; x[0] = big[0]; }\n",
			"uses too much shared data"},
	} {
		kernelSource = tc.src
		_, err := d.compile(compileOptions(d.info.CC, F32, 64, false), false)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "NVRTC_ERROR_COMPILATION") {
			t.Errorf("%s: %v, want a compile error naming %q", tc.name, err, tc.want)
		}
	}
}

// testDevice is the device the engine tests run on: the CPU kernels, or,
// with SWETUI_TEST_DEVICE=emu (make test runs them so too), the CUDA
// emulator, so that LoRA, the bf16 base, recomputation, sampling and the
// policy's steps run the GPU path's launches and products as well.
func testDevice(t testing.TB) Device {
	t.Helper()
	if os.Getenv("SWETUI_TEST_DEVICE") != "emu" {
		return NewCPU()
	}
	emuOnce.Do(func() {
		dir, err := filepath.Abs(filepath.Join("..", "..", "build", "cudaemu"))
		if err == nil {
			emuDev, emuErr = OpenCUDA(context.Background(), 0, &Loader{ConfigDirs: []string{dir}})
		} else {
			emuErr = err
		}
	})
	if emuErr != nil {
		t.Fatalf("SWETUI_TEST_DEVICE=emu: %v (make cuda-emu)", emuErr)
	}
	return emuDev
}

var (
	emuOnce sync.Once
	emuDev  *CUDADevice
	emuErr  error
)
