package cuda

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Bindings of the few entry points used, with prototypes declared here
// (no CUDA headers at build time). CUresult, nvrtcResult and
// cublasStatus_t are ints; 0 is success.

type driverAPI struct {
	path                      string
	cuInit                    func(flags uint32) int32
	cuDriverGetVersion        func(v *int32) int32
	cuDeviceGetCount          func(n *int32) int32
	cuDeviceGet               func(dev *int32, ordinal int32) int32
	cuDeviceGetName           func(name *byte, n int32, dev int32) int32
	cuDeviceTotalMem          func(bytes *uint64, dev int32) int32
	cuDeviceGetAttribute      func(v *int32, attr int32, dev int32) int32
	cuDevicePrimaryCtxRetain  func(ctx *uintptr, dev int32) int32
	cuDevicePrimaryCtxRelease func(dev int32) int32
	cuCtxSetCurrent           func(ctx uintptr) int32
	cuCtxSynchronize          func() int32
	cuMemAlloc                func(p *uintptr, bytes uint64) int32
	cuMemFree                 func(p uintptr) int32
	cuMemGetInfo              func(free, total *uint64) int32
	cuMemcpyHtoD              func(dst uintptr, src unsafe.Pointer, bytes uint64) int32
	cuMemcpyDtoH              func(dst unsafe.Pointer, src uintptr, bytes uint64) int32
	cuMemcpyDtoDAsync         func(dst, src uintptr, bytes uint64, stream uintptr) int32
	cuMemsetD8Async           func(dst uintptr, v uint8, n uint64, stream uintptr) int32
	cuModuleLoadData          func(mod *uintptr, image unsafe.Pointer) int32
	cuModuleUnload            func(mod uintptr) int32
	cuModuleGetFunction       func(fn *uintptr, mod uintptr, name *byte) int32
	cuLaunchKernel            func(fn uintptr, gx, gy, gz, bx, by, bz, smem uint32, stream uintptr, params, extra unsafe.Pointer) int32
	cuGetErrorName            func(res int32, s **byte) int32
	// cudaemuReport is the CUDA emulator's last check report (memcheck,
	// racecheck, a refused launch); nil on NVIDIA's driver, which has none.
	cudaemuReport func() string
}

type nvrtcAPI struct {
	path                   string
	nvrtcVersion           func(major, minor *int32) int32
	nvrtcCreateProgram     func(prog *uintptr, src, name *byte, nHeaders int32, headers, includeNames unsafe.Pointer) int32
	nvrtcCompileProgram    func(prog uintptr, nOpts int32, opts **byte) int32
	nvrtcGetProgramLogSize func(prog uintptr, n *uint64) int32
	nvrtcGetProgramLog     func(prog uintptr, log *byte) int32
	nvrtcGetCUBINSize      func(prog uintptr, n *uint64) int32
	nvrtcGetCUBIN          func(prog uintptr, out *byte) int32
	nvrtcGetPTXSize        func(prog uintptr, n *uint64) int32
	nvrtcGetPTX            func(prog uintptr, out *byte) int32
	nvrtcDestroyProgram    func(prog *uintptr) int32
	nvrtcGetErrorString    func(res int32) string
}

type cublasAPI struct {
	path          string
	cublasCreate  func(h *uintptr) int32
	cublasDestroy func(h uintptr) int32
	cublasGemmEx  func(h uintptr, ta, tb int32, m, n, k int32, alpha unsafe.Pointer, a uintptr, at int32, lda int32,
		b uintptr, bt int32, ldb int32, beta unsafe.Pointer, c uintptr, ct int32, ldc int32, compute int32, algo int32) int32
}

// cuda enums.
const (
	cuDevAttrCCMajor  = 75
	cuDevAttrCCMinor  = 76
	cudaR32F          = 0
	cudaR16BF         = 14
	cublasCompute32F  = 68
	cublasGemmDefault = -1
)

// libs are the three libraries, loaded once per process.
type libs struct {
	drv    driverAPI
	nvrtc  nvrtcAPI
	cublas cublasAPI
}

var (
	libsOnce sync.Mutex
	libsMemo *libs
)

// loadLibs opens and binds the driver, NVRTC and cuBLAS, then cuInit.
func loadLibs(l *Loader) (*libs, error) {
	libsOnce.Lock()
	defer libsOnce.Unlock()
	h, path, err := l.open(libCUDA)
	if err != nil {
		return nil, err
	}
	if libsMemo != nil { // a process holds one driver: the first it loaded
		if libsMemo.drv.path == path {
			return libsMemo, nil
		}
		return nil, fmt.Errorf("cuda: the driver %s is loaded in this process; %s cannot be used beside it", libsMemo.drv.path, path)
	}
	var L libs
	d := &L.drv
	d.path = path
	if err := bind(h, "libcuda", path, map[string]any{
		"cuInit": &d.cuInit, "cuDriverGetVersion": &d.cuDriverGetVersion, "cuDeviceGetCount": &d.cuDeviceGetCount,
		"cuDeviceGet": &d.cuDeviceGet, "cuDeviceGetName": &d.cuDeviceGetName, "cuDeviceTotalMem_v2": &d.cuDeviceTotalMem,
		"cuDeviceGetAttribute": &d.cuDeviceGetAttribute, "cuDevicePrimaryCtxRetain": &d.cuDevicePrimaryCtxRetain,
		"cuDevicePrimaryCtxRelease_v2": &d.cuDevicePrimaryCtxRelease, "cuCtxSetCurrent": &d.cuCtxSetCurrent,
		"cuCtxSynchronize": &d.cuCtxSynchronize, "cuMemAlloc_v2": &d.cuMemAlloc, "cuMemFree_v2": &d.cuMemFree,
		"cuMemGetInfo_v2": &d.cuMemGetInfo, "cuMemcpyHtoD_v2": &d.cuMemcpyHtoD, "cuMemcpyDtoH_v2": &d.cuMemcpyDtoH,
		"cuMemcpyDtoDAsync_v2": &d.cuMemcpyDtoDAsync, "cuMemsetD8Async": &d.cuMemsetD8Async,
		"cuModuleLoadData": &d.cuModuleLoadData, "cuModuleUnload": &d.cuModuleUnload,
		"cuModuleGetFunction": &d.cuModuleGetFunction, "cuLaunchKernel": &d.cuLaunchKernel, "cuGetErrorName": &d.cuGetErrorName,
	}); err != nil {
		return nil, err
	}
	if sym, err := purego.Dlsym(h, "cudaemuReport"); err == nil {
		purego.RegisterFunc(&d.cudaemuReport, sym)
	}
	if r := d.cuInit(0); r != 0 {
		return nil, fmt.Errorf("cuda: cuInit (driver %s): %s: is an NVIDIA GPU visible to this process?", path, L.drvErr(r))
	}
	h, path, err = l.open(libNVRTC)
	if err != nil {
		return nil, err
	}
	n := &L.nvrtc
	n.path = path
	if err := bind(h, "NVRTC", path, map[string]any{
		"nvrtcVersion": &n.nvrtcVersion, "nvrtcCreateProgram": &n.nvrtcCreateProgram,
		"nvrtcCompileProgram": &n.nvrtcCompileProgram, "nvrtcGetProgramLogSize": &n.nvrtcGetProgramLogSize,
		"nvrtcGetProgramLog": &n.nvrtcGetProgramLog, "nvrtcGetCUBINSize": &n.nvrtcGetCUBINSize,
		"nvrtcGetCUBIN": &n.nvrtcGetCUBIN, "nvrtcGetPTXSize": &n.nvrtcGetPTXSize, "nvrtcGetPTX": &n.nvrtcGetPTX,
		"nvrtcDestroyProgram": &n.nvrtcDestroyProgram, "nvrtcGetErrorString": &n.nvrtcGetErrorString,
	}); err != nil {
		return nil, err
	}
	h, path, err = l.open(libCUBLAS)
	if err != nil {
		return nil, err
	}
	c := &L.cublas
	c.path = path
	if err := bind(h, "cuBLAS", path, map[string]any{
		"cublasCreate_v2": &c.cublasCreate, "cublasDestroy_v2": &c.cublasDestroy, "cublasGemmEx": &c.cublasGemmEx,
	}); err != nil {
		return nil, err
	}
	libsMemo = &L
	return libsMemo, nil
}

// drvErr names a CUresult, with the emulator's report of what failed
// when the driver is the emulator.
func (L *libs) drvErr(r int32) string {
	var s *byte
	msg := fmt.Sprintf("CUresult %d", r)
	if L.drv.cuGetErrorName != nil && L.drv.cuGetErrorName(r, &s) == 0 && s != nil {
		msg = fmt.Sprintf("%s (%d)", cstring(s), r)
	}
	if L.drv.cudaemuReport != nil {
		if rep := L.drv.cudaemuReport(); rep != "" {
			msg += ": " + rep
		}
	}
	return msg
}

// Emulated reports whether the driver is swetui's CUDA emulator
// (model/cuda/emu) rather than NVIDIA's.
func (L *libs) Emulated() bool { return L.drv.cudaemuReport != nil }

// cstring copies a NUL-terminated C string.
func cstring(p *byte) string {
	var n int
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

func cbytes(s string) *byte {
	b := append([]byte(s), 0)
	return &b[0]
}
