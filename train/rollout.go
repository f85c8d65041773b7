package train

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/rollout"
	"github.com/swetui/swetui/task"
)

// cursor is a position in the seeded per-epoch task order.
type cursor struct {
	Epoch, Pos int
}

// take returns the next task and advances the cursor.
func (c *cursor) take(tasks []*task.Instance, seed int64) *task.Instance {
	order := epochOrder(len(tasks), seed, c.Epoch)
	if c.Pos >= len(order) {
		c.Epoch, c.Pos = c.Epoch+1, 0
		order = epochOrder(len(tasks), seed, c.Epoch)
	}
	inst := tasks[order[c.Pos]]
	c.Pos++
	return inst
}

// group is one task's G completions, sampled and scored.
type group struct {
	inst     *task.Instance
	cursor   cursor // data position after this group's task
	version  int    // weight version that sampled it
	phase    string // phase it was scored in
	prompt   []int
	played   *rollout.Group // as the Rollouts played it
	samples  []Sample
	texts    []string
	verdicts []event.Verdict
	adv      []float64
	ok       bool
	// Trajectories: which tokens the policy sampled (nil: all, a reply),
	// which did not submit (nil: none) and each one's turns (nil: a reply).
	masks       [][]bool
	unsubmitted []bool
	trajs       []*event.Trajectory

	sampleTime, rewardTime time.Duration
}

// unfinished reports whether completion i is a trajectory that did not
// submit.
func (gr *group) unfinished(i int) bool { return gr.unsubmitted != nil && gr.unsubmitted[i] }

// mask is completion i's loss-token mask; nil when every token is (a
// reply).
func (gr *group) mask(i int) []bool {
	if gr.masks == nil {
		return nil
	}
	return gr.masks[i]
}

type timing struct{ sample, reward time.Duration }

// source yields each step's scored groups.
type source interface {
	next(ctx context.Context, step int, phase string) ([]*group, timing, error)
	stepDone(step int)
	close()
}

// sampleGroup plays the phase's G rollouts of the task (Deps.Rollouts).
func (t *Trainer) sampleGroup(ctx context.Context, inst *task.Instance, cur cursor, phase string) (*group, error) {
	p, err := t.d.Rollouts.Play(ctx, inst, t.cfg.GRPO.GroupSizeIn(phase), phase, sampler{t})
	if err != nil {
		return nil, err
	}
	gr := &group{inst: inst, cursor: cur, version: p.Version, prompt: p.Prompt, played: p, sampleTime: p.SampleTime}
	for i, r := range p.Rollouts {
		gr.samples = append(gr.samples, r.Sample)
		gr.texts = append(gr.texts, r.Text)
		gr.trajs = append(gr.trajs, r.Agent)
		if r.Mask != nil && gr.masks == nil {
			gr.masks = make([][]bool, len(p.Rollouts))
		}
		if gr.masks != nil {
			gr.masks[i] = r.Mask
		}
		if !r.Finished && gr.unsubmitted == nil {
			gr.unsubmitted = make([]bool, len(p.Rollouts))
		}
		if gr.unsubmitted != nil {
			gr.unsubmitted[i] = !r.Finished
		}
	}
	if p.Graded {
		t.graded(gr, phase)
	}
	return gr, nil
}

// graded takes the verdicts of gr's played rollouts.
func (t *Trainer) graded(gr *group, phase string) {
	gr.verdicts = make([]event.Verdict, len(gr.played.Rollouts))
	for i, r := range gr.played.Rollouts {
		gr.verdicts[i] = r.Verdict
	}
	gr.phase, gr.rewardTime = phase, gr.played.RewardTime
}

// scoreGroup grades what play left ungraded.
func (t *Trainer) scoreGroup(ctx context.Context, gr *group, phase string) error {
	if gr.played.Graded {
		return nil // graded as they were played
	}
	if err := t.d.Rollouts.Grade(ctx, gr.inst, gr.played, phase); err != nil {
		return err
	}
	t.graded(gr, phase)
	return nil
}

// syncSource samples a step's groups with the current weights, then scores
// them all concurrently (the reward pool overlaps their containers). With
// dynamic sampling it draws more tasks until prompts_per_step groups have
// reward variance or max_groups were drawn.
type syncSource struct {
	t   *Trainer
	cur cursor
}

func (s *syncSource) next(ctx context.Context, step int, phase string) ([]*group, timing, error) {
	var tm timing
	g := s.t.cfg.GRPO
	var groups []*group
	used := map[string]bool{}
	varied := 0
	for want := g.PromptsPerStep; want > 0; {
		begin := time.Now()
		insts, curs := make([]*task.Instance, want), make([]cursor, want)
		for i := range want {
			insts[i] = s.t.pickTask(&s.cur, phase, used)
			used[insts[i].InstanceID] = true
			curs[i] = s.cur
		}
		batch, err := s.t.sampleGroups(ctx, insts, curs, phase)
		if err != nil {
			return nil, tm, err
		}
		tm.sample += time.Since(begin)
		begin = time.Now()
		err = s.t.scoreGroups(ctx, batch, phase)
		tm.reward += time.Since(begin)
		if err != nil {
			return nil, tm, err
		}
		groups = append(groups, batch...)
		if !g.DynamicSampling {
			break
		}
		varied += s.t.countVaried(batch) // each group judged once
		want = min(g.PromptsPerStep-varied, g.MaxGroups-len(groups))
	}
	return groups, tm, nil
}

// sampleGroups samples a group of each task, in order; groups of a
// Rollouts that plays them together (trajectories: their turns decoded
// together, their commands overlapping) play at once.
func (t *Trainer) sampleGroups(ctx context.Context, insts []*task.Instance, curs []cursor, phase string) ([]*group, error) {
	groups := make([]*group, len(insts))
	if !t.d.Rollouts.Together() {
		for i, inst := range insts {
			gr, err := t.sampleGroup(ctx, inst, curs[i], phase)
			if err != nil {
				return nil, err
			}
			groups[i] = gr
		}
		return groups, nil
	}
	g, gctx := errgroup.WithContext(ctx)
	for i, inst := range insts {
		g.Go(func() (err error) {
			groups[i], err = t.sampleGroup(gctx, inst, curs[i], phase)
			return err
		})
	}
	return groups, g.Wait()
}

// scoreGroups scores groups concurrently: the pool overlaps their
// containers.
func (t *Trainer) scoreGroups(ctx context.Context, groups []*group, phase string) error {
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i, gr := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = t.scoreGroup(ctx, gr, phase)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// varied reports whether a scored group's rewards, as its advantages
// see them, differ: only such a group has non-zero advantages.
func (t *Trainer) varied(gr *group) bool {
	rewards, valid, _ := t.shapedRewards(gr)
	return !RewardStats(rewards, valid, t.cfg.GRPO.StdEps).ZeroStd
}

func (t *Trainer) countVaried(groups []*group) int {
	n := 0
	for _, gr := range groups {
		if t.varied(gr) {
			n++
		}
	}
	return n
}

func (s *syncSource) stepDone(int) {}
func (s *syncSource) close()       {}

// asyncSource overlaps generation, scoring and training (after NeMo-RL's
// async GRPO). A generator goroutine samples groups in data order, at most
// max_trajectory_age_steps steps ahead of training, and starts scoring each
// at once; a FIFO of at most buffer_groups pending groups hands them to the
// trainer in order. With age 0 it samples step s only after step s-1's
// update, which is the sync loop exactly.
type asyncSource struct {
	t       *Trainer
	pending chan *pendingGroup
	done    atomic.Int64 // steps trained
	extra   atomic.Int64 // groups taken beyond prompts_per_step, all steps
	wake    chan struct{}
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	stale   int
}

type pendingGroup struct {
	gr   *group
	err  error
	done chan struct{}
}

func newAsyncSource(ctx context.Context, t *Trainer, startStep int, cur cursor) *asyncSource {
	ctx, cancel := context.WithCancel(ctx)
	a := &asyncSource{t: t, pending: make(chan *pendingGroup, t.cfg.GRPO.Async.BufferGroups),
		wake: make(chan struct{}, 1), cancel: cancel}
	a.done.Store(int64(startStep))
	if ss, ok := t.d.Policy.(SnapshotSampler); ok {
		t.model.Lock()
		ss.StartSnapshots()
		t.model.Unlock()
	}
	a.wg.Add(1)
	go a.generate(ctx, startStep, cur)
	return a
}

func (a *asyncSource) generate(ctx context.Context, startStep int, cur cursor) {
	defer a.wg.Done()
	defer close(a.pending)
	per := a.t.cfg.GRPO.PromptsPerStep
	age := int64(a.t.cfg.GRPO.Async.MaxTrajectoryAgeSteps)
	for k := 0; ; k++ {
		// Groups a step took beyond prompts_per_step (dynamic sampling) do
		// not move the generator on to a later step.
		step := func() int64 { return int64(startStep) + (int64(k)-a.extra.Load())/int64(per) + 1 }
		for a.done.Load() < step()-1-age { // too far ahead of training
			select {
			case <-a.wake:
			case <-ctx.Done():
				return
			}
		}
		phase := a.t.phaseNow()
		inst := a.t.pickTask(&cur, phase, nil)
		p := &pendingGroup{done: make(chan struct{})}
		var sampleErr error
		p.gr, sampleErr = a.t.sampleGroup(ctx, inst, cur, phase)
		p.err = sampleErr
		if sampleErr == nil {
			a.wg.Add(1)
			go func() {
				defer a.wg.Done()
				defer close(p.done)
				p.err = a.t.scoreGroup(ctx, p.gr, phase)
			}()
		} else {
			close(p.done)
		}
		select {
		case a.pending <- p:
		case <-ctx.Done():
			return
		}
		if sampleErr != nil {
			return
		}
	}
}

func (a *asyncSource) next(ctx context.Context, step int, phase string) ([]*group, timing, error) {
	var tm timing
	g := a.t.cfg.GRPO
	per := g.PromptsPerStep
	groups := make([]*group, 0, per)
	// With dynamic sampling, groups without reward variance are kept (they
	// are recorded, not trained) but do not count towards the step's
	// prompts_per_step, up to max_groups taken in all.
	limit := per
	if g.DynamicSampling {
		limit = g.MaxGroups
	}
	taken := 0
	for trainable := 0; trainable < per && len(groups) < limit; taken++ {
		if taken >= per { // a group dropped or barren: the generator draws one more for this step
			a.extra.Add(1)
			a.wakeGenerator()
		}
		var p *pendingGroup
		select {
		case p = <-a.pending:
		case <-ctx.Done():
			return nil, tm, ctx.Err()
		}
		if p == nil {
			return nil, tm, errors.New("async: generator stopped")
		}

		select {
		case <-p.done:
		case <-ctx.Done():
			return nil, tm, ctx.Err()
		}
		if p.err != nil {
			return nil, tm, p.err
		}
		tm.sample += p.gr.sampleTime
		tm.reward += p.gr.rewardTime
		// Groups scored before a phase switch, or older than the age bound,
		// are dropped rather than trained on.
		if p.gr.phase != phase || a.t.d.Policy.Version()-p.gr.version > a.t.cfg.GRPO.Async.MaxTrajectoryAgeSteps {
			a.stale++
			continue
		}
		groups = append(groups, p.gr)
		if !g.DynamicSampling || a.t.varied(p.gr) {
			trainable++
		}
	}
	return groups, tm, nil
}

func (a *asyncSource) stepDone(step int) {
	a.done.Store(int64(step))
	a.wakeGenerator()
}

func (a *asyncSource) wakeGenerator() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

func (a *asyncSource) close() {
	a.cancel()
	for range a.pending { // unblock the generator
	}
	a.wg.Wait()
}
