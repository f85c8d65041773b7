package cuda

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/model"
)

// The tests in this file run on a GPU when SWETUI_GPU=1 (the device
// check, make gpu-check), and otherwise on the CUDA emulator
// (model/cuda/emu, built by make cuda-emu into build/cudaemu) where it is
// built: the same driver, NVRTC and cuBLAS calls, the real kernels run on
// the CPU with memcheck and racecheck. The benchmarks need a GPU. Results
// go to $SWETUI_OUT when it is set.

// openGPU opens the GPU, or the emulator when no GPU is asked for.
func openGPU(t *testing.T) *CUDADevice {
	t.Helper()
	dirs := filepath.SplitList(os.Getenv("SWETUI_CUDA_LIBS"))
	if os.Getenv("SWETUI_GPU") != "1" {
		dirs = []string{emulatorLibs(t)}
	}
	return openCUDAAt(t, dirs)
}

// openRealGPU opens the GPU for the benchmarks; they skip on the emulator.
func openRealGPU(t *testing.T) *CUDADevice {
	t.Helper()
	if os.Getenv("SWETUI_GPU") != "1" {
		t.Skip("a benchmark: needs a GPU (SWETUI_GPU=1, make gpu-check)")
	}
	d := openCUDAAt(t, filepath.SplitList(os.Getenv("SWETUI_CUDA_LIBS")))
	if d.info.Emulated {
		t.Skip("a benchmark: the emulator's speed says nothing of a GPU's")
	}
	return d
}

func openCUDAAt(t *testing.T, dirs []string) *CUDADevice {
	t.Helper()
	d, err := OpenCUDA(context.Background(), 0, &Loader{ConfigDirs: dirs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	t.Logf("device: %v, NVRTC %s, libs %s | %s | %s", d.Info(), d.nvrtcV, d.L.drv.path, d.L.nvrtc.path, d.L.cublas.path)
	return d
}

// both is one tensor on the CPU and on the GPU, with the same values.
type both struct{ c, g Tensor }

// kernelHarness makes identical inputs on both devices and compares
// outputs; act is the GPU's activation type (the CPU holds f32 rounded to
// what bf16 keeps, so only the kernels' own error is measured).
type kernelHarness struct {
	t   *testing.T
	cpu *CPU
	gpu *CUDADevice
	act DType
	r   *rand.Rand
	tol float64
	// worst relative error per kernel, for the report
	worst map[string]float64
}

func (h *kernelHarness) mk(dt DType, vals []float32) both {
	h.t.Helper()
	if dt == BF16 { // the CPU gets exactly what the GPU holds
		for i, v := range vals {
			vals[i] = fromBF16(toBF16(v))
		}
	}
	c, err := h.cpu.Alloc(F32, len(vals))
	if err != nil {
		h.t.Fatal(err)
	}
	copy(c.f32(), vals)
	var g Tensor
	err = h.gpu.Do(func() error {
		var err error
		if g, err = h.gpu.Alloc(dt, len(vals)); err != nil {
			return err
		}
		return h.gpu.Upload(g, vals)
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return both{c, g}
}

// a is an activation tensor (the act type on the GPU) of normal values.
func (h *kernelHarness) a(n int, scale float64) both { return h.mk(h.act, h.normal(n, scale)) }

// f is an fp32 tensor of normal values.
func (h *kernelHarness) f(n int, scale float64) both { return h.mk(F32, h.normal(n, scale)) }

func (h *kernelHarness) normal(n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(scale * h.r.NormFloat64())
	}
	return v
}

func (h *kernelHarness) ints(vals []int32) both {
	h.t.Helper()
	c, _ := h.cpu.Alloc(I32, len(vals))
	copy(c.i32(), vals)
	var g Tensor
	err := h.gpu.Do(func() error {
		var err error
		if g, err = h.gpu.Alloc(I32, len(vals)); err != nil {
			return err
		}
		return h.gpu.Upload(g, vals)
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return both{c, g}
}

// run calls k on both devices and compares the outputs.
func (h *kernelHarness) run(name string, k func(d Device, p func(both) Tensor), outs ...both) {
	h.t.Helper()
	k(h.cpu, func(b both) Tensor { return b.c })
	if err := h.gpu.Do(func() error {
		k(h.gpu, func(b both) Tensor { return b.g })
		return nil
	}); err != nil {
		h.t.Errorf("%s: %v", name, err)
		return
	}
	for i, o := range outs {
		want := o.c
		var got []float32
		var err error
		if o.g.DT == I32 {
			gi := make([]int32, o.g.N)
			err = h.gpu.Do(func() error { return h.gpu.Download(gi, o.g) })
			wi := want.i32()
			same := 0
			for j := range gi {
				if gi[j] == wi[j] {
					same++
				}
			}
			if frac := float64(same) / float64(len(gi)); frac < 0.99 {
				h.t.Errorf("%s output %d: %.1f%% of ints agree", name, i, 100*frac)
			}
			continue
		}
		got = make([]float32, o.g.N)
		err = h.gpu.Do(func() error { return h.gpu.Download(got, o.g) })
		if err != nil {
			h.t.Errorf("%s: %v", name, err)
			continue
		}
		d := relErr(got, want.f32())
		if math.IsNaN(d) || d > h.tol {
			h.t.Errorf("%s (%v) output %d: relative error %.2e > %.0e", name, h.act, i, d, h.tol)
		}
		key := fmt.Sprintf("%s/%v", name, h.act)
		h.worst[key] = math.Max(h.worst[key], d)
	}
}

// TestGPUKernelsMatchCPU checks every kernel against the CPU device: fp32
// within 1e-5 relative, bf16 within 2e-2.
func TestGPUKernelsMatchCPU(t *testing.T) {
	gpu := openGPU(t)
	worst := map[string]float64{}
	for _, act := range []DType{F32, BF16} {
		tol := 1e-5
		if act == BF16 {
			tol = 2e-2
		}
		h := &kernelHarness{t: t, cpu: NewCPU(), gpu: gpu, act: act, r: rand.New(rand.NewPCG(1, uint64(act))), tol: tol, worst: worst}
		kernelCases(h)
	}
	report(t, "kernels.json", worst)
}

func kernelCases(h *kernelHarness) {
	const N, D, F, V = 75, 96, 136, 1000
	act := h.act
	// GEMMs: every transpose, act and f32 outputs, accumulate.
	for _, tc := range []struct{ tA, tB bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		m, n, k := 37, 45, 70
		a, b := h.a(m*k, 1), h.a(k*n, 1)
		lda, ldb := k, n
		if tc.tA {
			lda = m
		}
		if tc.tB {
			ldb = k
		}
		c := h.mk(act, make([]float32, m*n))
		cf := h.f(m*n, 1)
		h.run(fmt.Sprintf("gemm tA=%v tB=%v", tc.tA, tc.tB), func(d Device, p func(both) Tensor) {
			d.Gemm(tc.tA, tc.tB, m, n, k, 1, p(a), lda, p(b), ldb, 0, p(c), n)
			d.Gemm(tc.tA, tc.tB, m, n, k, 0.5, p(a), lda, p(b), ldb, 1, p(cf), n)
		}, c, cf)
	}
	tok := make([]int32, N)
	for i := range tok {
		tok[i] = int32(h.r.IntN(V))
	}
	tok[7] = tok[3]
	toks := h.ints(tok)
	table := h.a(V*D, 1)
	x := h.f(N*D, 1)
	h.run("embed", func(d Device, p func(both) Tensor) { d.Embed(p(x), p(table), p(toks), N, D) }, x)
	dtab, dx := h.f(V*D, 0.1), h.f(N*D, 1)
	h.run("embed_bwd", func(d Device, p func(both) Tensor) { d.EmbedBackward(p(dtab), p(dx), p(toks), N, D) }, dtab)
	w, y, rstd := h.f(D, 1), h.mk(act, make([]float32, N*D)), h.f(N, 1)
	h.run("rmsnorm", func(d Device, p func(both) Tensor) { d.RMSNorm(p(y), p(rstd), p(x), p(w), N, D, 1e-6) }, y, rstd)
	dy, dxx, dw := h.a(N*D, 1), h.f(N*D, 1), h.f(D, 1)
	h.run("rmsnorm_bwd", func(d Device, p func(both) Tensor) {
		d.RMSNormBackward(p(dxx), p(dw), p(dy), p(x), p(w), p(rstd), N, D)
	}, dxx, dw)
	yb, bias, db := h.a(N*D, 1), h.f(D, 1), h.f(D, 1)
	h.run("bias", func(d Device, p func(both) Tensor) {
		d.AddBias(p(yb), p(bias), N, D)
		d.BiasBackward(p(db), p(dy), N, D)
	}, yb, db)
	for _, hd := range []int{16, 32, 64, 128} {
		H, KVH, B, T := 4, 2, 2, 77
		ctxLen := 128
		cos, sin := ropeTables(model.Config{HeadDim: hd, Context: ctxLen, RopeTheta: 1e6})
		cb, sb := h.mk(F32, cos), h.mk(F32, sin)
		pos := make([]int32, B*T)
		for i := range pos {
			pos[i] = int32(i % T)
		}
		ps := h.ints(pos)
		q, k, v := h.a(B*T*H*hd, 1), h.a(B*T*KVH*hd, 1), h.a(B*T*KVH*hd, 1)
		h.run(fmt.Sprintf("rope hd=%d", hd), func(d Device, p func(both) Tensor) {
			d.RoPE(p(q), p(cb), p(sb), p(ps), B*T, H*hd, hd, false)
			d.RoPE(p(k), p(cb), p(sb), p(ps), B*T, KVH*hd, hd, false)
		}, q, k)
		s := AttnShape{B: B, T: T, H: H, KVH: KVH, HD: hd, Scale: float32(1 / math.Sqrt(float64(hd)))}
		o, lse := h.mk(act, make([]float32, B*T*H*hd)), h.f(B*T*H, 1)
		h.run(fmt.Sprintf("attention hd=%d", hd), func(d Device, p func(both) Tensor) { d.Attention(p(o), p(lse), p(q), p(k), p(v), s) }, o, lse)
		do := h.a(B*T*H*hd, 1)
		dq, dk, dv, delta := h.a(B*T*H*hd, 1), h.a(B*T*KVH*hd, 1), h.a(B*T*KVH*hd, 1), h.f(B*T*H, 1)
		h.run(fmt.Sprintf("attention_bwd hd=%d", hd), func(d Device, p func(both) Tensor) {
			d.AttentionBackward(p(dq), p(dk), p(dv), p(delta), p(q), p(k), p(v), p(o), p(do), p(lse), s)
		}, dq, dk, dv)
		h.run(fmt.Sprintf("rope_inverse hd=%d", hd), func(d Device, p func(both) Tensor) {
			d.RoPE(p(dq), p(cb), p(sb), p(ps), B*T, H*hd, hd, true)
		}, dq)
		// Decode: 3 rows over a cache of 4 slots.
		cs := CacheShape{Slots: 4, Cap: ctxLen, H: H, KVH: KVH, HD: hd, Scale: s.Scale}
		kc, vc := h.a(4*ctxLen*KVH*hd, 1), h.a(4*ctxLen*KVH*hd, 1)
		R := 3
		slot, at, ln := h.ints([]int32{2, 0, 3}), h.ints([]int32{5, 120, 0}), h.ints([]int32{6, 121, 1})
		qd, kd, vd, od := h.a(R*H*hd, 1), h.a(R*KVH*hd, 1), h.a(R*KVH*hd, 1), h.mk(act, make([]float32, R*H*hd))
		h.run(fmt.Sprintf("kv_write+attention_decode hd=%d", hd), func(d Device, p func(both) Tensor) {
			d.KVWrite(p(kc), p(vc), p(kd), p(vd), p(slot), p(at), R, cs)
			d.AttentionDecode(p(od), p(qd), p(kc), p(vc), p(slot), p(ln), R, cs)
		}, od, kc, vc)
	}
	g, u, sw := h.a(N*F, 2), h.a(N*F, 1), h.mk(act, make([]float32, N*F))
	dsw, dg, du := h.a(N*F, 1), h.mk(act, make([]float32, N*F)), h.mk(act, make([]float32, N*F))
	h.run("swiglu", func(d Device, p func(both) Tensor) {
		d.SwiGLU(p(sw), p(g), p(u), N*F)
		d.SwiGLUBackward(p(dg), p(du), p(dsw), p(g), p(u), N*F)
	}, sw, dg, du)
	xr, yr := h.f(N*D, 1), h.a(N*D, 1)
	h.run("add_into", func(d Device, p func(both) Tensor) { d.AddInto(p(xr), p(yr), N*D) }, xr)
	cf, ca := h.f(N*D, 1), h.mk(act, make([]float32, N*D))
	back := h.f(N*D, 1)
	h.run("cast", func(d Device, p func(both) Tensor) {
		d.Cast(p(ca), p(cf), N*D)
		d.Cast(p(back), p(ca), N*D)
	}, ca, back)
	idx := h.ints([]int32{4, 0, 74, 13, 12})
	gsel, gout := h.mk(act, make([]float32, 5*D)), h.a(N*D, 1)
	h.run("gather_scatter", func(d Device, p func(both) Tensor) {
		d.GatherRows(p(gsel), p(yr), p(idx), 5, D)
		d.ScatterRows(p(gout), p(gsel), p(idx), 5, D)
	}, gsel, gout)
	// Logprobs over a Qwen-sized vocabulary row count, two temperatures.
	const Vb, R = 151936, 6
	z := h.a(R*Vb, 3)
	tg := h.ints([]int32{5, -1, 151935, 77, 0, 12})
	for _, invT := range []float32{1, 1 / 0.7} {
		out, lse := h.f(2*R, 1), h.f(R, 1)
		cot := h.f(2*R, 1)
		dz := h.mk(act, make([]float32, R*Vb))
		h.run(fmt.Sprintf("chosen_logprob 1/T=%.2f", invT), func(d Device, p func(both) Tensor) {
			d.ChosenLogprob(p(out), p(lse), p(z), p(tg), R, Vb, invT)
			d.ChosenLogprobBackward(p(dz), p(z), p(tg), p(cot), p(out), p(lse), R, Vb, invT)
		}, out, lse, dz)
	}
	// Sampling: the same uniforms pick the same tokens (but for rounding at
	// a CDF boundary) and report the same logprobs.
	const RS = 64
	zs := h.a(RS*Vb, 3)
	us := make([]float32, RS)
	for i := range us {
		us[i] = h.r.Float32()
	}
	ub := h.mk(F32, us)
	for _, tc := range []struct{ invT, topP float32 }{{0, 1}, {1, 1}, {1 / 0.9, 0.95}, {1, 0.5}} {
		st, sl := h.ints(make([]int32, RS)), h.f(RS, 1)
		h.run(fmt.Sprintf("sample_tokens 1/T=%.2f top_p=%.2f", tc.invT, tc.topP), func(d Device, p func(both) Tensor) {
			d.SampleTokens(p(st), p(sl), p(zs), p(ub), RS, Vb, tc.invT, tc.topP)
		}, st)
	}
	nw := 100003
	wt, gr, m1, v1 := h.f(nw, 1), h.f(nw, 1), h.f(nw, 0.1), h.mk(F32, slices.Repeat([]float32{0.01}, nw))
	h.run("adamw", func(d Device, p func(both) Tensor) {
		d.AdamW(p(wt), p(gr), p(m1), p(v1), nw, AdamWArgs{B1: 0.9, B2: 0.99, Eps: 1e-8, Decay: 0.999, StepSize: 1e-3, InvBC2: 1.5, GScale: 0.7})
	}, wt, m1, v1)
	parts := h.f(SumSquaresParts, 1)
	h.run("sum_squares", func(d Device, p func(both) Tensor) { d.SumSquares(p(parts), p(gr), nw) }, parts)
}

func report(t *testing.T, name string, v any) {
	dir := os.Getenv("SWETUI_OUT")
	if dir == "" {
		return
	}
	b, _ := json.MarshalIndent(v, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
		t.Error(err)
	}
}

// TestGPUEngineMatchesCPU runs the whole engine on the GPU and on the CPU
// from the same weights: logprobs, gradients and one step (fp32 1e-4;
// bf16 looser, as bf16 activations compound over layers), and greedy
// sampling in fp32.
func TestGPUEngineMatchesCPU(t *testing.T) {
	gpu := openGPU(t)
	ctx := context.Background()
	def := model.ConfigFrom(config.Default().Model)
	for _, act := range []DType{F32, BF16} {
		for _, cfg := range []model.Config{def, qwen2Small()} {
			t.Run(fmt.Sprintf("%v-%dx%d", act, cfg.Layers, cfg.DModel), func(t *testing.T) {
				tol := 1e-4
				if act == BF16 {
					tol = 5e-2
				}
				ref := testModel(t, cfg, 3)
				ec, err := NewEngine(NewCPU(), ref, Options{Train: true})
				if err != nil {
					t.Fatal(err)
				}
				defer ec.Close()
				eg, err := NewEngine(gpu, ref, Options{Train: true, Act: act})
				if err != nil {
					t.Fatal(err)
				}
				defer eg.Close()
				r := rand.New(rand.NewPCG(9, 9))
				b := testBatch(r, cfg.VocabSize, []int{100, 57, 128, 9}, []int{70, 20, 64, 2}, 0.9)
				cot, ent := randCot(r, b, 1), randCot(r, b, 0.3)
				rc, err := ec.BackwardEntropy(ctx, b, cot, ent)
				if err != nil {
					t.Fatal(err)
				}
				rg, err := eg.BackwardEntropy(ctx, b, cot, ent)
				if err != nil {
					t.Fatal(err)
				}
				if d := relErr(flat(rg.Logprobs), flat(rc.Logprobs)); d > tol {
					t.Errorf("logprobs: relative error %.2e", d)
				}
				gc, gg := make([]float32, ref.NumParams()), make([]float32, ref.NumParams())
				if err := ec.Grads(gc); err != nil {
					t.Fatal(err)
				}
				if err := eg.Grads(gg); err != nil {
					t.Fatal(err)
				}
				off := 0
				for _, p := range ref.Params {
					n := len(p.W)
					if d := relErr(gg[off:off+n], gc[off:off+n]); d > tol*10 {
						t.Errorf("gradient of %s: relative error %.2e", p.Name, d)
					}
					off += n
				}
				oc := config.Default().Optim
				oa, ob := model.NewAdamW(oc, ref.NumParams()), model.NewAdamW(oc, ref.NumParams())
				nc, err := ec.Step(oa, 1e-3, 1)
				if err != nil {
					t.Fatal(err)
				}
				ng, err := eg.Step(ob, 1e-3, 1)
				if err != nil {
					t.Fatal(err)
				}
				if math.Abs(nc-ng) > tol*10*nc {
					t.Errorf("grad norm %g on the GPU, %g on the CPU", ng, nc)
				}
				if act == F32 {
					prompt := b.Tokens[0][:30]
					sc, err := ec.Sample(ctx, prompt, 3, model.SampleOptions{MaxNewTokens: 24})
					if err != nil {
						t.Fatal(err)
					}
					sg, err := eg.Sample(ctx, prompt, 3, model.SampleOptions{MaxNewTokens: 24})
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(sc[2].Tokens, sg[2].Tokens) {
						t.Errorf("greedy tokens: GPU %v, CPU %v", sg[2].Tokens, sc[2].Tokens)
					}
				}
			})
		}
	}
}

// qwen05B is Qwen2.5-Coder-0.5B's shape (untied head, as our model keeps
// one), with a 4096-token context.
func qwen05B() model.Config {
	return model.Config{Layers: 24, DModel: 896, Heads: 14, KVHeads: 2, HeadDim: 64, DFF: 4864, Context: 4096,
		VocabSize: 151936, RopeTheta: 1e6, NormEps: 1e-6, AttnBias: true}
}

// qwen15B is Qwen2.5-Coder-1.5B's shape, likewise.
func qwen15B() model.Config {
	return model.Config{Layers: 28, DModel: 1536, Heads: 12, KVHeads: 2, HeadDim: 128, DFF: 8960, Context: 4096,
		VocabSize: 151936, RopeTheta: 1e6, NormEps: 1e-6, AttnBias: true}
}

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestGPUBenchGRPO times what a GRPO step does on the device, for the
// default model and for Qwen2.5-Coder-0.5B's shape with random weights:
// G completions of a P-token prompt decoded together (C new tokens each,
// no stop token), then Backward of an advantage cotangent over the G
// sequences and a clipped AdamW step, in bf16. It writes tokens/s and
// peak device memory to $SWETUI_OUT/bench.json.
func TestGPUBenchGRPO(t *testing.T) {
	gpu := openRealGPU(t)
	ctx := context.Background()
	G, P, C := envInt("SWETUI_BENCH_G", 8), envInt("SWETUI_BENCH_PROMPT", 512), envInt("SWETUI_BENCH_NEW", 256)
	type result struct {
		Model                  string
		Params                 int
		G, Prompt, New         int
		SampleTokensPerS       float64
		TrainTokensPerS        float64
		TrainStepS, SampleS    float64
		DeviceUsedBytes        uint64
		BehaviourVsTrainMaxAbs float64
		GradNorm               float64
	}
	var results []result
	def := model.ConfigFrom(config.Default().Model)
	for _, tc := range []struct {
		name string
		cfg  model.Config
	}{{"default", def}, {"qwen2.5-coder-0.5b-shape", qwen05B()}} {
		if P+C > tc.cfg.Context {
			t.Logf("%s: prompt+new %d exceeds context %d; skipped", tc.name, P+C, tc.cfg.Context)
			continue
		}
		start := time.Now()
		m, err := model.New(tc.cfg, 1)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d parameters, host init %v", tc.name, m.NumParams(), time.Since(start))
		oc := config.Default().Optim
		sched, _ := model.NewSchedule(oc, 100)
		free0 := gpu.Info().FreeBytes
		pol, err := NewPolicy(gpu, m, Options{Act: BF16}, model.NewAdamW(oc, m.NumParams()), sched, oc.GradClip, nil, 1)
		if err != nil {
			t.Fatal(err)
		}
		pol.Temp = 0.9
		r := rand.New(rand.NewPCG(1, 2))
		prompt := make([]int, P)
		for i := range prompt {
			prompt[i] = r.IntN(tc.cfg.VocabSize)
		}
		so := model.SampleOptions{Temperature: 0.9, TopP: 1, MaxNewTokens: C}
		if _, err := pol.Sample(ctx, prompt, G, model.SampleOptions{Temperature: 0.9, MaxNewTokens: 4}); err != nil {
			t.Fatal(err) // warm-up: compile, plans
		}
		t0 := time.Now()
		group, err := pol.Sample(ctx, prompt, G, so)
		if err != nil {
			t.Fatal(err)
		}
		sampleS := time.Since(t0).Seconds()
		b := model.Batch{}
		var cot [][]float32
		newTok := 0
		for i, c := range group {
			b.Tokens = append(b.Tokens, append(slices.Clone(prompt), c.Tokens...))
			b.PromptLen = append(b.PromptLen, P)
			row := make([]float32, len(c.Tokens))
			for j := range row {
				row[j] = float32(i%2*2-1) / float32(len(c.Tokens))
			}
			cot = append(cot, row)
			newTok += len(c.Tokens)
		}
		old, err := pol.Logprobs(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		var maxAbs float64
		for i, c := range group {
			for j, lp := range c.Logprobs {
				maxAbs = math.Max(maxAbs, math.Abs(float64(lp-old[i][j])))
			}
		}
		// Warm-up step, then the timed one.
		if _, _, err := pol.Backward(ctx, b, cot); err != nil {
			t.Fatal(err)
		}
		pol.Step()
		t1 := time.Now()
		if _, _, err := pol.Backward(ctx, b, cot); err != nil {
			t.Fatal(err)
		}
		norm, _ := pol.Step()
		trainS := time.Since(t1).Seconds()
		used := free0 - gpu.Info().FreeBytes
		res := result{Model: tc.name, Params: m.NumParams(), G: G, Prompt: P, New: C,
			SampleTokensPerS: float64(newTok) / sampleS, TrainTokensPerS: float64(G*(P+C)) / trainS,
			TrainStepS: trainS, SampleS: sampleS, DeviceUsedBytes: used, BehaviourVsTrainMaxAbs: maxAbs, GradNorm: norm}
		t.Logf("%+v", res)
		results = append(results, res)
		if maxAbs > 0.1 {
			t.Errorf("%s: behaviour logprobs differ from the training forward by up to %g (bf16)", tc.name, maxAbs)
		}
		pol.Close()
	}
	report(t, "bench.json", results)
}

// stageResult is one stage of one model in TestGPUBenchStages.
type stageResult struct {
	Model, Stage string
	Params       int
	Tokens       int     // tokens the timed work covered
	Seconds      float64 // its wall time
	TokensPerS   float64
	UsedBytes    uint64 // device memory held after the stage (the engine frees nothing it cached)
	PlanBytes    int64  // the memory plan's total for the stage's run
}

// TestGPUBenchStages times each stage a GPU user runs, per model (the
// default, Qwen2.5-Coder-0.5B's and 1.5B's shapes; SWETUI_BENCH_MODELS
// picks some by name): a warm start step (every weight trains, 4 sequences
// of P+C tokens), eval (G completions of C tokens sampled from that
// policy), and a LoRA GRPO step (rank 16 on every projection: G
// completions, the frozen base's logprobs as the reference, backward and
// AdamW on the adapters), with the device memory each holds beside the
// memory plan's count for it. torch_bench.py --stages does the same work
// in PyTorch.
func TestGPUBenchStages(t *testing.T) {
	gpu := openRealGPU(t)
	G, P, C := envInt("SWETUI_BENCH_G", 8), envInt("SWETUI_BENCH_PROMPT", 512), envInt("SWETUI_BENCH_NEW", 256)
	pick := os.Getenv("SWETUI_BENCH_MODELS")
	var cases []benchModel
	for _, tc := range []benchModel{{"default", model.ConfigFrom(config.Default().Model)}, {"qwen2.5-coder-0.5b-shape", qwen05B()},
		{"qwen2.5-coder-1.5b-shape", qwen15B()}} {
		if pick == "" || slices.Contains(strings.Split(pick, ","), tc.name) {
			cases = append(cases, tc)
		}
	}
	held := func() uint64 { return gpu.Info().TotalBytes - gpu.Info().FreeBytes }
	results := benchStages(t, gpu, BF16, held, cases, G, P, C)
	for _, r := range results {
		// The plan is an upper bound the run comes near: a plan far below
		// what the device holds would let a run through that then fails.
		// (The CUDA context, cuBLAS's workspace and the kernels' modules
		// are the device's own, about 256 MiB.)
		if r.UsedBytes > uint64(r.PlanBytes)+(256<<20) {
			t.Errorf("%s %s: the device holds %d MiB, the plan counted %d MiB", r.Model, r.Stage, r.UsedBytes>>20, r.PlanBytes>>20)
		}
	}
}

// TestBenchStagesOnTheCPUDevice runs the device check's stage bench on the
// CPU implementation of the kernels with a small model, so that the GPU
// machine runs code that has run: every stage, and the plan's bound on
// what each holds, counted exactly here.
func TestBenchStagesOnTheCPUDevice(t *testing.T) {
	dev := &countingDevice{Device: NewCPU()}
	held := func() uint64 {
		dev.mu.Lock()
		defer dev.mu.Unlock()
		return uint64(dev.now)
	}
	results := benchStages(t, dev, F32, held, []benchModel{{"qwen2-small", qwen2Small()}}, 4, 40, 24)
	if len(results) != 3 {
		t.Fatalf("%d stage results, want 3", len(results))
	}
	for _, r := range results {
		if r.TokensPerS <= 0 || r.UsedBytes == 0 || r.UsedBytes > uint64(r.PlanBytes) {
			t.Errorf("%s: %+v: want tokens, held bytes within the plan", r.Stage, r)
		}
		// Training stages reach their plan (the warm start's counts the KV
		// cache eval fills next); eval's prefill evicts the training plan.
		if r.Stage != "eval sampling" && float64(r.UsedBytes) < 0.9*float64(r.PlanBytes) {
			t.Errorf("%s: holds %d bytes, the plan counted %d: the bound is loose", r.Stage, r.UsedBytes, r.PlanBytes)
		}
	}
}

// benchModel is a model the stage bench runs.
type benchModel struct {
	name string
	cfg  model.Config
}

// benchStages runs TestGPUBenchStages' stages on dev with activations act;
// held is the memory dev holds now.
func benchStages(t *testing.T, dev Device, act DType, held func() uint64, cases []benchModel, G, P, C int) []stageResult {
	ctx := context.Background()
	var results []stageResult
	for _, tc := range cases {
		if P+C > tc.cfg.Context {
			t.Logf("%s: prompt+new %d exceeds context %d; skipped", tc.name, P+C, tc.cfg.Context)
			continue
		}
		start := time.Now()
		m, err := model.New(tc.cfg, 1)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d parameters, host init %v", tc.name, m.NumParams(), time.Since(start))
		r := rand.New(rand.NewPCG(1, 2))
		seq := func(n int) []int {
			s := make([]int, n)
			for i := range s {
				s[i] = r.IntN(tc.cfg.VocabSize)
			}
			return s
		}
		oc := config.Default().Optim
		sched, _ := model.NewSchedule(oc, 100)
		// One micro-batch holds the whole batch: the plan's bound is then
		// what the stage reaches.
		micro := max(4, G) * (P + C)
		add := func(stage string, tokens int, secs float64, held0 uint64, plan MemoryPlan) {
			res := stageResult{Model: tc.name, Stage: stage, Params: m.NumParams(), Tokens: tokens, Seconds: secs,
				TokensPerS: float64(tokens) / secs, UsedBytes: held() - held0, PlanBytes: plan.Total}
			t.Logf("%+v", res)
			results = append(results, res)
			report(t, "stages.json", results)
		}

		// Warm start and eval: every weight trains, no reference.
		free0 := held()
		plan := Plan(Workload{Cfg: m.Cfg, Act: act, Completions: G, MicroTokens: micro})
		pol, err := NewPolicy(dev, m, Options{Act: act, MicroTokens: micro}, model.NewAdamW(oc, m.NumParams()), sched, oc.GradClip, nil, 1)
		if err != nil {
			t.Fatal(err)
		}
		b := model.Batch{Temperature: 1}
		var cot [][]float32
		for i := 0; i < 4; i++ {
			b.Tokens, b.PromptLen = append(b.Tokens, seq(P+C)), append(b.PromptLen, P)
			row := make([]float32, C)
			for j := range row {
				row[j] = 1 / float32(4*C) // the mean NLL's gradient
			}
			cot = append(cot, row)
		}
		for i := 0; i < 2; i++ { // warm-up, then timed
			t0 := time.Now()
			if _, _, err := pol.Backward(ctx, b, cot); err != nil {
				t.Fatal(err)
			}
			pol.Step()
			if i == 1 {
				add("warm start step", 4*(P+C), time.Since(t0).Seconds(), free0, plan)
			}
		}
		prompt := seq(P)
		if _, err := pol.Sample(ctx, prompt, G, model.SampleOptions{Temperature: 0.9, MaxNewTokens: 4}); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		group, err := pol.Sample(ctx, prompt, G, model.SampleOptions{Temperature: 0.9, TopP: 1, MaxNewTokens: C})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, c := range group {
			n += len(c.Tokens)
		}
		add("eval sampling", n, time.Since(t0).Seconds(), free0, plan)
		pol.Close()

		// LoRA GRPO: the adapters train, the base is the reference.
		free0 = held()
		l, err := model.NewLoRA(m, model.LoRAConfig{Rank: 16, Alpha: 32, Targets: model.LoRATargets}, 1)
		if err != nil {
			t.Fatal(err)
		}
		plan = Plan(Workload{Cfg: m.Cfg, Act: act, LoRA: &l.Cfg, Reference: true, Completions: G, MicroTokens: micro})
		lp, err := NewPolicy(dev, m, Options{Act: act, LoRA: l, MicroTokens: micro}, model.NewAdamW(oc, l.NumParams()), sched, oc.GradClip, nil, 1)
		if err != nil {
			t.Fatal(err)
		}
		ref := BaseReference(lp, 0.9)
		for i := 0; i < 2; i++ {
			t0 := time.Now()
			group, err := lp.Sample(ctx, prompt, G, model.SampleOptions{Temperature: 0.9, TopP: 1, MaxNewTokens: C})
			if err != nil {
				t.Fatal(err)
			}
			gb := model.Batch{Temperature: 0.9}
			var gcot [][]float32
			tokens := 0
			for k, c := range group {
				gb.Tokens, gb.PromptLen = append(gb.Tokens, append(slices.Clone(prompt), c.Tokens...)), append(gb.PromptLen, P)
				row := make([]float32, len(c.Tokens))
				for j := range row {
					row[j] = float32(k%2*2-1) / float32(len(c.Tokens))
				}
				gcot = append(gcot, row)
				tokens += P + len(c.Tokens)
			}
			if _, err := ref.Logprobs(ctx, gb); err != nil {
				t.Fatal(err)
			}
			if _, _, err := lp.Backward(ctx, gb, gcot); err != nil {
				t.Fatal(err)
			}
			lp.Step()
			if i == 1 {
				add("LoRA GRPO step (sample, reference, train)", tokens, time.Since(t0).Seconds(), free0, plan)
			}
		}
		lp.Close()
	}
	return results
}
