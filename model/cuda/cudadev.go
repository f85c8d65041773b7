package cuda

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

// kernelSource is the CUDA C of every device kernel, compiled by NVRTC at
// start for the device's compute capability.
//
//go:embed kernels.cu
var kernelSource string

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
	d := &CUDADevice{L: L, ordinal: ordinal, mods: map[modKey]*module{}}
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
	d.info = Info{Name: cstring(&name[0]), Kind: "cuda", Ordinal: ordinal, TotalBytes: total, CC: int(major*10 + minor)}
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

// Do implements Device.
func (d *CUDADevice) Do(fn func() error) error {
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

// headDimSupported: one attention row is split across TPR = HD/EPT threads
// of a warp, EPT = min(HD, 16), so TPR must be a power of two <= 16.
func headDimSupported(hd int) bool {
	if hd <= 16 {
		return hd >= 2 && hd%2 == 0
	}
	return hd == 32 || hd == 64 || hd == 128 || hd == 256
}

func threadsPerRow(hd int) int {
	if hd < 16 {
		return 1
	}
	return hd / 16
}

// CompileOptions are NVRTC's options for a module.
func compileOptions(cc int, act DType, hd int, ptx bool) []string {
	arch := fmt.Sprintf("--gpu-architecture=sm_%d", cc)
	if ptx {
		arch = fmt.Sprintf("--gpu-architecture=compute_%d", cc)
	}
	bf := "0"
	if act == BF16 {
		bf = "1"
	}
	return []string{arch, "--std=c++14", "-DSWETUI_BF16=" + bf, fmt.Sprintf("-DSWETUI_HD=%d", hd)}
}

// module returns the kernels compiled for (act, hd): from this process,
// from the on-disk cache, or compiled now.
func (d *CUDADevice) module(act DType, hd int) (*module, error) {
	if hd == 0 { // a kernel that does not depend on the head size: any module of act
		for k, m := range d.mods {
			if k.act == act {
				return m, nil
			}
		}
		hd = 64
	}
	k := modKey{act, hd}
	if m, ok := d.mods[k]; ok {
		return m, nil
	}
	if !headDimSupported(hd) {
		return nil, fmt.Errorf("cuda: head_dim %d is not supported by the attention kernels (2..16 even, 32, 64, 128 or 256)", hd)
	}
	image, err := d.image(act, hd)
	if err != nil {
		return nil, err
	}
	m := &module{fns: map[string]uintptr{}}
	if r := d.L.drv.cuModuleLoadData(&m.h, unsafe.Pointer(&image[0])); r != 0 {
		return nil, fmt.Errorf("cuda: cuModuleLoadData: %s", d.L.drvErr(r))
	}
	d.mods[k] = m
	return m, nil
}

// image is the compiled module: a cubin for sm_CC, or PTX for compute_CC
// when this NVRTC cannot emit the device's SASS.
func (d *CUDADevice) image(act DType, hd int) ([]byte, error) {
	opts := compileOptions(d.info.CC, act, hd, false)
	sum := sha256.Sum256([]byte(kernelSource + "\x00" + strings.Join(opts, " ") + "\x00nvrtc " + d.nvrtcV))
	path := ""
	if d.cache != "" {
		path = filepath.Join(d.cache, hex.EncodeToString(sum[:12])+".bin")
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return b, nil
		}
	}
	image, err := d.compile(opts, false)
	if err != nil {
		var cerr *compileError
		if !errors.As(err, &cerr) || !strings.Contains(cerr.log, "gpu-architecture") {
			return nil, err
		}
		if image, err = d.compile(compileOptions(d.info.CC, act, hd, true), true); err != nil {
			return nil, err
		}
	}
	if path != "" { // best effort: a failed cache write only costs a compile next time
		if err := os.MkdirAll(d.cache, 0o755); err == nil {
			tmp := path + ".tmp"
			if os.WriteFile(tmp, image, 0o644) == nil {
				_ = os.Rename(tmp, path)
			}
		}
	}
	return image, nil
}

type compileError struct {
	opts []string
	log  string
	res  string
}

func (e *compileError) Error() string {
	return fmt.Sprintf("cuda: NVRTC could not compile kernels.cu (%s): %s\n%s", strings.Join(e.opts, " "), e.res, e.log)
}

func (d *CUDADevice) compile(opts []string, ptx bool) ([]byte, error) {
	n := &d.L.nvrtc
	var prog uintptr
	if r := n.nvrtcCreateProgram(&prog, cbytes(kernelSource), cbytes("kernels.cu"), 0, nil, nil); r != 0 {
		return nil, fmt.Errorf("cuda: nvrtcCreateProgram: %s", n.nvrtcGetErrorString(r))
	}
	defer n.nvrtcDestroyProgram(&prog)
	copts := make([]*byte, len(opts))
	for i, o := range opts {
		copts[i] = cbytes(o)
	}
	if r := n.nvrtcCompileProgram(prog, int32(len(copts)), &copts[0]); r != 0 {
		var size uint64
		n.nvrtcGetProgramLogSize(prog, &size)
		log := make([]byte, size+1)
		n.nvrtcGetProgramLog(prog, &log[0])
		return nil, &compileError{opts: opts, log: strings.TrimRight(string(log), "\x00"), res: n.nvrtcGetErrorString(r)}
	}
	var size uint64
	get, getSize := n.nvrtcGetCUBIN, n.nvrtcGetCUBINSize
	if ptx {
		get, getSize = n.nvrtcGetPTX, n.nvrtcGetPTXSize
	}
	if r := getSize(prog, &size); r != 0 || size == 0 {
		return nil, fmt.Errorf("cuda: NVRTC produced no image (%s)", n.nvrtcGetErrorString(r))
	}
	out := make([]byte, size)
	if r := get(prog, &out[0]); r != 0 {
		return nil, fmt.Errorf("cuda: NVRTC image: %s", n.nvrtcGetErrorString(r))
	}
	return out, nil
}

// Compile builds the kernels for (act, head size) now, so that a source
// error shows at start rather than at the first launch.
func (d *CUDADevice) Compile(act DType, hd int) error {
	return d.Do(func() error {
		_, err := d.module(act, hd)
		return err
	})
}

// launch queues kernel name of module (act, hd) on grid × block. Args are
// Tensors (their addresses), ints (passed as 64-bit slots: the kernel reads
// the low 4 bytes of an int, all 8 of an i64), and float32s.
func (d *CUDADevice) launch(act DType, hd int, name string, grid [3]int, block int, args ...any) {
	if d.err != nil {
		return
	}
	m, err := d.module(act, hd)
	if err != nil {
		d.fail(err)
		return
	}
	fn, ok := m.fns[name]
	if !ok {
		if r := d.L.drv.cuModuleGetFunction(&fn, m.h, cbytes(name)); r != 0 {
			d.fail(fmt.Errorf("cuda: kernel %s: %s", name, d.L.drvErr(r)))
			return
		}
		m.fns[name] = fn
	}
	if len(args) > len(d.params) {
		d.fail(fmt.Errorf("cuda: kernel %s: %d arguments", name, len(args)))
		return
	}
	for i, a := range args {
		switch v := a.(type) {
		case Tensor:
			d.params[i] = uint64(v.ptr)
		case int:
			d.params[i] = uint64(int64(v))
		case float32:
			d.params[i] = uint64(math.Float32bits(v))
		default:
			d.fail(fmt.Errorf("cuda: kernel %s: argument %d is %T", name, i, a))
			return
		}
		d.ptrs[i] = unsafe.Pointer(&d.params[i])
	}
	for i := range grid {
		grid[i] = max(1, grid[i])
	}
	d.check("launch "+name, d.L.drv.cuLaunchKernel(fn, uint32(grid[0]), uint32(grid[1]), uint32(grid[2]),
		uint32(block), 1, 1, 0, 0, unsafe.Pointer(&d.ptrs[0]), nil))
}

// blocks1D sizes a grid-stride launch of n elements.
func blocks1D(n int) [3]int { return [3]int{min((n+255)/256, 1<<20), 1, 1} }

// rowChunks is how many row chunks the column-sum kernels split n rows into.
func rowChunks(n int) int { return max(1, min(n, 256)) }

// Gemm implements Kernels with cublasGemmEx: a row-major product is the
// column-major product of the transposes, so A and B swap places.
func (d *CUDADevice) Gemm(tA, tB bool, m, n, k int, alpha float32, a Tensor, lda int, b Tensor, ldb int, beta float32, c Tensor, ldc int) {
	if d.err != nil || m == 0 || n == 0 {
		return
	}
	if a.DT != b.DT {
		d.fail(fmt.Errorf("cuda: gemm of %v and %v", a.DT, b.DT))
		return
	}
	ty := func(t DType) int32 {
		if t == BF16 {
			return cudaR16BF
		}
		return cudaR32F
	}
	op := func(t bool) int32 {
		if t {
			return 1
		}
		return 0
	}
	d.alpha, d.beta = alpha, beta
	r := d.L.cublas.cublasGemmEx(d.blas, op(tB), op(tA), int32(n), int32(m), int32(k), unsafe.Pointer(&d.alpha),
		b.ptr, ty(b.DT), int32(ldb), a.ptr, ty(a.DT), int32(lda), unsafe.Pointer(&d.beta), c.ptr, ty(c.DT), int32(ldc),
		cublasCompute32F, cublasGemmDefault)
	if r != 0 {
		d.fail(fmt.Errorf("cuda: cublasGemmEx(m=%d n=%d k=%d, %v×%v→%v): status %d", m, n, k, a.DT, b.DT, c.DT, r))
	}
}

// Embed implements Kernels.
func (d *CUDADevice) Embed(x, table, tok Tensor, n, dd int) {
	d.launch(table.DT, 0, "embed", blocks1D(n*dd), 256, x, table, tok, n, dd)
}

// EmbedBackward implements Kernels.
func (d *CUDADevice) EmbedBackward(dtable, dx, tok Tensor, n, dd int) {
	d.launch(d.anyAct(), 0, "embed_bwd", blocks1D(n*dd), 256, dtable, dx, tok, n, dd)
}

// anyAct is the activation type of a compiled module, for kernels whose
// arguments are all f32 or i32.
func (d *CUDADevice) anyAct() DType {
	for k := range d.mods {
		return k.act
	}
	return F32
}

// RMSNorm implements Kernels.
func (d *CUDADevice) RMSNorm(y, rstd, x, w Tensor, n, dd int, eps float32) {
	d.launch(y.DT, 0, "rmsnorm", [3]int{n, 1, 1}, 256, y, rstd, x, w, n, dd, eps)
}

// RMSNormBackward implements Kernels.
func (d *CUDADevice) RMSNormBackward(dx, dw, dy, x, w, rstd Tensor, n, dd int) {
	d.launch(dy.DT, 0, "rmsnorm_bwd_dx", [3]int{n, 1, 1}, 256, dx, dy, x, w, rstd, n, dd)
	d.launch(dy.DT, 0, "rmsnorm_bwd_dw", [3]int{(dd + 255) / 256, rowChunks(n), 1}, 256, dw, dy, x, rstd, n, dd)
}

// AddBias implements Kernels.
func (d *CUDADevice) AddBias(y, b Tensor, n, c int) {
	d.launch(y.DT, 0, "add_bias", blocks1D(n*c), 256, y, b, n, c)
}

// BiasBackward implements Kernels.
func (d *CUDADevice) BiasBackward(db, dy Tensor, n, c int) {
	d.launch(dy.DT, 0, "bias_bwd", [3]int{(c + 255) / 256, rowChunks(n), 1}, 256, db, dy, n, c)
}

// RoPE implements Kernels.
func (d *CUDADevice) RoPE(x, cos, sin, pos Tensor, n, width, hd int, inverse bool) {
	sign := float32(1)
	if inverse {
		sign = -1
	}
	d.launch(x.DT, 0, "rope", blocks1D(n*width/2), 256, x, cos, sin, pos, n, width, hd, sign)
}

// attnRows is the rows of one attention block (BR in kernels.cu).
const attnRows = 64

// Attention implements Kernels.
func (d *CUDADevice) Attention(o, lse, q, k, v Tensor, s AttnShape) {
	d.launch(q.DT, s.HD, "attn_fwd", [3]int{(s.T + attnRows - 1) / attnRows, s.H, s.B}, attnRows*threadsPerRow(s.HD),
		o, lse, q, k, v, s.B, s.T, s.H, s.KVH, s.Scale)
}

// AttentionBackward implements Kernels.
func (d *CUDADevice) AttentionBackward(dq, dk, dv, delta, q, k, v, o, do, lse Tensor, s AttnShape) {
	N := s.B * s.T
	tb := attnRows * threadsPerRow(s.HD)
	bx := (s.T + attnRows - 1) / attnRows
	d.launch(q.DT, s.HD, "attn_delta", blocks1D(N*s.H), 256, delta, o, do, N, s.H)
	d.launch(q.DT, s.HD, "attn_bwd_dq", [3]int{bx, s.H, s.B}, tb, dq, q, k, v, do, lse, delta, s.B, s.T, s.H, s.KVH, s.Scale)
	d.launch(q.DT, s.HD, "attn_bwd_dkdv", [3]int{bx, s.KVH, s.B}, tb, dk, dv, q, k, v, do, lse, delta, s.B, s.T, s.H, s.KVH, s.Scale)
}

// AttentionDecode implements Kernels.
func (d *CUDADevice) AttentionDecode(o, q, kc, vc, slot, length Tensor, r int, s CacheShape) {
	d.launch(q.DT, s.HD, "attn_decode", [3]int{s.H, r, 1}, 128, o, q, kc, vc, slot, length, r, s.H, s.KVH, s.Cap, s.Scale)
}

// KVWrite implements Kernels.
func (d *CUDADevice) KVWrite(kc, vc, k, v, slot, pos Tensor, r int, s CacheShape) {
	kvd := s.KVH * s.HD
	d.launch(k.DT, 0, "kv_write", blocks1D(r*kvd), 256, kc, vc, k, v, slot, pos, r, kvd, s.Cap)
}

// SwiGLU implements Kernels.
func (d *CUDADevice) SwiGLU(y, g, u Tensor, n int) {
	d.launch(y.DT, 0, "swiglu", blocks1D(n), 256, y, g, u, n)
}

// SwiGLUBackward implements Kernels.
func (d *CUDADevice) SwiGLUBackward(dg, du, dy, g, u Tensor, n int) {
	d.launch(dy.DT, 0, "swiglu_bwd", blocks1D(n), 256, dg, du, dy, g, u, n)
}

// AddInto implements Kernels.
func (d *CUDADevice) AddInto(x, y Tensor, n int) {
	d.launch(y.DT, 0, "add_into", blocks1D(n), 256, x, y, n)
}

// Cast implements Kernels.
func (d *CUDADevice) Cast(dst, src Tensor, n int) {
	switch {
	case dst.DT == src.DT:
		d.Copy(dst.View(0, n), src.View(0, n))
	case dst.DT == BF16 && src.DT == F32:
		d.launch(BF16, 0, "cast_f32_bf16", blocks1D(n), 256, dst, src, n)
	case dst.DT == F32 && src.DT == BF16:
		d.launch(BF16, 0, "cast_bf16_f32", blocks1D(n), 256, dst, src, n)
	default:
		d.fail(fmt.Errorf("cuda: cast %v to %v", src.DT, dst.DT))
	}
}

// GatherRows implements Kernels.
func (d *CUDADevice) GatherRows(dst, src, idx Tensor, m, dd int) {
	name := "gather_rows_u32"
	if src.DT.Size() == 2 {
		name = "gather_rows_u16"
	}
	d.launch(d.anyAct(), 0, name, blocks1D(m*dd), 256, dst, src, idx, m, dd)
}

// ScatterRows implements Kernels.
func (d *CUDADevice) ScatterRows(dst, src, idx Tensor, m, dd int) {
	name := "scatter_rows_u32"
	if src.DT.Size() == 2 {
		name = "scatter_rows_u16"
	}
	d.launch(d.anyAct(), 0, name, blocks1D(m*dd), 256, dst, src, idx, m, dd)
}

// ChosenLogprob implements Kernels.
func (d *CUDADevice) ChosenLogprob(out, lse, logits, tgt Tensor, n, v int, invTemp float32) {
	d.launch(logits.DT, 0, "chosen_logprob", [3]int{n, 1, 1}, 512, out, lse, logits, tgt, n, v, invTemp)
}

// ChosenLogprobBackward implements Kernels.
func (d *CUDADevice) ChosenLogprobBackward(dlogits, logits, tgt, cot, out, lse Tensor, n, v int, invTemp float32) {
	d.launch(logits.DT, 0, "chosen_logprob_bwd", [3]int{n, 1, 1}, 256, dlogits, logits, tgt, cot, out, lse, n, v, invTemp)
}

// SampleTokens implements Kernels (SAMPLE_THREADS = 512 in kernels.cu).
func (d *CUDADevice) SampleTokens(tok, lp, logits, u Tensor, r, v int, invTemp, topP float32) {
	d.launch(logits.DT, 0, "sample_tokens", [3]int{r, 1, 1}, 512, tok, lp, logits, u, v, invTemp, topP)
}

// AdamW implements Kernels.
func (d *CUDADevice) AdamW(w, g, m, v Tensor, n int, a AdamWArgs) {
	d.launch(d.anyAct(), 0, "adamw", blocks1D(n), 256, w, g, m, v, n, a.B1, a.B2, a.Eps, a.Decay, a.StepSize, a.InvBC2, a.GScale)
}

// SumSquares implements Kernels (256 threads: the kernel's shared array).
func (d *CUDADevice) SumSquares(out, x Tensor, n int) {
	d.launch(d.anyAct(), 0, "sum_squares", [3]int{SumSquaresParts, 1, 1}, 256, out, x, n)
}
