package train_test

// BenchmarkGRPOStepDocker measures a GRPO step in the docker phase on the
// embedded suite, split into sampling, reward (real containers) and training,
// sync against async. Half of each group is the task's gold patch, so tests
// really run and rewards vary; the other half is what the model samples.
//
//	go test ./train -run '^$' -bench GRPOStepDocker -benchtime 8x
//
// The slow-tests variants add a 4 s wait to every test run, with 4 workers:
// the reward is then the slowest component and does not compete with
// sampling and training for this machine's cores. Beside the split it reports the two floors of a step: the slowest
// component (what full overlap reaches when the components use different
// machines or cores) and all-cores-busy (the machine's CPU time per step over
// its cores: what overlap reaches when they share the cores).
//
// It needs the Docker Engine and the suite's image (make setup).

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"testing"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/internal/hoststat"
	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/policy"
	"github.com/swetui/swetui/prompt"
	"github.com/swetui/swetui/reward"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/task"
	"github.com/swetui/swetui/train"
)

// goldMixPolicy samples with the real model, then swaps every other
// completion for the task's gold reply. The gold reply's logprobs are the
// initial model's, computed once: the benchmark times the loop, and the
// async loop samples from snapshots while the live weights train.
type goldMixPolicy struct {
	*policy.Model
	gold map[string]train.Sample // last tokens of a prompt -> gold reply
}

func promptKey(prompt []int) string { return fmt.Sprint(prompt[max(0, len(prompt)-32):]) }

func (g *goldMixPolicy) mix(prompt []int, samples []train.Sample) {
	if gold, ok := g.gold[promptKey(prompt)]; ok {
		for i := 0; i < len(samples); i += 2 {
			samples[i] = gold
		}
	}
}

func (g *goldMixPolicy) Sample(ctx context.Context, prompt []int, n int, o train.SampleOptions) ([]train.Sample, error) {
	samples, err := g.Model.Sample(ctx, prompt, n, o)
	g.mix(prompt, samples)
	return samples, err
}

func (g *goldMixPolicy) SampleSnapshot(ctx context.Context, prompt []int, n int, o train.SampleOptions) ([]train.Sample, int, error) {
	samples, v, err := g.Model.SampleSnapshot(ctx, prompt, n, o)
	g.mix(prompt, samples)
	return samples, v, err
}

func BenchmarkGRPOStepDocker(b *testing.B) {
	for _, bc := range []struct {
		name      string
		async     bool
		testSleep int // seconds each test run waits in its container
	}{
		{"sync", false, 0}, {"async", true, 0},
		// Tests that take time but not this machine's CPU, as on remote
		// Docker hosts or with slow test set-ups.
		{"sync-slow-tests", false, 4}, {"async-slow-tests", true, 4},
	} {
		b.Run(bc.name, func(b *testing.B) { benchStepDocker(b, bc.async, bc.testSleep) })
	}
}

func benchStepDocker(b *testing.B, async bool, testSleep int) {
	ctx := context.Background()
	cfg := config.Default()
	cfg.Run.OutDir, cfg.Run.MaxSteps, cfg.Run.SaveEvery = b.TempDir(), b.N, 0
	cfg.Curriculum.Phase, cfg.Curriculum.Auto = config.PhaseDocker, false
	cfg.GRPO.GroupSize, cfg.GRPO.PromptsPerStep = 4, 2
	cfg.Model = config.Model{Layers: 2, DModel: 64, Heads: 4, KVHeads: 2, DFF: 192, Context: 1024, VocabSize: 768, RopeTheta: 10000}
	cfg.Sample.MaxNewTokens = 200
	cfg.Watchdog.BarrenEpochs = 0
	if testSleep > 0 {
		cfg.Sandbox.Workers = 4
	}
	if async {
		cfg.GRPO.Async.Enabled, cfg.GRPO.Async.MaxTrajectoryAgeSteps = true, 1
		cfg.GRPO.ISCorrection = "truncated"
	}
	suite, err := task.GenerateMiniFor(cfg)
	if err != nil {
		b.Fatal(err)
	}
	repos, err := suite.Materialize(ctx, task.DefaultCacheDir())
	if err != nil {
		b.Fatal(err)
	}
	pool, err := sandbox.NewPool(ctx, sandbox.FromConfig(cfg, fmt.Sprintf("bench-%d", os.Getpid())))
	if err != nil {
		b.Skipf("no Docker: %v", err)
	}
	defer pool.Close(context.WithoutCancel(ctx))
	scorer := reward.NewScorer(cfg.Reward, &reward.PoolEvaluator{Pool: pool})
	defer scorer.Close()

	var tasks []*task.Instance
	for i := range suite.Tasks {
		if in := &suite.Tasks[i].Instance; in.Split == task.SplitTrain && len(tasks) < 8 {
			if testSleep > 0 {
				in.TestCmd = fmt.Sprintf("sleep %d && %s", testSleep, in.TestCmd)
			}
			tasks = append(tasks, in)
			scorer.Applier.RegisterInstance(in.InstanceID, repos[in.InstanceID])
		}
	}
	prompter := prompt.Repo{MaxContextBytes: 1200, RepoDir: func(_ context.Context, in *task.Instance) (string, error) { return repos[in.InstanceID], nil }}
	var texts []string
	for _, in := range tasks {
		p, err := prompter.Prompt(ctx, in)
		if err != nil {
			b.Fatal(err)
		}
		texts = append(texts, p, prompt.ChatFormat{}.GoldCompletion(in.Patch))
	}
	tok, err := model.TrainBPE(ctx, slices.Values(texts), cfg.Model.VocabSize, nil)
	if err != nil {
		b.Fatal(err)
	}
	mc := model.ConfigFrom(cfg.Model)
	mc.VocabSize = tok.VocabSize()
	m, err := model.New(mc, 1)
	if err != nil {
		b.Fatal(err)
	}
	sched, _ := model.NewSchedule(cfg.Optim, b.N)
	pol := policy.NewModel(m, model.NewAdamW(cfg.Optim, m.NumParams()), sched, tok, 1, 1)
	pol.Temp = cfg.Sample.Temperature
	gold := map[string]train.Sample{}
	for i, in := range tasks {
		promptIDs := tok.Encode(texts[2*i])
		reply := tok.Encode(prompt.ChatFormat{}.GoldCompletion(in.Patch))
		lp, err := pol.Logprobs(ctx, []train.Sequence{{Prompt: promptIDs, Completion: reply}})
		if err != nil {
			b.Fatal(err)
		}
		gold[promptKey(promptIDs)] = train.Sample{Tokens: reply, Logprobs: lp[0]}
	}
	ref := &policy.ModelReference{Model: m.Clone(), Temp: cfg.Sample.Temperature}
	bus := event.NewBus()
	sub := bus.Subscribe(train.EventBuffer)
	tr := train.New(cfg, train.Deps{Policy: &goldMixPolicy{pol, gold}, Reference: ref, Tokenizer: tok,
		Scorer: scorer, Prompter: prompter, Tasks: tasks, DockerOK: true, Events: bus})
	var steps []event.StepFinished
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range sub.Events() {
			switch e := ev.(type) {
			case event.StepFinished:
				steps = append(steps, e)
			case event.Stopped:
				return
			}
		}
	}()
	b.ResetTimer()
	busy0, _ := hoststat.CPUTimes()
	if err := tr.Run(ctx); err != nil {
		b.Fatal(err)
	}
	busy1, _ := hoststat.CPUTimes()
	b.StopTimer()
	<-done
	var sample, rew, trn, step, resolved float64
	for _, s := range steps {
		sample += s.Metrics.SampleSeconds
		rew += s.Metrics.RewardSeconds
		trn += s.Metrics.TrainSeconds
		step += s.Metrics.StepSeconds
		resolved += s.Metrics.ResolvedRate
	}
	n := float64(len(steps))
	if resolved == 0 {
		b.Fatal("no gold patch resolved: the docker phase did not run tests")
	}
	b.ReportMetric(sample/n, "sample-s/step")
	b.ReportMetric(rew/n, "reward-s/step")
	b.ReportMetric(trn/n, "train-s/step")
	b.ReportMetric(step/n, "step-s")
	// The best any overlap can do is the slowest component, and on a box
	// whose cores are all busy, the CPU work spread over every core.
	if !async { // async times overlap: compare its step-s with sync's floors
		b.ReportMetric(max(sample, rew, trn)/n, "slowest-s/step")
	}
	b.ReportMetric(float64(busy1-busy0)/hoststat.ClockTicks/float64(runtime.NumCPU())/n, "all-cores-busy-s/step")
}
