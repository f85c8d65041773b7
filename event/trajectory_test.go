package event

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestTrajectoryText(t *testing.T) {
	cmdTurn := Turn{Reply: "Looking.\n```bash\ncat -n a.py\n```", Command: "cat -n a.py", ExitCode: 0, Duration: 41700 * time.Microsecond,
		OutputBytes: 18, Observation: "exit code 0\n     1\tx = 1\n"}
	tests := []struct {
		name string
		c    CompletionScored
		want string
	}{
		{"single-shot", CompletionScored{Completion: "```diff\n...```"}, "```diff\n...```"},
		{"submitted, its diff after", CompletionScored{Verdict: Verdict{Patch: "diff --git a/a.py b/a.py\n"}, Agent: &Trajectory{End: "submitted", Turns: []Turn{
			cmdTurn,
			{Reply: "I think\nthe bug   is here", Observation: "No command found."},
			{Reply: "cat > f <<'E'\n...", Command: "cat > f <<'E'\nx\nE", ExitCode: 137, TimedOut: true, Duration: time.Minute, OutputBytes: 1,
				Observation: "exit code 137 (killed after 1m0s, the time a command may take)\n(no output)"},
			{Reply: "SUBMIT"},
		}}},
			"── turn 1 · exit 0 · 42ms · 18 bytes · $ cat -n a.py\nexit code 0\n     1\tx = 1\n" +
				"── turn 2 · no command in the reply: \"I think the bug is here\"\nNo command found.\n" +
				"── turn 3 · exit 137 (timed out) · 1m0s · 1 byte · $ cat > f <<'E' ...\nexit code 137 (killed after 1m0s, the time a command may take)\n(no output)\n" +
				"── turn 4 · submit\n" +
				"── submitted after 4 turns\n```diff\ndiff --git a/a.py b/a.py\n```\n"},
		{"a reply without a command ends it", CompletionScored{Agent: &Trajectory{End: "turn_limit", Turns: []Turn{{Reply: "SUBMIT?", Observation: "No command found."}}}},
			"── turn 1 · no command in the reply: \"SUBMIT?\"\nNo command found.\n── turn_limit after 1 turn\n"},
		{"no session", CompletionScored{Agent: &Trajectory{End: "container_failure", Detail: "no session: docker gone"}},
			"── container_failure after 0 turns (no session: docker gone)\n"},
	}
	for _, tt := range tests {
		if got := tt.c.Text(); got != tt.want {
			t.Errorf("%s:\n%s\nwant\n%s", tt.name, got, tt.want)
		}
	}
}

// A single-shot line has no "agent" key: its rollouts.jsonl line is as it
// was before trajectories were kept; an agent line keeps every turn.
func TestTrajectoryJSON(t *testing.T) {
	b, err := json.Marshal(CompletionScored{Completion: "x"})
	if err != nil || strings.Contains(string(b), "agent") {
		t.Errorf("single-shot line %s (%v)", b, err)
	}
	in := CompletionScored{Agent: &Trajectory{End: "timeout_budget", Turns: []Turn{{Reply: "r", Command: "sleep 9", ExitCode: 137, TimedOut: true,
		Duration: 2 * time.Second, OutputBytes: 3, Observation: "o", ReplyTokens: 5, ObsTokens: 7}}}}
	b, err = json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	want := `"agent":{"end":"timeout_budget","turns":[{"reply":"r","command":"sleep 9","exit_code":137,"timed_out":true,"duration_ns":2000000000,"output_bytes":3,"observation":"o","reply_tokens":5,"obs_tokens":7}]}`
	if !strings.Contains(string(b), want) {
		t.Errorf("agent line %s\nlacks %s", b, want)
	}
}
