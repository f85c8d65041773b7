package ui

import (
	"strings"
	"testing"

	"github.com/swetui/swetui/event"
)

// The Containers pane counts the agent sessions open on the pool's hosts,
// and says nothing of them when there are none.
func TestContainersPaneCountsSessions(t *testing.T) {
	m := newTestModel(&fakeCtrl{}, 200, 40)
	feed(m, event.PoolState{Workers: []event.WorkerState{{ID: 0}, {ID: 1}}, Sessions: 3})
	if v := m.View(); !strings.Contains(v, "0/2 busy · queue 0 · done 0 · 3 agent sessions") {
		t.Errorf("no session count in:\n%s", v)
	}
	feed(m, event.PoolState{Workers: []event.WorkerState{{ID: 0}, {ID: 1}}, Sessions: 1})
	if v := m.View(); !strings.Contains(v, "· 1 agent session ") {
		t.Errorf("one session not said in the singular:\n%s", v)
	}
	feed(m, event.PoolState{Workers: []event.WorkerState{{ID: 0}, {ID: 1}}})
	if v := m.View(); strings.Contains(v, "agent session") {
		t.Errorf("sessions shown with none open:\n%s", v)
	}
}
