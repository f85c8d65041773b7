package policy

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/swetui/swetui/model"
)

// A LoRA policy trains adapters beside frozen base weights (model.LoRA). Its
// checkpoint's policy/ is a PEFT adapter folder naming the base model's
// folder; no reference/ is written, since the reference is the base itself.

// loraMode is a Model's LoRA state.
type loraMode struct {
	l        *model.LoRA
	base     *model.Model // frozen
	basePath string       // the base model's folder, for adapter_config.json
	// onDevice: p.Model is the base, not merged (AttachLoRA); the device
	// computes.
	onDevice bool
}

// UseLoRA makes p train adapters l, with p.Optim replaced by opt (sized for
// l): p.Model's weights become the frozen base, and p.Model itself holds
// the merged weights W + s·A·B that gorgonia samples and differentiates (a
// second copy of the weights on the host). basePath is the base model's
// folder, written into the adapters' config. The KL reference is Base().
func (p *Model) UseLoRA(l *model.LoRA, opt *model.AdamW, basePath string) error {
	base := p.Model.Clone()
	if err := l.Merge(p.Model, base); err != nil {
		return err
	}
	p.lora = &loraMode{l: l, base: base, basePath: basePath}
	p.Optim = opt
	p.refreshSnapshot()
	return nil
}

// AttachLoRA is UseLoRA for a policy a device computes (policy.Device):
// p.Model stays the base, unmerged, and only carries the adapters, their
// optimiser and the base's folder to the device and to checkpoints.
func (p *Model) AttachLoRA(l *model.LoRA, opt *model.AdamW, basePath string) {
	p.lora = &loraMode{l: l, base: p.Model, basePath: basePath, onDevice: true}
	p.Optim = opt
}

// BasePath is a LoRA policy's base model folder ("" without LoRA).
func (p *Model) BasePath() string {
	if p.lora == nil {
		return ""
	}
	return p.lora.basePath
}

// LoRA is the adapters p trains, nil when it trains every weight.
func (p *Model) LoRA() *model.LoRA {
	if p.lora == nil {
		return nil
	}
	return p.lora.l
}

// Base is the frozen base weights of a LoRA policy, else p.Model.
func (p *Model) Base() *model.Model {
	if p.lora == nil {
		return p.Model
	}
	return p.lora.base
}

// stepLoRA moves the adapters by the merged weights' gradients (the chain
// rule of model.LoRA.AdapterGrads) and merges them again.
func (p *Model) stepLoRA(lr float64) float64 {
	if p.lora.onDevice {
		panic("policy: a device LoRA policy's host copy stepped") // a wiring bug
	}
	l := p.lora.l
	l.ZeroGrad()
	if err := l.AdapterGrads(p.Model); err != nil {
		panic(err) // the adapters were built for this model: a wiring bug
	}
	norm := l.ClipGradNorm(p.GradClip)
	if err := p.Optim.UpdateParams(l.Params, l.NumParams(), lr); err != nil {
		panic(err)
	}
	if err := l.Merge(p.Model, p.lora.base); err != nil {
		panic(err)
	}
	return norm
}

// saveLoRA writes policy/ as an adapter folder.
func (p *Model) saveLoRA(dir string, rng []byte) error {
	return model.SaveAdapter(filepath.Join(dir, "policy"), model.Adapter{LoRA: p.lora.l, BaseModel: p.lora.basePath,
		Optim: p.Optim, Tokenizer: p.Tokenizer, Files: p.Format.Files, Extra: map[string][]byte{"sampler_rng": rng}})
}

// loadAdapterCheckpoint reads policy/ of a LoRA checkpoint for base: the
// adapters, their optimiser state and the sampler's random source.
func loadAdapterCheckpoint(dir string, base *model.Model) (*model.Adapter, []byte, error) {
	path := filepath.Join(dir, "policy")
	if !model.IsAdapter(path) {
		return nil, nil, fmt.Errorf("load policy: %s holds full weights, not LoRA adapters: resume it with lora.rank=0, or set run.resume=never", path)
	}
	a, err := model.LoadAdapter(path, base)
	if err != nil {
		return nil, nil, err
	}
	rng, err := samplerRNG(a.Extra, path)
	if err != nil {
		return nil, nil, err
	}
	return a, rng, nil
}

// loadLoRA restores what saveLoRA wrote.
func (p *Model) loadLoRA(ctx context.Context, dir string) error {
	a, rng, err := loadAdapterCheckpoint(dir, p.lora.base)
	if err != nil {
		return err
	}
	if a.LoRA.Cfg.Rank != p.lora.l.Cfg.Rank || a.LoRA.NumParams() != p.lora.l.NumParams() {
		return fmt.Errorf("load policy: the checkpoint's adapters (rank %d, %v) differ from lora.* (rank %d, %v)",
			a.LoRA.Cfg.Rank, a.LoRA.Cfg.Targets, p.lora.l.Cfg.Rank, p.lora.l.Cfg.Targets)
	}
	copy(p.lora.l.Weights(), a.LoRA.Weights())
	if a.Optim != nil {
		p.Optim = a.Optim
	}
	if err := p.lora.l.Merge(p.Model, p.lora.base); err != nil {
		return err
	}
	if err := p.restoreRNG(rng); err != nil {
		return err
	}
	p.refreshSnapshot()
	return nil
}
