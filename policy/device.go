package policy

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/model/cuda"
	"github.com/swetui/swetui/train"
)

// Device is the policy on a model/cuda device (model.device = cuda or
// cuda:N) behind the Policy, SnapshotSampler and Store interfaces, so that
// GRPO (sync and async) runs on it unchanged. Host is the CPU copy that
// checkpoints are written from and read into, in the CPU model's format.
type Device struct {
	P         *cuda.Policy
	Host      *model.Model
	Tokenizer *model.Tokenizer
	// Ref, when set, is the frozen reference saved beside the policy.
	Ref *DeviceReference
	// Format is how checkpoints write the weights, as Model.Format.
	Format model.Format
	// BasePath is a LoRA policy's base model folder (P.LoRA set): its
	// checkpoints are adapter folders naming it.
	BasePath string
}

var (
	_ train.SnapshotSampler = (*Device)(nil)
	_ train.Store           = (*Device)(nil)
	_ train.Reference       = (*DeviceReference)(nil)
)

func (d *Device) options(o train.SampleOptions) model.SampleOptions {
	return model.SampleOptions{Temperature: float32(o.Temperature), TopP: float32(o.TopP), MaxNewTokens: o.MaxNewTokens}
}

// Sample implements train.Policy.
func (d *Device) Sample(ctx context.Context, prompt []int, n int, o train.SampleOptions) ([]train.Sample, error) {
	cs, err := d.P.Sample(ctx, prompt, n, d.options(o))
	return samplesOf(cs), err
}

// SampleSnapshot implements SnapshotSampler.
func (d *Device) SampleSnapshot(ctx context.Context, prompt []int, n int, o train.SampleOptions) ([]train.Sample, int, error) {
	cs, version, err := d.P.SampleSnapshot(ctx, prompt, n, d.options(o))
	return samplesOf(cs), version, err
}

// SampleTurn implements train.TurnPolicy.
func (d *Device) SampleTurn(ctx context.Context, context []int, o train.SampleOptions) (train.Sample, error) {
	c, err := d.P.SampleTurn(ctx, context, d.options(o))
	if err != nil {
		return train.Sample{}, err
	}
	return samplesOf([]model.Completion{c})[0], nil
}

// SampleTurnSnapshot implements train.TurnPolicy.
func (d *Device) SampleTurnSnapshot(ctx context.Context, context []int, o train.SampleOptions) (train.Sample, int, error) {
	c, version, err := d.P.SampleTurnSnapshot(ctx, context, d.options(o))
	if err != nil {
		return train.Sample{}, 0, err
	}
	return samplesOf([]model.Completion{c})[0], version, nil
}

// StartSnapshots implements SnapshotSampler.
func (d *Device) StartSnapshots() { d.P.StartSnapshots() }

// Logprobs implements train.Policy.
func (d *Device) Logprobs(ctx context.Context, seqs []train.Sequence) ([][]float64, error) {
	lp, err := d.P.Logprobs(ctx, batchOf(seqs, 0))
	return widenAll(lp), err
}

// Backward implements train.Policy.
func (d *Device) Backward(ctx context.Context, seqs []train.Sequence, cot [][]float64) ([][]float64, float64, error) {
	lp, entropy, err := d.P.Backward(ctx, batchOf(seqs, 0), narrowAll(cot))
	return widenAll(lp), entropy, err
}

// Step implements train.Policy.
func (d *Device) Step() (gradNorm, lr float64) { return d.P.Step() }

// Version implements train.Policy.
func (d *Device) Version() int { return d.P.Version() }

// Save implements Store: the device's weights and moments are copied to the
// host first, then written as Model writes them; with a Host that is a
// model.Layout (a model read from its files straight onto the device) they
// are streamed from the device a tensor at a time instead.
func (d *Device) Save(ctx context.Context, dir string) error {
	if !d.Host.HasWeights() && d.P.LoRA == nil {
		return d.saveStreamed(dir)
	}
	if err := d.P.Sync(d.Host); err != nil {
		return fmt.Errorf("save policy: %w", err)
	}
	rng, err := d.P.RNGState()
	if err != nil {
		return fmt.Errorf("save policy: %w", err)
	}
	if d.P.LoRA != nil {
		return model.SaveAdapter(filepath.Join(dir, "policy"), model.Adapter{LoRA: d.P.LoRA, BaseModel: d.BasePath,
			Optim: d.P.Optim, Tokenizer: d.Tokenizer, Files: d.Format.Files, Extra: map[string][]byte{"sampler_rng": rng}})
	}
	var ref *model.Model
	if d.Ref != nil {
		ref = d.Host.Clone()
		if err := d.Ref.R.Engine.Download(ref, nil); err != nil {
			return fmt.Errorf("save reference: %w", err)
		}
	}
	var refCk *model.Checkpoint
	if ref != nil {
		refCk = &model.Checkpoint{Model: ref}
	}
	return saveCheckpoint(dir, model.Checkpoint{Model: d.Host, Optim: d.P.Optim, Tokenizer: d.Tokenizer, Format: d.Format}, rng, refCk)
}

// saveStreamed is Save for a Host without weights: the device's weights,
// moments and reference go to the files a tensor at a time.
func (d *Device) saveStreamed(dir string) error {
	rng, err := d.P.RNGState()
	if err != nil {
		return fmt.Errorf("save policy: %w", err)
	}
	e := d.P.Engine
	ck := model.Checkpoint{Model: d.Host, Optim: d.P.Optim, Tokenizer: d.Tokenizer, Format: d.Format,
		ReadWeight: func(i int, dst []float32) error { return e.ReadParam(i, cuda.Weights, dst) },
		ReadMoment: func(i, which int, dst []float32) error { return e.ReadParam(i, cuda.Slot(which), dst) }}
	var ref *model.Checkpoint
	if d.Ref != nil {
		re := d.Ref.R.Engine
		ref = &model.Checkpoint{Model: d.Host, ReadWeight: func(i int, dst []float32) error { return re.ReadParam(i, cuda.Weights, dst) }}
	}
	return saveCheckpoint(dir, ck, rng, ref)
}

// loadStreamed is Load for a Host without weights: the checkpoint goes
// onto the device a tensor at a time. A checkpoint that fails part-way
// leaves the device part-loaded: the run stops with the error.
func (d *Device) loadStreamed(dir string) error {
	e := d.P.Engine
	o, extra, err := model.LoadStreamed(filepath.Join(dir, "policy"), d.Host.Cfg, d.Host, func(i, which int, src []float32) error {
		return e.WriteParam(i, cuda.Slot(which), src)
	})
	if err != nil {
		return err
	}
	rng, err := samplerRNG(extra, filepath.Join(dir, "policy"))
	if err != nil {
		return err
	}
	if o != nil {
		d.P.Optim = o // its moments are on the device now
	}
	if err := d.P.SetRNGState(rng); err != nil {
		return fmt.Errorf("load policy: sampler rng: %w", err)
	}
	if d.Ref != nil {
		if err := checkReference(dir); err != nil {
			return err
		}
		re := d.Ref.R.Engine
		if _, _, err := model.LoadStreamed(filepath.Join(dir, "reference"), d.Host.Cfg, d.Host, func(i, which int, src []float32) error {
			return re.WriteParam(i, cuda.Slot(which), src)
		}); err != nil {
			return err
		}
	}
	return d.P.Republish()
}

// Load implements train.Store.
func (d *Device) Load(ctx context.Context, dir string) error {
	if d.P.LoRA != nil {
		return d.loadLoRA(dir)
	}
	if !d.Host.HasWeights() {
		return d.loadStreamed(dir)
	}
	ck, ref, rng, err := loadCheckpoint(dir, d.Host.Cfg, d.Ref != nil)
	if err != nil {
		return err
	}
	if err := d.Host.CopyWeightsFrom(ck.Model); err != nil {
		return err
	}
	if err := d.P.Load(ck.Model, ck.Optim); err != nil {
		return fmt.Errorf("load policy: %w", err)
	}
	if err := d.P.SetRNGState(rng); err != nil {
		return fmt.Errorf("load policy: sampler rng: %w", err)
	}
	if ref != nil {
		return d.Ref.R.Engine.Upload(ref.Model)
	}
	return nil
}

// BeginStage trains the policy with another optimiser and schedule (the
// warm start's) until end gives it back its own; the weights stay on the
// device. from, when set, replaces them first, with opt's moments (a stage
// continued from its checkpoint).
func (d *Device) BeginStage(from *model.Model, opt *model.AdamW, sched model.Schedule) (end func(), err error) {
	p := d.P
	own, ownSched := p.Optim, p.Schedule
	if from != nil {
		err = p.Load(from, opt)
	} else {
		err = p.UseOptim(opt)
	}
	if err != nil {
		p.Optim = own
		return nil, fmt.Errorf("begin stage: %w", err)
	}
	p.Schedule = sched
	return func() { p.Optim, p.Schedule = own, ownSched }, nil
}

// Restart starts the policy's own optimiser afresh on the weights a stage
// left on the device (its moments uploaded; they have not moved), and makes
// a reference that is a copy of the policy (not a LoRA's adapters-off
// base) a copy of those weights, device to device: a warm start's weights
// never travel back to the host for GRPO to go on from them.
func (d *Device) Restart() error {
	if err := d.P.UseOptim(d.P.Optim); err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	if d.Ref != nil && d.P.LoRA == nil {
		if err := d.Ref.R.Engine.CopyWeightsFrom(d.P.Engine); err != nil {
			return fmt.Errorf("restart: reference: %w", err)
		}
	}
	return d.P.Republish()
}

// DeviceReference is the frozen reference on a device.
type DeviceReference struct{ R *cuda.Reference }

// Logprobs implements train.Reference.
func (r *DeviceReference) Logprobs(ctx context.Context, seqs []train.Sequence) ([][]float64, error) {
	lp, err := r.R.Logprobs(ctx, batchOf(seqs, 0))
	return widenAll(lp), err
}

func samplesOf(cs []model.Completion) []train.Sample {
	out := make([]train.Sample, len(cs))
	for i, c := range cs {
		out[i] = train.Sample{Tokens: c.Tokens, Logprobs: widen(c.Logprobs), Truncated: c.Truncated}
	}
	return out
}

func narrowAll(xs [][]float64) [][]float32 {
	out := make([][]float32, len(xs))
	for i, row := range xs {
		out[i] = make([]float32, len(row))
		for j, x := range row {
			out[i][j] = float32(x)
		}
	}
	return out
}

// loadLoRA restores a LoRA checkpoint's adapters, moments and sampler state
// onto the device (the base stays as it is).
func (d *Device) loadLoRA(dir string) error {
	a, rng, err := loadAdapterCheckpoint(dir, d.Host)
	if err != nil {
		return err
	}
	if a.LoRA.NumParams() != d.P.LoRA.NumParams() {
		return fmt.Errorf("load policy: the checkpoint's adapters (rank %d, %v) differ from lora.* (rank %d, %v)",
			a.LoRA.Cfg.Rank, a.LoRA.Cfg.Targets, d.P.LoRA.Cfg.Rank, d.P.LoRA.Cfg.Targets)
	}
	copy(d.P.LoRA.Weights(), a.LoRA.Weights())
	if err := d.P.LoadLoRA(a.Optim); err != nil {
		return fmt.Errorf("load policy: %w", err)
	}
	if err := d.P.SetRNGState(rng); err != nil {
		return fmt.Errorf("load policy: sampler rng: %w", err)
	}
	return nil
}
