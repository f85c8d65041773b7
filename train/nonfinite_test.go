package train

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// nanPolicy is the bandit whose update goes NaN at update number at.
type nanPolicy struct {
	*banditPolicy
	at int
}

func (p *nanPolicy) Step() (float64, float64) {
	norm, lr := p.banditPolicy.Step()
	if p.Updates == p.at {
		p.Theta[0] = math.NaN()
		return math.NaN(), lr
	}
	return norm, lr
}

// TestNonFiniteStopsTheRun: a step whose gradient goes NaN stops the run
// with an error naming the step, and saves nothing of it: the newest
// checkpoint is the last good step's.
func TestNonFiniteStopsTheRun(t *testing.T) {
	cfg := testConfig(t, "run.max_steps=10", "run.save_every=1", "run.keep_last=20")
	pol := &nanPolicy{banditPolicy: newBandit(6, 0.5, 7), at: 4}
	tr := New(cfg, Deps{Policy: pol, Tokenizer: digitTokenizer{}, Scorer: rewardOf3,
		Prompter: staticPrompter{}, Tasks: fakeTasks(5), Store: pol, DockerOK: true})
	evs := drain(tr)
	err := tr.Run(context.Background())
	<-evs
	var step int
	if err == nil || !strings.Contains(err.Error(), "the gradient norm is NaN") {
		t.Fatalf("run error %v, want a NaN gradient norm", err)
	}
	if _, serr := fmt.Sscanf(err.Error(), "step %d:", &step); serr != nil || step < 4 {
		t.Fatalf("run error %v: want the step named first (the 4th update's)", err)
	}
	entries, _ := os.ReadDir(filepath.Join(cfg.Run.OutDir, "checkpoints"))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := fmt.Sprintf("step-%08d", step-1); len(names) == 0 || names[len(names)-1] != want {
		t.Fatalf("checkpoints %v, want the newest to be %s", names, want)
	}
}
