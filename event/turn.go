package event

import (
	"strings"
	"time"
	"unicode/utf8"
)

// TurnHeadBytes bounds each text of a TurnPlayed: a live view shows a line
// of each turn, so no subscriber holds much of one however much a command
// printed.
const TurnHeadBytes = 200

// TurnPlayed is one turn of an agent trajectory as it is played
// (rollout.mode = "agent"), after its command ran, or the trajectory's end:
// what the console shows of the trajectories in flight. It is high-rate (a
// subscriber that is behind loses it) and small (Bounded); the whole
// trajectory comes with its CompletionScored once graded.
type TurnPlayed struct {
	// Session is the trajectory's sandbox (its container's or Pod's id):
	// one a trajectory, so it names the trajectory while it runs.
	Session    string
	InstanceID string
	// Turn is the turn's number, from 1; with End, the turns played.
	Turn int
	// Command is the command's first line ("..." after it when it has
	// more); "" for a submit or a reply without a command.
	Command   string
	Submitted bool // the reply submitted
	ExitCode  int
	TimedOut  bool
	Duration  time.Duration
	// Output is the head of what went back to the policy: the command's
	// output (without the exit code's line), or for a reply without a
	// command what it was told.
	Output string
	// Reply is the head of a reply without a command (what the policy
	// wrote instead); "" otherwise.
	Reply string
	// End is set on a trajectory's last event only: what ended it
	// (TrajectoryEnds; a served session's also EndDeleted, EndLost,
	// EndReaped), with Detail (the sandbox's error) and the size of the
	// diff that goes to grading.
	End       End
	Detail    string
	DiffBytes int
}

// PlayedTurn is turn n of the trajectory in session, t, as a live view is
// told of it (bounded); submitted says its reply submitted.
func PlayedTurn(session, instanceID string, n int, t Turn, submitted bool) TurnPlayed {
	e := TurnPlayed{Session: session, InstanceID: instanceID, Turn: n, Command: t.Command, Submitted: submitted,
		ExitCode: t.ExitCode, TimedOut: t.TimedOut, Duration: t.Duration, Output: t.Observation}
	switch {
	case t.Command != "":
		_, e.Output, _ = strings.Cut(t.Observation, "\n") // the exit code's line: ExitCode says it
	case !submitted:
		e.Reply = t.Reply
	}
	return e.Bounded()
}

// Bounded is e with its texts cut to TurnHeadBytes each and the command to
// its first line.
func (e TurnPlayed) Bounded() TurnPlayed {
	e.Session = head(e.Session, 64)
	e.InstanceID = head(e.InstanceID, TurnHeadBytes)
	e.Command = head(firstLine(e.Command), TurnHeadBytes)
	e.Output = head(e.Output, TurnHeadBytes)
	e.Reply = head(e.Reply, TurnHeadBytes)
	e.Detail = head(e.Detail, TurnHeadBytes)
	return e
}

// head is s's first n bytes at most, cut at a rune's start (bytes that are
// not UTF-8 stay: whoever draws them cleans them).
func head(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Back to a rune's start, but not past a run of bytes that starts none.
	for i := 0; i < utf8.UTFMax-1 && n > 0 && !utf8.RuneStart(s[n]); i++ {
		n--
	}
	return strings.Clone(s[:n]) // not a view that holds the whole output
}
