package cuda

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// CUDADevice runs the kernel list on one NVIDIA GPU through the driver
// API, cuBLAS and NVRTC kernels. Every call happens inside Do, which locks
// the calling goroutine to its OS thread and makes the device's primary
// context current there; calls are serialised on the device.
type CUDADevice struct {
	L       *libs
	ordinal int
	dev     int32
	ctx     uintptr
	blas    uintptr
	info    Info
	nvrtcV  string

	// work is the process's work on this GPU; a yielding handle
	// (WithYield) waits for it to be idle before each call.
	work  *work
	yield bool

	mu     sync.Mutex
	err    error // first failure since the current Do began
	mods   map[modKey]*module
	cache  string // folder of compiled kernels; "" = none
	params [32]uint64
	ptrs   [32]unsafe.Pointer
	alpha  float32
	beta   float32
}

type modKey struct {
	act DType
	hd  int
}

type module struct {
	h   uintptr
	fns map[string]uintptr
}

var _ Device = (*CUDADevice)(nil)

// OpenCUDA opens GPU ordinal with the libraries l finds.
func OpenCUDA(ctx context.Context, ordinal int, l *Loader) (*CUDADevice, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	L, err := loadLibs(l)
	if err != nil {
		return nil, err
	}
	d := &CUDADevice{L: L, ordinal: ordinal, mods: map[modKey]*module{}, work: workOn(ordinal), yield: yielding(ctx)}
	if dir, err := os.UserCacheDir(); err == nil {
		d.cache = filepath.Join(dir, "swetui", "cuda")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	drv := &L.drv
	var count int32
	if r := drv.cuDeviceGetCount(&count); r != 0 {
		return nil, fmt.Errorf("cuda: cuDeviceGetCount: %s", L.drvErr(r))
	}
	if count == 0 {
		return nil, fmt.Errorf("cuda: the driver (%s) sees no GPU", drv.path)
	}
	if ordinal < 0 || ordinal >= int(count) {
		return nil, fmt.Errorf("cuda: device cuda:%d does not exist: %d GPU(s), cuda:0 to cuda:%d", ordinal, count, count-1)
	}
	if r := drv.cuDeviceGet(&d.dev, int32(ordinal)); r != 0 {
		return nil, fmt.Errorf("cuda: cuDeviceGet(%d): %s", ordinal, L.drvErr(r))
	}
	name := make([]byte, 256)
	var total uint64
	var major, minor int32
	for _, r := range []int32{
		drv.cuDeviceGetName(&name[0], int32(len(name)), d.dev),
		drv.cuDeviceTotalMem(&total, d.dev),
		drv.cuDeviceGetAttribute(&major, cuDevAttrCCMajor, d.dev),
		drv.cuDeviceGetAttribute(&minor, cuDevAttrCCMinor, d.dev),
		drv.cuDevicePrimaryCtxRetain(&d.ctx, d.dev),
	} {
		if r != 0 {
			return nil, fmt.Errorf("cuda: device cuda:%d: %s", ordinal, L.drvErr(r))
		}
	}
	d.info = Info{Name: cstring(&name[0]), Kind: "cuda", Ordinal: ordinal, TotalBytes: total, CC: int(major*10 + minor), Emulated: L.Emulated()}
	if r := drv.cuCtxSetCurrent(d.ctx); r != 0 {
		return nil, fmt.Errorf("cuda: cuCtxSetCurrent: %s", L.drvErr(r))
	}
	if r := L.cublas.cublasCreate(&d.blas); r != 0 {
		drv.cuDevicePrimaryCtxRelease(d.dev)
		return nil, fmt.Errorf("cuda: cublasCreate (%s): status %d", L.cublas.path, r)
	}
	var vmaj, vmin int32
	L.nvrtc.nvrtcVersion(&vmaj, &vmin)
	d.nvrtcV = fmt.Sprintf("%d.%d", vmaj, vmin)
	return d, nil
}

// TensorAllocs: on the emulator every buffer of a memory plan is its own
// allocation, so that memcheck bounds tensors, not arenas.
func (d *CUDADevice) TensorAllocs() bool { return d.L.Emulated() }

// Info implements Device; FreeBytes is read now (it enters Do: do not
// call it from inside Do).
func (d *CUDADevice) Info() Info {
	i := d.info
	_ = d.Do(func() error {
		var free, total uint64
		if d.L.drv.cuMemGetInfo(&free, &total) == 0 {
			i.FreeBytes = free
		}
		return nil
	})
	return i
}

// memReader is a device whose memory can be read from inside its Do.
type memReader interface {
	memInfo() (free, total uint64, ok bool)
}

// memInfo is cuMemGetInfo; the caller is inside Do.
func (d *CUDADevice) memInfo() (free, total uint64, ok bool) {
	return free, total, d.L.drv.cuMemGetInfo(&free, &total) == 0
}

// Do implements Device. A yielding handle's (WithYield) first waits for
// the GPU's other work in this process to be idle for yieldQuiet.
func (d *CUDADevice) Do(fn func() error) error {
	if d.yield {
		d.work.waitIdle(yieldQuiet)
	} else {
		d.work.enter()
		defer func() { d.work.leave(time.Now()) }()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if r := d.L.drv.cuCtxSetCurrent(d.ctx); r != 0 {
		return fmt.Errorf("cuda: cuCtxSetCurrent: %s", d.L.drvErr(r))
	}
	d.err = nil
	err := fn()
	if r := d.L.drv.cuCtxSynchronize(); r != 0 {
		d.fail(fmt.Errorf("cuda: kernel failed (cuCtxSynchronize): %s", d.L.drvErr(r)))
	}
	if err == nil {
		err = d.err
	}
	d.err = nil
	return err
}

func (d *CUDADevice) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

func (d *CUDADevice) check(what string, r int32) {
	if r != 0 {
		d.fail(fmt.Errorf("cuda: %s: %s", what, d.L.drvErr(r)))
	}
}

// Close implements Device.
func (d *CUDADevice) Close() error {
	return d.Do(func() error {
		for k, m := range d.mods {
			d.L.drv.cuModuleUnload(m.h)
			delete(d.mods, k)
		}
		if d.blas != 0 {
			d.L.cublas.cublasDestroy(d.blas)
			d.blas = 0
		}
		if d.ctx != 0 {
			d.L.drv.cuDevicePrimaryCtxRelease(d.dev)
		}
		return nil
	})
}

// Alloc implements Device.
func (d *CUDADevice) Alloc(dt DType, n int) (Tensor, error) {
	t := Tensor{DT: dt, N: n}
	if n == 0 {
		return t, nil
	}
	bytes := uint64(n * dt.Size())
	if r := d.L.drv.cuMemAlloc(&t.ptr, bytes); r != 0 {
		return Tensor{}, fmt.Errorf("cuda: cuMemAlloc(%d bytes): %s", bytes, d.L.drvErr(r))
	}
	d.check("cuMemsetD8Async", d.L.drv.cuMemsetD8Async(t.ptr, 0, bytes, 0))
	return t, nil
}

// Free implements Device.
func (d *CUDADevice) Free(t Tensor) {
	if t.ptr != 0 {
		d.check("cuMemFree", d.L.drv.cuMemFree(t.ptr))
	}
}

// Upload implements Device.
func (d *CUDADevice) Upload(t Tensor, src any) error {
	var p unsafe.Pointer
	switch s := src.(type) {
	case []float32:
		if len(s) != t.N || t.DT == I32 {
			return fmt.Errorf("cuda upload: %d float32 into %v[%d]", len(s), t.DT, t.N)
		}
		if t.DT == BF16 {
			h := make([]uint16, len(s))
			for i, v := range s {
				h[i] = toBF16(v)
			}
			if len(h) > 0 {
				p = unsafe.Pointer(&h[0])
			}
			defer runtime.KeepAlive(h)
		} else if len(s) > 0 {
			p = unsafe.Pointer(&s[0])
		}
	case []int32:
		if len(s) != t.N || t.DT != I32 {
			return fmt.Errorf("cuda upload: %d int32 into %v[%d]", len(s), t.DT, t.N)
		}
		if len(s) > 0 {
			p = unsafe.Pointer(&s[0])
		}
	default:
		return fmt.Errorf("cuda upload: unsupported %T", src)
	}
	if t.N == 0 {
		return nil
	}
	if r := d.L.drv.cuMemcpyHtoD(t.ptr, p, uint64(t.Bytes())); r != 0 {
		return fmt.Errorf("cuda: cuMemcpyHtoD: %s", d.L.drvErr(r))
	}
	return nil
}

// Download implements Device (it waits for the queued work).
func (d *CUDADevice) Download(dst any, t Tensor) error {
	if t.N == 0 {
		return nil
	}
	if d.err != nil {
		return d.err
	}
	switch s := dst.(type) {
	case []float32:
		if len(s) != t.N || t.DT == I32 {
			return fmt.Errorf("cuda download: %v[%d] into %d float32", t.DT, t.N, len(s))
		}
		if t.DT == BF16 {
			h := make([]uint16, t.N)
			if r := d.L.drv.cuMemcpyDtoH(unsafe.Pointer(&h[0]), t.ptr, uint64(t.Bytes())); r != 0 {
				return fmt.Errorf("cuda: cuMemcpyDtoH: %s", d.L.drvErr(r))
			}
			for i, v := range h {
				s[i] = fromBF16(v)
			}
			return nil
		}
		if r := d.L.drv.cuMemcpyDtoH(unsafe.Pointer(&s[0]), t.ptr, uint64(t.Bytes())); r != 0 {
			return fmt.Errorf("cuda: cuMemcpyDtoH: %s", d.L.drvErr(r))
		}
	case []int32:
		if len(s) != t.N || t.DT != I32 {
			return fmt.Errorf("cuda download: %v[%d] into %d int32", t.DT, t.N, len(s))
		}
		if r := d.L.drv.cuMemcpyDtoH(unsafe.Pointer(&s[0]), t.ptr, uint64(t.Bytes())); r != 0 {
			return fmt.Errorf("cuda: cuMemcpyDtoH: %s", d.L.drvErr(r))
		}
	default:
		return fmt.Errorf("cuda download: unsupported %T", dst)
	}
	return nil
}

// Copy implements Device.
func (d *CUDADevice) Copy(dst, src Tensor) {
	if dst.N != src.N || dst.DT != src.DT {
		d.fail(fmt.Errorf("cuda: copy %v[%d] into %v[%d]", src.DT, src.N, dst.DT, dst.N))
		return
	}
	if dst.N > 0 {
		d.check("cuMemcpyDtoDAsync", d.L.drv.cuMemcpyDtoDAsync(dst.ptr, src.ptr, uint64(dst.Bytes()), 0))
	}
}

// Zero implements Device.
func (d *CUDADevice) Zero(t Tensor) {
	if t.N > 0 {
		d.check("cuMemsetD8Async", d.L.drv.cuMemsetD8Async(t.ptr, 0, uint64(t.Bytes()), 0))
	}
}

// toBF16 rounds to nearest even, as the kernels' bf16_st.
func toBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

func fromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// ---- kernels: compilation and launch ----

// attnRows is the rows of one attention block (BR in kernels.cu).
const attnRows = 64
