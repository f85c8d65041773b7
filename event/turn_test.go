package event

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// A turn's event holds little however much the command printed: each text
// at most TurnHeadBytes, the command its first line, cut at a rune's start.
func TestTurnPlayedBounded(t *testing.T) {
	long := strings.Repeat("x", 5000)
	for _, tt := range []struct {
		name string
		in   TurnPlayed
		want TurnPlayed
	}{
		{"short texts stay", TurnPlayed{Command: "ls -la", Output: "a.py\nb.py\n", Detail: "gone"},
			TurnPlayed{Command: "ls -la", Output: "a.py\nb.py\n", Detail: "gone"}},
		{"a heredoc is its first line", TurnPlayed{Command: "cat > f.py <<'EOF'\n" + long + "\nEOF"},
			TurnPlayed{Command: "cat > f.py <<'EOF' ..."}},
		{"a long output is its head", TurnPlayed{Output: long, Reply: long, Detail: long},
			TurnPlayed{Output: long[:TurnHeadBytes], Reply: long[:TurnHeadBytes], Detail: long[:TurnHeadBytes]}},
		{"cut before a rune, not in it", TurnPlayed{Output: strings.Repeat("x", TurnHeadBytes-1) + "é" + long},
			TurnPlayed{Output: strings.Repeat("x", TurnHeadBytes-1)}},
		{"bytes that are not UTF-8 are cut as bytes", TurnPlayed{Output: strings.Repeat("\x80", 3*TurnHeadBytes)},
			TurnPlayed{Output: strings.Repeat("\x80", TurnHeadBytes-3)}},
	} {
		got := tt.in.Bounded()
		if got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
		for _, s := range []string{got.Output, got.Reply, got.Command, got.Detail} {
			if len(s) > TurnHeadBytes {
				t.Errorf("%s: %d bytes, over %d", tt.name, len(s), TurnHeadBytes)
			}
		}
		if utf8.ValidString(tt.in.Output) && !utf8.ValidString(got.Output) {
			t.Errorf("%s: a rune cut in two: %q", tt.name, got.Output)
		}
	}
}

// Turns are high-rate: a subscriber that is behind loses them, and the
// agent's loop never waits on the console.
func TestBusDropsTurnsForAFullSubscriber(t *testing.T) {
	b := NewBus()
	s := b.Subscribe(1)
	b.Publish(TurnPlayed{Turn: 1})
	start := time.Now()
	b.Publish(TurnPlayed{Turn: 2}) // full: dropped at once, not after ImportantWait
	if d := s.Dropped(); d.Events != 1 {
		t.Fatalf("dropped %+v, want 1 event", d)
	}
	if took := time.Since(start); took >= ImportantWait {
		t.Errorf("Publish waited %s for room for a turn", took)
	}
}
