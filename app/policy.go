package app

import (
	"context"
	"fmt"
	"strings"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/model/cuda"
	"github.com/swetui/swetui/policy"
	"github.com/swetui/swetui/train"
)

// NewModel builds the policy's network: from model.init_ckpt, or freshly
// initialised with the tokenizer's vocabulary.
func (ws *Workspace) NewModel() (*model.Model, error) {
	m, err := ws.buildModel()
	if err != nil {
		return nil, err
	}
	m.MicroTokens = ws.Cfg.Model.MicroTokens
	return m, nil
}

// buildModel is NewModel's network before its run settings: loaded (at
// model.context) or fresh.
func (ws *Workspace) buildModel() (*model.Model, error) {
	if ws.Cfg.Model.InitCkpt != "" {
		load := func() (*model.Model, error) { return LoadModel(ws.Cfg.Model.InitCkpt, ws.Tok) }
		if ws.streamsWeights() {
			load = ws.openWeights
		}
		m, err := load()
		if err != nil {
			return nil, err
		}
		// The run's model.context, not the checkpoint's max_position_embeddings:
		// prompts are cut to it, and a device plans its KV cache for it.
		if err := m.SetContext(ws.Cfg.Model.Context); err != nil {
			return nil, err
		}
		return m, nil
	}
	mc := model.ConfigFrom(ws.Cfg.Model)
	mc.VocabSize = ws.Tok.VocabSize()
	m, err := model.New(mc, uint64(ws.Cfg.Run.Seed))
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	return m, nil
}

// ContextNote says when model.context runs m past the positions its
// checkpoint declares ("" when it does not).
func ContextNote(m *model.Model) string {
	c := m.Cfg
	if c.MaxPositions == 0 || c.Context <= c.MaxPositions {
		return ""
	}
	return fmt.Sprintf("model.context = %d is past model.init_ckpt's max_position_embeddings = %d: "+
		"positions beyond %d are new to the model (RoPE runs them; training teaches them)", c.Context, c.MaxPositions, c.MaxPositions)
}

// LoadModel reads a checkpoint folder: an SFT or eval checkpoint, a run
// checkpoint (its policy/ subfolder) or a Hugging Face model.
func LoadModel(dir string, tok *model.Tokenizer) (*model.Model, error) {
	if IsAdapterDir(dir) {
		return LoadMerged(dir, tok)
	}
	dir = ModelDir(dir)
	ck, err := model.Load(dir, nil)
	if err != nil {
		return nil, err
	}
	// Hugging Face models pad their embeddings past the tokenizer's ids
	// (Qwen2.5-Coder-7B: 152064 rows for 151665 tokens); fewer rows than
	// ids is a tokenizer that is not the model's.
	if tok != nil && ck.Model.Cfg.VocabSize < tok.VocabSize() {
		return nil, fmt.Errorf("checkpoint %s: vocab_size %d is less than the tokenizer's %d ids", dir, ck.Model.Cfg.VocabSize, tok.VocabSize())
	}
	return ck.Model, nil
}

// NewPolicy wraps m with a fresh AdamW at lr for steps updates.
func (ws *Workspace) NewPolicy(m *model.Model, lr float64, steps int) (*policy.Model, error) {
	oc := ws.Cfg.Optim
	oc.LR = lr
	sched, err := model.NewSchedule(oc, steps)
	if err != nil {
		return nil, err
	}
	n := m.NumParams()
	if !m.HasWeights() {
		n = 0 // a layout streamed to the device: the moments live there (or only the adapters train)
	}
	p := policy.NewModel(m, model.NewAdamW(oc, n), sched, ws.Tok, oc.GradClip, uint64(ws.Cfg.Run.Seed))
	p.Temp = ws.Cfg.Sample.Temperature
	p.SetStopTokens(ws.Chat.StopTokens(ws.Tok))
	if p.Format, err = model.FormatOf(BaseDir(ws.Cfg.Model.InitCkpt), ws.Cfg.Run.SaveDtype); err != nil {
		return nil, err
	}
	return p, nil
}

// OpenDevice opens model.device's engine; tests put the engine's CPU
// implementation of the kernels here to run the device path without a GPU.
var OpenDevice = func(ctx context.Context, cfg config.Config) (cuda.Device, error) {
	return cuda.Open(ctx, cfg.Model.Device, cfg.Model.CUDALibs)
}

// OnDevice reports whether the policy runs on model.device's engine
// rather than on gorgonia.
func (ws *Workspace) OnDevice() bool { return ws.Cfg.Model.Device != "cpu" }

// Opened is a policy on the device it runs on, the one way run, sft and eval
// get theirs: on the CPU the gorgonia model itself; elsewhere its copy on
// model.device, whose Sync brings the weights back into Host.
type Opened struct {
	train.Policy
	Store  train.Store
	Ref    train.Reference // nil without a reference
	Host   *policy.Model
	Device string         // where it runs, for the logs and the header
	Plan   string         // the device's memory plan, "" on the CPU
	Sync   func() error   // device weights -> Host.Model (a no-op on the CPU)
	Dev    *policy.Device // the device policy, nil on the CPU
	Close  func()
}

// OpenPolicy puts pol (and ref, nil for none) where model.device says.
func (ws *Workspace) OpenPolicy(ctx context.Context, pol *policy.Model, ref *policy.ModelReference) (*Opened, error) {
	if !ws.OnDevice() {
		o := &Opened{Policy: pol, Store: pol, Host: pol, Device: "cpu (gorgonia)", Sync: func() error { return nil }, Close: func() {}}
		if ref != nil {
			o.Ref = ref
		}
		return o, nil
	}
	dp, closeDev, err := ws.devicePolicy(ctx, pol, ref)
	if err != nil {
		return nil, err
	}
	dp.Format = pol.Format
	o := &Opened{Policy: dp, Store: dp, Host: pol, Dev: dp, Device: dp.Where(), Plan: ws.Plan.String(), Close: closeDev,
		Sync: func() error { return dp.SyncInto(pol.Model, nil) }}
	if !pol.Model.HasWeights() && pol.LoRA() == nil {
		o.Sync = func() error { return nil } // streamed: checkpoints read the device (deviceCheckpoint)
	}
	if dp.Ref != nil {
		o.Ref = dp.Ref
	}
	return o, nil
}

// devicePolicy puts the policy and the reference (ref nil: none) on
// model.device (bf16 activations, fp32 master weights): the GPU path. close
// frees the device.
func (ws *Workspace) devicePolicy(ctx context.Context, pol *policy.Model, ref *policy.ModelReference) (dp *policy.Device, close func(), err error) {
	if _, ords, all, err := cuda.ParseDevices(ws.Cfg.Model.Device); err == nil && (all || len(ords) > 1) {
		return ws.dataParallelPolicy(ctx, pol, ref)
	}
	dev, err := OpenDevice(ctx, ws.Cfg)
	if err != nil {
		return nil, nil, err
	}
	prec := cuda.BF16
	if dev.Info().Kind == "cpu" {
		prec = cuda.F32 // the engine's CPU kernels compute in fp32
	}
	lora := pol.LoRA()
	// The plan is counted, and a run that cannot fit refused, before
	// anything is allocated.
	w := ws.Workload(pol.Model.Cfg, prec, lora, ref != nil)
	if ws.SampleOnly > 0 {
		w.Inference, w.Completions = true, ws.SampleOnly
	}
	if ws.Cfg.Model.Recompute == "auto" {
		w = cuda.AutoRecompute(w, int64(dev.Info().FreeBytes))
	}
	if ws.Plan, err = cuda.Check(w, int64(dev.Info().FreeBytes), dev.Info().String()); err != nil {
		dev.Close()
		return nil, nil, err
	}
	o := cuda.Options{Act: prec, LoRA: lora, MicroTokens: ws.Cfg.Model.MicroTokens, Source: ws.Source, Recompute: w.Recompute}
	var p *cuda.Policy
	if ws.SampleOnly > 0 {
		p, err = cuda.NewSampler(dev, pol.Base(), o, pol.Temp, pol.StopTokens(), uint64(ws.Cfg.Run.Seed))
	} else {
		p, err = cuda.NewPolicy(dev, pol.Base(), o, pol.Optim, pol.Schedule, pol.GradClip, pol.StopTokens(), uint64(ws.Cfg.Run.Seed))
	}
	if err != nil {
		dev.Close()
		return nil, nil, err
	}
	p.Temp = pol.Temp
	p.TurnSlots = w.Completions // agent mode: a group's trajectories keep their caches
	dp = &policy.Device{P: p, Host: pol.Base(), Tokenizer: ws.Tok, BasePath: pol.BasePath()}
	if ref == nil { // grpo.kl_coef = 0
		return dp, func() { p.Close(); dev.Close() }, nil
	}
	if lora != nil { // the frozen base: the policy's own engine, adapters off
		dp.Ref = &policy.DeviceReference{R: cuda.BaseReference(p, ref.Temp)}
		return dp, func() { p.Close(); dev.Close() }, nil
	}
	r, err := cuda.NewReference(dev, ref.Model, o, ref.Temp)
	if err != nil {
		p.Close()
		dev.Close()
		return nil, nil, err
	}
	dp.Ref = &policy.DeviceReference{R: r}
	return dp, func() { r.Engine.Close(); p.Close(); dev.Close() }, nil
}

// OpenGPUs opens the GPUs of a model.device that lists several (or
// cuda:all); tests put emulated ones here.
var OpenGPUs = func(ctx context.Context, cfg config.Config) ([]*cuda.CUDADevice, error) {
	return cuda.OpenGPUs(ctx, cfg.Model.Device, cfg.Model.CUDALibs)
}

// dataParallelPolicy is devicePolicy on several GPUs: a replica on each
// (cuda.DataParallel), the optimiser's moments sharded across them with
// model.shard_optimizer (ZeRO-1), the plan checked against each GPU's
// free memory. The KL reference lives on the first GPU: a full copy
// there, or with LoRA the first replica's base.
func (ws *Workspace) dataParallelPolicy(ctx context.Context, pol *policy.Model, ref *policy.ModelReference) (dp *policy.Device, close func(), err error) {
	devs, err := OpenGPUs(ctx, ws.Cfg)
	if err != nil {
		return nil, nil, err
	}
	closeDevs := func() {
		for _, d := range devs {
			d.Close()
		}
	}
	lora := pol.LoRA()
	w := ws.Workload(pol.Model.Cfg, cuda.BF16, lora, ref != nil)
	w.GPUs, w.ShardOptimizer = len(devs), ws.Cfg.Model.ShardOptimizer && ws.SampleOnly == 0
	if ws.SampleOnly > 0 {
		w.Inference, w.Completions = true, ws.SampleOnly
	}
	free, where := int64(0), ""
	for i, d := range devs {
		if f := int64(d.Info().FreeBytes); i == 0 || f < free {
			free, where = f, d.Info().String()
		}
	}
	if ws.Cfg.Model.Recompute == "auto" {
		w = cuda.AutoRecompute(w, free)
	}
	if ws.Plan, err = cuda.Check(w, free, where); err != nil {
		closeDevs()
		return nil, nil, err
	}
	comms, err := cuda.OpenComms(devs, &cuda.Loader{ConfigDirs: ws.Cfg.Model.CUDALibs})
	if err != nil {
		closeDevs()
		return nil, nil, err
	}
	o := cuda.Options{Act: cuda.BF16, LoRA: lora, MicroTokens: ws.Cfg.Model.MicroTokens, Source: ws.Source, Recompute: w.Recompute}
	var par *cuda.DataParallel
	if ws.SampleOnly > 0 {
		ranks := make([]*cuda.Policy, len(devs))
		for r, d := range devs {
			if ranks[r], err = cuda.NewSampler(d, pol.Base(), o, pol.Temp, pol.StopTokens(), uint64(ws.Cfg.Run.Seed)+uint64(r)); err != nil {
				break
			}
		}
		if err == nil {
			par, err = cuda.NewDataParallel(ranks, comms)
		}
		if err != nil {
			for _, p := range ranks {
				if p != nil {
					p.Close()
				}
			}
		}
	} else {
		par, err = cuda.NewDataParallelPolicy(comms, pol.Base(), o, pol.Optim, pol.Schedule, pol.GradClip, pol.StopTokens(),
			uint64(ws.Cfg.Run.Seed), w.ShardOptimizer)
	}
	if err != nil {
		comms.Close()
		closeDevs()
		return nil, nil, err
	}
	for _, p := range par.Ranks {
		p.Temp = pol.Temp
		p.TurnSlots = w.Completions
	}
	p := par.Ranks[0]
	dp = &policy.Device{P: p, DP: par, Host: pol.Base(), Tokenizer: ws.Tok, BasePath: pol.BasePath()}
	closeAll := func() { par.Close(); closeDevs() }
	if ref == nil {
		return dp, closeAll, nil
	}
	if lora != nil {
		dp.Ref = &policy.DeviceReference{R: cuda.BaseReference(p, ref.Temp)}
		return dp, closeAll, nil
	}
	r, err := cuda.NewReference(devs[0], ref.Model, o, ref.Temp)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	dp.Ref = &policy.DeviceReference{R: r}
	return dp, func() { r.Engine.Close(); closeAll() }, nil
}

// DeviceName names the device model.device opens, as `swetui version`
// shows it: "cpu", the GPU (an emulated one says so), or every GPU of a
// data-parallel run. The devices are opened and closed again.
func DeviceName(ctx context.Context, cfg config.Config) (string, error) {
	if cfg.Model.Device == "cpu" {
		return "cpu", nil
	}
	devs, err := cuda.OpenGPUs(ctx, cfg.Model.Device, cfg.Model.CUDALibs)
	if err != nil {
		return "", err
	}
	var names []string
	for _, d := range devs {
		names = append(names, d.Info().String())
		d.Close()
	}
	if len(names) > 1 {
		return fmt.Sprintf("%d GPUs, data-parallel: %s", len(names), strings.Join(names, "; ")), nil
	}
	return strings.Join(names, "; "), nil
}
