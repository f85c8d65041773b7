package sgemm

import (
	"runtime"
	"sync"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// Packed is a k×n matrix B packed once into the kernel's column panels,
// for many products C = alpha·A·B + beta·C (the sampler's weights: one
// packing per Sample call, then a product per layer per token). Products
// through Packed equal Sgemm's bit for bit (same k blocks, same kernel).
type Packed struct {
	K, N int
	kcb  int
	p    []float32 // per k block, ceil(N/nr) panels of kc×nr
	raw  []float32 // row-major B, for the fallback
}

// PackCols packs the horizontal concatenation of row-major matrices: part
// i is k×widths[i] with row stride widths[i] (fused projections such as
// [Wq | Wk | Wv]). It reuses dst's storage when dst is not nil.
func PackCols(dst *Packed, k int, parts [][]float32, widths []int) *Packed {
	n := 0
	for i, w := range widths {
		if len(parts[i]) < k*w {
			panic("sgemm: short part")
		}
		n += w
	}
	if dst == nil {
		dst = new(Packed)
	}
	dst.K, dst.N, dst.kcb = k, n, blocks(max(k, 1), kcBlock, 1)
	if !Accelerated() {
		dst.raw = grow(dst.raw, k*n)
		off := 0
		for i, w := range widths {
			for r := 0; r < k; r++ {
				copy(dst.raw[r*n+off:r*n+off+w], parts[i][r*w:(r+1)*w])
			}
			off += w
		}
		return dst
	}
	panels := (n + nr - 1) / nr
	dst.p = grow(dst.p, panels*nr*k)
	// Source of each fused column: part and column within it.
	part, col := make([]int, n), make([]int, n)
	j := 0
	for i, w := range widths {
		for c := 0; c < w; c++ {
			part[j], col[j] = i, c
			j++
		}
	}
	for pc := 0; pc < k; pc += dst.kcb {
		kc := min(dst.kcb, k-pc)
		blk := dst.p[pc*panels*nr:]
		for q := 0; q < panels; q++ {
			d := blk[q*kc*nr : (q+1)*kc*nr]
			j0 := q * nr
			w := min(nr, n-j0)
			if w == nr && part[j0] == part[j0+nr-1] {
				src, sw, c0 := parts[part[j0]], widths[part[j0]], col[j0]
				for kk := 0; kk < kc; kk++ {
					o := (pc+kk)*sw + c0
					*(*[nr]float32)(d[kk*nr : kk*nr+nr]) = *(*[nr]float32)(src[o : o+nr])
				}
				continue
			}
			clear(d)
			for jj := 0; jj < w; jj++ {
				src, sw, c := parts[part[j0+jj]], widths[part[j0+jj]], col[j0+jj]
				for kk := 0; kk < kc; kk++ {
					d[kk*nr+jj] = src[(pc+kk)*sw+c]
				}
			}
		}
	}
	return dst
}

// Mul computes C = alpha·A·B + beta·C for row-major A (m×K, row stride
// lda) and C (m×N), splitting large products across cores.
func (p *Packed) Mul(m int, alpha float32, a []float32, lda int, beta float32, c []float32, ldc int) {
	p.mulW(m, alpha, a, lda, beta, c, ldc, runtime.GOMAXPROCS(0))
}

// MulSerial is Mul on the calling goroutine.
func (p *Packed) MulSerial(m int, alpha float32, a []float32, lda int, beta float32, c []float32, ldc int) {
	p.mulW(m, alpha, a, lda, beta, c, ldc, 1)
}

func (p *Packed) mulW(m int, alpha float32, a []float32, lda int, beta float32, c []float32, ldc int, workers int) {
	k, n := p.K, p.N
	if m < 0 || lda < max(1, k) || ldc < max(1, n) {
		panic("sgemm: bad dimension")
	}
	if m == 0 || n == 0 {
		return
	}
	if len(c) < (m-1)*ldc+n {
		panic("sgemm: short C")
	}
	if !Accelerated() {
		gonum.Implementation{}.Sgemm(blas.NoTrans, blas.NoTrans, m, n, k, alpha, a, lda, p.raw, max(1, n), beta, c, ldc)
		return
	}
	if k == 0 || alpha == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	if len(a) < (m-1)*lda+k {
		panic("sgemm: short A")
	}
	panels := (n + nr - 1) / nr
	if workers < 2 || m*n*k < parallelMin {
		p.mul(m, 0, panels, alpha, a, lda, beta, c, ldc)
		return
	}
	var wg sync.WaitGroup
	if m/mr >= panels {
		per := ((m+mr-1)/mr + workers - 1) / workers * mr
		for lo := 0; lo < m; lo += per {
			hi := min(lo+per, m)
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.mul(hi-lo, 0, panels, alpha, a[lo*lda:], lda, beta, c[lo*ldc:], ldc)
			}()
		}
	} else {
		per := (panels + workers - 1) / workers
		for q0 := 0; q0 < panels; q0 += per {
			q1 := min(q0+per, panels)
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.mul(m, q0, q1, alpha, a, lda, beta, c, ldc)
			}()
		}
	}
	wg.Wait()
}

// mul computes the columns of panels [q0, q1).
func (p *Packed) mul(m, q0, q1 int, alpha float32, a []float32, lda int, beta float32, c []float32, ldc int) {
	buf := pool.Get().(*buffers)
	defer pool.Put(buf)
	k, panels := p.K, (p.N+nr-1)/nr
	j0 := q0 * nr
	nc := min(q1*nr, p.N) - j0
	mcb := blocks(m, mcBlock, mr)
	buf.ea = grow(buf.ea, mr*p.kcb)
	for pc := 0; pc < k; pc += p.kcb {
		kc := min(p.kcb, k-pc)
		ob := operand{d: p.p[pc*panels*nr+q0*kc*nr:], step: kc, rs: nr, full: nc + nr}
		be := beta
		if pc > 0 {
			be = 1
		}
		for ic := 0; ic < m; ic += mcb {
			mc := min(mcb, m-ic)
			oa := operand{d: a[ic*lda+pc:], step: lda, rs: lda, cs: 1, full: mc - mc%mr, edge: buf.ea, ec: mr}
			if mc%mr != 0 {
				packA(buf.ea, false, a, lda, ic+oa.full, pc, mc%mr, kc)
			}
			macro(mc, nc, kc, alpha, &oa, &ob, be, c[ic*ldc+j0:], ldc)
		}
	}
}
