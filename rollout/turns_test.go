package rollout

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/swetui/swetui/agent"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/prompt"
	"github.com/swetui/swetui/sandbox"
)

// recorder is a Publisher that keeps what it is given.
type recorder []event.Event

func (r *recorder) Publish(ev event.Event) { *r = append(*r, ev) }

// tableSession runs commands from a table (the real sessions are tested on
// Docker and Kubernetes).
type tableSession map[string]sandbox.ExecResult

func (tableSession) ID() string   { return "3f2a1b9c0d12" }
func (tableSession) Host() string { return "fake" }
func (tableSession) Close() error { return nil }
func (s tableSession) Exec(_ context.Context, cmd string, _ sandbox.ExecOptions) (sandbox.ExecResult, error) {
	return s[cmd], nil
}
func (tableSession) Diff(context.Context, string, int) (string, error) {
	return "diff --git a/a.py b/a.py\n", nil
}

// What the console is told of a trajectory as the loop plays it: each
// turn once its command ran (its first line, exit code and output's head,
// cut small), a reply without a command with what it was told, the submit,
// then the end.
func TestPublishTurns(t *testing.T) {
	tok, err := model.TrainBPE(context.Background(), slices.Values([]string{"```bash\nls\n```", "exit code 0\n", "SUBMIT"}), 300, nil)
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("0123456789", 500)
	sess := tableSession{
		"ls":                     {Output: "a.py\nb.py\n", Bytes: 10, Duration: 40 * time.Millisecond},
		"cat > a.py <<'E'\nx\nE": {},
		"cat big.txt":            {Output: big, Bytes: int64(len(big))},
		"sleep 99":               {ExitCode: 137, TimedOut: true, Duration: time.Minute},
	}
	replies := []string{"```bash\nls\n```", "I am not sure.", "```bash\ncat > a.py <<'E'\nx\nE\n```", "```bash\ncat big.txt\n```",
		"```bash\nsleep 99\n```", "SUBMIT"}
	var bus recorder
	chat := prompt.ChatFormat{}
	l := agent.Limits{Turns: 30, CommandTimeout: time.Minute, ObservationChars: 10000, Context: 100000, MaxNewTokens: 256, MaxDiffBytes: 1 << 20}
	_, err = agent.Episode{Session: sess, Sampler: &agent.Scripted{Tok: tok, Chat: chat, Replies: replies}, Tok: tok, Chat: chat, Limits: l,
		OnTurn: publishTurns(&bus, sess.ID(), "mini__calc-1")}.Run(context.Background(), tok.Encode("prompt"))
	if err != nil {
		t.Fatal(err)
	}
	turn := func(n int, cmd, out string) event.TurnPlayed {
		return event.TurnPlayed{Session: "3f2a1b9c0d12", InstanceID: "mini__calc-1", Turn: n, Command: cmd, Output: out}
	}
	want := []event.Event{
		event.TurnPlayed{Session: "3f2a1b9c0d12", InstanceID: "mini__calc-1", Turn: 1, Command: "ls", Output: "a.py\nb.py\n", Duration: 40 * time.Millisecond},
		event.TurnPlayed{Session: "3f2a1b9c0d12", InstanceID: "mini__calc-1", Turn: 2, Reply: "I am not sure.",
			Output: "No command found: reply with one ```bash block, or SUBMIT alone when the fix is made."},
		turn(3, "cat > a.py <<'E' ...", "(no output)"),
		turn(4, "cat big.txt", big[:event.TurnHeadBytes]),
		event.TurnPlayed{Session: "3f2a1b9c0d12", InstanceID: "mini__calc-1", Turn: 5, Command: "sleep 99", ExitCode: 137, TimedOut: true,
			Duration: time.Minute, Output: "(no output)"},
		event.TurnPlayed{Session: "3f2a1b9c0d12", InstanceID: "mini__calc-1", Turn: 6, Submitted: true},
		event.TurnPlayed{Session: "3f2a1b9c0d12", InstanceID: "mini__calc-1", Turn: 6, End: "submitted", DiffBytes: 25},
	}
	if !slices.Equal(bus, want) {
		t.Errorf("published\n%+v\nwant\n%+v", bus, want)
	}
}
