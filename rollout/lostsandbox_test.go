package rollout

import (
	"testing"

	"github.com/swetui/swetui/agent"
	"github.com/swetui/swetui/event"
)

// In training, a sandbox the agent's own processes destroyed (kill -9 -1
// cannot, but a fork bomb past the kill's bound, the disk bound or the
// session's life can) is the agent's failure: never an infrastructure
// failure masked out of the advantage. Only a loss it did not cause is.
func TestDestroyedSandboxIsNotMasked(t *testing.T) {
	v := event.Verdict{InstanceID: "x"}
	if got := lostSandbox(v, agent.Trajectory{End: event.EndContainer, Infra: true, Detail: "killed from outside"}); !got.Infra {
		t.Error("a sandbox lost for no doing of the agent's is not masked")
	}
	if got := lostSandbox(v, agent.Trajectory{End: event.EndContainer, Infra: false, Detail: "disk limit"}); got.Infra {
		t.Error("a sandbox the agent destroyed is masked as an infrastructure failure")
	}
	if got := lostSandbox(v, agent.Trajectory{End: event.EndTurnLimit}); got.Infra {
		t.Error("an unfinished trajectory is masked")
	}
}
