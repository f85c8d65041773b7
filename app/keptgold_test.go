package app

import (
	"strings"
	"testing"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/train"
)

func TestKeptGoldText(t *testing.T) {
	tests := []struct {
		skips train.SFTSkips
		level event.Level
		want  string
	}{
		{train.SFTSkips{Gold: 50}, event.Info, "warm start: 50 of 50 gold patches kept"},
		{train.SFTSkips{Gold: 50, TooLong: 43, Longest: 2100}, event.Warn,
			"7 of 50 gold patches kept; 43 left out: their reply is longer than sample.max_new_tokens = 256 tokens (the longest 2100)"},
		{train.SFTSkips{Gold: 50, TooLong: 3, Longest: 300}, event.Info, "47 of 50 gold patches kept; 3 left out"},
	}
	for _, tt := range tests {
		lvl, text := KeptGoldText(tt.skips, 256)
		if lvl != tt.level || !strings.Contains(text, tt.want) {
			t.Errorf("keptGoldText(%+v) = %v %q, want %v and %q", tt.skips, lvl, text, tt.level, tt.want)
		}
	}
}
