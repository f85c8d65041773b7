package cuda

import (
	"slices"
	"strconv"
	"strings"

	"github.com/swetui/swetui/model"
)

// Shapes are the architectures `swetui plan` knows by name, as their
// config.json declares them, for a plan without the model's folder.
var Shapes = map[string]model.Config{
	"qwen2.5-coder-0.5b": {Layers: 24, DModel: 896, Heads: 14, KVHeads: 2, HeadDim: 64, DFF: 4864, Context: 32768,
		VocabSize: 151936, RopeTheta: 1e6, NormEps: 1e-6, AttnBias: true},
	"qwen2.5-coder-1.5b": {Layers: 28, DModel: 1536, Heads: 12, KVHeads: 2, HeadDim: 128, DFF: 8960, Context: 32768,
		VocabSize: 151936, RopeTheta: 1e6, NormEps: 1e-6, AttnBias: true},
	"qwen2.5-coder-3b": {Layers: 36, DModel: 2048, Heads: 16, KVHeads: 2, HeadDim: 128, DFF: 11008, Context: 32768,
		VocabSize: 151936, RopeTheta: 1e6, NormEps: 1e-6, AttnBias: true},
	"qwen2.5-coder-7b": {Layers: 28, DModel: 3584, Heads: 28, KVHeads: 4, HeadDim: 128, DFF: 18944, Context: 32768,
		VocabSize: 152064, RopeTheta: 1e6, NormEps: 1e-6, AttnBias: true},
	"qwen2.5-coder-14b": {Layers: 48, DModel: 5120, Heads: 40, KVHeads: 8, HeadDim: 128, DFF: 13824, Context: 32768,
		VocabSize: 152064, RopeTheta: 1e6, NormEps: 1e-6, AttnBias: true},
	"qwen2.5-coder-32b": {Layers: 64, DModel: 5120, Heads: 40, KVHeads: 8, HeadDim: 128, DFF: 27648, Context: 32768,
		VocabSize: 152064, RopeTheta: 1e6, NormEps: 1e-6, AttnBias: true},
	"llama-3-8b": {Layers: 32, DModel: 4096, Heads: 32, KVHeads: 8, HeadDim: 128, DFF: 14336, Context: 8192,
		VocabSize: 128256, RopeTheta: 5e5, NormEps: 1e-5},
}

// ShapeNames lists Shapes' names, sorted.
func ShapeNames() []string {
	var out []string
	for n := range Shapes {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Shape is the architecture named name, in any case.
func Shape(name string) (model.Config, bool) {
	c, ok := Shapes[strings.ToLower(name)]
	return c, ok
}

// Fit is the first combination of settings that brings w within free
// bytes, preferring those that change the run least: the largest
// micro-batch that fits (only slower), then with synchronous sampling, then
// with LoRA (rank 16), then fewer completions per group. It returns the
// settings and the plan; ok is false when even all of them do not fit.
func Fit(w Workload, free int64) (settings []string, p MemoryPlan, ok bool) {
	if p = Plan(w); p.Total <= free {
		return nil, p, true
	}
	type choice struct {
		recompute, sync, lora bool
	}
	// Recomputing changes no number of the training, only its time: it
	// comes before everything that does.
	choices := []choice{{}}
	if w.Snapshots > 0 {
		choices = append(choices, choice{sync: true})
	}
	if w.LoRA == nil {
		choices = append(choices, choice{lora: true})
		if w.Snapshots > 0 {
			choices = append(choices, choice{sync: true, lora: true})
		}
	}
	if !w.Recompute && !w.Inference {
		for i, n := 0, len(choices); i < n; i++ {
			c := choices[i]
			c.recompute = true
			choices = append(choices, c)
		}
		// Each choice, then the same with recomputing, in that order.
		ordered := make([]choice, 0, len(choices))
		for i := 0; i < len(choices)/2; i++ {
			ordered = append(ordered, choices[i], choices[i+len(choices)/2])
		}
		choices = ordered
	}
	for g := w.Completions; ; g /= 2 {
		for _, c := range choices {
			v := w
			v.Completions = g
			var set []string
			if c.recompute {
				v.Recompute = true
				set = append(set, RecomputeSetting)
			}
			if c.sync {
				v.Snapshots = 0
				set = append(set, "grpo.async.enabled=false")
			}
			if c.lora {
				v.LoRA = &model.LoRAConfig{Rank: 16, Alpha: 32, Targets: model.LoRATargets}
				set = append(set, "lora.rank=16")
			}
			if g != w.Completions {
				set = append(set, "grpo.group_size="+strconv.Itoa(g))
			}
			for mt := w.MicroTokens; mt >= min(1024, w.MicroTokens); mt /= 2 {
				v.MicroTokens = mt
				if p = Plan(v); p.Total <= free {
					if mt != w.MicroTokens {
						set = append(set, "model.micro_tokens="+strconv.Itoa(mt))
					}
					return set, p, true
				}
				if mt == 0 {
					break
				}
			}
			settings = set
		}
		if g <= 2 {
			return settings, p, false
		}
	}
}

// SizeFit is one known shape's plan under a workload's settings, trained
// in full and with LoRA.
type SizeFit struct {
	Shape      string
	Params     int
	Full, LoRA int64 // bytes on one device
}

// SizeFits plans each known shape, smallest first, with w's settings
// (its context, group, micro-batch, sampling, reference and GPUs), once
// training every weight and once with LoRA of w's shape (rank 16 when w
// trains every weight): which model sizes fit a device of free bytes.
// With auto (model.recompute = "auto") each recomputes its activations
// where that is what makes it fit, as a run would.
func SizeFits(w Workload, free int64, auto bool) []SizeFit {
	l := model.LoRAConfig{Rank: 16, Alpha: 32, Targets: model.LoRATargets}
	if w.LoRA != nil {
		l = *w.LoRA
	}
	var out []SizeFit
	for _, name := range ShapeNames() {
		v := w
		v.Cfg = Shapes[name]
		v.Cfg.Context = w.Cfg.Context
		v.HeadRows = 0
		plan := func(v Workload) int64 {
			if auto {
				v = AutoRecompute(v, free)
			}
			return Plan(v).Total
		}
		v.LoRA = nil
		full := plan(v)
		v.LoRA = &l
		out = append(out, SizeFit{Shape: name, Params: ParamCount(v.Cfg), Full: full, LoRA: plan(v)})
	}
	slices.SortStableFunc(out, func(a, b SizeFit) int { return a.Params - b.Params })
	return out
}
