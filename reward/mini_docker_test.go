package reward

import (
	"context"
	"testing"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/task"
)

// TestDockerMiniSuite scores the embedded suite's gold patches (and empty
// ones) in docker mode, end to end: task's generated repositories and image,
// sandbox's pool and eval script, reward's apply check, parser and grading.
func TestDockerMiniSuite(t *testing.T) {
	d := dockerClient(t)
	cfg := config.Default()
	cfg.Data.MiniTasks = 3
	suite, err := task.GenerateMiniFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A private tag, so the real suite image (sandbox.image) is left alone.
	cfg.Sandbox.Image = "swetui/reward-mini-test:" + suite.Digest()
	if suite, err = task.GenerateMiniFor(cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	missing, err := sandbox.Missing(ctx, d, []string{cfg.Sandbox.Image})
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		bc, err := task.OpenMiniBuildContext(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = sandbox.Build(ctx, d, cfg.Sandbox.Image, bc, "", nil)
		bc.Close()
		if err != nil {
			t.Fatalf("build %s: %v", cfg.Sandbox.Image, err)
		}
	}
	repos, err := suite.Materialize(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := NewScorer(cfg.Reward, &PoolEvaluator{Pool: dockerPool(t, d)})
	defer s.Close()
	for id, p := range repos {
		s.Applier.RegisterInstance(id, p)
	}
	for _, mt := range suite.Tasks {
		inst := mt.Instance
		rs, err := s.ScoreDiffs(ctx, &inst, []string{inst.Patch, ""}, config.PhaseDocker)
		if err != nil {
			t.Fatal(err)
		}
		gold, empty := rs[0], rs[1]
		if gold.Infra || !gold.Resolved || gold.Reward != 1 || gold.ApplyMethod != ApplyGit || gold.F2PPassed != gold.F2PTotal || gold.F2PTotal == 0 {
			t.Errorf("%s gold: reward %v resolved %v infra %q method %s f2p %d/%d p2p broken %d, tests error %q",
				inst.InstanceID, gold.Reward, gold.Resolved, gold.InfraCause, gold.ApplyMethod, gold.F2PPassed, gold.F2PTotal, gold.P2PBroken, gold.TestsError)
		}
		if empty.Reward != 0 || empty.Resolved || empty.Applied || empty.Infra {
			t.Errorf("%s empty: %+v", inst.InstanceID, empty)
		}
	}
}
