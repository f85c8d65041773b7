package sgemm

import (
	"runtime"
	"sync"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// Tile and block sizes. The 6×16 tile keeps 12 accumulators in registers;
// kc·16 floats of B (16 KiB) stay in L1 while the mc×kc block of A (144 KiB)
// stays in L2, and the kc×nc block of B is read from L2/L3.
const (
	mr, nr  = 6, 16
	kcBlock = 256
	mcBlock = 144
	ncBlock = 512
	// Products below this many multiply-adds run on one core: splitting
	// costs a few microseconds of goroutine start and wake-up.
	parallelMin = 1 << 19
)

// Disable forces the gonum fallback even where the CPU has AVX2 and FMA
// (tests of the fallback; set it before use, not while multiplying).
var Disable bool

// Accelerated reports whether the assembly kernel is in use.
func Accelerated() bool { return hasKernel && !Disable }

// Implementation is gonum's BLAS with Sgemm replaced by this package's, for
// gorgonia.Use.
type Implementation struct{ gonum.Implementation }

// Sgemm implements blas.Float32's Sgemm (row-major, as gonum).
func (Implementation) Sgemm(tA, tB blas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	Sgemm(tA != blas.NoTrans, tB != blas.NoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// Sgemm computes C = alpha·op(A)·op(B) + beta·C for row-major A (m×k, or
// k×m when tA), B (k×n, or n×k when tB) and C (m×n), splitting large
// products across GOMAXPROCS cores. beta == 0 does not read C. It panics on
// bad arguments, as gonum does.
func Sgemm(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	gemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, runtime.GOMAXPROCS(0))
}

// SgemmSerial is Sgemm on the calling goroutine only, for callers that
// already run one product per core.
func SgemmSerial(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	gemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, 1)
}

func gemm(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, workers int) {
	check(tA, tB, m, n, k, a, lda, b, ldb, c, ldc)
	if m == 0 || n == 0 {
		return
	}
	if !Accelerated() {
		ta, tb := blas.NoTrans, blas.NoTrans
		if tA {
			ta = blas.Trans
		}
		if tB {
			tb = blas.Trans
		}
		gonum.Implementation{}.Sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	if k == 0 || alpha == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	if workers < 2 || m*n*k < parallelMin {
		serial(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	// Split C into row or column stripes of whole tiles; each worker packs
	// its own panels (the repeated packing is O(k·n) against O(m·n·k/w)).
	rows := m/mr >= n/nr
	unit, total := nr, n
	if rows {
		unit, total = mr, m
	}
	tiles := (total + unit - 1) / unit
	w := min(workers, tiles)
	if w < 2 {
		serial(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	per := (tiles + w - 1) / w * unit
	var wg sync.WaitGroup
	for lo := 0; lo < total; lo += per {
		hi := min(lo+per, total)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if rows {
				ao := lo * lda
				if tA {
					ao = lo
				}
				serial(tA, tB, hi-lo, n, k, alpha, a[ao:], lda, b, ldb, beta, c[lo*ldc:], ldc)
			} else {
				bo := lo
				if tB {
					bo = lo * ldb
				}
				serial(tA, tB, m, hi-lo, k, alpha, a, lda, b[bo:], ldb, beta, c[lo:], ldc)
			}
		}()
	}
	wg.Wait()
}

func scaleC(m, n int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

// buffers are one worker's packed panels.
type buffers struct{ a, b, ea, eb []float32 }

var pool = sync.Pool{New: func() any { return new(buffers) }}

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

// blocks splits n into pieces of at most max, as equal as possible (a 300
// deep product runs as 150+150, not 256+44).
func blocks(n, max, unit int) int {
	parts := (n + max - 1) / max
	per := (n + parts - 1) / parts
	return (per + unit - 1) / unit * unit
}

// Packing pays when a panel is reused: B across the row tiles of A, A across
// the column panels of B. Below these sizes the kernel reads the operand in
// place (row-major or transposed A; row-major B), packing only the ragged
// last panel. Transposed B is always packed.
var (
	packBMinRows   = 3 * mr
	packAMinCols   = 1 << 30
	packATransCols = 64
)

// operand is a block of A or B as the kernel reads it: tile t (a row index
// of A, a column index of B) starts at d[t·step]; rs and cs are the element
// strides; edge is the zero-padded copy of a ragged last tile, from index
// full on.
type operand struct {
	d          []float32
	step       int
	rs, cs     int
	full       int
	edge       []float32
	edgeRS, ec int
}

// serial is the blocked product on one core (BLIS's loop order).
func serial(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	buf := pool.Get().(*buffers)
	defer pool.Put(buf)
	kcb, mcb, ncb := blocks(k, kcBlock, 1), blocks(m, mcBlock, mr), blocks(n, ncBlock, nr)
	pA, pB := n >= packAMinCols || (tA && n >= packATransCols), tB || m >= packBMinRows
	if pA {
		buf.a = grow(buf.a, mcb*kcb)
	}
	if pB {
		buf.b = grow(buf.b, kcb*ncb)
	}
	buf.ea, buf.eb = grow(buf.ea, mr*kcb), grow(buf.eb, kcb*nr)
	for jc := 0; jc < n; jc += ncb {
		nc := min(ncb, n-jc)
		for pc := 0; pc < k; pc += kcb {
			kc := min(kcb, k-pc)
			var ob operand
			if pB {
				packB(buf.b, tB, b, ldb, pc, jc, kc, nc)
				ob = operand{d: buf.b, step: kc, rs: nr, full: nc + nr}
			} else {
				ob = operand{d: b[pc*ldb+jc:], step: 1, rs: ldb, full: nc - nc%nr, edge: buf.eb, edgeRS: nr}
				if nc%nr != 0 {
					packBPanel(buf.eb, false, b, ldb, pc, jc+ob.full, kc, nc%nr)
				}
			}
			be := beta
			if pc > 0 {
				be = 1
			}
			for ic := 0; ic < m; ic += mcb {
				mc := min(mcb, m-ic)
				var oa operand
				switch {
				case pA:
					packA(buf.a, tA, a, lda, ic, pc, mc, kc)
					oa = operand{d: buf.a, step: kc, rs: 1, cs: mr, full: mc + mr}
				case tA:
					oa = operand{d: a[pc*lda+ic:], step: 1, rs: 1, cs: lda, full: mc - mc%mr, edge: buf.ea, ec: mr}
				default:
					oa = operand{d: a[ic*lda+pc:], step: lda, rs: lda, cs: 1, full: mc - mc%mr, edge: buf.ea, ec: mr}
				}
				if !pA && mc%mr != 0 {
					packA(buf.ea, tA, a, lda, ic+oa.full, pc, mc%mr, kc)
				}
				macro(mc, nc, kc, alpha, &oa, &ob, be, c[ic*ldc+jc:], ldc)
			}
		}
	}
}

// macro runs the kernel over an mc×nc block of C.
func macro(mc, nc, kc int, alpha float32, oa, ob *operand, beta float32, c []float32, ldc int) {
	var t [mr * nr]float32
	for jr := 0; jr < nc; jr += nr {
		nw := min(nr, nc-jr)
		bp, rsb := ob.d[jr*ob.step:], ob.rs
		if jr >= ob.full {
			bp, rsb = ob.edge, ob.edgeRS
		}
		for ir := 0; ir < mc; ir += mr {
			mh := min(mr, mc-ir)
			ap, rsa, csa := oa.d[ir*oa.step:], oa.rs, oa.cs
			if ir >= oa.full {
				ap, rsa, csa = oa.edge, 1, oa.ec
			}
			kern := kernel6x16
			if mh <= 4 {
				kern = kernel4x16 // a third fewer multiply-adds thrown away
			}
			if (mh == mr || mh == 4) && nw == nr {
				kern(kc, &ap[0], rsa, csa, &bp[0], rsb, &c[ir*ldc+jr], ldc, alpha, beta)
				continue
			}
			// Edge tile: compute the full tile aside, then add its part.
			kern(kc, &ap[0], rsa, csa, &bp[0], rsb, &t[0], nr, alpha, 0)
			for i := 0; i < mh; i++ {
				row := c[(ir+i)*ldc+jr : (ir+i)*ldc+jr+nw]
				tr := t[i*nr : i*nr+nw]
				if beta == 0 {
					copy(row, tr)
					continue
				}
				for j, v := range tr {
					row[j] = v + beta*row[j]
				}
			}
		}
	}
}

// packA writes op(A)[ic:ic+mc, pc:pc+kc] as panels of mr rows, k-major,
// zero-padding the last panel.
func packA(dst []float32, tA bool, a []float32, lda, ic, pc, mc, kc int) {
	for p := 0; p < mc; p += mr {
		d := dst[(p/mr)*kc*mr : (p/mr+1)*kc*mr]
		h := min(mr, mc-p)
		i0 := ic + p
		if tA {
			// op(A)(i, kk) = a[kk·lda + i]: mr contiguous values per k.
			if h == mr {
				for kk := 0; kk < kc; kk++ {
					o := (pc+kk)*lda + i0
					*(*[mr]float32)(d[kk*mr : kk*mr+mr]) = *(*[mr]float32)(a[o : o+mr])
				}
				continue
			}
			for kk := 0; kk < kc; kk++ {
				src := a[(pc+kk)*lda+i0 : (pc+kk)*lda+i0+h]
				dd := d[kk*mr : kk*mr+mr]
				copy(dd, src)
				clear(dd[h:])
			}
			continue
		}
		if h == mr {
			r0 := a[(i0+0)*lda+pc : (i0+0)*lda+pc+kc]
			r1 := a[(i0+1)*lda+pc : (i0+1)*lda+pc+kc]
			r2 := a[(i0+2)*lda+pc : (i0+2)*lda+pc+kc]
			r3 := a[(i0+3)*lda+pc : (i0+3)*lda+pc+kc]
			r4 := a[(i0+4)*lda+pc : (i0+4)*lda+pc+kc]
			r5 := a[(i0+5)*lda+pc : (i0+5)*lda+pc+kc]
			for kk := range r0 {
				dd := d[kk*mr : kk*mr+mr : kk*mr+mr]
				dd[0], dd[1], dd[2], dd[3], dd[4], dd[5] = r0[kk], r1[kk], r2[kk], r3[kk], r4[kk], r5[kk]
			}
			continue
		}
		clear(d)
		for i := 0; i < h; i++ {
			row := a[(i0+i)*lda+pc : (i0+i)*lda+pc+kc]
			for kk, v := range row {
				d[kk*mr+i] = v
			}
		}
	}
}

// packB writes op(B)[pc:pc+kc, jc:jc+nc] as panels of nr columns, k-major,
// zero-padding the last panel. Row-major B is read row by row (each row of
// the block once, in order), which streams where a panel at a time would
// touch a new cache line of every row.
func packB(dst []float32, tB bool, b []float32, ldb, pc, jc, kc, nc int) {
	full := nc / nr
	if tB || full == 0 {
		for q := 0; q < nc; q += nr {
			packBPanel(dst[(q/nr)*kc*nr:(q/nr+1)*kc*nr], tB, b, ldb, pc, jc+q, kc, min(nr, nc-q))
		}
		return
	}
	for kk := 0; kk < kc; kk++ {
		src := b[(pc+kk)*ldb+jc : (pc+kk)*ldb+jc+nc]
		for q := 0; q < full; q++ {
			o := q*kc*nr + kk*nr
			*(*[nr]float32)(dst[o : o+nr]) = *(*[nr]float32)(src[q*nr : q*nr+nr])
		}
	}
	if nc%nr != 0 {
		packBPanel(dst[full*kc*nr:(full+1)*kc*nr], false, b, ldb, pc, jc+full*nr, kc, nc%nr)
	}
}

// packBPanel writes w ≤ nr columns of op(B) starting at column j0, rows
// pc..pc+kc, into one kc×nr panel.
func packBPanel(d []float32, tB bool, b []float32, ldb, pc, j0, kc, w int) {
	if !tB {
		for kk := 0; kk < kc; kk++ {
			dd := d[kk*nr : kk*nr+nr]
			copy(dd, b[(pc+kk)*ldb+j0:(pc+kk)*ldb+j0+w])
			clear(dd[w:])
		}
		return
	}
	if w < nr {
		clear(d)
	}
	// op(B)(kk, j) = b[j·ldb + kk]: a transpose of w rows of b.
	for j := 0; j < w; j++ {
		row := b[(j0+j)*ldb+pc : (j0+j)*ldb+pc+kc]
		for kk, v := range row {
			d[kk*nr+j] = v
		}
	}
}

func check(tA, tB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic("sgemm: negative dimension")
	}
	ar, ac := m, k
	if tA {
		ar, ac = k, m
	}
	br, bc := k, n
	if tB {
		br, bc = n, k
	}
	if lda < max(1, ac) || ldb < max(1, bc) || ldc < max(1, n) {
		panic("sgemm: bad leading dimension")
	}
	if m == 0 || n == 0 {
		return
	}
	if ar > 0 && ac > 0 && len(a) < (ar-1)*lda+ac {
		panic("sgemm: short A")
	}
	if br > 0 && bc > 0 && len(b) < (br-1)*ldb+bc {
		panic("sgemm: short B")
	}
	if len(c) < (m-1)*ldc+n {
		panic("sgemm: short C")
	}
}
