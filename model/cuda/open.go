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
	d, err := OpenCUDA(ctx, n, &Loader{ConfigDirs: libDirs})
	if err != nil {
		return nil, fmt.Errorf("model.device=%s: %w", spec, err)
	}
	return d, nil
}
