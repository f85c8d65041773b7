package cuda

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/model"
)

// TestParamCounts checks the plan's weight counts against the published
// sizes of two pretrained models (their config.json shapes) and PEFT's
// count of rank-16 adapters on every projection, and against model.New.
func TestParamCounts(t *testing.T) {
	qwen05 := model.Config{Layers: 24, DModel: 896, Heads: 14, KVHeads: 2, HeadDim: 64, DFF: 4864,
		Context: 32768, VocabSize: 151936, AttnBias: true}
	qwen15 := model.Config{Layers: 28, DModel: 1536, Heads: 12, KVHeads: 2, HeadDim: 128, DFF: 8960,
		Context: 32768, VocabSize: 151936, AttnBias: true}
	lora16 := model.LoRAConfig{Rank: 16, Alpha: 32, Targets: model.LoRATargets}
	for _, tc := range []struct {
		name       string
		cfg        model.Config
		tied, lora int // Hugging Face's count (tied embeddings), PEFT's trainable count
	}{
		// Qwen2.5-0.5B: 494,032,768 parameters; PEFT r=16 all-linear: 8,798,208.
		{"qwen2.5-0.5b", qwen05, 494_032_768, 8_798_208},
		// Qwen2.5-1.5B: 1,543,714,304 parameters.
		{"qwen2.5-1.5b", qwen15, 1_543_714_304, 18_464_768},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// We train the LM head untied: one more vocab × d_model matrix.
			if got, want := ParamCount(tc.cfg), tc.tied+tc.cfg.VocabSize*tc.cfg.DModel; got != want {
				t.Errorf("ParamCount = %d, want %d", got, want)
			}
			if got := LoRAParamCount(tc.cfg, lora16); got != tc.lora {
				t.Errorf("LoRAParamCount = %d, want %d", got, tc.lora)
			}
		})
	}
	for _, cfg := range []model.Config{qwen2Small(), model.ConfigFrom(config.Default().Model)} {
		m, err := model.New(cfg, 1)
		if err != nil {
			t.Fatal(err)
		}
		if got := ParamCount(m.Cfg); got != m.NumParams() {
			t.Errorf("ParamCount = %d, model.New lays out %d", got, m.NumParams())
		}
		l, err := model.NewLoRA(m, model.LoRAConfig{Rank: 3, Alpha: 1, Targets: []string{"k_proj", "down_proj"}}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if got := LoRAParamCount(m.Cfg, l.Cfg); got != l.NumParams() {
			t.Errorf("LoRAParamCount = %d, model.NewLoRA lays out %d", got, l.NumParams())
		}
	}
}

// countingDevice records the bytes a device holds and their peak.
type countingDevice struct {
	Device
	mu        sync.Mutex
	now, peak int64
}

func (d *countingDevice) Alloc(dt DType, n int) (Tensor, error) {
	t, err := d.Device.Alloc(dt, n)
	if err == nil {
		d.mu.Lock()
		d.now += int64(t.Bytes())
		d.peak = max(d.peak, d.now)
		d.mu.Unlock()
	}
	return t, err
}

func (d *countingDevice) Free(t Tensor) {
	d.mu.Lock()
	d.now -= int64(t.Bytes())
	d.mu.Unlock()
	d.Device.Free(t)
}

// TestMemoryPlanMatchesAllocations runs a GRPO step's device work (G
// completions sampled to the full context, their logprobs under the
// reference, a backward over a full micro-batch, an AdamW step, async
// snapshots) on a device that counts its allocations, and checks the
// peak against the plan counted before anything was allocated.
func TestMemoryPlanMatchesAllocations(t *testing.T) {
	for _, tc := range []struct {
		name      string
		lora      bool
		snapshots bool
		act       DType
		recompute bool
	}{{"full", false, false, F32, false}, {"lora", true, false, F32, false}, {"lora-async", true, true, F32, false},
		{"full-async", false, true, F32, false}, {"lora-bf16", true, false, BF16, false}, {"full-bf16", false, false, BF16, false},
		{"full-recompute", false, false, F32, true}, {"lora-bf16-recompute", true, false, BF16, true},
		{"lora-bf16-recompute-async", true, true, BF16, true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			cfg := qwen2Small() // context 128
			const G, micro = 5, 256
			base := testModel(t, cfg, 3)
			w := Workload{Cfg: base.Cfg, Act: tc.act, Reference: true, Completions: G, MicroTokens: micro, Recompute: tc.recompute}
			var l *model.LoRA
			if tc.lora {
				var err error
				if l, err = model.NewLoRA(base, model.LoRAConfig{Rank: 4, Alpha: 8, Targets: model.LoRATargets}, 1); err != nil {
					t.Fatal(err)
				}
				w.LoRA = &l.Cfg
			}
			if tc.snapshots {
				// The first copy, and after the step a second one (the first
				// becomes the spare), both sampled from; a run holds up to 3.
				w.Snapshots = 2
			}
			plan := Plan(w)
			dev := &countingDevice{Device: NewCPU()}
			oc := config.Default().Optim
			sched, _ := model.NewSchedule(oc, 10)
			n := base.NumParams()
			if l != nil {
				n = l.NumParams()
			}
			e, err := NewEngine(dev, base.Clone(), Options{Act: tc.act, Train: true, LoRA: l, MicroTokens: micro, Recompute: tc.recompute})
			if err != nil {
				t.Fatal(err)
			}
			p := &Policy{Engine: e, Optim: model.NewAdamW(oc, n), Schedule: sched, LoRA: l, pcg: rand.NewPCG(1, 1)}
			p.rng = rand.New(p.pcg)
			defer p.Close()
			ref := BaseReference(p, 1)
			if !tc.lora {
				if ref, err = NewReference(dev, base, Options{Act: tc.act, MicroTokens: micro}, 1); err != nil {
					t.Fatal(err)
				}
				defer ref.Engine.Close()
			}
			// A prompt whose prefill takes the largest bucket, and completions
			// to the end of the context.
			prompt := make([]int, 70)
			for i := range prompt {
				prompt[i] = (7 * i) % cfg.VocabSize
			}
			o := model.SampleOptions{Temperature: 1, TopP: 1, MaxNewTokens: cfg.Context - len(prompt)}
			sampler := func() ([]model.Completion, error) { return p.Sample(ctx, prompt, G, o) }
			if tc.snapshots {
				p.StartSnapshots()
				sampler = func() ([]model.Completion, error) {
					c, _, err := p.SampleSnapshot(ctx, prompt, G, o)
					return c, err
				}
			}
			comps, err := sampler()
			if err != nil {
				t.Fatal(err)
			}
			// Two sequences padded to the context: one micro-batch of 256 tokens.
			b := model.Batch{Temperature: 1}
			r := rand.New(rand.NewPCG(2, 2))
			for i := 0; i < 2; i++ {
				seq := append([]int(nil), prompt...)
				for len(seq) < 110+i {
					seq = append(seq, r.IntN(cfg.VocabSize))
				}
				b.Tokens, b.PromptLen = append(b.Tokens, seq), append(b.PromptLen, len(prompt))
			}
			if _, err := ref.Logprobs(ctx, b); err != nil {
				t.Fatal(err)
			}
			if _, _, err := p.Backward(ctx, b, randCot(r, b, 1)); err != nil {
				t.Fatal(err)
			}
			p.Step()
			if _, err := sampler(); err != nil {
				t.Fatal(err)
			}
			if len(comps) != G {
				t.Fatalf("%d completions", len(comps))
			}
			// The plan is an upper bound that the work reaches: all but the
			// grad-norm's partial sums (SumSquaresParts floats, freed at once).
			if dev.peak > plan.Total+4*SumSquaresParts {
				t.Errorf("peak %d bytes exceeds the plan's %d:\n%s", dev.peak, plan.Total, plan)
			}
			if slack := plan.Total - dev.peak; slack > plan.Total/50 {
				t.Errorf("the plan's %d bytes overstate the peak %d by %d:\n%s", plan.Total, dev.peak, slack, plan)
			}
		})
	}
}

// TestMemoryPlanRefusesWithRemedies: a 1.5B-shaped model with G = 16 at an
// 8k context does not fit 48 GiB when every weight trains; the refusal
// names the plan, the free memory and the settings that would fit.
func TestMemoryPlanRefusesWithRemedies(t *testing.T) {
	cfg := model.Config{Layers: 28, DModel: 1536, Heads: 12, KVHeads: 2, HeadDim: 128, DFF: 8960,
		Context: 8192, VocabSize: 151936, AttnBias: true}
	w := Workload{Cfg: cfg, Act: BF16, Reference: true, Completions: 16, MicroTokens: 16384}
	const free = 48 << 30
	_, err := Check(w, free, "cuda:0 test")
	var fe *FitError
	if !errors.As(err, &fe) {
		t.Fatalf("Check = %v, want a FitError", err)
	}
	msg := err.Error()
	for _, want := range []string{"the run needs", "48.00 GiB free", "AdamW moments", "KV cache (16 completions × 8192 positions)", "lora.rank=16"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal lacks %q:\n%s", want, msg)
		}
	}
	for _, r := range fe.Remedies {
		if r.Plan.Total > free {
			t.Errorf("remedy %s needs %s, more than free", r.Setting, GiB(r.Plan.Total))
		}
	}
	// With LoRA it fits, and the reference costs nothing.
	w.LoRA = &model.LoRAConfig{Rank: 16, Alpha: 32, Targets: model.LoRATargets}
	p, err := Check(w, free, "cuda:0 test")
	if err != nil {
		t.Fatalf("LoRA plan refused: %v", err)
	}
	for _, it := range p.Items {
		if strings.HasPrefix(it.Name, "KL reference") && it.Bytes != 0 {
			t.Errorf("LoRA reference costs %d bytes, want shared", it.Bytes)
		}
	}
	if _, err := Check(w, 0, "cpu"); err != nil {
		t.Errorf("unknown free memory must not refuse: %v", err)
	}
}

// TestInferencePlan: eval's engine holds the weights, one forward
// micro-batch and the KV cache, no training state; the sampler it opens
// allocates within that plan.
func TestInferencePlan(t *testing.T) {
	cfg := qwen2Small()
	base := testModel(t, cfg, 5)
	w := Workload{Cfg: base.Cfg, Act: F32, Completions: 4, MicroTokens: 256, Inference: true}
	p := Plan(w)
	for _, it := range p.Items {
		if strings.Contains(it.Name, "gradients") || strings.Contains(it.Name, "AdamW") || strings.Contains(it.Name, "reference") {
			t.Errorf("inference plan counts %q", it.Name)
		}
	}
	w.Inference = false
	if train := Plan(w); p.Total >= train.Total {
		t.Errorf("inference plan %d bytes, training %d", p.Total, train.Total)
	}
	dev := &countingDevice{Device: NewCPU()}
	s, err := NewSampler(dev, base, Options{Act: F32, MicroTokens: 256}, 1, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	prompt := make([]int, 70)
	for i := range prompt {
		prompt[i] = i % cfg.VocabSize
	}
	if _, err := s.Sample(context.Background(), prompt, 4, model.SampleOptions{Temperature: 1, MaxNewTokens: cfg.Context - len(prompt)}); err != nil {
		t.Fatal(err)
	}
	if dev.peak > p.Total || dev.peak < p.Total*9/10 {
		t.Errorf("the sampler peaked at %d bytes, the plan counted %d", dev.peak, p.Total)
	}
}

// TestAutoRecompute: model.recompute=auto recomputes only where the plan
// does not fit without and recomputing holds less.
func TestAutoRecompute(t *testing.T) {
	c := qwen2Small()
	w := Workload{Cfg: c, Act: F32, Completions: 4, MicroTokens: 4096}
	one := w
	one.Cfg.Layers = 1
	kept, again := Plan(w).Total, Plan(func() Workload { v := w; v.Recompute = true; return v }()).Total
	if again >= kept {
		t.Fatalf("recomputing holds %d bytes, keeping %d", again, kept)
	}
	infer := w
	infer.Inference = true
	for _, tt := range []struct {
		name string
		w    Workload
		free int64
		want bool
	}{
		{"fits as it is", w, kept, false},
		{"fits only recomputed", w, (kept + again) / 2, true},
		{"fits neither way: recomputing still helps", w, again / 2, true},
		{"free unknown", w, 0, false},
		{"one layer keeps what it would recompute", one, 1, false},
		{"sampling only", infer, 1, false},
	} {
		if got := AutoRecompute(tt.w, tt.free).Recompute; got != tt.want {
			t.Errorf("%s: recompute %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestZeRO1ShardsTheMoments: on N GPUs with the optimizer sharded, one
// GPU's plan keeps ceil(n/N) weights' moments, NCCL's allowance, and
// everything else a single device holds; unsharded, the whole moments.
func TestZeRO1ShardsTheMoments(t *testing.T) {
	c, _ := Shape("qwen2.5-coder-1.5b")
	c.Context = 4096
	np := ParamCount(c)
	lora := &model.LoRAConfig{Rank: 16, Alpha: 32, Targets: model.LoRATargets}
	nl := LoRAParamCount(c, *lora)
	item := func(p MemoryPlan, prefix string) int64 {
		for _, it := range p.Items {
			if strings.HasPrefix(it.Name, prefix) {
				return it.Bytes
			}
		}
		t.Fatalf("no %q line in\n%s", prefix, p)
		return 0
	}
	for _, tc := range []struct {
		name  string
		lora  *model.LoRAConfig
		line  string
		n     int
		gpus  int
		shard bool
		fewer int64 // moments' bytes fewer than on one device
	}{
		{"full, 2 GPUs", nil, "AdamW moments", np, 2, true, int64(8 * (np - (np+1)/2))},
		{"full, 3 GPUs", nil, "AdamW moments", np, 3, true, int64(8 * (np - (np+2)/3))},
		{"full, 2 GPUs unsharded", nil, "AdamW moments", np, 2, false, 0},
		{"LoRA, 8 GPUs", lora, "LoRA adapters", nl, 8, true, int64(8 * (nl - (nl+7)/8))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			one := Workload{Cfg: c, Act: BF16, LoRA: tc.lora, Completions: 8, Reference: true}
			many := one
			many.GPUs, many.ShardOptimizer = tc.gpus, tc.shard
			p1, pn := Plan(one), Plan(many)
			if got := item(p1, tc.line) - item(pn, tc.line); got != tc.fewer {
				t.Errorf("%s: %d bytes fewer on one of %d GPUs, want %d", tc.line, got, tc.gpus, tc.fewer)
			}
			if got := pn.Total - p1.Total; got != ncclBufferBytes-tc.fewer {
				t.Errorf("total moved by %d, want NCCL's %d less the moments' %d:\n%s\n%s", got, ncclBufferBytes, tc.fewer, p1, pn)
			}
		})
	}
	if tc := (Workload{Cfg: c, Act: BF16, GPUs: 2, ShardOptimizer: true}); item(Plan(tc), "AdamW moments")*2 != int64(8*np) {
		t.Errorf("2 GPUs do not halve the moments of %d (even) weights", np)
	}
}

// TestSizeFits: every known shape, smallest first, LoRA under full
// fine-tuning, and the shape's own plan where the workload is that shape.
func TestSizeFits(t *testing.T) {
	c, _ := Shape("qwen2.5-coder-7b")
	c.Context = 8192
	w := Workload{Cfg: c, Act: BF16, Completions: 8, Reference: true, GPUs: 8, ShardOptimizer: true}
	fits := SizeFits(w, 80<<30, false)
	if len(fits) != len(Shapes) {
		t.Fatalf("%d sizes for %d shapes", len(fits), len(Shapes))
	}
	for i, f := range fits {
		if i > 0 && f.Params < fits[i-1].Params {
			t.Errorf("%s before %s: not smallest first", fits[i-1].Shape, f.Shape)
		}
		if f.LoRA >= f.Full {
			t.Errorf("%s: LoRA %d bytes, full %d", f.Shape, f.LoRA, f.Full)
		}
		if f.Shape == "qwen2.5-coder-7b" && f.Full != Plan(w).Total {
			t.Errorf("7B full fine-tuning: %d in the table, %d planned", f.Full, Plan(w).Total)
		}
	}
}

// A job beside the run on the same GPU (the verifier's refresh) is
// counted whole, on its own line.
func TestPlanCountsTheJobBeside(t *testing.T) {
	run := Workload{Cfg: qwen2Small(), Act: BF16, Completions: 4, MicroTokens: 256}
	beside := Workload{Cfg: qwen2Small(), Act: BF16, MicroTokens: 128}
	alone := Plan(run)
	run.Beside, run.BesideWhat = &beside, "the verifier's refresh"
	both := Plan(run)
	if both.Total != alone.Total+Plan(beside).Total {
		t.Errorf("with the job beside %d bytes, want %d + %d", both.Total, alone.Total, Plan(beside).Total)
	}
	last := both.Items[len(both.Items)-1]
	if last.Name != "the verifier's refresh" || int64(last.Bytes) != Plan(beside).Total {
		t.Errorf("its line: %+v", last)
	}
}
