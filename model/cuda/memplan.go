package cuda

import (
	"fmt"
	"strings"

	"github.com/swetui/swetui/model"
)

// A memory plan is what a run will hold on its device, counted before
// anything is allocated from the same layouts the engine allocates
// (layoutPlan, layoutDecode), so that a run that cannot fit is refused
// up front with the settings that would make it fit, not by an
// out-of-memory error an hour in.

// MaxSnapshots is how many sampling copies an async run holds at most
// (internal/snapshot's bound: the newest, one in use, one spare).
const MaxSnapshots = 3

// Workload is what a run puts on the device.
type Workload struct {
	Cfg model.Config
	Act DType
	// LoRA, when set, trains adapters of this shape; nil trains every weight.
	LoRA *model.LoRAConfig
	// Reference keeps the frozen KL reference (grpo.kl_coef > 0).
	Reference bool
	// Snapshots is how many sampling copies the async loop may hold (0 when
	// sampling is synchronous; internal/snapshot keeps at most
	// MaxSnapshots).
	Snapshots int
	// Completions is G: the completions decoded together, each with a KV
	// cache of the whole context.
	Completions int
	MicroTokens int
	HeadRows    int // 0: the engine's default
	// Recompute keeps each layer's input only (Options.Recompute).
	Recompute bool
	// Inference samples only (eval): no gradients, moments, adapters,
	// reference or snapshots.
	Inference bool
	// Turns: agent mode, whose trajectories keep their caches from one
	// turn to the next, a turn's new tokens prefilled turnRows at a time.
	Turns bool
	// GPUs is the number of data-parallel ranks (0 or 1: one device).
	// Each holds a replica of the weights and its own activations, caches
	// and snapshots for its share of the step's groups; the plan is one
	// GPU's.
	GPUs int
	// ShardOptimizer is ZeRO-1 across GPUs: each keeps the AdamW moments
	// of its 1/GPUs share of the weights only.
	ShardOptimizer bool
	// Beside is another job of the process on the same GPU, counted whole
	// on one line named BesideWhat: the learned verifier's refresh beside
	// a run (reward.verifier_refresh_steps).
	Beside     *Workload
	BesideWhat string
}

// ncclBufferBytes is an allowance for NCCL's own device buffers on each
// GPU of a data-parallel run: NCCL_BUFFSIZE (4 MiB) for each direction of
// each of up to 32 channels' ring connections. An estimate: NCCL sizes
// them by topology, and NCCL_BUFFSIZE changes them.
const ncclBufferBytes = (4 << 20) * 2 * 32

// momentShare is how many weights' moments one GPU keeps of n.
func (w Workload) momentShare(n int) int {
	if w.GPUs > 1 && w.ShardOptimizer {
		return (n + w.GPUs - 1) / w.GPUs
	}
	return n
}

// shardNote names the moments' share in a plan line.
func (w Workload) shardNote() string {
	if w.GPUs > 1 && w.ShardOptimizer {
		return fmt.Sprintf(", ZeRO-1: this GPU's 1/%d", w.GPUs)
	}
	return ""
}

// MemItem is one line of the plan.
type MemItem struct {
	Name  string
	Bytes int64
}

// MemoryPlan is a workload's device memory, item by item.
type MemoryPlan struct {
	Items []MemItem
	Total int64
}

func (p *MemoryPlan) add(name string, b int) {
	if b > 0 {
		p.Items = append(p.Items, MemItem{name, int64(b)})
		p.Total += int64(b)
	}
}

// ParamCount is the number of weights of an architecture as model.Model
// lays them out (an untied LM head).
func ParamCount(c model.Config) int {
	D, F, V := c.DModel, c.DFF, c.VocabSize
	Hq, Hkv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	per := 2*D + D*Hq + 2*D*Hkv + Hq*D + 3*D*F
	if c.AttnBias {
		per += Hq + 2*Hkv
	}
	return 2*V*D + c.Layers*per + D
}

// VectorParamCount is the number of weights in the norms and biases: what
// a bf16-only frozen base keeps in fp32.
func VectorParamCount(c model.Config) int {
	per := 2 * c.DModel
	if c.AttnBias {
		per += c.Heads*c.HeadDim + 2*c.KVHeads*c.HeadDim
	}
	return c.Layers*per + c.DModel
}

// LoRAParamCount is the number of adapter weights of shape l on c.
func LoRAParamCount(c model.Config, l model.LoRAConfig) int {
	D, F := c.DModel, c.DFF
	Hq, Hkv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	dims := map[string][2]int{"q_proj": {D, Hq}, "k_proj": {D, Hkv}, "v_proj": {D, Hkv}, "o_proj": {Hq, D},
		"gate_proj": {D, F}, "up_proj": {D, F}, "down_proj": {F, D}}
	n := 0
	for _, t := range l.Targets {
		d := dims[t]
		n += l.Rank * (d[0] + d[1])
	}
	return c.Layers * n
}

// headRowsOf is Engine.headRows for a workload.
func headRowsOf(w Workload) int {
	if w.HeadRows > 0 {
		return w.HeadRows
	}
	return max(1, (64<<20)/w.Cfg.VocabSize)
}

// Plan counts a workload's memory.
func Plan(w Workload) MemoryPlan {
	c := w.Cfg
	if w.MicroTokens <= 0 {
		w.MicroTokens = 16384
	}
	np := ParamCount(c)
	act := w.Act.Size()
	var p MemoryPlan
	rope := 2 * 4 * c.Context * (c.HeadDim / 2)
	copyBytes := 4 * np // an engine's fp32 weights
	what := "weights (fp32)"
	switch {
	case w.LoRA != nil && w.Act != F32: // the frozen base: no masters
		copyBytes = act*np + 4*VectorParamCount(c)
		what = "weights (frozen base in " + w.Act.String() + ", norms and biases fp32)"
	case w.Act != F32:
		copyBytes += act * np // and their compute copy
		what = "weights (fp32 masters + " + w.Act.String() + " compute copy)"
	}
	p.add(what, copyBytes+rope)
	maxRows := max(w.MicroTokens, c.Context, w.Completions)
	hr := headRowsOf(w)
	rows := max(1, w.Completions)
	if w.Turns {
		rows = max(turnRows, rows)
	}
	_, dec := layoutDecode(c, w.Act, rows, max(1, w.Completions), c.Context)
	if w.Inference {
		_, prefill := layoutPlan(c, w.Act, hr, 1, c.Context, false, false) // sampling only prefills one prompt
		p.add(fmt.Sprintf("activations (a prompt's prefill, up to %d tokens)", c.Context), prefill.bytes())
		p.add(fmt.Sprintf("KV cache (%d completions × %d positions)", w.Completions, c.Context), dec.bytes())
		return p
	}
	var adapters int
	if w.LoRA != nil {
		n := LoRAParamCount(c, *w.LoRA)
		adapters = 4 * n
		if w.Act != F32 {
			adapters += act * n
		}
		p.add(fmt.Sprintf("LoRA adapters (%d weights: masters, gradients, AdamW moments%s)", n, w.shardNote()),
			adapters+4*n+8*w.momentShare(n)+4*max(c.DModel, c.Heads*c.HeadDim, c.KVHeads*c.HeadDim))
		p.add("LoRA scratch", 2*act*maxRows*w.LoRA.Rank)
	} else {
		p.add("gradients (fp32)", 4*np)
		p.add("AdamW moments (fp32"+w.shardNote()+")", 8*w.momentShare(np))
	}
	acts := fmt.Sprintf("activations (one micro-batch of %d tokens)", w.MicroTokens)
	if w.Recompute {
		acts = fmt.Sprintf("activations (one micro-batch of %d tokens, recomputed)", w.MicroTokens)
	}
	p.add(acts, maxPlanBytes(c, w.Act, hr, w.MicroTokens, true, w.Recompute))
	if w.Snapshots == 0 { // else the snapshots sample, each with its cache
		p.add(fmt.Sprintf("KV cache (%d completions × %d positions)", w.Completions, c.Context), dec.bytes())
	}
	if w.Reference {
		if w.LoRA != nil {
			p.Items = append(p.Items, MemItem{Name: "KL reference (the frozen base, shared: adapters off)"})
		} else {
			p.add("KL reference (a frozen copy + its activations)", copyBytes+rope+maxPlanBytes(c, w.Act, hr, w.MicroTokens, false, false))
		}
	}
	if w.GPUs > 1 {
		p.add(fmt.Sprintf("NCCL buffers (%d GPUs; an estimate: NCCL sizes them by topology)", w.GPUs), ncclBufferBytes)
	}
	if w.Beside != nil {
		p.add(w.BesideWhat, int(Plan(*w.Beside).Total))
	}
	if w.Snapshots > 0 {
		each := copyBytes + rope
		if w.LoRA != nil {
			each = adapters + act*maxRows*w.LoRA.Rank
		}
		_, prefill := layoutPlan(c, w.Act, hr, 1, c.Context, false, false) // a snapshot only samples
		each += prefill.bytes() + dec.bytes()
		p.add(fmt.Sprintf("sampling snapshots (async: up to %d, each with a KV cache of %d × %d)", w.Snapshots, w.Completions, c.Context), w.Snapshots*each)
	}
	return p
}

// GiB formats bytes for the plan's lines.
func GiB(b int64) string {
	if b < 1<<30 {
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
}

// String is the plan as the run prints it.
func (p MemoryPlan) String() string {
	var b strings.Builder
	for _, it := range p.Items {
		fmt.Fprintf(&b, "  %-68s %10s\n", it.Name, GiB(it.Bytes))
	}
	fmt.Fprintf(&b, "  %-68s %10s\n", "total", GiB(p.Total))
	return b.String()
}

// Remedy is a change of settings and the plan it would give.
type Remedy struct {
	Setting string
	Plan    MemoryPlan
}

// Remedies are the single changes that bring w within free bytes, in the
// order a user would try them: recomputed activations (the same training,
// slower), LoRA, fewer completions per group, smaller micro-batches,
// synchronous sampling.
func Remedies(w Workload, free int64) []Remedy {
	var out []Remedy
	try := func(setting string, v Workload) {
		if p := Plan(v); p.Total <= free {
			out = append(out, Remedy{setting, p})
		}
	}
	if !w.Recompute && !w.Inference {
		v := w
		v.Recompute = true
		try(RecomputeSetting, v)
	}
	if w.LoRA == nil {
		v := w
		v.LoRA = &model.LoRAConfig{Rank: 16, Alpha: 32, Targets: model.LoRATargets}
		try("lora.rank=16", v)
	}
	for g := w.Completions / 2; g >= 2; g /= 2 {
		v := w
		v.Completions = g
		if Plan(v).Total <= free {
			try(fmt.Sprintf("grpo.group_size=%d", g), v)
			break
		}
	}
	for mt := w.MicroTokens / 2; mt >= 1024; mt /= 2 {
		v := w
		v.MicroTokens = mt
		if Plan(v).Total <= free {
			try(fmt.Sprintf("model.micro_tokens=%d", mt), v)
			break
		}
	}
	if w.Snapshots > 0 {
		v := w
		v.Snapshots = 0
		try("grpo.async.enabled=false", v)
	}
	return out
}

// FitError is a plan that does not fit the device's free memory.
type FitError struct {
	Plan     MemoryPlan
	Free     int64
	Device   string
	Remedies []Remedy
}

func (e *FitError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "memory plan: the run needs %s on %s, which has %s free:\n%s", GiB(e.Plan.Total), e.Device, GiB(e.Free), e.Plan)
	if len(e.Remedies) == 0 {
		b.WriteString("no single setting makes it fit: combine lora.rank, a smaller grpo.group_size and model.micro_tokens, or use a device with more memory")
		return b.String()
	}
	b.WriteString("it would fit with")
	for i, r := range e.Remedies {
		if i > 0 {
			b.WriteString(";")
		}
		fmt.Fprintf(&b, " %s (%s)", r.Setting, GiB(r.Plan.Total))
	}
	return b.String()
}

// RecomputeSetting is the setting that turns recomputed activations on.
const RecomputeSetting = "model.recompute=on"

// AutoRecompute is model.recompute = "auto": w recomputing its
// activations when it does not fit free bytes without, and recomputing
// holds less (free 0: unknown, left off). A one-layer model keeps what
// it would recompute anyway.
func AutoRecompute(w Workload, free int64) Workload {
	if free <= 0 || w.Inference || w.Recompute {
		return w
	}
	kept := Plan(w).Total
	if kept <= free {
		return w
	}
	v := w
	v.Recompute = true
	if Plan(v).Total < kept {
		return v
	}
	return w
}

// Check refuses a plan over free bytes (0: unknown, e.g. the CPU device,
// which is not checked) with the remedies that would make it fit.
func Check(w Workload, free int64, device string) (MemoryPlan, error) {
	p := Plan(w)
	if free > 0 && p.Total > free {
		return p, &FitError{Plan: p, Free: free, Device: device, Remedies: Remedies(w, free)}
	}
	return p, nil
}
