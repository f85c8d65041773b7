package cuda

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// ParseDevice reads model.device: "cpu", "cuda" (GPU 0) or "cuda:N".
func ParseDevice(spec string) (kind string, ordinal int, err error) {
	switch s := strings.TrimSpace(spec); {
	case s == "cpu":
		return "cpu", 0, nil
	case s == "cuda":
		return "cuda", 0, nil
	case strings.HasPrefix(s, "cuda:"):
		n, err := strconv.Atoi(s[len("cuda:"):])
		if err != nil || n < 0 {
			return "", 0, fmt.Errorf("device %q: want cuda:N with N a GPU number >= 0", spec)
		}
		return "cuda", n, nil
	}
	return "", 0, fmt.Errorf("device %q: want \"cpu\", \"cuda\" or \"cuda:N\"", spec)
}

// ParseDevices reads model.device's forms for one GPU or several: "cuda"
// and "cuda:N" are one, "cuda:0,1,3" those GPUs in that order (rank i on
// the i-th), "cuda:all" every GPU the driver sees (all is then true and
// ordinals empty). "cpu" gives kind "cpu".
func ParseDevices(spec string) (kind string, ordinals []int, all bool, err error) {
	s := strings.TrimSpace(spec)
	if s == "cuda:all" {
		return "cuda", nil, true, nil
	}
	if list, ok := strings.CutPrefix(s, "cuda:"); ok && strings.Contains(list, ",") {
		seen := map[int]bool{}
		for _, f := range strings.Split(list, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 0 {
				return "", nil, false, fmt.Errorf("device %q: %q is not a GPU number", spec, f)
			}
			if seen[n] {
				return "", nil, false, fmt.Errorf("device %q: cuda:%d is listed twice", spec, n)
			}
			seen[n] = true
			ordinals = append(ordinals, n)
		}
		return "cuda", ordinals, false, nil
	}
	kind, n, err := ParseDevice(spec)
	if err != nil || kind == "cpu" {
		return kind, nil, false, err
	}
	return kind, []int{n}, false, nil
}

// OpenGPUs opens the GPUs model.device names (ParseDevices), every one
// the driver sees for "cuda:all".
func OpenGPUs(ctx context.Context, spec string, libDirs []string) ([]*CUDADevice, error) {
	kind, ords, all, err := ParseDevices(spec)
	if err != nil {
		return nil, fmt.Errorf("model.device: %w", err)
	}
	if kind != "cuda" {
		return nil, fmt.Errorf("model.device=%s: not a GPU", spec)
	}
	l := &Loader{ConfigDirs: libDirs}
	var devs []*CUDADevice
	closeAll := func() {
		for _, d := range devs {
			d.Close()
		}
	}
	if all {
		first, err := OpenCUDA(ctx, 0, l)
		if err != nil {
			return nil, fmt.Errorf("model.device=%s: %w", spec, err)
		}
		devs = append(devs, first)
		var count int32
		if r := first.L.drv.cuDeviceGetCount(&count); r != 0 {
			closeAll()
			return nil, fmt.Errorf("model.device=%s: cuDeviceGetCount: %s", spec, first.L.drvErr(r))
		}
		for i := 1; i < int(count); i++ {
			ords = append(ords, i)
		}
	}
	for _, n := range ords {
		d, err := OpenCUDA(ctx, n, l)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("model.device=%s: %w", spec, err)
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// Open returns the device model.device names. libDirs are model.cuda_libs's
// folders, searched before LD_LIBRARY_PATH and the usual places. Without
// a usable driver it returns an error naming what was missing and every
// place it looked (a *LibraryError when a library was not found).
func Open(ctx context.Context, spec string, libDirs []string) (Device, error) {
	kind, n, err := ParseDevice(spec)
	if err != nil {
		return nil, fmt.Errorf("model.device: %w", err)
	}
	if kind == "cpu" {
		return NewCPU(), nil
	}
	// Several GPUs are opened by OpenGPUs; one of them is its first.
	d, err := OpenCUDA(ctx, n, &Loader{ConfigDirs: libDirs})
	if err != nil {
		return nil, fmt.Errorf("model.device=%s: %w", spec, err)
	}
	return d, nil
}
