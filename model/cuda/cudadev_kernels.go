package cuda

import (
	"fmt"
	"math"
	"unsafe"
)

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
