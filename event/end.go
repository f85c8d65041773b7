package event

// End is what ended an agent's trajectory, or a session served to a
// trainer elsewhere: one word, the same in rollouts.jsonl and
// trajectories.jsonl, on the console, in `swetui view`'s filters and in
// serve's answers.
type End string

// What ends a trajectory. Only EndSubmitted is finished; what the others
// earn in training is the agent's unfinished reward.
const (
	EndSubmitted     End = "submitted"
	EndTurnLimit     End = "turn_limit"
	EndContextFull   End = "context_full"
	EndTimeoutBudget End = "timeout_budget"
	EndContainer     End = "container_failure"
)

// What else ends a served session (`swetui serve`): its client deleted
// it, its sandbox was lost, it was reaped after serve.session_idle_s, its
// life (agent.session_minutes) was spent, or the server stopped.
const (
	EndDeleted End = "deleted"
	EndLost    End = "lost"
	EndReaped  End = "reaped"
	EndExpired End = "expired"
	EndStopped End = "stopped"
)

// TrajectoryEnds are the ends of the trajectories a run plays, in the
// order the metrics, view's filters and eval's summary list them. The
// order is kept in history's index files: add at the end only.
var TrajectoryEnds = []End{EndSubmitted, EndTurnLimit, EndContextFull, EndTimeoutBudget, EndContainer}

// Finished reports whether the agent ended the trajectory itself.
func (e End) Finished() bool { return e == EndSubmitted }
