package agent

import (
	"context"
	"math/rand/v2"
	"path"
	"strings"

	"github.com/swetui/swetui/prompt"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/task"
)

// ExpertReplies is a scripted expert's trajectory for a task with a gold
// patch, the agent warm start's teacher: look at the file the fix changes,
// write the fix and apply it, run the task's tests, submit. r draws its
// variety: how it looks (the whole file, its functions, a search for a
// name from the issue), a wrong path tried first and recovered from, the
// tests run before the fix as well, the words around each command.
func ExpertReplies(in *task.Instance, r *rand.Rand) []string {
	files := task.Paths(task.PatchFiles(in.Patch))
	if len(files) == 0 {
		return []string{prompt.SubmitWord}
	}
	file := files[0]
	say := func(options ...string) string { return options[r.IntN(len(options))] }
	bash := func(words, cmd string) string {
		if words != "" {
			words += "\n"
		}
		return words + "```bash\n" + cmd + "\n```"
	}
	var replies []string
	if r.IntN(4) == 0 { // a wrong guess first, and the recovery
		wrong := path.Join("src", path.Base(file))
		replies = append(replies, bash(say("Let me open the module.", "First, the code.", ""), "cat "+wrong),
			bash(say("Not there. Let me find it.", "Wrong path; searching.", ""), "git ls-files | grep "+sandbox.ShellQuote(path.Base(file))))
	}
	switch r.IntN(3) {
	case 0:
		replies = append(replies, bash(say("Let me read the file the issue is about.", "Looking at the code.", ""), "cat -n "+file))
	case 1:
		replies = append(replies, bash(say("Where are its functions?", "An outline first.", ""), "grep -n 'def \\|class ' "+file),
			bash(say("Now the whole file.", ""), "cat -n "+file))
	default:
		replies = append(replies, bash(say("Let me see the file.", ""), "sed -n '1,200p' "+file))
	}
	tests := "python3 -m pytest -q -p no:cacheprovider"
	if len(in.TestDirectives) > 0 {
		tests += " " + strings.Join(in.TestDirectives, " ")
	}
	tests += " 2>&1 | tail -n 5"
	if r.IntN(3) == 0 {
		replies = append(replies, bash(say("The tests as they are:", "Do the tests pass now?", ""), tests))
	}
	patch := in.Patch
	if !strings.HasSuffix(patch, "\n") {
		patch += "\n"
	}
	replies = append(replies, bash(say("The bug is here. The fix:", "I will fix it with this patch.", "Applying the fix."),
		"cat > /tmp/fix.patch <<'SWETUI_EOF'\n"+patch+"SWETUI_EOF\n"+ApplyFix))
	replies = append(replies, bash(say("Now the tests.", "Checking the tests pass.", ""), tests))
	replies = append(replies, say("The tests pass.\n", "Done.\n", "")+prompt.SubmitWord)
	return replies
}

// ApplyFix is how the expert applies the patch it wrote to /tmp/fix.patch:
// as leniently as the harness applies a single-shot patch (GNU patch with
// fuzz 5, the rejected hunks dropped and no backups, so that neither lands
// in the diff). Strict `git apply` refused most of the warm start's own
// patches that the harness would have resolved (measured on the held-out
// tasks: 4 of 54 applied, where the harness's way resolves 14).
const ApplyFix = "patch -p1 --batch --fuzz=5 --forward --no-backup-if-mismatch -r - -i /tmp/fix.patch && git diff --stat"

// Scripted samples fixed replies, each encoded with the end of turn as
// sampling ends it (logprobs 0): a scripted expert played through the same
// loop as the policy, so its trajectory's tokens are what the policy is
// trained to sample.
type Scripted struct {
	Tok     Tokenizer
	Chat    prompt.ChatFormat
	Replies []string
	next    int
}

// SampleTurn implements Sampler; past its replies it submits.
func (s *Scripted) SampleTurn(_ context.Context, _ []int, maxNew int) ([]int, []float64, bool, error) {
	reply := prompt.SubmitWord
	if s.next < len(s.Replies) {
		reply = s.Replies[s.next]
	}
	s.next++
	toks := s.Tok.Encode(reply + s.Chat.EndOfTurn())
	truncated := len(toks) > maxNew
	if truncated {
		toks = toks[:maxNew]
	}
	return toks, make([]float64, len(toks)), truncated, nil
}
