package app

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/model/cuda"
)

// PlanOptions say what `swetui plan` plans.
type PlanOptions struct {
	// Model is a named shape (cuda.Shapes), a model folder, or "" for the
	// run's own: model.init_ckpt's, else [model]'s.
	Model string
	// Eval plans `swetui eval` sampling Eval replies a task instead of a
	// training run: no gradients, moments, adapters or reference.
	Eval int
	// GPUs plans one GPU of a data-parallel run on this many (0 or 1:
	// one device); model.shard_optimizer says whether the moments are
	// sharded across them.
	GPUs int
}

// PlanWorkload is what a run of cfg would hold on a device (bf16
// activations, fp32 masters), as a device run counts it before it
// allocates; what names the model.
func PlanWorkload(cfg config.Config, o PlanOptions) (w cuda.Workload, what string, err error) {
	mc, what, err := planShape(cfg, o.Model)
	if err != nil {
		return w, "", err
	}
	mc.Context = cfg.Model.Context // the context a run uses, not the model's most
	var lora *model.LoRAConfig
	if cfg.LoRA.Rank > 0 {
		lora = &model.LoRAConfig{Rank: cfg.LoRA.Rank, Alpha: cfg.LoRA.Alpha, Targets: cfg.LoRA.Targets}
	}
	w = workloadOf(cfg, mc, cuda.BF16, lora, cfg.GRPO.KLCoef > 0)
	if o.Eval > 0 {
		w.Inference, w.Completions, w.LoRA, w.Reference, w.Snapshots = true, o.Eval, nil, false, 0
	} else if w.Beside = refreshBeside(cfg, cuda.BF16, lora); w.Beside != nil {
		w.BesideWhat = refreshBesideWhat
	}
	w.GPUs, w.ShardOptimizer = o.GPUs, cfg.Model.ShardOptimizer
	return w, what, nil
}

func planShape(cfg config.Config, name string) (model.Config, string, error) {
	if name == "" {
		if cfg.Model.InitCkpt == "" {
			return model.ConfigFrom(cfg.Model), "[model] (model.layers, model.d_model, ...)", nil
		}
		name = cfg.Model.InitCkpt
	}
	if mc, ok := cuda.Shape(name); ok {
		return mc, strings.ToLower(name) + "'s shape", nil
	}
	dir := ModelDir(name)
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		return model.Config{}, "", fmt.Errorf("model %q is neither a known shape (%s) nor a model folder with a config.json", name,
			strings.Join(cuda.ShapeNames(), ", "))
	}
	w, err := model.OpenWeights(BaseDir(dir), nil)
	if err != nil {
		return model.Config{}, "", err
	}
	return w.Cfg, dir, nil
}
