package app

import (
	"errors"
	"strings"
	"testing"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/rollout"
	"github.com/swetui/swetui/sandbox"
)

// rollout.mode picks the peer, and agent.executor its sessions' opener, in
// one place: single-shot asks for no pool; agent mode's sandbox executor
// takes the pool, and says so when there is none; an executor swetui does
// not have is named.
func TestPlayerPicksOnce(t *testing.T) {
	noPool := errors.New("no daemon")
	for _, tt := range []struct {
		mode, executor string
		want           string // the peer's type, or the error's text
	}{
		{config.RolloutSingle, config.ExecutorSandbox, "*rollout.Single"},
		{config.RolloutAgent, config.ExecutorSandbox, "needs a sandbox host for its sessions: no daemon"},
		{config.RolloutAgent, "ssh", `agent.executor = "ssh": no such executor`},
	} {
		cfg := config.Default()
		cfg.Rollout.Mode, cfg.Agent.Executor = tt.mode, tt.executor
		asked := false
		p, err := (&Workspace{Cfg: cfg}).Player(func() (*sandbox.Pool, error) { asked = true; return nil, noPool }, nil, SampleOptions(cfg), 3)
		switch {
		case err != nil:
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s/%s: %v, want %q", tt.mode, tt.executor, err, tt.want)
			}
		case tt.want != "*rollout.Single":
			t.Errorf("%s/%s: %T, want the error %q", tt.mode, tt.executor, p, tt.want)
		default:
			if _, ok := p.(*rollout.Single); !ok || asked {
				t.Errorf("%s: %T (pool asked for: %v), want a Single that asks for none", tt.mode, p, asked)
			}
		}
	}
	cfg := config.Default()
	cfg.Rollout.Mode = config.RolloutAgent
	p, err := (&Workspace{Cfg: cfg}).Player(func() (*sandbox.Pool, error) { return &sandbox.Pool{}, nil }, nil, SampleOptions(cfg), 7)
	if a, ok := p.(*rollout.Agent); err != nil || !ok || a.Limits.Turns != 7 || a.Scorer != nil {
		t.Errorf("agent mode: %T %+v (%v), want an Agent of 7 turns that grades nothing", p, p, err)
	}
}

// Best-of-N's three counts, by hand: task a's first sample resolves, the
// pick (1) does not; b's pick (1) resolves and its first does not; c
// resolves nowhere.
func TestMeasureBestOfN(t *testing.T) {
	entries := []ScoreEntry{{InstanceID: "a", Sample: 0, Resolved: true}, {InstanceID: "a", Sample: 1},
		{InstanceID: "b", Sample: 0}, {InstanceID: "b", Sample: 1, Resolved: true}, {InstanceID: "c", Sample: 0}, {InstanceID: "c", Sample: 1}}
	got := MeasureBestOfN(entries, map[string]int{"a": 1, "b": 1, "c": 0})
	if want := (BestOfN{Tasks: 3, First: 1, Picked: 1, Oracle: 2}); got != want {
		t.Errorf("%+v, want %+v", got, want)
	}
}
