package train

import (
	"fmt"
	"slices"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
)

// Curriculum is the reward-mode state machine: syntax → apply-only → docker.
// It advances when the phase's metric, averaged over the last Window steps of
// the phase, reaches its threshold, and optionally steps back when the mean
// reward over the window collapses. It is plain data so checkpoints can save it.
type Curriculum struct {
	Phase string    `json:"phase"`
	Auto  bool      `json:"auto"`
	Since int       `json:"since"` // step the phase began
	Hist  []float64 `json:"hist"`  // the phase's metric, last Window steps
	Rew   []float64 `json:"rew"`   // mean reward, last Window steps

	Window        int     `json:"-"`
	SyntaxToApply float64 `json:"-"`
	ApplyToDocker float64 `json:"-"`
	StepBackBelow float64 `json:"-"`
	// DockerOK says whether the docker phase can run; without Docker the
	// curriculum stops at apply-only.
	DockerOK bool `json:"-"`
}

// NewCurriculum starts the curriculum of cfg.
func NewCurriculum(cfg config.Curriculum, dockerOK bool) *Curriculum {
	return &Curriculum{Phase: cfg.Phase, Auto: cfg.Auto, Window: cfg.Window,
		SyntaxToApply: cfg.SyntaxToApply, ApplyToDocker: cfg.ApplyToDocker,
		StepBackBelow: cfg.StepBackBelow, DockerOK: dockerOK}
}

// Set switches to phase at step (a live switch), resetting the window.
func (c *Curriculum) Set(phase string, step int) error {
	if err := config.CheckPhase(phase); err != nil {
		return fmt.Errorf("set phase: %w", err)
	}
	c.Phase, c.Since, c.Hist, c.Rew = phase, step, nil, nil
	return nil
}

// Observe records a finished step and returns the phase change it triggers
// (nil when none). The metric watched is the syntax-valid rate in syntax,
// the apply rate in apply-only; docker only watches for collapse.
func (c *Curriculum) Observe(step int, m event.Metrics) *event.PhaseChanged {
	metric := m.SyntaxRate
	if c.Phase == config.PhaseApplyOnly {
		metric = m.ApplyRate
	}
	c.Hist = pushWindow(c.Hist, metric, c.Window)
	c.Rew = pushWindow(c.Rew, m.RewardMean, c.Window)
	if !c.Auto || len(c.Hist) < c.Window {
		return nil
	}
	from := c.Phase
	avg, rew := mean(c.Hist), mean(c.Rew)
	var to, reason string
	switch {
	case c.Phase == config.PhaseSyntax && avg >= c.SyntaxToApply:
		to, reason = config.PhaseApplyOnly, fmt.Sprintf("syntax-valid rate %.2f ≥ %.2f over %d steps", avg, c.SyntaxToApply, c.Window)
	case c.Phase == config.PhaseApplyOnly && avg >= c.ApplyToDocker && c.DockerOK:
		to, reason = config.PhaseDocker, fmt.Sprintf("apply rate %.2f ≥ %.2f over %d steps", avg, c.ApplyToDocker, c.Window)
	case c.StepBackBelow > 0 && rew < c.StepBackBelow && c.Phase != config.PhaseSyntax:
		to = config.Phases[slices.Index(config.Phases, c.Phase)-1]
		reason = fmt.Sprintf("mean reward %.2f < %.2f over %d steps: stepping back", rew, c.StepBackBelow, c.Window)
	default:
		return nil
	}
	_ = c.Set(to, step)
	return &event.PhaseChanged{Step: step, From: from, To: to, Auto: true, Reason: reason}
}

func pushWindow(xs []float64, x float64, n int) []float64 {
	xs = append(xs, x)
	if len(xs) > n {
		xs = xs[len(xs)-n:]
	}
	return xs
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
