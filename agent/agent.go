// Package agent owns agent mode's rollout: the policy working in a task's
// sandbox session turn by turn (a ```bash block a reply, its output back as
// the next turn in the model's chat template), until it submits or a limit
// ends it, then its work tree's diff, computed by swetui. A trajectory is
// the token ids exactly as they were sampled, with the observations' and
// the template's tokens between them (loss mask 0): nothing is decoded and
// encoded again, so what GRPO trains on is what the policy saw and said.
//
// It grades nothing itself: the diff goes to the reward pipeline in a fresh
// sandbox (reward.Scorer), so nothing the agent does in its own session can
// touch the verdict.
package agent

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/prompt"
	"github.com/swetui/swetui/sandbox"
)

// Limits bound a trajectory.
type Limits struct {
	Turns          int           // replies at most
	CommandTimeout time.Duration // a command's wall clock
	// TimeoutBudget ends the trajectory once this many commands have timed
	// out (0: no budget).
	TimeoutBudget int
	// ObservationChars of a command's output go back, as its head and
	// tail; ObservationTokens bound them again once tokenized.
	ObservationChars  int
	ObservationTokens int
	Context           int // tokens of the whole trajectory, prompt included
	MaxNewTokens      int // tokens of one reply at most
	// MaxDiffBytes bounds the final diff (reward.max_patch_kb).
	MaxDiffBytes int
}

// Sampler draws one reply to a context of token ids: its tokens as sampled
// (ending with the stop token when it stopped), their logprobs, and
// whether max tokens cut it.
type Sampler interface {
	SampleTurn(ctx context.Context, context []int, maxNew int) (tokens []int, logprobs []float64, truncated bool, err error)
}

// Tokenizer encodes the observation turns and decodes replies to read
// their commands.
type Tokenizer interface {
	Encode(text string) []int
	Decode(tokens []int) string
}

// Turn is one reply and what its command did.
type Turn struct {
	Reply       string        `json:"reply"`             // the reply's text, for reading (the trajectory keeps its tokens)
	Command     string        `json:"command,omitempty"` // "" for a submit or a reply without a command
	ExitCode    int           `json:"exit_code"`
	TimedOut    bool          `json:"timed_out,omitempty"`
	Duration    time.Duration `json:"duration_ns"`
	OutputBytes int64         `json:"output_bytes"`
	// Observation is what went back to the policy, as text.
	Observation string `json:"observation"`
	ReplyTokens int    `json:"reply_tokens"`
	ObsTokens   int    `json:"obs_tokens"`
}

// Trajectory is one rollout in agent mode.
type Trajectory struct {
	// Tokens are the prompt's, then each reply's as sampled and each
	// observation turn's as tokenized; Sampled says which the policy drew
	// (the loss covers those), Logprobs their behaviour logprobs (0
	// elsewhere).
	Tokens    []int
	Sampled   []bool
	Logprobs  []float64
	PromptLen int
	Turns     []Turn
	End       event.End
	// Detail says more of the end (the sandbox's error).
	Detail string
	// Infra says that an event.EndContainer was no doing of the agent's (the
	// sandbox died, killed from outside, its host lost): masked out of
	// the advantage. One the agent's own processes caused (its sandbox
	// stopped for them: sandbox.ErrSessionKilled) is the agent's failure,
	// scored as agent.unfinished says.
	Infra bool
	// Diff is the work tree's change from the base commit, computed by
	// swetui; "" when the session was lost.
	Diff string
}

// Episode is one trajectory's setting: the session it acts in, the policy,
// the chat format and the limits.
type Episode struct {
	Session    sandbox.Session
	Sampler    Sampler
	Tok        Tokenizer
	Chat       prompt.ChatFormat
	Limits     Limits
	BaseCommit string
	// OnTurn, when set, is told of each turn once it is played (its
	// command ran; a submit or a reply without a command too) and, last,
	// of the end of a trajectory Run returns without an error: for a live
	// view (the console). It runs on Run's goroutine: it must not block.
	OnTurn func(Progress)
}

// Progress is what Episode.OnTurn is told: a turn just played, or the end.
type Progress struct {
	N    int  // the turn's number, from 1; at the end, the turns played
	Turn Turn // the turn played; zero at the end
	// End is set on the last call only, with Detail and the size of the
	// diff taken.
	End       event.End
	Detail    string
	DiffBytes int
}

// Run plays the episode from prompt (the agent prompt's token ids) until
// the agent submits or a limit ends it, and takes the diff. The error is
// the caller's (a cancelled ctx, the sampler failing); a lost sandbox ends
// the trajectory (event.EndContainer) instead.
func (e Episode) Run(ctx context.Context, promptIDs []int) (tr Trajectory, err error) {
	l := e.Limits
	tr = Trajectory{PromptLen: len(promptIDs)}
	if e.OnTurn != nil {
		defer func() {
			if err == nil {
				e.OnTurn(Progress{N: len(tr.Turns), End: tr.End, Detail: tr.Detail, DiffBytes: len(tr.Diff)})
			}
		}()
	}
	tr.add(promptIDs, nil, false)
	timeouts := 0
	for turn := 0; ; turn++ {
		if turn == l.Turns {
			tr.End = event.EndTurnLimit
			break
		}
		room := l.Context - len(tr.Tokens)
		if room <= 0 {
			tr.End = event.EndContextFull
			break
		}
		toks, lps, truncated, err := e.Sampler.SampleTurn(ctx, tr.Tokens, min(l.MaxNewTokens, room))
		if err != nil {
			return tr, fmt.Errorf("agent: turn %d: %w", turn+1, err)
		}
		tr.add(toks, lps, true)
		reply := e.Chat.CompletionText(e.Tok, toks)
		t := Turn{Reply: reply, ReplyTokens: len(toks)}
		act := ParseReply(reply)
		if act.Submit {
			e.played(&tr, t)
			tr.End = event.EndSubmitted
			break
		}
		if truncated && len(tr.Tokens) >= l.Context {
			e.played(&tr, t)
			tr.End = event.EndContextFull
			break
		}
		var obs string
		var cmdRes sandbox.ExecResult
		if act.Command == "" {
			obs = act.Problem
		} else {
			t.Command = act.Command
			res, err := e.Session.Exec(ctx, act.Command, sandbox.ExecOptions{Timeout: l.CommandTimeout, MaxOutput: l.ObservationChars})
			t.ExitCode, t.TimedOut, t.Duration, t.OutputBytes = res.ExitCode, res.TimedOut, res.Duration, res.Bytes
			if err != nil {
				if ctx.Err() != nil {
					return tr, fmt.Errorf("agent: %w", ctx.Err())
				}
				e.played(&tr, t)
				tr.End, tr.Detail, tr.Infra = event.EndContainer, err.Error(), !errors.Is(err, sandbox.ErrSessionKilled)
				return tr, nil
			}
			obs = Observation(res, l.CommandTimeout)
			cmdRes = res
			if res.TimedOut {
				timeouts++
			}
		}
		seg, err := e.Chat.ObservationTurn(obs)
		if err != nil {
			return tr, fmt.Errorf("agent: %w", err)
		}
		ids := e.Tok.Encode(seg)
		if l.ObservationTokens > 0 && len(ids) > l.ObservationTokens+64 {
			// Over the token cap once tokenized (dense output): cut the
			// text further, keeping its head and tail, and encode again.
			n := len(obs) * l.ObservationTokens / len(ids)
			for try := 0; try < 4 && len(ids) > l.ObservationTokens+64; try++ {
				if act.Command != "" {
					// The output cut further, the count of what is left
					// out still the command's own.
					obs = Observation(CutOutput(cmdRes, n), l.CommandTimeout)
				} else {
					obs = cutMiddle(obs, n)
				}
				if seg, err = e.Chat.ObservationTurn(obs); err != nil {
					return tr, fmt.Errorf("agent: %w", err)
				}
				ids = e.Tok.Encode(seg)
				n = n * 3 / 4
			}
		}
		t.Observation, t.ObsTokens = obs, len(ids)
		e.played(&tr, t)
		if len(tr.Tokens)+len(ids) >= l.Context {
			tr.End = event.EndContextFull // no room for the observation and a reply to it
			break
		}
		tr.add(ids, nil, false)
		if l.TimeoutBudget > 0 && timeouts >= l.TimeoutBudget {
			tr.End = event.EndTimeoutBudget
			break
		}
	}
	diff, err := e.Session.Diff(ctx, e.BaseCommit, l.MaxDiffBytes)
	switch {
	case err != nil && ctx.Err() != nil:
		return tr, fmt.Errorf("agent: %w", ctx.Err())
	case errors.Is(err, sandbox.ErrSessionLost):
		tr.End, tr.Detail, tr.Infra = event.EndContainer, err.Error(), !errors.Is(err, sandbox.ErrSessionKilled)
	case err != nil:
		// Not the sandbox's failure: the agent broke its repository, or
		// its diff is over the bound. It earns what an empty patch earns.
		tr.Detail = err.Error()
	default:
		tr.Diff = diff
	}
	return tr, nil
}

// played adds turn t to tr and tells OnTurn.
func (e Episode) played(tr *Trajectory, t Turn) {
	tr.Turns = append(tr.Turns, t)
	if e.OnTurn != nil {
		e.OnTurn(Progress{N: len(tr.Turns), Turn: t})
	}
}

func (t *Trajectory) add(ids []int, lps []float64, sampled bool) {
	t.Tokens = append(t.Tokens, ids...)
	for i := range ids {
		t.Sampled = append(t.Sampled, sampled)
		lp := 0.0
		if sampled && i < len(lps) {
			lp = lps[i]
		}
		t.Logprobs = append(t.Logprobs, lp)
	}
}

// Action is what a reply asks for.
type Action struct {
	Command string // the bash block's command
	Submit  bool
	// Problem says why a reply asks for nothing that can run; it goes back
	// as the observation.
	Problem string
}

var bashBlock = regexp.MustCompile("(?s)```(?:bash|sh|shell)?[ \t]*\n(.*?)```")

// ParseReply reads a reply: the submit word alone on a line submits;
// otherwise exactly one ```bash block is the command.
func ParseReply(reply string) Action {
	blocks := bashBlock.FindAllStringSubmatch(reply, -1)
	for _, line := range strings.Split(reply, "\n") {
		if strings.TrimSpace(line) == prompt.SubmitWord && len(blocks) == 0 {
			return Action{Submit: true}
		}
	}
	switch len(blocks) {
	case 0:
		return Action{Problem: "No command found: reply with one ```bash block, or " + prompt.SubmitWord + " alone when the fix is made."}
	case 1:
		cmd := strings.TrimSpace(blocks[0][1])
		if cmd == "" {
			return Action{Problem: "The ```bash block is empty."}
		}
		if cmd == prompt.SubmitWord {
			return Action{Submit: true}
		}
		return Action{Command: cmd}
	}
	return Action{Problem: fmt.Sprintf("%d ```bash blocks: reply with exactly one command a turn.", len(blocks))}
}

// Observation is what a command's result says to the policy: its exit
// code (and its timeout), how many bytes of its output were left out when
// it was cut (the cut is marked where it is), then its output as kept.
func Observation(r sandbox.ExecResult, timeout time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "exit code %d", r.ExitCode)
	if r.TimedOut {
		fmt.Fprintf(&b, " (killed after %s, the time a command may take)", timeout)
	}
	if r.Omitted > 0 {
		fmt.Fprintf(&b, " (output cut: %d of its %d bytes not shown, where marked)", r.Omitted, r.Bytes)
	}
	b.WriteString("\n")
	if r.Output == "" {
		b.WriteString("(no output)")
	} else {
		b.WriteString(r.Output)
	}
	return b.String()
}

// CutOutput keeps about n bytes of r's output, its head and tail, the
// count of what is left out (Omitted, and the mark where the cut is) the
// command's own: a head and a tail no longer than those r kept are the
// output's own.
func CutOutput(r sandbox.ExecResult, n int) sandbox.ExecResult {
	if n <= 0 || len(r.Output) <= n {
		return r
	}
	head, tail := strings.ToValidUTF8(r.Output[:n/2], ""), strings.ToValidUTF8(r.Output[len(r.Output)-n/2:], "")
	r.Omitted = max(0, r.Bytes-int64(len(head)+len(tail)))
	r.Output = fmt.Sprintf("%s\n... [%d bytes not shown] ...\n%s", head, r.Omitted, tail)
	return r
}

// cutMiddle keeps about n bytes of s, its head and tail.
func cutMiddle(s string, n int) string {
	if n <= 0 || len(s) <= n {
		return s
	}
	head, tail := s[:n/2], s[len(s)-n/2:]
	return fmt.Sprintf("%s\n... [%d bytes not shown] ...\n%s", strings.ToValidUTF8(head, ""), len(s)-len(head)-len(tail), strings.ToValidUTF8(tail, ""))
}
