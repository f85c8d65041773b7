package train

import (
	"testing"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
)

func TestCurriculum(t *testing.T) {
	cfg := config.Curriculum{Phase: "syntax", Auto: true, Window: 3, SyntaxToApply: 0.8, ApplyToDocker: 0.5, StepBackBelow: 0.1}
	type obs struct {
		m    event.Metrics
		want string // phase after observing
	}
	tests := []struct {
		name     string
		dockerOK bool
		auto     bool
		steps    []obs
	}{
		{"advances only on a full window", true, true, []obs{
			{event.Metrics{SyntaxRate: 1, RewardMean: 0.3}, "syntax"},
			{event.Metrics{SyntaxRate: 1, RewardMean: 0.3}, "syntax"},
			{event.Metrics{SyntaxRate: 0.5, RewardMean: 0.3}, "apply-only"}, // mean 0.833
			{event.Metrics{ApplyRate: 0.6, RewardMean: 0.3}, "apply-only"},
			{event.Metrics{ApplyRate: 0.6, RewardMean: 0.3}, "apply-only"},
			{event.Metrics{ApplyRate: 0.3, RewardMean: 0.3}, "docker"}, // mean 0.5
		}},
		{"below threshold stays", true, true, []obs{
			{event.Metrics{SyntaxRate: 0.7}, "syntax"}, {event.Metrics{SyntaxRate: 0.8}, "syntax"}, {event.Metrics{SyntaxRate: 0.8}, "syntax"},
		}},
		{"manual mode never moves", true, false, []obs{
			{event.Metrics{SyntaxRate: 1}, "syntax"}, {event.Metrics{SyntaxRate: 1}, "syntax"}, {event.Metrics{SyntaxRate: 1}, "syntax"},
		}},
		{"no docker stops at apply-only", false, true, []obs{
			{event.Metrics{SyntaxRate: 1, RewardMean: 0.3}, "syntax"}, {event.Metrics{SyntaxRate: 1, RewardMean: 0.3}, "syntax"},
			{event.Metrics{SyntaxRate: 1, RewardMean: 0.3}, "apply-only"},
			{event.Metrics{ApplyRate: 1, RewardMean: 0.3}, "apply-only"}, {event.Metrics{ApplyRate: 1, RewardMean: 0.3}, "apply-only"},
			{event.Metrics{ApplyRate: 1, RewardMean: 0.3}, "apply-only"},
		}},
		{"collapse steps back", true, true, []obs{
			{event.Metrics{SyntaxRate: 1, RewardMean: 0.3}, "syntax"}, {event.Metrics{SyntaxRate: 1, RewardMean: 0.3}, "syntax"},
			{event.Metrics{SyntaxRate: 1, RewardMean: 0.3}, "apply-only"},
			{event.Metrics{ApplyRate: 0, RewardMean: 0}, "apply-only"}, {event.Metrics{ApplyRate: 0, RewardMean: 0}, "apply-only"},
			{event.Metrics{ApplyRate: 0, RewardMean: 0.05}, "syntax"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cfg
			c.Auto = tt.auto
			cur := NewCurriculum(c, tt.dockerOK)
			for i, o := range tt.steps {
				ev := cur.Observe(i+1, o.m)
				if cur.Phase != o.want {
					t.Fatalf("step %d: phase %s, want %s", i+1, cur.Phase, o.want)
				}
				if (ev != nil) != (i > 0 && tt.steps[i-1].want != o.want) {
					t.Fatalf("step %d: event %+v", i+1, ev)
				}
			}
		})
	}
}

func TestCurriculumSetRejectsUnknownPhase(t *testing.T) {
	cur := NewCurriculum(config.Default().Curriculum, true)
	if err := cur.Set("tests", 3); err == nil {
		t.Fatal("want an error")
	}
	if err := cur.Set("docker", 3); err != nil || cur.Phase != "docker" || cur.Since != 3 {
		t.Fatalf("set docker: %v %+v", err, cur)
	}
}
