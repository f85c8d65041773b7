package history

import (
	"testing"

	"github.com/swetui/swetui/event"
)

// KindOf names an event in snake case, acronyms kept whole.
func TestKindOf(t *testing.T) {
	tests := []struct {
		ev   event.Event
		want string
	}{
		{event.StepFinished{}, "step_finished"}, {event.SFTStep{}, "sft_step"}, {event.RunInfo{}, "run_info"}, {event.Message{}, "message"},
	}
	for _, tt := range tests {
		if got := KindOf(tt.ev); got != tt.want {
			t.Errorf("KindOf(%T) = %q, want %q", tt.ev, got, tt.want)
		}
	}
}
