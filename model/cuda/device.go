package cuda

import (
	"fmt"
	"strings"
	"unsafe"
)

// DType is an element type on a device.
type DType uint8

// Element types: fp32, bf16 (activations and compute weights in bf16 mode)
// and int32 (token ids, positions, slots).
const (
	F32 DType = iota
	BF16
	I32
)

// Size is the element size in bytes.
func (d DType) Size() int {
	if d == BF16 {
		return 2
	}
	return 4
}

func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case BF16:
		return "bf16"
	case I32:
		return "i32"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Tensor is a flat run of N elements on a device: a device address on a
// CUDA device, host memory on the CPU device. View makes sub-tensors
// without copying.
type Tensor struct {
	DT  DType
	N   int
	ptr uintptr        // CUDA device address
	h   unsafe.Pointer // CPU backing
}

// View is the n elements starting at element off.
func (t Tensor) View(off, n int) Tensor {
	if off < 0 || n < 0 || off+n > t.N {
		panic(fmt.Sprintf("cuda: view [%d, %d) of a %d-element tensor", off, off+n, t.N))
	}
	v := Tensor{DT: t.DT, N: n}
	if t.h != nil { // the CPU's words are 4 bytes, bf16 too
		v.h = unsafe.Add(t.h, off*4)
	} else {
		v.ptr = t.ptr + uintptr(off*t.DT.Size())
	}
	return v
}

// Bytes is the tensor's size in bytes.
func (t Tensor) Bytes() int { return t.N * t.DT.Size() }

func (t Tensor) same(o Tensor) bool { return t.ptr == o.ptr && t.h == o.h && t.N == o.N }

// f32 and i32 are the CPU device's views of a tensor's memory.
func (t Tensor) f32() []float32 {
	if t.N == 0 {
		return nil
	}
	if t.DT != F32 && t.DT != BF16 || t.h == nil { // the CPU's bf16 is f32 words
		panic(fmt.Sprintf("cuda: %v tensor read as host f32", t.DT))
	}
	return unsafe.Slice((*float32)(t.h), t.N)
}

func (t Tensor) i32() []int32 {
	if t.N == 0 {
		return nil
	}
	if t.DT != I32 || t.h == nil {
		panic(fmt.Sprintf("cuda: %v tensor read as host i32", t.DT))
	}
	return unsafe.Slice((*int32)(t.h), t.N)
}

// Info describes a device for the console header and `swetui version`.
type Info struct {
	Name string
	// Kind is "cpu" or "cuda".
	Kind    string
	Ordinal int
	// TotalBytes and FreeBytes are the device memory (0 on the CPU).
	TotalBytes, FreeBytes uint64
	// CC is the compute capability, e.g. 90 for sm_90 (0 on the CPU).
	CC int
	// Emulated: the driver is swetui's CUDA emulator on the CPU, not a GPU.
	Emulated bool
}

func (i Info) String() string {
	if i.Kind == "cpu" {
		return "cpu"
	}
	s := fmt.Sprintf("cuda:%d %s (sm_%d, %.1f GiB)", i.Ordinal, i.Name, i.CC, float64(i.TotalBytes)/(1<<30))
	if i.Emulated && !strings.Contains(i.Name, "emulat") {
		s += " [emulated on the CPU]"
	}
	return s
}

// AttnShape is packed causal attention over B sequences of T positions:
// q and o are [B·T, H·HD], k and v [B·T, KVH·HD]; head h reads kv head
// h/(H/KVH).
type AttnShape struct {
	B, T, H, KVH, HD int
	Scale            float32
}

// CacheShape is a KV cache of Slots sequences of Cap positions:
// [Slots, Cap, KVH·HD] per layer for keys and again for values.
type CacheShape struct {
	Slots, Cap, H, KVH, HD int
	Scale                  float32
}

// AdamWArgs are one AdamW update's scalars; the engine computes the bias
// corrections so every device applies the same formula:
// m = b1·m + (1−b1)·g·GScale, v = b2·v + (1−b2)·(g·GScale)²,
// w = w·Decay − StepSize·m / (sqrt(v·InvBC2) + Eps).
type AdamWArgs struct {
	B1, B2, Eps, Decay, StepSize, InvBC2, GScale float32
}

// SumSquaresParts is the length of SumSquares' output: partial sums that
// the host adds in float64.
const SumSquaresParts = 256

// Kernels is the kernel list of the decoder. Row-major throughout; "act"
// is the engine's activation type (F32, or BF16 on CUDA), f32 marks
// tensors that are always float32. Kernels are queued in order on the
// device and never return errors: Device.Sync reports the first.
type Kernels interface {
	// Gemm: C = alpha·op(A)·op(B) + beta·C with op(A) [m, k], op(B) [k, n];
	// A, B act, C act or f32.
	Gemm(tA, tB bool, m, n, k int, alpha float32, a Tensor, lda int, b Tensor, ldb int, beta float32, c Tensor, ldc int)
	// Embed: x f32 [n, d] = table act [V, d] rows tok i32 [n].
	Embed(x, table, tok Tensor, n, d int)
	// EmbedBackward: dtable f32 [V, d] += dx f32 [n, d] into rows tok.
	EmbedBackward(dtable, dx, tok Tensor, n, d int)
	// RMSNorm: y act [n, d] = x·rstd·w, rstd f32 [n] = 1/sqrt(mean(x²)+eps),
	// x f32, w f32 [d].
	RMSNorm(y, rstd, x, w Tensor, n, d int, eps float32)
	// RMSNormBackward: dx f32 += ∂/∂x, dw f32 [d] += ∂/∂w of Σ dy∘y
	// (dy act).
	RMSNormBackward(dx, dw, dy, x, w, rstd Tensor, n, d int)
	// AddBias: y act [n, c] += b f32 [c].
	AddBias(y, b Tensor, n, c int)
	// BiasBackward: db f32 [c] += column sums of dy act [n, c].
	BiasBackward(db, dy Tensor, n, c int)
	// RoPE rotates x act [n, width] in place, every head of hd at the
	// row's position pos i32 [n] (rotate-half layout); inverse undoes it,
	// which is also its gradient. cos, sin f32 [context, hd/2].
	RoPE(x, cos, sin, pos Tensor, n, width, hd int, inverse bool)
	// Attention: o act = softmax(q kᵀ·scale + causal) v, flash-style (no
	// T×T matrix); lse f32 [B·T, H] keeps each row's log-sum-exp.
	Attention(o, lse, q, k, v Tensor, s AttnShape)
	// AttentionBackward: dq, dk, dv act from do act, recomputing the
	// probabilities from lse; delta f32 [B·T, H] is scratch (rowsum do∘o).
	AttentionBackward(dq, dk, dv, delta, q, k, v, o, do, lse Tensor, s AttnShape)
	// AttentionDecode: o act [r, H·HD] for r query rows q act, row i over
	// cache slot slot[i], positions [0, length[i]) (i32 [r] each).
	AttentionDecode(o, q, kc, vc, slot, length Tensor, r int, s CacheShape)
	// KVWrite stores k, v act [r, KVH·HD] at cache (slot[i], pos[i]).
	KVWrite(kc, vc, k, v, slot, pos Tensor, r int, s CacheShape)
	// SwiGLU: y act = silu(g)∘u over n elements.
	SwiGLU(y, g, u Tensor, n int)
	// SwiGLUBackward: dg, du act from dy act.
	SwiGLUBackward(dg, du, dy, g, u Tensor, n int)
	// AddInto: x f32 += y act over n elements (the residual stream).
	AddInto(x, y Tensor, n int)
	// Cast converts n elements between float types (f32, bf16).
	Cast(dst, src Tensor, n int)
	// GatherRows: dst [m, d] = src rows idx i32 [m] (same type).
	GatherRows(dst, src, idx Tensor, m, d int)
	// ScatterRows: dst rows idx [m] = src [m, d] (distinct rows).
	ScatterRows(dst, src, idx Tensor, m, d int)
	// ChosenLogprob: out f32 [n, 2] = (log softmax(z·invTemp)[tgt],
	// entropy), lse f32 [n] of z·invTemp; z act [n, v], tgt i32 [n] (−1:
	// zeros).
	ChosenLogprob(out, lse, logits, tgt Tensor, n, v int, invTemp float32)
	// ChosenLogprobBackward: dlogits act [n, v] from cot f32 [n, 2]:
	// dz = [c_lp·(δ_t − p) − c_ent·p·(log p + H)]·invTemp.
	ChosenLogprobBackward(dlogits, logits, tgt, cot, out, lse Tensor, n, v int, invTemp float32)
	// SampleTokens draws tok i32 [r] from logits act [r, v] with uniforms
	// u f32 [r]: softmax(z·invTemp) restricted to the smallest top-p set
	// (all tokens with p >= the threshold), chosen by inverse CDF in vocab
	// order; lp f32 [r] is the token's logprob over the full vocabulary.
	// invTemp 0 is greedy, with lp at temperature 1.
	SampleTokens(tok, lp, logits, u Tensor, r, v int, invTemp, topP float32)
	// AdamW updates n weights w f32 with gradients g and moments m, v.
	AdamW(w, g, m, v Tensor, n int, a AdamWArgs)
	// SumSquares writes SumSquaresParts partial sums of x² (x f32 [n]).
	SumSquares(out, x Tensor, n int)
}

// Device is where an engine's tensors live and its kernels run.
type Device interface {
	Kernels
	Info() Info
	// Alloc returns n zeroed elements.
	Alloc(dt DType, n int) (Tensor, error)
	Free(t Tensor)
	// Upload copies host values into t: []float32 into F32 or BF16
	// (rounded), []int32 into I32.
	Upload(t Tensor, src any) error
	// Download copies t into dst ([]float32 for F32/BF16, []int32 for I32),
	// after the queued work.
	Download(dst any, t Tensor) error
	// Copy copies src into dst (same type and size); Zero clears t.
	Copy(dst, src Tensor)
	Zero(t Tensor)
	// Do runs fn with the device current on the calling goroutine (CUDA:
	// locked to its OS thread) and waits for the work fn queued; it
	// returns fn's error or the first kernel error.
	Do(fn func() error) error
	Close() error
}
