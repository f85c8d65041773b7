package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/prompt"
	"github.com/swetui/swetui/sandbox"
)

func TestParseReply(t *testing.T) {
	for _, tt := range []struct {
		name, reply string
		want        Action
	}{
		{"a command", "Let me look.\n```bash\nls -la\n```\n", Action{Command: "ls -la"}},
		{"sh fence", "```sh\ncat a.py\n```", Action{Command: "cat a.py"}},
		{"bare fence", "```\npytest -q\n```", Action{Command: "pytest -q"}},
		{"multi-line", "```bash\ncd pkg\nsed -i 's/a/b/' x.py\n```", Action{Command: "cd pkg\nsed -i 's/a/b/' x.py"}},
		{"submit", "The fix is in.\nSUBMIT", Action{Submit: true}},
		{"submit in a block", "```bash\nSUBMIT\n```", Action{Submit: true}},
		{"a command wins over the word", "SUBMIT\n```bash\nls\n```", Action{Command: "ls"}},
		{"nothing", "I think the bug is in add.", Action{Problem: "No command found: reply with one ```bash block, or SUBMIT alone when the fix is made."}},
		{"two blocks", "```bash\nls\n```\n```bash\npwd\n```", Action{Problem: "2 ```bash blocks: reply with exactly one command a turn."}},
		{"empty block", "```bash\n\n```", Action{Problem: "The ```bash block is empty."}},
		{"the word inside prose is not a submit", "I will SUBMIT later", Action{Problem: "No command found: reply with one ```bash block, or SUBMIT alone when the fix is made."}},
	} {
		if got := ParseReply(tt.reply); got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestObservation(t *testing.T) {
	if got := Observation(sandbox.ExecResult{ExitCode: 0, Output: "ok\n"}, time.Minute); got != "exit code 0\nok\n" {
		t.Errorf("%q", got)
	}
	if got := Observation(sandbox.ExecResult{ExitCode: 137, TimedOut: true}, time.Minute); got != "exit code 137 (killed after 1m0s, the time a command may take)\n(no output)" {
		t.Errorf("%q", got)
	}
	if got := cutMiddle("0123456789", 4); got != "01\n... [6 bytes not shown] ...\n89" {
		t.Errorf("%q", got)
	}
}

// fakeSession runs commands from a table, for the loop's logic; the real
// sessions are tested on Docker.
type fakeSession struct {
	out  map[string]sandbox.ExecResult
	ran  []string
	lost bool
	// killed: the sandbox was stopped for what the agent's commands did.
	killed bool
	diff   string
	calls  int
}

func (f *fakeSession) ID() string   { return "fake" }
func (f *fakeSession) Host() string { return "fake" }
func (f *fakeSession) Close() error { return nil }
func (f *fakeSession) Exec(_ context.Context, cmd string, _ sandbox.ExecOptions) (sandbox.ExecResult, error) {
	f.ran = append(f.ran, cmd)
	if f.killed {
		return sandbox.ExecResult{ExitCode: -1}, fmt.Errorf("fake: %w: disk limit", sandbox.ErrSessionKilled)
	}
	if f.lost {
		return sandbox.ExecResult{ExitCode: -1}, fmt.Errorf("fake: %w", sandbox.ErrSessionLost)
	}
	if r, ok := f.out[cmd]; ok {
		return r, nil
	}
	return sandbox.ExecResult{ExitCode: 127, Output: "sh: " + cmd + ": not found\n", Bytes: 20}, nil
}
func (f *fakeSession) Diff(context.Context, string, int) (string, error) {
	if f.lost {
		return "", sandbox.ErrSessionLost
	}
	return f.diff, nil
}

// scripted replies with fixed texts, each encoded and ended with the end
// of turn as sampling ends it; its logprob of token i of reply r is
// -(r+1)/(i+1), to follow them into the trajectory.
type scripted struct {
	tok      *model.Tokenizer
	chat     prompt.ChatFormat
	replies  []string
	contexts [][]int // what each turn was given
	sampled  [][]int
}

func (s *scripted) SampleTurn(_ context.Context, ctx []int, maxNew int) ([]int, []float64, bool, error) {
	r := len(s.contexts)
	if r == len(s.replies) {
		return nil, nil, false, errors.New("script ran out")
	}
	s.contexts = append(s.contexts, slices.Clone(ctx))
	toks := s.tok.Encode(s.replies[r] + s.chat.EndOfTurn())
	truncated := false
	if len(toks) > maxNew {
		toks, truncated = toks[:maxNew], true
	}
	lps := make([]float64, len(toks))
	for i := range lps {
		lps[i] = -float64(r+1) / float64(i+1)
	}
	s.sampled = append(s.sampled, toks)
	return toks, lps, truncated, nil
}

func testTokenizer(t *testing.T) *model.Tokenizer {
	t.Helper()
	corpus := []string{"```bash\nls\n```", "exit code 0\n", "SUBMIT", "pytest -q tests", "cat pkg/calc.py"}
	tok, err := model.TrainBPE(context.Background(), slices.Values(corpus), 400, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func limits() Limits {
	return Limits{Turns: 30, CommandTimeout: time.Minute, ObservationChars: 10000, ObservationTokens: 4000, Context: 4096,
		MaxNewTokens: 256, MaxDiffBytes: 1 << 20}
}

// The trajectory is, token for token, the prompt, each reply as sampled and
// each observation turn as tokenized; only the replies are marked sampled,
// with their logprobs; each turn was given exactly the trajectory so far.
func TestTrajectoryIsTheExactTokens(t *testing.T) {
	tok := testTokenizer(t)
	// Qwen2.5-Coder's chat template (its tool role) over this tokenizer:
	// the fixture's tokenizer_config.json alone, its generation_config.json
	// naming the real vocabulary's ids.
	dir := t.TempDir()
	tc, err := os.ReadFile("../prompt/testdata/chat/qwen2.5-coder-7b-instruct/tokenizer_config.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), tc, 0o644); err != nil {
		t.Fatal(err)
	}
	qwen, err := prompt.LoadChatFormat(dir, tok)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		chat prompt.ChatFormat
		// obs is how the first observation reads in the decoded trajectory.
		obs string
	}{
		{"chatml", prompt.ChatFormat{}, "<|im_start|>user\nexit code 0\npkg\ntests\n<|im_end|>\n<|im_start|>assistant\nNow the tests."},
		{"qwen2.5 template", qwen, "<|im_start|>user\n<tool_response>\nexit code 0\npkg\ntests\n\n</tool_response><|im_end|>\n<|im_start|>assistant\nNow the tests."},
	} {
		t.Run(tc.name, func(t *testing.T) { checkExactTokens(t, tok, tc.chat, tc.obs) })
	}
}

func checkExactTokens(t *testing.T, tok *model.Tokenizer, chat prompt.ChatFormat, obsText string) {
	sess := &fakeSession{out: map[string]sandbox.ExecResult{
		"ls":              {ExitCode: 0, Output: "pkg\ntests\n", Bytes: 10},
		"pytest -q tests": {ExitCode: 1, Output: "1 failed\n", Bytes: 9},
	}, diff: "diff --git a/x b/x\n"}
	s := &scripted{tok: tok, chat: chat, replies: []string{"```bash\nls\n```", "Now the tests.\n```bash\npytest -q tests\n```", "thinking", "SUBMIT"}}
	text, err := chat.RenderAgentPrompt("add is wrong", "/testbed", []string{"calc/ops.py"})
	if err != nil {
		t.Fatal(err)
	}
	p := tok.Encode(text)
	tr, err := Episode{Session: sess, Sampler: s, Tok: tok, Chat: chat, Limits: limits(), BaseCommit: "HEAD"}.Run(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if tr.End != event.EndSubmitted || tr.Diff != sess.diff || len(tr.Turns) != 4 {
		t.Fatalf("end %s, diff %q, %d turns", tr.End, tr.Diff, len(tr.Turns))
	}
	want, wantSampled := slices.Clone(p), make([]bool, len(p))
	var wantLP []float64 = make([]float64, len(p))
	for r, toks := range s.sampled {
		if !slices.Equal(s.contexts[r], want) {
			t.Errorf("turn %d was given %d tokens, not the %d of the trajectory so far", r+1, len(s.contexts[r]), len(want))
		}
		want = append(want, toks...)
		for i := range toks {
			wantSampled = append(wantSampled, true)
			wantLP = append(wantLP, -float64(r+1)/float64(i+1))
		}
		if r == len(s.sampled)-1 {
			break
		}
		seg, _ := chat.ObservationTurn(tr.Turns[r].Observation)
		obs := tok.Encode(seg)
		want = append(want, obs...)
		wantSampled = append(wantSampled, make([]bool, len(obs))...)
		wantLP = append(wantLP, make([]float64, len(obs))...)
	}
	if !slices.Equal(tr.Tokens, want) || !slices.Equal(tr.Sampled, wantSampled) || !slices.Equal(tr.Logprobs, wantLP) {
		t.Errorf("trajectory of %d tokens is not the %d sampled and observed", len(tr.Tokens), len(want))
	}
	if tr.Turns[0].Observation != "exit code 0\npkg\ntests\n" || tr.Turns[1].ExitCode != 1 || tr.Turns[2].Command != "" ||
		!strings.HasPrefix(tr.Turns[2].Observation, "No command found") {
		t.Errorf("turns %+v", tr.Turns)
	}
	if !slices.Equal(sess.ran, []string{"ls", "pytest -q tests"}) {
		t.Errorf("ran %q", sess.ran)
	}
	// The whole trajectory decodes to the conversation in the template.
	if got := tok.Decode(tr.Tokens); !strings.Contains(got, obsText) {
		t.Errorf("decoded: %q", got)
	}
}

func TestTrajectoryEnds(t *testing.T) {
	tok := testTokenizer(t)
	chat := prompt.ChatFormat{}
	ls := map[string]sandbox.ExecResult{"ls": {Output: "a\n"}, "sleep 99": {ExitCode: 137, TimedOut: true}}
	for _, tt := range []struct {
		name    string
		replies []string
		limits  func(*Limits)
		sess    *fakeSession
		end     event.End
		turns   int
		diff    bool
	}{
		{"turn limit", []string{"```bash\nls\n```", "```bash\nls\n```", "```bash\nls\n```"}, func(l *Limits) { l.Turns = 2 }, &fakeSession{out: ls}, event.EndTurnLimit, 2, true},
		{"context full", slices.Repeat([]string{"```bash\nls\n```"}, 50), func(l *Limits) { l.Context = 120 }, &fakeSession{out: ls}, event.EndContextFull, -1, true},
		{"timeout budget", []string{"```bash\nsleep 99\n```", "```bash\nsleep 99\n```", "```bash\nls\n```"}, func(l *Limits) { l.TimeoutBudget = 2 }, &fakeSession{out: ls}, event.EndTimeoutBudget, 2, true},
		{"container failure", []string{"```bash\nls\n```"}, nil, &fakeSession{lost: true}, event.EndContainer, 1, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := limits()
			if tt.limits != nil {
				tt.limits(&l)
			}
			tt.sess.diff = "d"
			p := tok.Encode("prompt")
			tr, err := Episode{Session: tt.sess, Sampler: &scripted{tok: tok, chat: chat, replies: tt.replies}, Tok: tok, Chat: chat, Limits: l, BaseCommit: "HEAD"}.Run(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			if tr.End != tt.end || tt.turns >= 0 && len(tr.Turns) != tt.turns || (tr.Diff != "") != tt.diff || tr.End.Finished() {
				t.Errorf("end %s after %d turns, diff %q (%s); want %s after %d", tr.End, len(tr.Turns), tr.Diff, tr.Detail, tt.end, tt.turns)
			}
			if len(tr.Tokens) > l.Context {
				t.Errorf("%d tokens in a context of %d", len(tr.Tokens), l.Context)
			}
		})
	}
}

// OnTurn is told of each turn, in order, once its command has run, then
// once of the end of a trajectory Run returns; of nothing more after an
// error (the caller has it).
func TestOnTurnFollowsTheTrajectory(t *testing.T) {
	tok := testTokenizer(t)
	chat := prompt.ChatFormat{}
	ls := map[string]sandbox.ExecResult{"ls": {Output: "a\n", Bytes: 2}, "sleep 99": {ExitCode: 137, TimedOut: true, Duration: time.Minute}}
	for _, tt := range []struct {
		name    string
		replies []string
		sess    *fakeSession
		end     event.End // "": Run fails
	}{
		{"submitted", []string{"```bash\nls\n```", "no command here", "```bash\nsleep 99\n```", "SUBMIT"}, &fakeSession{out: ls, diff: "d"}, event.EndSubmitted},
		{"turn limit", []string{"```bash\nls\n```", "```bash\nls\n```", "```bash\nls\n```"}, &fakeSession{out: ls}, event.EndTurnLimit},
		{"container failure", []string{"```bash\nls\n```"}, &fakeSession{lost: true}, event.EndContainer},
		{"the sampler fails", []string{"```bash\nls\n```"}, &fakeSession{out: ls}, ""}, // its script runs out at turn 2
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := limits()
			if tt.end == event.EndTurnLimit {
				l.Turns = 2
			}
			var got []Progress
			e := Episode{Session: tt.sess, Sampler: &scripted{tok: tok, chat: chat, replies: tt.replies}, Tok: tok, Chat: chat, Limits: l,
				BaseCommit: "HEAD", OnTurn: func(p Progress) {
					if c := p.Turn.Command; c != "" && (len(tt.sess.ran) == 0 || tt.sess.ran[len(tt.sess.ran)-1] != c) {
						t.Errorf("told of turn %d before its command %q ran", p.N, c)
					}
					got = append(got, p)
				}}
			tr, err := e.Run(context.Background(), tok.Encode("prompt"))
			if (err != nil) != (tt.end == "") || tr.End != tt.end {
				t.Fatalf("end %q, error %v; want end %q", tr.End, err, tt.end)
			}
			var want []Progress
			for i, turn := range tr.Turns {
				want = append(want, Progress{N: i + 1, Turn: turn})
			}
			if err == nil {
				want = append(want, Progress{N: len(tr.Turns), End: tr.End, Detail: tr.Detail, DiffBytes: len(tr.Diff)})
			}
			if len(want) == 0 || !slices.Equal(got, want) {
				t.Errorf("told\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

// An observation dense in tokens is cut again to its token cap.
func TestObservationTokenCap(t *testing.T) {
	tok := testTokenizer(t)
	chat := prompt.ChatFormat{}
	dense := strings.Repeat("#$%^&*()", 1000)
	sess := &fakeSession{out: map[string]sandbox.ExecResult{"cat x": {Output: dense, Bytes: int64(len(dense))}}}
	l := limits()
	l.ObservationTokens, l.Context = 300, 100000
	tr, err := Episode{Session: sess, Sampler: &scripted{tok: tok, chat: chat, replies: []string{"```bash\ncat x\n```", "SUBMIT"}}, Tok: tok, Chat: chat, Limits: l}.Run(context.Background(), tok.Encode("p"))
	if err != nil {
		t.Fatal(err)
	}
	if n := tr.Turns[0].ObsTokens; n > 300+64 || !strings.Contains(tr.Turns[0].Observation, "bytes not shown") {
		t.Errorf("%d observation tokens for a cap of 300: %.100q", n, tr.Turns[0].Observation)
	}
	// What was left out is counted against the command's whole output,
	// where the cut is and in the first line.
	obs := tr.Turns[0].Observation
	first, out, _ := strings.Cut(obs, "\n")
	head, rest, _ := strings.Cut(out, "\n... [")
	count, tail, _ := strings.Cut(rest, " bytes not shown] ...\n")
	if n, err := strconv.Atoi(count); err != nil || n+len(head)+len(tail) != len(dense) {
		t.Errorf("the cut's count %q is not the output's own (%d kept of %d): %.200q", count, len(head)+len(tail), len(dense), obs)
	}
	if !strings.Contains(first, count+" of its 8000 bytes not shown") {
		t.Errorf("the first line does not say what was cut: %q", first)
	}
}

// An output cut in the session says so on the observation's first line:
// how many of its bytes were left out, and the cut is marked where it is.
func TestObservationSaysWhatWasCut(t *testing.T) {
	r := sandbox.ExecResult{ExitCode: 0, Output: "ab\n... [96 bytes not shown] ...\nyz", Bytes: 100, Omitted: 96}
	if got := Observation(r, time.Minute); got != "exit code 0 (output cut: 96 of its 100 bytes not shown, where marked)\nab\n... [96 bytes not shown] ...\nyz" {
		t.Errorf("%q", got)
	}
	c := CutOutput(sandbox.ExecResult{Output: "0123456789", Bytes: 10}, 4)
	if c.Output != "01\n... [6 bytes not shown] ...\n89" || c.Omitted != 6 {
		t.Errorf("%+v", c)
	}
}

// A sandbox the agent's own processes destroyed is the agent's failure (an
// unfinished trajectory, scored as agent.unfinished says); only a loss it
// did not cause is an infrastructure failure, masked.
func TestDestroyedSandboxIsTheAgents(t *testing.T) {
	tok := testTokenizer(t)
	chat := prompt.ChatFormat{}
	for _, tt := range []struct {
		sess  *fakeSession
		infra bool
	}{{&fakeSession{lost: true}, true}, {&fakeSession{killed: true}, false}} {
		tr, err := Episode{Session: tt.sess, Sampler: &scripted{tok: tok, chat: chat, replies: []string{"```bash\nls\n```"}}, Tok: tok, Chat: chat,
			Limits: limits(), BaseCommit: "HEAD"}.Run(context.Background(), tok.Encode("prompt"))
		if err != nil {
			t.Fatal(err)
		}
		if tr.End != event.EndContainer || tr.Infra != tt.infra || tr.End.Finished() {
			t.Errorf("%s: end %s, infra %v; want container_failure, infra %v", tr.Detail, tr.End, tr.Infra, tt.infra)
		}
	}
}
