// Package par splits loops over the machine's cores: the CPU kernels of
// the model and of the device backend's CPU implementation share it.
package par

import (
	"runtime"
	"sync"
)

// For runs fn over [0, n) in one contiguous chunk per core.
func For(n int, fn func(lo, hi int)) {
	w := min(runtime.GOMAXPROCS(0), n)
	if w <= 1 {
		fn(0, n)
		return
	}
	split(n, (n+w-1)/w, fn)
}

// Chunks runs an elementwise fn over [0, n) in one chunk per core, each a
// multiple of align elements, when n is at least minN (smaller loops run on
// the calling goroutine: the split would cost more than it saves).
func Chunks(n, align, minN int, fn func(lo, hi int)) {
	w := runtime.GOMAXPROCS(0)
	if w < 2 || n < minN {
		fn(0, n)
		return
	}
	chunk := ((n+w-1)/w + align - 1) / align * align
	split(n, chunk, fn)
}

func split(n, chunk int, fn func(lo, hi int)) {
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	wg.Wait()
}
