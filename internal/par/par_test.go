package par

import (
	"sync/atomic"
	"testing"
)

func TestForAndChunksCoverEachIndexOnce(t *testing.T) {
	for _, n := range []int{0, 1, 7, 100, 1 << 15} {
		for name, run := range map[string]func(int, func(int, int)){
			"For":    For,
			"Chunks": func(n int, fn func(int, int)) { Chunks(n, 8, 16, fn) },
		} {
			seen := make([]atomic.Int32, n)
			run(n, func(lo, hi int) {
				if name == "Chunks" && lo%8 != 0 {
					t.Errorf("%s(%d): chunk starts at %d, not a multiple of 8", name, n, lo)
				}
				for i := lo; i < hi; i++ {
					seen[i].Add(1)
				}
			})
			for i := range seen {
				if c := seen[i].Load(); c != 1 {
					t.Fatalf("%s(%d): index %d run %d times", name, n, i, c)
				}
			}
		}
	}
}
