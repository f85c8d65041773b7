package policy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"

	"github.com/swetui/swetui/internal/snapshot"
	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/prompt"
	"github.com/swetui/swetui/train"
)

// Model is the gorgonia transformer behind the Policy, Reference and
// Store interfaces: it owns the optimiser, the learning-rate schedule and the
// sampler's random source, so a checkpoint restores all of them.
type Model struct {
	Model     *model.Model
	Optim     *model.AdamW
	Schedule  model.Schedule
	Tokenizer *model.Tokenizer
	GradClip  float64
	// Ref, when set, is the frozen reference saved beside the policy.
	Ref *ModelReference
	// Temp is the softmax temperature of training logprobs: the sampling
	// temperature, so ratios compare like with like.
	Temp float64
	// Format is how checkpoints write the weights (run.save_dtype, the init
	// model's files); the fp32 masters are kept whatever the dtype.
	Format model.Format

	stop  []int
	rngMu sync.Mutex // the sampler's random source: samplers and Save share it
	pcg   *rand.PCG
	rng   *rand.Rand

	// snaps are the weight copies SampleSnapshot draws from.
	snaps snapshot.Set[*model.Model]

	lora *loraMode // nil: every weight trains (lora.go)

	turns turnCache // agent trajectories' caches (turns.go)
}

// NewModel wraps m; sampling stops at ChatML's end-of-turn and end-of-text
// tokens (SetStopTokens for another chat format's).
func NewModel(m *model.Model, opt *model.AdamW, sched model.Schedule, tok *model.Tokenizer, gradClip float64, seed uint64) *Model {
	p := &Model{Model: m, Optim: opt, Schedule: sched, Tokenizer: tok, GradClip: gradClip}
	p.stop = prompt.ChatFormat{}.StopTokens(tok)
	p.pcg = rand.NewPCG(seed, 0x5a4d)
	p.rng = rand.New(p.pcg)
	return p
}

// Sample implements train.Policy.
func (p *Model) Sample(ctx context.Context, prompt []int, n int, o train.SampleOptions) ([]train.Sample, error) {
	return p.sampleFrom(ctx, p.Model, prompt, n, o)
}

// StartSnapshots implements SnapshotSampler.
func (p *Model) StartSnapshots() {
	if !p.snapshotsStarted() {
		p.publishSnapshot()
	}
}

func (p *Model) snapshotsStarted() bool { return p.snaps.Started() }

// SampleSnapshot implements SnapshotSampler.
func (p *Model) SampleSnapshot(ctx context.Context, prompt []int, n int, o train.SampleOptions) ([]train.Sample, int, error) {
	m, version, release, err := p.snaps.Acquire()
	if err != nil {
		return nil, 0, err
	}
	defer release()
	out, err := p.sampleFrom(ctx, m, prompt, n, o)
	return out, version, err
}

// publishSnapshot copies the weights into a free snapshot and makes it the
// newest. Only the goroutine that updates the weights calls it.
func (p *Model) publishSnapshot() {
	err := p.snaps.Publish(p.Version(), func(spare *model.Model, ok bool) (*model.Model, error) {
		if !ok {
			return p.Model.Clone(), nil
		}
		return spare, spare.CopyWeightsFrom(p.Model)
	})
	if err != nil {
		panic(err) // cloned from this model: a mismatch is a wiring bug
	}
}

func (p *Model) sampleFrom(ctx context.Context, m *model.Model, prompt []int, n int, o train.SampleOptions) ([]train.Sample, error) {
	p.rngMu.Lock()
	defer p.rngMu.Unlock()
	cs, err := m.Sample(ctx, prompt, n, model.SampleOptions{Temperature: float32(o.Temperature),
		TopP: float32(o.TopP), MaxNewTokens: o.MaxNewTokens, Stop: p.stop, Rand: p.rng})
	if err != nil {
		return nil, err
	}
	return samplesOf(cs), nil
}

func batchOf(seqs []train.Sequence, temperature float64) model.Batch {
	b := model.Batch{Tokens: make([][]int, len(seqs)), PromptLen: make([]int, len(seqs)), Temperature: float32(temperature)}
	for i, s := range seqs {
		b.Tokens[i] = append(append(make([]int, 0, len(s.Prompt)+len(s.Completion)), s.Prompt...), s.Completion...)
		b.PromptLen[i] = len(s.Prompt)
	}
	return b
}

var (
	_ train.SnapshotSampler = (*Model)(nil)
	_ train.Store           = (*Model)(nil)
	_ train.Reference       = (*ModelReference)(nil)
)

// Logprobs implements train.Policy.
func (p *Model) Logprobs(ctx context.Context, seqs []train.Sequence) ([][]float64, error) {
	res, err := p.Model.Logprobs(ctx, batchOf(seqs, p.temperature()))
	if err != nil {
		return nil, err
	}
	return widenAll(res.Logprobs), nil
}

// Backward implements train.Policy.
func (p *Model) Backward(ctx context.Context, seqs []train.Sequence, cot [][]float64) ([][]float64, float64, error) {
	res, err := p.Model.Backward(ctx, batchOf(seqs, p.temperature()), narrowAll(cot))
	if err != nil {
		return nil, 0, err
	}
	return widenAll(res.Logprobs), res.MeanEntropy(), nil
}

// Step implements Policy: clip, AdamW at the scheduled rate, clear.
func (p *Model) Step() (gradNorm, lr float64) {
	lr = p.Schedule.At(p.Optim.Step)
	if p.lora != nil {
		gradNorm = p.stepLoRA(lr)
	} else {
		gradNorm = p.Model.ClipGradNorm(p.GradClip)
		if err := p.Optim.Update(p.Model, lr); err != nil {
			panic(err) // the optimiser was built for this model: a mismatch is a wiring bug
		}
	}
	p.Model.ZeroGrad()
	p.turns.drop()
	p.refreshSnapshot()
	return gradNorm, lr
}

// refreshSnapshot publishes the new weights to snapshot samplers, once
// StartSnapshots has been called.
func (p *Model) refreshSnapshot() {
	if p.snapshotsStarted() {
		p.publishSnapshot()
	}
}

// Version implements Policy: updates taken by this optimiser.
func (p *Model) Version() int { return p.Optim.Step }

// temperature of the training graph's softmax: the sampling temperature
// (TRL divides logits by it in both places).
func (p *Model) temperature() float64 {
	if p.Temp > 0 {
		return p.Temp
	}
	return 1
}

// Save implements Store: policy/ (weights, optimiser, tokenizer, sampler
// RNG) and reference/.
func (p *Model) Save(ctx context.Context, dir string) error {
	p.rngMu.Lock()
	rng, err := p.pcg.MarshalBinary()
	p.rngMu.Unlock()
	if err != nil {
		return fmt.Errorf("save policy: %w", err)
	}
	if p.lora != nil {
		return p.saveLoRA(dir, rng)
	}
	var ref *model.Checkpoint
	if p.Ref != nil {
		ref = &model.Checkpoint{Model: p.Ref.Model}
	}
	return saveCheckpoint(dir, model.Checkpoint{Model: p.Model, Optim: p.Optim, Tokenizer: p.Tokenizer, Format: p.Format}, rng, ref)
}

// Load implements Store; an architecture that differs is refused with the
// field named.
func (p *Model) Load(ctx context.Context, dir string) error {
	p.turns.drop()
	if p.lora != nil {
		return p.loadLoRA(ctx, dir)
	}
	ck, ref, rng, err := loadCheckpoint(dir, p.Model.Cfg, p.Ref != nil)
	if err != nil {
		return err
	}
	if err := p.Model.CopyWeightsFrom(ck.Model); err != nil {
		return err
	}
	if ck.Optim != nil {
		p.Optim = ck.Optim
	}
	if err := p.restoreRNG(rng); err != nil {
		return err
	}
	p.refreshSnapshot()
	if ref != nil {
		return p.Ref.Model.CopyWeightsFrom(ref.Model)
	}
	return nil
}

// saveCheckpoint writes a policy's part of a checkpoint in dir, as both
// policies do: policy/ (ck, with the sampler's random source) and, when ref
// is set, reference/, both in ck's Format.
func saveCheckpoint(dir string, ck model.Checkpoint, rng []byte, ref *model.Checkpoint) error {
	ck.Extra = map[string][]byte{"sampler_rng": rng}
	if err := model.Save(filepath.Join(dir, "policy"), ck); err != nil {
		return err
	}
	if ref != nil {
		r := *ref
		r.Format = ck.Format
		return model.Save(filepath.Join(dir, "reference"), r)
	}
	return nil
}

// loadCheckpoint reads what saveCheckpoint wrote in dir for architecture
// cfg (one that differs is refused with the field named): the policy, its
// sampler's random source and, with withRef, the reference. All is read
// before a policy changes, so a checkpoint that fails leaves it as it was.
func loadCheckpoint(dir string, cfg model.Config, withRef bool) (ck, ref *model.Checkpoint, rng []byte, err error) {
	if ck, err = model.Load(filepath.Join(dir, "policy"), &cfg); err != nil {
		return nil, nil, nil, err
	}
	rng, err = samplerRNG(ck.Extra, filepath.Join(dir, "policy"))
	if err != nil {
		return nil, nil, nil, err
	}
	if withRef {
		if ref, err = loadReference(dir, &cfg); err != nil {
			return nil, nil, nil, err
		}
	}
	return ck, ref, rng, nil
}

// loadReference loads the checkpoint's reference/. A run without a KL term
// (grpo.kl_coef = 0) saves none, so the checkpoint cannot give a run with
// one its reference: that is said, not reported as a missing file.
func loadReference(dir string, cfg *model.Config) (*model.Checkpoint, error) {
	if err := checkReference(dir); err != nil {
		return nil, err
	}
	return model.Load(filepath.Join(dir, "reference"), cfg)
}

// checkReference says why a checkpoint has no reference/ when it has none.
func checkReference(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "reference")); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("load reference: %s has no reference/ (saved with grpo.kl_coef = 0): resume with grpo.kl_coef=0, or set run.resume=never", dir)
	}
	return nil
}

// ModelReference is the frozen reference policy.
type ModelReference struct {
	Model *model.Model
	Temp  float64
}

// Logprobs implements train.Reference.
func (r *ModelReference) Logprobs(ctx context.Context, seqs []train.Sequence) ([][]float64, error) {
	t := r.Temp
	if t <= 0 {
		t = 1
	}
	res, err := r.Model.Logprobs(ctx, batchOf(seqs, t))
	if err != nil {
		return nil, err
	}
	return widenAll(res.Logprobs), nil
}

func widen(xs []float32) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(x)
	}
	return out
}

func widenAll(xs [][]float32) [][]float64 {
	out := make([][]float64, len(xs))
	for i, row := range xs {
		out[i] = widen(row)
	}
	return out
}

// StopTokens are the tokens sampling stops at (the chat format's end of
// turn and end of text).
func (p *Model) StopTokens() []int { return append([]int(nil), p.stop...) }

// SetStopTokens makes sampling stop at ids (prompt.ChatFormat.StopTokens);
// call it before sampling.
func (p *Model) SetStopTokens(ids []int) { p.stop = append([]int(nil), ids...) }

// restoreRNG puts back the sampler's random source a checkpoint saved.
func (p *Model) restoreRNG(rng []byte) error {
	p.rngMu.Lock()
	defer p.rngMu.Unlock()
	if err := p.pcg.UnmarshalBinary(rng); err != nil {
		return fmt.Errorf("load policy: sampler rng: %w", err)
	}
	return nil
}

// samplerRNG is the sampler's random source among a checkpoint's extra
// files (path names the folder in the error). Without it a resumed run
// would not draw what the uninterrupted one drew: the checkpoint is
// incomplete.
func samplerRNG(extra map[string][]byte, path string) ([]byte, error) {
	rng, ok := extra["sampler_rng"]
	if !ok {
		return nil, fmt.Errorf("load policy: %s has no sampler_rng", path)
	}
	return rng, nil
}
