package app

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/model/cuda"
	"github.com/swetui/swetui/policy"
)

// WithLoRA makes pol train lora.* adapters (lora.rank > 0) with a fresh
// AdamW for them (optim.*'s hyper-parameters; the schedule stays pol's).
// On the CPU pol then computes with the merged weights; on a device the
// engine runs the adapters beside the frozen base.
func (ws *Workspace) WithLoRA(pol *policy.Model) error {
	c := ws.Cfg.LoRA
	if c.Rank == 0 {
		return nil
	}
	init := ws.Cfg.Model.InitCkpt
	if init == "" {
		return fmt.Errorf("lora.rank=%d: adapters need a trained model to adapt: set model.init_ckpt (a Hugging Face folder or a checkpoint)", c.Rank)
	}
	if IsAdapterDir(init) {
		return fmt.Errorf("lora.rank=%d: model.init_ckpt %s holds LoRA adapters, not a model the new adapters can name as their base: "+
			"fold them in first with `swetui merge --adapter %s --out DIR` and start from DIR", c.Rank, init, init)
	}
	l, err := model.NewLoRA(pol.Model, model.LoRAConfig{Rank: c.Rank, Alpha: c.Alpha, Targets: c.Targets}, uint64(ws.Cfg.Run.Seed))
	if err != nil {
		return err
	}
	base, err := filepath.Abs(ModelDir(init))
	if err != nil {
		return fmt.Errorf("lora: %w", err)
	}
	opt := model.NewAdamW(ws.Cfg.Optim, l.NumParams())
	if ws.OnDevice() {
		pol.AttachLoRA(l, opt, base)
		return nil
	}
	return pol.UseLoRA(l, opt, base)
}

// streamsWeights reports whether the model goes straight from its files to
// the device, never whole on the host: a device run from a model folder.
// Its checkpoints then stream back from the device a tensor at a time
// (policy.Device), and a LoRA run's frozen base is never read back at all.
// An adapter folder is merged on the host first.
func (ws *Workspace) streamsWeights() bool {
	init := ws.Cfg.Model.InitCkpt
	return ws.OnDevice() && init != "" && !IsAdapterDir(init)
}

// openWeights indexes model.init_ckpt's weights for the device engine and
// returns the model's layout (no weights).
func (ws *Workspace) openWeights() (*model.Model, error) {
	dir := ModelDir(ws.Cfg.Model.InitCkpt)
	w, err := model.OpenWeights(dir, nil)
	if err != nil {
		return nil, err
	}
	if ws.Tok != nil && w.Cfg.VocabSize < ws.Tok.VocabSize() {
		return nil, fmt.Errorf("checkpoint %s: vocab_size %d is less than the tokenizer's %d ids", dir, w.Cfg.VocabSize, ws.Tok.VocabSize())
	}
	ws.Source = w
	return model.Layout(w.Cfg)
}

// ModelDir is where a checkpoint folder keeps its model: a run checkpoint's
// policy/, else the folder itself.
func ModelDir(dir string) string {
	if fileExists(filepath.Join(dir, "policy", "config.json")) || fileExists(filepath.Join(dir, "policy", "adapter_config.json")) {
		return filepath.Join(dir, "policy")
	}
	return dir
}

// IsAdapterDir reports whether dir (or a run checkpoint's policy/) holds
// LoRA adapters.
func IsAdapterDir(dir string) bool { return model.IsAdapter(ModelDir(dir)) }

// BaseDir is the folder whose config.json describes dir's weights: an
// adapter folder's base model, else dir ("" stays "").
func BaseDir(dir string) string {
	if dir == "" || !IsAdapterDir(dir) {
		return dir
	}
	a, err := model.ReadAdapterBase(ModelDir(dir))
	if err != nil || a == "" {
		return dir // loading it says what is wrong
	}
	if !filepath.IsAbs(a) {
		a = filepath.Join(ModelDir(dir), a)
	}
	return a
}

// LoadMerged reads an adapter folder's base model (its
// base_model_name_or_path) and folds the adapters in.
func LoadMerged(dir string, tok *model.Tokenizer) (*model.Model, error) {
	dir = ModelDir(dir)
	a := BaseDir(dir)
	if a == dir {
		return nil, fmt.Errorf("adapter %s: adapter_config.json names no base_model_name_or_path", dir)
	}
	if IsAdapterDir(a) {
		return nil, fmt.Errorf("adapter %s: its base %s is itself an adapter folder", dir, a)
	}
	base, err := LoadModel(a, tok)
	if err != nil {
		return nil, fmt.Errorf("adapter %s: base model: %w", dir, err)
	}
	ad, err := model.LoadAdapter(dir, base)
	if err != nil {
		return nil, err
	}
	if err := ad.LoRA.Merge(base, base); err != nil {
		return nil, err
	}
	return base, nil
}

// Merged is what Merge folded: the adapter folder, its base, the adapters'
// count, rank and alpha, and the dtype written.
type Merged struct {
	Adapter, Base string
	Adapters      int
	Rank          int
	Alpha         float64
	Dtype         string
}

// Merge folds the adapters of the folder adapter into its base model
// (base, or the one adapter_config.json names) and saves the merged
// weights to out as a full checkpoint in the base's layout (dtype, "" for
// the base's; chat template and end-token files) that vLLM, transformers
// and model.init_ckpt load.
func Merge(adapter, base, dtype, out string) (Merged, error) {
	dir := ModelDir(adapter)
	if !model.IsAdapter(dir) {
		return Merged{}, fmt.Errorf("%s holds no adapter_config.json: not a LoRA adapter folder", adapter)
	}
	if base == "" {
		if base = BaseDir(dir); base == dir {
			return Merged{}, fmt.Errorf("%s names no base model: give it with --base", dir)
		}
	}
	ck, err := model.Load(ModelDir(base), nil)
	if err != nil {
		return Merged{}, fmt.Errorf("base model: %w", err)
	}
	a, err := model.LoadAdapter(dir, ck.Model)
	if err != nil {
		return Merged{}, err
	}
	if err := a.LoRA.Merge(ck.Model, ck.Model); err != nil {
		return Merged{}, err
	}
	format, err := model.FormatOf(ModelDir(base), dtype)
	if err != nil {
		return Merged{}, err
	}
	tok := ck.Tokenizer
	if a.Tokenizer != nil {
		tok = a.Tokenizer
	}
	if err := model.Save(out, model.Checkpoint{Model: ck.Model, Tokenizer: tok, Format: format}); err != nil {
		return Merged{}, err
	}
	return Merged{Adapter: dir, Base: ModelDir(base), Adapters: len(a.LoRA.Base), Rank: a.LoRA.Cfg.Rank, Alpha: a.LoRA.Cfg.Alpha, Dtype: string(format.Dtype)}, nil
}

// Workload is what opening pol on a device with activations act will hold.
func (ws *Workspace) Workload(cfg model.Config, act cuda.DType, lora *model.LoRA, withRef bool) cuda.Workload {
	var lc *model.LoRAConfig
	if lora != nil {
		lc = &lora.Cfg
	}
	w := workloadOf(ws.Cfg, cfg, act, lc, withRef)
	if ws.SampleOnly == 0 {
		if w.Beside = refreshBeside(ws.Cfg, act, lc); w.Beside != nil {
			w.BesideWhat = refreshBesideWhat
		}
	}
	return w
}

// workloadOf is what a run of c on a model of shape mc holds on a device.
func workloadOf(c config.Config, mc model.Config, act cuda.DType, lora *model.LoRAConfig, withRef bool) cuda.Workload {
	g := 1
	for _, ph := range config.Phases {
		g = max(g, c.GRPO.GroupSizeIn(ph))
	}
	w := cuda.Workload{Cfg: mc, Act: act, Reference: withRef, Completions: g, MicroTokens: c.Model.MicroTokens, LoRA: lora,
		Recompute: c.Model.Recompute == "on", Turns: c.Rollout.Mode == config.RolloutAgent}
	if c.GRPO.Async.Enabled {
		w.Snapshots = cuda.MaxSnapshots
	}
	return w
}

// LoRANote says what a LoRA run trains, for the run's log.
func LoRANote(l *model.LoRA, base int) string {
	return fmt.Sprintf("lora: rank %d, alpha %g on %s: %d adapter weights train (%.2f%% of the model's %d), the rest is frozen; the KL reference is the frozen base",
		l.Cfg.Rank, l.Cfg.Alpha, strings.Join(l.Cfg.Targets, ", "), l.NumParams(), 100*float64(l.NumParams())/float64(base), base)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
