package cuda

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/swetui/swetui/internal/snapshot"
	"github.com/swetui/swetui/model"
)

// Policy is the trainable policy on a device, with the methods of
// train.Policy and train.SnapshotSampler in model-level types: it owns the
// engine, the optimiser's hyper-parameters and step, the learning-rate
// schedule, the sampler's stop tokens and random source, and the snapshot
// engines that SampleSnapshot reads while Backward and Step run.
type Policy struct {
	Engine   *Engine
	Optim    *model.AdamW // hyper-parameters and Step; its moments live on the device
	Schedule model.Schedule
	GradClip float64
	// Temp is the softmax temperature of training logprobs (the sampling
	// temperature, so ratios compare like with like); 0 means 1.
	Temp float64
	Stop []int
	// LoRA mirrors the device's adapters on the host (Sync fills it); nil
	// for full fine-tuning.
	LoRA *model.LoRA
	// TurnSlots is how many agent trajectories keep their caches between
	// turns at once (the group size; 0 means 1).
	TurnSlots int

	rngMu sync.Mutex
	pcg   *rand.PCG // the sampler's random source (RNGState for checkpoints)
	rng   *rand.Rand

	snaps snapshot.Set[*Engine] // copies the async loop samples from
}

// NewPolicy puts m on dev for training with opt's hyper-parameters (its
// moments, when it has taken steps, are uploaded too).
// o is the engine's (Train is implied); with o.LoRA only the adapters
// train (opt then holds their moments) and the base weights stay frozen.
func NewPolicy(dev Device, m *model.Model, o Options, opt *model.AdamW, sched model.Schedule, gradClip float64, stop []int, seed uint64) (*Policy, error) {
	return newPolicy(dev, m, o, opt, sched, gradClip, stop, seed, nil)
}

// newPolicy is NewPolicy for a rank of a data-parallel run, whose
// engine's Step reaches the other ranks through group.
func newPolicy(dev Device, m *model.Model, o Options, opt *model.AdamW, sched model.Schedule, gradClip float64, stop []int, seed uint64, group *Comms) (*Policy, error) {
	o.Train = true
	lora := o.LoRA
	e, err := NewEngine(dev, m, o)
	if err != nil {
		return nil, err
	}
	e.group = group
	if opt.Step > 0 {
		if lora != nil {
			err = e.UploadLoRA(lora, opt)
		} else {
			err = e.UploadOptim(opt)
		}
		if err != nil {
			e.Close()
			return nil, err
		}
	}
	p := &Policy{Engine: e, Optim: opt, Schedule: sched, GradClip: gradClip, Stop: stop, LoRA: lora, pcg: rand.NewPCG(seed, 0x5a4d)}
	p.rng = rand.New(p.pcg)
	return p, nil
}

// NewSampler puts m on dev to sample only (eval): no gradients, no
// moments; Backward and Step fail on it.
func NewSampler(dev Device, m *model.Model, o Options, temp float64, stop []int, seed uint64) (*Policy, error) {
	o.Train, o.LoRA = false, nil
	e, err := NewEngine(dev, m, o)
	if err != nil {
		return nil, err
	}
	p := &Policy{Engine: e, Optim: &model.AdamW{}, Temp: temp, Stop: stop, pcg: rand.NewPCG(seed, 0x5a4d)}
	p.rng = rand.New(p.pcg)
	return p, nil
}

func (p *Policy) temperature() float32 {
	if p.Temp > 0 {
		return float32(p.Temp)
	}
	return 1
}

// Sample draws n completions of prompt from the current weights.
func (p *Policy) Sample(ctx context.Context, prompt []int, n int, o model.SampleOptions) ([]model.Completion, error) {
	return p.sampleFrom(ctx, p.Engine, prompt, n, o)
}

func (p *Policy) sampleFrom(ctx context.Context, e *Engine, prompt []int, n int, o model.SampleOptions) ([]model.Completion, error) {
	p.rngMu.Lock()
	defer p.rngMu.Unlock()
	if o.Stop == nil {
		o.Stop = p.Stop
	}
	if o.Rand == nil {
		o.Rand = p.rng
	}
	return e.Sample(ctx, prompt, n, o)
}

// SampleTurn draws one reply to an agent trajectory's context, its keys
// and values kept for the next turn (Engine.SampleTurn).
func (p *Policy) SampleTurn(ctx context.Context, context []int, o model.SampleOptions) (model.Completion, error) {
	return p.sampleTurnFrom(ctx, p.Engine, context, o)
}

// SampleTurnSnapshot is SampleTurn from the newest snapshot, with its
// version.
func (p *Policy) SampleTurnSnapshot(ctx context.Context, context []int, o model.SampleOptions) (model.Completion, int, error) {
	e, version, release, err := p.snaps.Acquire()
	if err != nil {
		return model.Completion{}, 0, err
	}
	defer release()
	c, err := p.sampleTurnFrom(ctx, e, context, o)
	return c, version, err
}

func (p *Policy) sampleTurnFrom(ctx context.Context, e *Engine, context []int, o model.SampleOptions) (model.Completion, error) {
	p.rngMu.Lock()
	defer p.rngMu.Unlock()
	if o.Stop == nil {
		o.Stop = p.Stop
	}
	if o.Rand == nil {
		o.Rand = p.rng
	}
	return e.SampleTurn(ctx, context, p.TurnSlots, o)
}

// Logprobs returns each completion token's logprob under the current
// weights at the policy's temperature (b.Temperature is overridden).
func (p *Policy) Logprobs(ctx context.Context, b model.Batch) ([][]float32, error) {
	b.Temperature = p.temperature()
	res, err := p.Engine.Logprobs(ctx, b)
	if err != nil {
		return nil, err
	}
	return res.Logprobs, nil
}

// Backward accumulates the gradient of Σ cot·logprob and returns the
// logprobs and the mean token entropy.
func (p *Policy) Backward(ctx context.Context, b model.Batch, cot [][]float32) ([][]float32, float64, error) {
	b.Temperature = p.temperature()
	res, err := p.Engine.Backward(ctx, b, cot)
	if err != nil {
		return nil, 0, err
	}
	return res.Logprobs, res.MeanEntropy(), nil
}

// Step clips, applies AdamW at the scheduled rate and clears the
// gradients; it returns the pre-clip norm and the learning rate. A device
// failure here cannot be retried, so it panics as policy.Model
// does on a wiring bug.
func (p *Policy) Step() (gradNorm, lr float64) {
	norm, lr, err := p.step()
	if err != nil {
		panic(fmt.Errorf("cuda policy: %w", err))
	}
	return norm, lr
}

func (p *Policy) step() (gradNorm, lr float64, err error) {
	lr = p.Schedule.At(p.Optim.Step)
	norm, err := p.Engine.Step(p.Optim, lr, p.GradClip)
	if err != nil {
		return 0, 0, fmt.Errorf("step: %w", err)
	}
	if p.snapshotsStarted() {
		if err := p.publishSnapshot(); err != nil {
			return 0, 0, fmt.Errorf("snapshot: %w", err)
		}
	}
	return norm, lr, nil
}

// Version counts the updates applied so far.
func (p *Policy) Version() int { return p.Optim.Step }

func (p *Policy) snapshotsStarted() bool { return p.snaps.Started() }

// StartSnapshots takes the first copy; call it while no update runs.
func (p *Policy) StartSnapshots() {
	if !p.snapshotsStarted() {
		if err := p.publishSnapshot(); err != nil {
			panic(fmt.Errorf("cuda policy: snapshot: %w", err))
		}
	}
}

// SampleSnapshot draws like Sample from the newest snapshot and returns
// the version it sampled from.
func (p *Policy) SampleSnapshot(ctx context.Context, prompt []int, n int, o model.SampleOptions) ([]model.Completion, int, error) {
	e, version, release, err := p.snaps.Acquire()
	if err != nil {
		return nil, 0, err
	}
	defer release()
	out, err := p.sampleFrom(ctx, e, prompt, n, o)
	return out, version, err
}

// publishSnapshot copies the weights into a free snapshot engine on the
// same device (a device-to-device copy) and makes it the newest.
func (p *Policy) publishSnapshot() error {
	return p.snaps.Publish(p.Version(), func(spare *Engine, ok bool) (*Engine, error) {
		if !ok {
			return p.Engine.forwardCopy()
		}
		return spare, spare.CopyWeightsFrom(p.Engine)
	})
}

// RNGState is the sampler's random source, for a checkpoint's extra files.
func (p *Policy) RNGState() ([]byte, error) {
	p.rngMu.Lock()
	defer p.rngMu.Unlock()
	return p.pcg.MarshalBinary()
}

// SetRNGState restores what RNGState returned.
func (p *Policy) SetRNGState(b []byte) error {
	p.rngMu.Lock()
	defer p.rngMu.Unlock()
	return p.pcg.UnmarshalBinary(b)
}

// Sync copies the device's weights and AdamW moments into m and p.Optim
// (for checkpoints: model.Save then writes them as the CPU model would);
// with LoRA, the adapters and their moments into p.LoRA and p.Optim.
func (p *Policy) Sync(m *model.Model) error {
	if p.LoRA != nil { // the base never moves: only the adapters come back
		return p.Engine.DownloadLoRA(p.LoRA, p.Optim)
	}
	return p.Engine.Download(m, p.Optim)
}

// Load replaces the device's weights with m's and its moments with opt's
// (a resumed checkpoint); p.Optim becomes opt.
func (p *Policy) Load(m *model.Model, opt *model.AdamW) error {
	if err := p.Engine.Upload(m); err != nil {
		return err
	}
	if p.LoRA != nil {
		if err := p.Engine.UploadLoRA(p.LoRA, opt); err != nil {
			return err
		}
		if opt != nil {
			p.Optim = opt
		}
	} else if opt != nil {
		if err := p.Engine.UploadOptim(opt); err != nil {
			return err
		}
		p.Optim = opt
	}
	if p.snapshotsStarted() {
		return p.publishSnapshot()
	}
	return nil
}

// UseOptim makes opt the policy's optimiser, its moments uploaded in place
// of the device's (a stage's own optimiser, or a fresh one after it); the
// weights stay as they are.
func (p *Policy) UseOptim(opt *model.AdamW) error {
	if p.LoRA != nil {
		if err := p.Engine.UploadLoRA(p.LoRA, opt); err != nil {
			return err
		}
	} else if err := p.Engine.UploadOptim(opt); err != nil {
		return err
	}
	p.Optim = opt
	return nil
}

// LoadLoRA uploads p.LoRA's adapters (a resumed checkpoint's, copied in)
// and opt's moments when non-nil; p.Optim becomes opt.
func (p *Policy) LoadLoRA(opt *model.AdamW) error {
	if err := p.Engine.UploadLoRA(p.LoRA, opt); err != nil {
		return err
	}
	if opt != nil {
		p.Optim = opt
	}
	if p.snapshotsStarted() {
		return p.publishSnapshot()
	}
	return nil
}

// ReadParam copies parameter i's arena s into dst (Engine.ReadParam): a
// checkpoint streamed from the device.
func (p *Policy) ReadParam(i int, s Slot, dst []float32) error { return p.Engine.ReadParam(i, s, dst) }

// WriteParam copies src into parameter i's arena s (Engine.WriteParam).
func (p *Policy) WriteParam(i int, s Slot, src []float32) error {
	return p.Engine.WriteParam(i, s, src)
}

// SetOptim makes o the policy's optimiser without uploading its moments
// (a streamed resume has written them already).
func (p *Policy) SetOptim(o *model.AdamW) { p.Optim = o }

// BeginStage trains with another optimiser and schedule (the warm
// start's) until end gives the policy back its own; from, when set,
// replaces the weights first, with opt's moments.
func (p *Policy) BeginStage(from *model.Model, opt *model.AdamW, sched model.Schedule) (end func(), err error) {
	own, ownSched := p.Optim, p.Schedule
	if from != nil {
		err = p.Load(from, opt)
	} else {
		err = p.UseOptim(opt)
	}
	if err != nil {
		p.Optim = own
		return nil, err
	}
	p.Schedule = sched
	return func() { p.Optim, p.Schedule = own, ownSched }, nil
}

// Republish refreshes the sampling snapshot, once snapshots have started,
// after the weights were written in place (a streamed resume).
func (p *Policy) Republish() error {
	if p.snapshotsStarted() {
		return p.publishSnapshot()
	}
	return nil
}

// Close frees the policy's and its snapshots' device memory.
func (p *Policy) Close() error {
	for _, e := range p.snaps.Drain() {
		e.Close()
	}
	return p.Engine.Close()
}

// forwardCopy is a forward-only engine on the same device with e's weights.
func (e *Engine) forwardCopy() (*Engine, error) {
	c := &Engine{dev: e.dev, cfg: e.cfg, act: e.act, np: e.np, embed: e.embed, norm: e.norm, lm: e.lm,
		layers: e.layers, decays: e.decays, plans: map[[3]int]*plan{}, uses: map[[3]int]int{},
		bf16Base: e.bf16Base, nMaster: e.nMaster}
	c.opts = e.opts
	c.opts.Train = false
	if e.lora != nil {
		return e.adapterCopy(c)
	}
	err := e.dev.Do(func() error {
		var err error
		alloc := func(dst *Tensor, dt DType, n int) {
			if err == nil {
				*dst, err = e.dev.Alloc(dt, n)
			}
		}
		alloc(&c.w, F32, e.nMaster)
		if c.act == F32 {
			c.wc = c.w
		} else {
			alloc(&c.wc, c.act, e.np)
		}
		alloc(&c.cos, F32, e.cos.N)
		alloc(&c.sin, F32, e.sin.N)
		if err != nil {
			return err
		}
		e.dev.Copy(c.cos, e.cos)
		e.dev.Copy(c.sin, e.sin)
		return nil
	})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("cuda engine: copy: %w", err)
	}
	if err := c.CopyWeightsFrom(e); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Reference is the frozen KL reference on a device (forward only).
type Reference struct {
	Engine *Engine
	// Temp is the softmax temperature; 0 means 1.
	Temp float64
	// base runs Engine with its adapters off (a LoRA policy's own engine).
	base bool
}

// BaseReference is a LoRA policy's KL reference: its frozen base, read
// from the policy's own engine with the adapters off (no second copy).
func BaseReference(p *Policy, temp float64) *Reference {
	return &Reference{Engine: p.Engine, Temp: temp, base: true}
}

// NewReference puts m's weights on dev, forward only (o.Train and o.LoRA
// are ignored).
func NewReference(dev Device, m *model.Model, o Options, temp float64) (*Reference, error) {
	o.Train, o.LoRA = false, nil
	e, err := NewEngine(dev, m, o)
	if err != nil {
		return nil, err
	}
	return &Reference{Engine: e, Temp: temp}, nil
}

// Logprobs returns each completion token's logprob under the reference.
func (r *Reference) Logprobs(ctx context.Context, b model.Batch) ([][]float32, error) {
	b.Temperature = 1
	if r.Temp > 0 {
		b.Temperature = float32(r.Temp)
	}
	run := r.Engine.Logprobs
	if r.base {
		run = r.Engine.LogprobsBase
	}
	res, err := run(ctx, b)
	if err != nil {
		return nil, err
	}
	return res.Logprobs, nil
}
