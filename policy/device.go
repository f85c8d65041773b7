package policy

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/model/cuda"
	"github.com/swetui/swetui/train"
)

// Device is the policy on a model/cuda device (model.device = cuda or
// cuda:N) behind the Policy, SnapshotSampler and Store interfaces, so that
// GRPO (sync and async) runs on it unchanged. Host is the CPU copy that
// checkpoints are written from and read into, in the CPU model's format.
type Device struct {
	// P is the policy on one GPU, or rank 0's replica when DP is set.
	P *cuda.Policy
	// DP, when set, is the policy on several GPUs (model.device =
	// cuda:0,1,...): every training call goes to it.
	DP        *cuda.DataParallel
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
	_ train.GPUReporter     = (*Device)(nil)
	_ train.Store           = (*Device)(nil)
	_ train.Reference       = (*DeviceReference)(nil)
)

// trainer is what Device asks of the policy, on one GPU (*cuda.Policy) or
// on several (*cuda.DataParallel).
type trainer interface {
	Sample(ctx context.Context, prompt []int, n int, o model.SampleOptions) ([]model.Completion, error)
	SampleSnapshot(ctx context.Context, prompt []int, n int, o model.SampleOptions) ([]model.Completion, int, error)
	SampleTurn(ctx context.Context, context []int, o model.SampleOptions) (model.Completion, error)
	SampleTurnSnapshot(ctx context.Context, context []int, o model.SampleOptions) (model.Completion, int, error)
	StartSnapshots()
	Logprobs(ctx context.Context, b model.Batch) ([][]float32, error)
	Backward(ctx context.Context, b model.Batch, cot [][]float32) ([][]float32, float64, error)
	Step() (gradNorm, lr float64)
	Version() int
	Sync(m *model.Model) error
	Load(m *model.Model, opt *model.AdamW) error
	LoadLoRA(opt *model.AdamW) error
	UseOptim(opt *model.AdamW) error
	SetOptim(opt *model.AdamW)
	BeginStage(from *model.Model, opt *model.AdamW, sched model.Schedule) (end func(), err error)
	Republish() error
	RNGState() ([]byte, error)
	SetRNGState(b []byte) error
	ReadParam(i int, s cuda.Slot, dst []float32) error
	WriteParam(i int, s cuda.Slot, src []float32) error
}

var (
	_ trainer = (*cuda.Policy)(nil)
	_ trainer = (*cuda.DataParallel)(nil)
)

// GPUShares is each GPU's share of a run on several (none on one).
func (d *Device) GPUShares() []event.GPUShare {
	if d.DP == nil {
		return nil
	}
	var out []event.GPUShare
	for _, s := range d.DP.Shares() {
		// A conversion: it compiles only while the two have the same fields.
		out = append(out, event.GPUShare(s))
	}
	return out
}

// Where names the device the policy is on: the GPU, the engine's CPU
// kernels, or the GPUs of a data-parallel run and how it shards.
func (d *Device) Where() string {
	if d.DP != nil {
		names := make([]string, len(d.DP.Ranks))
		for r, p := range d.DP.Ranks {
			names[r] = p.Engine.Device().Info().String()
		}
		how := "data-parallel"
		if d.DP.Ranks[0].Engine.Sharded() {
			how += ", optimiser sharded (ZeRO-1)"
		}
		return fmt.Sprintf("%d GPUs, %s: %s", len(names), how, strings.Join(names, "; "))
	}
	info := d.P.Engine.Device().Info()
	if info.Kind == "cpu" {
		return "the device engine on its CPU kernels"
	}
	return info.String()
}

// Optim is the run's optimiser (rank 0's on several GPUs, which Sync
// gathers the moments into).
func (d *Device) Optim() *model.AdamW { return d.P.Optim }

// UploadReference writes m into the frozen KL reference on the device; a
// no-op without one.
func (d *Device) UploadReference(m *model.Model) error {
	if d.Ref == nil {
		return nil
	}
	return d.Ref.R.Engine.Upload(m)
}

// ReadWeight reads parameter i's weights from the device (rank 0's replica
// on several GPUs: the replicas are equal), for a checkpoint streamed a
// tensor at a time.
func (d *Device) ReadWeight(i int, dst []float32) error {
	return d.P.Engine.ReadParam(i, cuda.Weights, dst)
}

// t is the policy every training call goes to.
func (d *Device) t() trainer {
	if d.DP != nil {
		return d.DP
	}
	return d.P
}

func (d *Device) options(o train.SampleOptions) model.SampleOptions {
	return model.SampleOptions{Temperature: float32(o.Temperature), TopP: float32(o.TopP), MaxNewTokens: o.MaxNewTokens}
}

// Sample implements train.Policy.
func (d *Device) Sample(ctx context.Context, prompt []int, n int, o train.SampleOptions) ([]train.Sample, error) {
	cs, err := d.t().Sample(ctx, prompt, n, d.options(o))
	return samplesOf(cs), err
}

// SampleSnapshot implements SnapshotSampler.
func (d *Device) SampleSnapshot(ctx context.Context, prompt []int, n int, o train.SampleOptions) ([]train.Sample, int, error) {
	cs, version, err := d.t().SampleSnapshot(ctx, prompt, n, d.options(o))
	return samplesOf(cs), version, err
}

// SampleTurn implements train.TurnPolicy.
func (d *Device) SampleTurn(ctx context.Context, context []int, o train.SampleOptions) (train.Sample, error) {
	c, err := d.t().SampleTurn(ctx, context, d.options(o))
	if err != nil {
		return train.Sample{}, err
	}
	return samplesOf([]model.Completion{c})[0], nil
}

// SampleTurnSnapshot implements train.TurnPolicy.
func (d *Device) SampleTurnSnapshot(ctx context.Context, context []int, o train.SampleOptions) (train.Sample, int, error) {
	c, version, err := d.t().SampleTurnSnapshot(ctx, context, d.options(o))
	if err != nil {
		return train.Sample{}, 0, err
	}
	return samplesOf([]model.Completion{c})[0], version, nil
}

// StartSnapshots implements SnapshotSampler.
func (d *Device) StartSnapshots() { d.t().StartSnapshots() }

// Logprobs implements train.Policy.
func (d *Device) Logprobs(ctx context.Context, seqs []train.Sequence) ([][]float64, error) {
	lp, err := d.t().Logprobs(ctx, batchOf(seqs, 0))
	return widenAll(lp), err
}

// Backward implements train.Policy.
func (d *Device) Backward(ctx context.Context, seqs []train.Sequence, cot [][]float64) ([][]float64, float64, error) {
	lp, entropy, err := d.t().Backward(ctx, batchOf(seqs, 0), narrowAll(cot))
	return widenAll(lp), entropy, err
}

// Step implements train.Policy.
func (d *Device) Step() (gradNorm, lr float64) { return d.t().Step() }

// Version implements train.Policy.
func (d *Device) Version() int { return d.t().Version() }

// Save implements Store: the device's weights and moments are copied to the
// host first, then written as Model writes them; with a Host that is a
// model.Layout (a model read from its files straight onto the device) they
// are streamed from the device a tensor at a time instead.
func (d *Device) Save(ctx context.Context, dir string) error {
	if !d.Host.HasWeights() && d.P.LoRA == nil {
		return d.saveStreamed(dir)
	}
	if err := d.t().Sync(d.Host); err != nil {
		return fmt.Errorf("save policy: %w", err)
	}
	rng, err := d.t().RNGState()
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
	rng, err := d.t().RNGState()
	if err != nil {
		return fmt.Errorf("save policy: %w", err)
	}
	e := d.t()
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
	e := d.t()
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
		d.t().SetOptim(o) // its moments are on the device now
	}
	if err := d.t().SetRNGState(rng); err != nil {
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
	return d.t().Republish()
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
	if err := d.t().Load(ck.Model, ck.Optim); err != nil {
		return fmt.Errorf("load policy: %w", err)
	}
	if err := d.t().SetRNGState(rng); err != nil {
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
	end, err = d.t().BeginStage(from, opt, sched)
	if err != nil {
		return nil, fmt.Errorf("begin stage: %w", err)
	}
	return end, nil
}

// Restart starts the policy's own optimiser afresh on the weights a stage
// left on the device (its moments uploaded; they have not moved), and makes
// a reference that is a copy of the policy (not a LoRA's adapters-off
// base) a copy of those weights, device to device: a warm start's weights
// never travel back to the host for GRPO to go on from them.
func (d *Device) Restart() error {
	if err := d.t().UseOptim(d.P.Optim); err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	if d.Ref != nil && d.P.LoRA == nil {
		if err := d.Ref.R.Engine.CopyWeightsFrom(d.P.Engine); err != nil {
			return fmt.Errorf("restart: reference: %w", err)
		}
	}
	return d.t().Republish()
}

// SyncInto copies the device's weights into m and, with opt, the moments
// into opt (every rank's part under ZeRO-1); opt nil syncs into the
// policy's own optimiser.
func (d *Device) SyncInto(m *model.Model, opt *model.AdamW) error {
	if opt == nil {
		return d.t().Sync(m)
	}
	if err := d.P.Engine.Download(m, opt); err != nil {
		return err
	}
	if d.DP == nil {
		return nil
	}
	for r, rp := range d.DP.Ranks[1:] {
		if rp.Engine.Sharded() {
			if err := rp.Engine.DownloadMoments(opt); err != nil {
				return fmt.Errorf("rank %d: %w", r+1, err)
			}
		}
	}
	return nil
}

// LoadModel replaces the weights on every GPU with m's and the moments
// with opt's.
func (d *Device) LoadModel(m *model.Model, opt *model.AdamW) error { return d.t().Load(m, opt) }

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
	if err := d.t().LoadLoRA(a.Optim); err != nil {
		return fmt.Errorf("load policy: %w", err)
	}
	if err := d.t().SetRNGState(rng); err != nil {
		return fmt.Errorf("load policy: sampler rng: %w", err)
	}
	return nil
}
