package cli

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/swetui/swetui/agent"
	"github.com/swetui/swetui/app"
	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/task"
	"github.com/swetui/swetui/train"
)

// scriptedAgentRun runs one GRPO step in agent mode on the first training
// task with a gold patch (in), through app's agent peer: one trajectory a
// script of replies (scripts(in, the expert's replies); scriptedPolicy),
// each in its own Docker session, graded in a fresh sandbox. overrides
// come after the run's own. The scorer and the pool are closed before it
// returns (the pool's Close waits for the removals it took off the
// critical path): nothing of the run should be left. It returns the run's
// folder and id.
func scriptedAgentRun(t *testing.T, name string, scripts func(in *task.Instance, expert []string) [][]string, overrides ...string) (out, run string, in task.Instance) {
	t.Helper()
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	ctx := context.Background()
	for _, x := range miniTasks(t) {
		if x.Split == task.SplitTrain && x.Patch != "" {
			in = x
			break
		}
	}
	out = t.TempDir()
	run = name + "-" + sandbox.NewNonce()[:6]
	ss := scripts(&in, agent.ExpertReplies(&in, rand.New(rand.NewPCG(1, 2))))
	cfg, err := config.Load("", nil, append([]string{"run.out_dir=" + out, "run.name=" + run, "rollout.mode=agent", "run.max_steps=1",
		"run.save_every=0", fmt.Sprintf("agent.group_size=%d", len(ss)), "grpo.prompts_per_step=1", "grpo.dynamic_sampling=false",
		"grpo.kl_coef=0", "curriculum.phase=docker", "curriculum.auto=false", "run.sft_first=false", "model.context=8192",
		fmt.Sprintf("data.include=[%q]", in.InstanceID)}, overrides...))
	if err != nil {
		t.Fatal(err)
	}
	ws, err := app.Open(ctx, cfg, task.SplitTrain)
	if err != nil {
		t.Fatal(err)
	}
	scorer, pool, err := ws.Rewards(ctx, run, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer scorer.Close()
	defer app.ClosePool(ctx, pool)
	player, err := ws.Player(func() (*sandbox.Pool, error) { return pool, nil }, scorer, app.SampleOptions(cfg), cfg.Agent.Turns)
	if err != nil {
		t.Fatal(err)
	}
	tr := train.New(cfg, train.Deps{Policy: newScriptedPolicy(ws, ss...), Tokenizer: ws.Tok, Scorer: scorer, Prompter: ws.Prompter,
		Chat: ws.Chat, Tasks: ws.Tasks, Rollouts: player, DockerOK: true})
	if err := tr.Run(ctx); err != nil {
		t.Fatal(err)
	}
	return out, run, in
}
