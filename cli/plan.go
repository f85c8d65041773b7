package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/swetui/swetui/app"
	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/model/cuda"
)

// planOptions are `swetui plan`'s inputs.
type planOptions struct {
	Config config.Config
	app.PlanOptions
	GPUGiB float64 // 0: no bound to check
}

func newPlanOptions(env Env, args []string) (planOptions, error) {
	fs := newFlags(env, "plan")
	load := configFlag(fs, env)
	m := fs.String("model", "", "a model folder or one of "+strings.Join(cuda.ShapeNames(), ", ")+" (default: model.init_ckpt, else [model])")
	gib := fs.Float64("gpu-gib", 0, "the device's memory in GiB: say whether the plan fits, and which settings would make it")
	eval := fs.Int("eval", 0, "plan swetui eval sampling this many replies a task instead of a training run")
	gpus := fs.Int("gpus", 1, "plan one GPU of a data-parallel run on this many (model.shard_optimizer shards the AdamW moments)")
	cfg, _, err := parseAndLoad(fs, load, args)
	if err != nil {
		return planOptions{}, err
	}
	if *gib < 0 || *eval < 0 {
		return planOptions{}, UsageErrorf("--gpu-gib and --eval must not be negative")
	}
	if *gpus < 1 {
		return planOptions{}, UsageErrorf("--gpus must be at least 1, not %d", *gpus)
	}
	return planOptions{Config: cfg, PlanOptions: app.PlanOptions{Model: *m, Eval: *eval, GPUs: *gpus}, GPUGiB: *gib}, nil
}

// planRun implements `swetui plan`: the device memory plan of a run, with
// no device: the numbers a device run prints and enforces before it
// allocates anything.
func planRun(ctx context.Context, env Env, o planOptions) error {
	w, what, err := app.PlanWorkload(o.Config, o.PlanOptions)
	if err != nil {
		return UsageErrorf("plan: %v", err)
	}
	c := o.Config
	train := "full fine-tuning"
	if w.LoRA != nil {
		train = fmt.Sprintf("LoRA rank %d on %s", w.LoRA.Rank, strings.Join(w.LoRA.Targets, ", "))
	}
	if w.Inference {
		train = fmt.Sprintf("eval: sampling %d replies a task", w.Completions)
	}
	fmt.Fprintf(env.Stdout, "swetui plan: %s, %.2f B weights; %s; G=%d, model.context=%d, model.micro_tokens=%d, %s sampling, reference %v\n",
		what, float64(cuda.ParamCount(w.Cfg))/1e9, train, w.Completions, c.Model.Context, w.MicroTokens,
		map[bool]string{true: "async", false: "sync"}[w.Snapshots > 0], w.Reference)
	if w.GPUs > 1 {
		shard := "each holds the whole AdamW moments (model.shard_optimizer=false)"
		if w.ShardOptimizer {
			shard = fmt.Sprintf("ZeRO-1: each keeps and updates 1/%d of the AdamW moments", w.GPUs)
		}
		if w.Inference {
			shard = "each samples its share of the tasks"
		}
		fmt.Fprintf(env.Stdout, "one GPU of %d, data-parallel (a replica of the weights each, its share of the step's groups; %s):\n", w.GPUs, shard)
	}
	p := cuda.Plan(w)
	fmt.Fprint(env.Stdout, p)
	if o.GPUGiB == 0 {
		return nil
	}
	free := int64(o.GPUGiB * (1 << 30))
	if !w.Inference {
		printSizeFits(env.Stdout, w, free, o.GPUGiB, c.Model.Recompute == "auto")
	}
	if p.Total <= free {
		fmt.Fprintf(env.Stdout, "fits in %g GiB (%s to spare)\n", o.GPUGiB, cuda.GiB(free-p.Total))
		return nil
	}
	fmt.Fprintf(env.Stdout, "does not fit in %g GiB: %s over\n", o.GPUGiB, cuda.GiB(p.Total-free))
	if auto := cuda.AutoRecompute(w, free); c.Model.Recompute == "auto" && auto.Recompute {
		fmt.Fprintf(env.Stdout, "  model.recompute=auto: a run on this device recomputes its activations, and holds %s\n", cuda.GiB(cuda.Plan(auto).Total))
	}
	for _, r := range cuda.Remedies(w, free) {
		fmt.Fprintf(env.Stdout, "  it fits with %s alone: %s\n", r.Setting, cuda.GiB(r.Plan.Total))
	}
	settings, fp, ok := cuda.Fit(w, free)
	if !ok {
		fmt.Fprintf(env.Stdout, "no combination of lora.rank=16, model.micro_tokens, grpo.group_size and sync sampling fits: %s at best with %s\n",
			cuda.GiB(fp.Total), strings.Join(settings, " "))
		return fmt.Errorf("does not fit in %g GiB", o.GPUGiB)
	}
	fmt.Fprintf(env.Stdout, "it fits with %s: %s\n%s", strings.Join(settings, " "), cuda.GiB(fp.Total), fp)
	return nil
}

// printSizeFits says which known model sizes fit a device of free bytes
// with this run's settings, trained in full and with LoRA.
func printSizeFits(w io.Writer, wl cuda.Workload, free int64, gib float64, auto bool) {
	on := fmt.Sprintf("a GPU of %g GiB", gib)
	if wl.GPUs > 1 {
		on = fmt.Sprintf("each of %d GPUs of %g GiB", wl.GPUs, gib)
	}
	rank := 16
	if wl.LoRA != nil {
		rank = wl.LoRA.Rank
	}
	how := ""
	if auto {
		how = ", activations recomputed where that makes it fit (model.recompute=auto)"
	}
	fmt.Fprintf(w, "model sizes on %s, with these settings%s (per GPU):\n", on, how)
	fits := map[bool]string{true: "fits", false: "over"}
	for _, f := range cuda.SizeFits(wl, free, auto) {
		fmt.Fprintf(w, "  %-20s %6.2f B   full fine-tuning %10s %-4s   LoRA rank %d %10s %s\n", f.Shape, float64(f.Params)/1e9,
			cuda.GiB(f.Full), fits[f.Full <= free], rank, cuda.GiB(f.LoRA), fits[f.LoRA <= free])
	}
}
