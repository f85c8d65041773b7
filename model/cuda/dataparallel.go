package cuda

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/swetui/swetui/model"
)

// DataParallel is the policy on several GPUs of one process: rank r is a
// replica (Ranks[r], a Policy on Comms.Devices[r]) holding the whole
// weights. Each sampling call runs on one rank, spread across them (the
// least busy, taken in turn, so calls made one after another go round the
// ranks); a backward or logprob pass splits its sequences across the
// ranks; Step sums the gradients every rank accumulated (NCCL all-reduce,
// in place) and every rank then takes the same AdamW update from the same
// sum, so the replicas stay equal to the bit. The sum is the one a single
// device accumulates from the same batches, in another order.
type DataParallel struct {
	Ranks []*Policy
	Comms *Comms

	// stepMu: backward passes share it, Step holds it alone, so that no
	// gradient is being accumulated while the sums are taken.
	stepMu sync.RWMutex
	mu     sync.Mutex
	busy   []int // calls running on each rank
	next   int   // where the next pick starts
	work   []rankWork
	homes  turnHomes
}

// NewDataParallel joins replicas that hold the same weights and optimiser
// state, one per device of comms, rank r on comms.Devices[r].
func NewDataParallel(ranks []*Policy, comms *Comms) (*DataParallel, error) {
	if len(ranks) != comms.Size() {
		return nil, fmt.Errorf("cuda data-parallel: %d replicas for %d communicators", len(ranks), comms.Size())
	}
	for r, p := range ranks {
		if p.Engine.Device() != Device(comms.Devices[r]) {
			return nil, fmt.Errorf("cuda data-parallel: replica %d is not on rank %d's device", r, r)
		}
	}
	return &DataParallel{Ranks: ranks, Comms: comms, busy: make([]int, len(ranks)), work: make([]rankWork, len(ranks))}, nil
}

// NewDataParallelPolicy puts a replica of m on each device of comms
// (NewPolicy's arguments); rank 0 samples with seed as one GPU would, the
// others with seeds derived from it and their rank. With shard (ZeRO-1)
// each rank keeps the AdamW moments of its 1/N of the trainable weights.
func NewDataParallelPolicy(comms *Comms, m *model.Model, o Options, opt *model.AdamW, sched model.Schedule, gradClip float64, stop []int, seed uint64, shard bool) (*DataParallel, error) {
	ranks := make([]*Policy, comms.Size())
	for r, d := range comms.Devices {
		ro := o
		if shard {
			ro.Shard = Shard{Rank: r, Ranks: comms.Size()}
		}
		rp, err := newPolicy(d, m, ro, optimFor(opt, r), sched, gradClip, stop, rankSeed(seed, r), comms)
		if err != nil {
			for _, q := range ranks[:r] {
				q.Close()
			}
			return nil, fmt.Errorf("cuda data-parallel: rank %d (cuda:%d): %w", r, d.ordinal, err)
		}
		ranks[r] = rp
	}
	return NewDataParallel(ranks, comms)
}

// pick takes the least busy rank, starting after the last one picked.
func (p *DataParallel) pick() (int, func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.Ranks)
	best := p.next % n
	for i := 1; i < n; i++ {
		if r := (p.next + i) % n; p.busy[r] < p.busy[best] {
			best = r
		}
	}
	p.next = best + 1
	p.busy[best]++
	return best, p.release(best)
}

// take counts a call on rank r until the returned func is called.
func (p *DataParallel) take(r int) func() {
	p.mu.Lock()
	p.busy[r]++
	p.mu.Unlock()
	return p.release(r)
}

// release is the func that ends a call counted on rank r.
func (p *DataParallel) release(r int) func() {
	return func() {
		p.mu.Lock()
		p.busy[r]--
		p.mu.Unlock()
	}
}

// Sample draws n completions of prompt on one rank.
func (p *DataParallel) Sample(ctx context.Context, prompt []int, n int, o model.SampleOptions) ([]model.Completion, error) {
	r, done := p.pick()
	defer done()
	defer p.sampled(r, time.Now())
	return p.Ranks[r].Sample(ctx, prompt, n, o)
}

// SampleSnapshot draws like Sample from one rank's newest snapshot; every
// rank's snapshot is of the same version.
func (p *DataParallel) SampleSnapshot(ctx context.Context, prompt []int, n int, o model.SampleOptions) ([]model.Completion, int, error) {
	r, done := p.pick()
	defer done()
	defer p.sampled(r, time.Now())
	return p.Ranks[r].SampleSnapshot(ctx, prompt, n, o)
}

// SampleTurn draws one agent turn on the rank that holds the keys of the
// trajectory's earlier turns (turnHomes), or on the least busy one for a
// first turn: another rank would prefill the whole context again
// (Engine.SampleTurn), the same reply at a prefill's cost.
func (p *DataParallel) SampleTurn(ctx context.Context, context []int, o model.SampleOptions) (model.Completion, error) {
	r, done := p.pickTurn(context)
	defer done()
	defer p.sampled(r, time.Now())
	c, err := p.Ranks[r].SampleTurn(ctx, context, o)
	if err == nil {
		p.homes.keep(r, context, c.Tokens, p.turnBound())
	}
	return c, err
}

// SampleTurnSnapshot is SampleTurn from one rank's newest snapshot.
func (p *DataParallel) SampleTurnSnapshot(ctx context.Context, context []int, o model.SampleOptions) (model.Completion, int, error) {
	r, done := p.pickTurn(context)
	defer done()
	defer p.sampled(r, time.Now())
	c, v, err := p.Ranks[r].SampleTurnSnapshot(ctx, context, o)
	if err == nil {
		p.homes.keep(r, context, c.Tokens, p.turnBound())
	}
	return c, v, err
}

// turnBound is how many trajectories' homes are kept: twice the turn
// caches of all ranks (TurnSlots is set after the ranks are made), 64 at
// least.
func (p *DataParallel) turnBound() int {
	slots := 0
	for _, r := range p.Ranks {
		slots += r.TurnSlots
	}
	return max(2*slots, 64)
}

// pickTurn takes the rank holding context's trajectory, else the least
// busy.
func (p *DataParallel) pickTurn(context []int) (int, func()) {
	r := p.homes.of(context)
	if r < 0 {
		return p.pick()
	}
	return r, p.take(r)
}

// Logprobs splits b's sequences across the ranks (the weights are the
// same on all) and returns them in b's order.
func (p *DataParallel) Logprobs(ctx context.Context, b model.Batch) ([][]float32, error) {
	out := make([][]float32, len(b.Tokens))
	err := p.onParts(b, func(r int, sub model.Batch, lo, hi int) error {
		lp, err := p.Ranks[r].Logprobs(ctx, sub)
		copy(out[lo:hi], lp)
		return err
	})
	return out, err
}

// Backward splits b's sequences across the ranks, each accumulating the
// gradient of its part (Σ cot·logprob is a sum over sequences, so the
// parts' gradients add up to the whole's); it returns the logprobs in b's
// order and the mean token entropy over all of them.
func (p *DataParallel) Backward(ctx context.Context, b model.Batch, cot [][]float32) ([][]float32, float64, error) {
	p.stepMu.RLock()
	defer p.stepMu.RUnlock()
	out := make([][]float32, len(b.Tokens))
	ent := make([]float64, len(p.Ranks))
	toks := make([]int, len(p.Ranks))
	err := p.onParts(b, func(r int, sub model.Batch, lo, hi int) error {
		lp, e, err := p.Ranks[r].Backward(ctx, sub, cot[lo:hi])
		copy(out[lo:hi], lp)
		for _, row := range cot[lo:hi] {
			toks[r] += len(row)
		}
		ent[r] = e
		return err
	})
	var sum float64
	var n int
	for r := range ent {
		sum += ent[r] * float64(toks[r])
		n += toks[r]
	}
	if n > 0 {
		sum /= float64(n)
	}
	return out, sum, err
}

// onParts runs fn on each rank's part of b at once (SplitBatch); a batch
// of one sequence runs whole on the least busy rank.
func (p *DataParallel) onParts(b model.Batch, fn func(r int, sub model.Batch, lo, hi int) error) error {
	bounds := SplitBatch(b.Tokens, len(p.Ranks))
	if len(bounds) <= 2 {
		r, done := p.pick()
		defer done()
		defer p.trained(r, time.Now())
		return fn(r, b, 0, len(b.Tokens))
	}
	errs := make([]error, len(bounds)-1)
	var wg sync.WaitGroup
	for r := 0; r+1 < len(bounds); r++ {
		lo, hi := bounds[r], bounds[r+1]
		if lo == hi {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := p.take(r)
			defer done()
			sub := model.Batch{Tokens: b.Tokens[lo:hi], PromptLen: b.PromptLen[lo:hi], Temperature: b.Temperature}
			defer p.trained(r, time.Now())
			errs[r] = fn(r, sub, lo, hi)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// SplitBatch cuts sequences into at most n contiguous parts of about equal
// tokens, as bounds (part r is seqs[bounds[r]:bounds[r+1]]); fewer
// sequences than n give one part each.
func SplitBatch(seqs [][]int, n int) []int {
	total := 0
	for _, s := range seqs {
		total += len(s)
	}
	bounds := []int{0}
	acc := 0
	for i, s := range seqs {
		acc += len(s)
		// Close part r once it holds its share of the tokens, or when the
		// sequences left are no more than the parts still to come.
		r, left := len(bounds), len(seqs)-(i+1)
		if r < n && left > 0 && (acc*n >= total*r || left <= n-r) {
			bounds = append(bounds, i+1)
		}
	}
	return append(bounds, len(seqs))
}

// onRanks runs fn for every rank at once and returns the first error; a
// rank that fails aborts the communicators, so that none waits on it.
func (p *DataParallel) onRanks(fn func(r int) error) error {
	errs := make([]error, len(p.Ranks))
	var wg sync.WaitGroup
	for r := range p.Ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[r] = fn(r); errs[r] != nil {
				p.Comms.Abort()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Step sums the ranks' gradients, then each rank clips on the global norm
// and applies AdamW; it returns the pre-clip norm and the learning rate.
// A failure panics, as Policy.Step's does.
func (p *DataParallel) Step() (gradNorm, lr float64) {
	p.stepMu.Lock()
	defer p.stepMu.Unlock()
	norms := make([]float64, len(p.Ranks))
	lrs := make([]float64, len(p.Ranks))
	err := p.onRanks(func(r int) error {
		if err := p.Ranks[r].Engine.allReduceGrads(p.Comms, r); err != nil {
			return err
		}
		var err error
		norms[r], lrs[r], err = p.Ranks[r].step()
		return err
	})
	if err != nil {
		panic(fmt.Errorf("cuda data-parallel: step: %w", err))
	}
	return norms[0], lrs[0]
}

// Sharded reports whether the engine keeps a ZeRO-1 part of the moments.
func (e *Engine) Sharded() bool { return e.opts.Shard.Ranks > 1 }

// allReduceGrads sums the trainable gradients over the ranks, in place.
func (e *Engine) allReduceGrads(c *Comms, rank int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, g, _, _, _, _ := e.trainable()
	start := time.Now()
	defer func() { e.collective.Add(int64(time.Since(start))) }()
	return e.dev.Do(func() error {
		if d, ok := e.dev.(memReader); ok {
			if free, total, ok := d.memInfo(); ok {
				e.memUsed.Store(int64(total - free))
				e.memTotal.Store(int64(total))
			}
		}
		return c.AllReduceSum(rank, g)
	})
}

// Version counts the updates applied so far (the same on every rank).
func (p *DataParallel) Version() int { return p.Ranks[0].Version() }

// StartSnapshots takes every rank's first copy.
func (p *DataParallel) StartSnapshots() {
	for _, r := range p.Ranks {
		r.StartSnapshots()
	}
}

// all runs fn on every rank in turn (uploads and copies that need no
// collective), stopping at the first error.
func (p *DataParallel) all(fn func(int, *Policy) error) error {
	for r, rp := range p.Ranks {
		if err := fn(r, rp); err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return nil
}

// Sync brings rank 0's weights into m and the moments into rank 0's
// optimiser (the run's): under ZeRO-1 each rank's part from that rank.
func (p *DataParallel) Sync(m *model.Model) error {
	if err := p.Ranks[0].Sync(m); err != nil {
		return err
	}
	for r, rp := range p.Ranks[1:] {
		if rp.Engine.Sharded() {
			if err := rp.Engine.DownloadMoments(p.Ranks[0].Optim); err != nil {
				return fmt.Errorf("rank %d: %w", r+1, err)
			}
		}
	}
	return nil
}

// Load replaces every rank's weights and moments; opt becomes rank 0's
// optimiser (the others replicas of it).
func (p *DataParallel) Load(m *model.Model, opt *model.AdamW) error {
	return p.all(func(r int, rp *Policy) error { return rp.Load(m, optimFor(opt, r)) })
}

// UseOptim makes opt rank 0's optimiser and a replica of it every other
// rank's, its moments uploaded on all.
func (p *DataParallel) UseOptim(opt *model.AdamW) error {
	return p.all(func(r int, rp *Policy) error { return rp.UseOptim(optimFor(opt, r)) })
}

// LoadLoRA uploads the adapters (Policy.LoRA, which the ranks share) and
// opt's moments on every rank; opt becomes rank 0's optimiser.
func (p *DataParallel) LoadLoRA(opt *model.AdamW) error {
	return p.all(func(r int, rp *Policy) error { return rp.LoadLoRA(optimFor(opt, r)) })
}

// ReadParam copies parameter i's arena s into dst: the weights from rank
// 0 (every rank holds them), the moments from every rank that keeps a part
// of them under ZeRO-1.
func (p *DataParallel) ReadParam(i int, s Slot, dst []float32) error {
	if s == Weights || p.Ranks[0].Engine.opts.Shard.Ranks <= 1 {
		return p.Ranks[0].ReadParam(i, s, dst)
	}
	return p.all(func(_ int, rp *Policy) error { return rp.ReadParam(i, s, dst) })
}

// WriteParam copies src into parameter i's arena s on every rank (each
// takes its part of the moments under ZeRO-1).
func (p *DataParallel) WriteParam(i int, s Slot, src []float32) error {
	return p.all(func(_ int, rp *Policy) error { return rp.WriteParam(i, s, src) })
}

// SetOptim makes o rank 0's optimiser and replicas of it the others',
// without uploading (a streamed resume has written the moments).
func (p *DataParallel) SetOptim(o *model.AdamW) {
	for r, rp := range p.Ranks {
		rp.SetOptim(optimFor(o, r))
	}
}

// BeginStage is Policy.BeginStage on every rank (rank 0 with opt itself).
func (p *DataParallel) BeginStage(from *model.Model, opt *model.AdamW, sched model.Schedule) (end func(), err error) {
	ends := make([]func(), 0, len(p.Ranks))
	undo := func() {
		for _, f := range ends {
			f()
		}
	}
	for r, rp := range p.Ranks {
		f, err := rp.BeginStage(from, optimFor(opt, r), sched)
		if err != nil {
			undo()
			return nil, fmt.Errorf("rank %d: %w", r, err)
		}
		ends = append(ends, f)
	}
	return undo, nil
}

// Republish refreshes every rank's snapshot.
func (p *DataParallel) Republish() error {
	return p.all(func(_ int, rp *Policy) error { return rp.Republish() })
}

// RNGState is rank 0's random source; SetRNGState derives the others from
// it, so that a run resumes on any number of GPUs.
func (p *DataParallel) RNGState() ([]byte, error) { return p.Ranks[0].RNGState() }

// SetRNGState restores rank 0's source and seeds rank r's from it and r.
func (p *DataParallel) SetRNGState(b []byte) error {
	if err := p.Ranks[0].SetRNGState(b); err != nil {
		return err
	}
	h := fnv.New64a()
	h.Write(b)
	for r := 1; r < len(p.Ranks); r++ {
		rp := p.Ranks[r]
		rp.rngMu.Lock()
		rp.pcg.Seed(h.Sum64(), uint64(r))
		rp.rngMu.Unlock()
	}
	return nil
}

// Close frees every rank's memory and the communicators.
func (p *DataParallel) Close() error {
	var errs []error
	for _, rp := range p.Ranks {
		errs = append(errs, rp.Close())
	}
	errs = append(errs, p.Comms.Close())
	return errors.Join(errs...)
}

// replicaOptim is another rank's optimiser: o's hyper-parameters and step
// count of its own, advanced by its own updates. It shares o's host
// moments, which it only reads (an upload); only rank 0's are written
// back (Sync).
func replicaOptim(o *model.AdamW) *model.AdamW {
	c := *o
	return &c
}

// optimFor is rank r's optimiser: o itself on rank 0, whose state is the
// run's, a replica elsewhere.
func optimFor(o *model.AdamW, r int) *model.AdamW {
	if r == 0 || o == nil {
		return o
	}
	return replicaOptim(o)
}

// rankSeed is rank r's sampling seed in a run seeded with seed: rank 0
// keeps the run's own, so one GPU samples as before.
func rankSeed(seed uint64, r int) uint64 {
	if r == 0 {
		return seed
	}
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	binary.LittleEndian.PutUint64(b[8:], uint64(r))
	h := fnv.New64a()
	h.Write(b[:])
	return h.Sum64()
}
