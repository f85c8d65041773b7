package app

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/task"
)

// The verifier is retrained every `every` steps in the background: a step
// never waits (the tap returns while the training runs), a refresh under
// way makes the next step's wait its turn, the trained one takes the
// gate's place, and a failed one leaves the gate its verifier, said.
func TestVerifierRefresh(t *testing.T) {
	gate := NewGate(&phaseGrader{}, fixedVerifier(0.1), gateConfig(0, 1), 1, nil)
	release := make(chan struct{})
	var mu sync.Mutex
	var trained []int
	var said []string
	r := &refresher{every: 2, gate: gate, ctx: context.Background(),
		train: func(_ context.Context, step int) (PatchVerifier, string, error) {
			mu.Lock()
			trained = append(trained, step)
			mu.Unlock()
			<-release
			if step == 6 {
				return nil, "", errors.New("no docker-phase verdict yet")
			}
			return fixedVerifier(0.9), "fine", nil
		},
		say: func(_ event.Level, s string) { mu.Lock(); said = append(said, s); mu.Unlock() }}
	seen := &stepRecorder{}
	tap := stepTap{Publisher: seen, stepEnded: r.stepEnded}
	tap.Publish(event.StepFinished{Step: 1})
	tap.Publish(event.StepFinished{Step: 2}) // starts a refresh, and returns
	tap.Publish(event.StepFinished{Step: 4}) // one is under way: not another
	if len(seen.steps) != 3 {
		t.Fatalf("the tap passed on %v", seen.steps)
	}
	close(release)
	r.close()
	vs, _ := gate.Score(context.Background(), &task.Instance{InstanceID: "a__x-1"}, []string{"ok-fix"}, config.PhaseDocker)
	if vs[0].Gate != "" || !vs[0].Resolved {
		t.Errorf("after the refresh the gate still spares: %+v", vs[0])
	}
	tap.Publish(event.StepFinished{Step: 6})
	r.close()
	mu.Lock()
	defer mu.Unlock()
	if len(trained) != 2 || trained[0] != 2 || trained[1] != 6 {
		t.Errorf("refreshes at %v, want at steps 2 and 6", trained)
	}
	if len(said) != 2 || !strings.Contains(said[0], "refreshed") || !strings.Contains(said[1], "keeps the verifier it has") {
		t.Errorf("said %q", said)
	}
}

// stepRecorder keeps the steps it is told of.
type stepRecorder struct{ steps []int }

func (s *stepRecorder) Publish(ev event.Event) {
	if sf, ok := ev.(event.StepFinished); ok {
		s.steps = append(s.steps, sf.Step)
	}
}
