package cuda

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"
)

// kernelSource is the CUDA C of every device kernel, compiled by NVRTC at
// start for the device's compute capability.
//
//go:embed kernels.cu
var kernelSource string

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
	// The library's path is part of the key: the emulator's NVRTC says the
	// same version as NVIDIA's, and its images are host code.
	sum := sha256.Sum256([]byte(kernelSource + "\x00" + strings.Join(opts, " ") + "\x00nvrtc " + d.nvrtcV + " " + d.L.nvrtc.path))
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
