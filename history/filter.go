package history

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/swetui/swetui/event"
)

// Filter selects completions; NoFilter selects every one. The fields
// combine (all must hold); range bounds are inclusive.
type Filter struct {
	Task             string // a substring of the instance id
	MinStep, MaxStep int    // 0 = no bound
	Phase            string // "" any
	Outcome          string // one of Outcomes, "" any
	MinReward        float64
	MaxReward        float64 // NaN = no bound (see NoFilter)
	MinAdv, MaxAdv   float64 // NaN = no bound
	Text             string  // a substring of the completion (read from the file)
	// The agent's trajectories: End is an end reason (Ends) or
	// "unfinished" (any but submitted); MinTurns and MaxTurns bound the
	// turns (-1 = no bound); Command is a substring of any turn's command,
	// in any case (read from the file). Any of them set selects agent
	// trajectories only.
	End                string
	MinTurns, MaxTurns int
	Command            string
	// Verifier is the verifier's part: "disagree" (sure, and the grader
	// decided otherwise: event.Verdict.VerifierDisagrees), "spared",
	// "audited" or "scored"; "" any.
	Verifier   string
	SortBy     string // "step" (default), "reward", "advantage"
	Descending bool
}

// NoFilter selects every completion in step order.
func NoFilter() Filter {
	nan := math.NaN()
	return Filter{MinReward: nan, MaxReward: nan, MinAdv: nan, MaxAdv: nan, MinTurns: -1, MaxTurns: -1}
}

// Unfinished is Filter.End for every end but submitted.
const Unfinished = "unfinished"

// readsLines reports whether f needs the completions' lines, not only the
// index.
func (f Filter) readsLines() bool { return f.Text != "" || f.Command != "" }

// VerifierWords are what verifier= takes, and their Entry bits.
var VerifierWords = []string{"disagree", "spared", "audited", "scored"}

var verifierBits = map[string]uint32{"disagree": VerifierDisagrees, "spared": VerifierSpared, "audited": VerifierAudited, "scored": VerifierScored}

// endTest is the test of Filter.End on an Entry, nil for "".
func endTest(end string) (func(*Entry) bool, error) {
	switch i := slices.Index(Ends, end); {
	case end == "":
		return nil, nil
	case end == Unfinished:
		return func(e *Entry) bool { return e.Agent() && !event.End(e.EndName()).Finished() }, nil
	case i >= 0:
		return func(e *Entry) bool { return int(e.End) == i+1 }, nil
	}
	return nil, fmt.Errorf("history: no end %q (one of %s, or %s)", end, strings.Join(Ends, ", "), Unfinished)
}

// matchesLine reports whether c passes f's filters that read lines: its
// text (a trajectory's replies, commands, observations, end detail and
// diff) and its commands.
func (f Filter) matchesLine(c *event.CompletionScored) bool {
	if c == nil {
		return false
	}
	if f.Text != "" && !hasText(c, f.Text) {
		return false
	}
	if f.Command != "" {
		want := strings.ToLower(f.Command)
		if !slices.ContainsFunc(turns(c), func(t event.Turn) bool { return strings.Contains(strings.ToLower(t.Command), want) }) {
			return false
		}
	}
	return true
}

func hasText(c *event.CompletionScored, s string) bool {
	if c.Agent == nil {
		return strings.Contains(c.Completion, s)
	}
	if strings.Contains(c.Agent.Detail, s) || strings.Contains(c.Verdict.Patch, s) {
		return true
	}
	return slices.ContainsFunc(c.Agent.Turns, func(t event.Turn) bool {
		return strings.Contains(t.Reply, s) || strings.Contains(t.Command, s) || strings.Contains(t.Observation, s)
	})
}

func turns(c *event.CompletionScored) []event.Turn {
	if c.Agent == nil {
		return nil
	}
	return c.Agent.Turns
}

// Outcomes are the names Filter.Outcome takes, each a test on an Entry.
var Outcomes = func() map[string]func(*Entry) bool {
	m := map[string]func(*Entry) bool{
		"malformed": func(e *Entry) bool { return !e.Has(Valid) },
		"valid":     func(e *Entry) bool { return e.Has(Valid) },
		"applied":   func(e *Entry) bool { return e.Has(Applied) },
		"resolved":  func(e *Entry) bool { return e.Has(Resolved) },
		"noop":      func(e *Entry) bool { return e.Has(Noop) },
		"infra":     func(e *Entry) bool { return e.Has(Infra) },
		"truncated": func(e *Entry) bool { return e.Has(Truncated) },
		"flagged":   func(e *Entry) bool { return e.Has(Flagged) },
	}
	for _, h := range HackNames {
		bit := hackBit[h]
		m[h] = func(e *Entry) bool { return e.Has(bit) }
	}
	return m
}()

// OutcomeNames are Outcomes' keys in a fixed order, for help and cycling.
var OutcomeNames = append([]string{"malformed", "valid", "applied", "resolved", "noop", "infra", "truncated", "flagged"}, HackNames...)

// Select returns the positions in ix.Entries that f selects, sorted as it
// says. read, when f reads lines (text=, cmd=), returns a completion as its
// line holds it, nil when it cannot be read (a lazy read, only of the
// entries the index's filters let through).
func (ix *Index) Select(f Filter, read func(Entry) *event.CompletionScored) ([]int, error) {
	outcome := Outcomes[f.Outcome]
	if f.Outcome != "" && outcome == nil {
		return nil, fmt.Errorf("history: no outcome %q (one of %s)", f.Outcome, strings.Join(OutcomeNames, ", "))
	}
	end, err := endTest(f.End)
	if err != nil {
		return nil, err
	}
	if f.Verifier != "" && verifierBits[f.Verifier] == 0 {
		return nil, fmt.Errorf("history: no verifier=%s (one of %s)", f.Verifier, strings.Join(VerifierWords, ", "))
	}
	agentOnly := end != nil || f.MinTurns >= 0 || f.MaxTurns >= 0 || f.Command != ""
	phase := -1
	if f.Phase != "" {
		if phase = slices.Index(Phases, f.Phase); phase < 0 {
			return nil, fmt.Errorf("history: no phase %q (one of %s)", f.Phase, strings.Join(Phases, ", "))
		}
	}
	var tasks map[uint32]bool
	if f.Task != "" {
		tasks = map[uint32]bool{}
		for i, t := range ix.Tasks {
			if strings.Contains(t, f.Task) {
				tasks[uint32(i)] = true
			}
		}
	}
	in := func(v float64, lo, hi float64) bool {
		return (math.IsNaN(lo) || v >= lo-1e-6) && (math.IsNaN(hi) || v <= hi+1e-6)
	}
	var out []int
	for i := range ix.Entries {
		e := &ix.Entries[i]
		switch {
		case tasks != nil && !tasks[e.Task],
			f.MinStep > 0 && int(e.Step) < f.MinStep,
			f.MaxStep > 0 && int(e.Step) > f.MaxStep,
			phase >= 0 && int(e.Phase) != phase,
			outcome != nil && !outcome(e),
			!in(float64(e.Reward), f.MinReward, f.MaxReward),
			!in(float64(e.Advantage), f.MinAdv, f.MaxAdv),
			agentOnly && !e.Agent(),
			end != nil && !end(e),
			f.MinTurns >= 0 && int(e.Turns) < f.MinTurns,
			f.MaxTurns >= 0 && int(e.Turns) > f.MaxTurns,
			f.Verifier != "" && !e.Has(verifierBits[f.Verifier]):
			continue
		}
		if f.readsLines() && (read == nil || !f.matchesLine(read(*e))) {
			continue
		}
		out = append(out, i)
	}
	key := func(i int) float64 {
		switch f.SortBy {
		case "reward":
			return float64(ix.Entries[i].Reward)
		case "advantage":
			return float64(ix.Entries[i].Advantage)
		}
		return float64(ix.Entries[i].Step)
	}
	slices.SortStableFunc(out, func(a, b int) int {
		c := cmp.Compare(key(a), key(b))
		if f.Descending {
			return -c
		}
		return c
	})
	return out, nil
}

// ParseFilter reads a filter from words such as
// "task=slug step=10-20 phase=docker outcome=applied reward>=0.3 adv<0
// text=foo end=unfinished turns>=5 cmd=pytest sort=-reward", each word one
// condition; double quotes keep spaces in a word (cmd="git apply").
func ParseFilter(s string) (Filter, error) {
	f := NoFilter()
	for _, w := range words(s) {
		k, v, op := splitCond(w)
		num := func() (float64, error) {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("filter %q: %q is not a number", w, v)
			}
			return x, nil
		}
		switch k {
		case "task":
			f.Task = v
		case "phase":
			f.Phase = v
		case "outcome", "is":
			f.Outcome = v
		case "text":
			f.Text = v
		case "cmd", "command":
			f.Command = v
		case "verifier":
			if !slices.Contains(VerifierWords, v) {
				return f, fmt.Errorf("filter %q: verifier=%s", w, strings.Join(VerifierWords, "|"))
			}
			f.Verifier = v
		case "end":
			if _, err := endTest(v); err != nil || v == "" {
				return f, fmt.Errorf("filter %q: end=%s, or end=%s", w, strings.Join(Ends, "|"), Unfinished)
			}
			f.End = v
		case "turns":
			lo, hi, err := intRange(v, op)
			if err != nil {
				return f, fmt.Errorf("filter %q: turns=N, turns=N-M, turns>=N or turns<N", w)
			}
			// Each word sets its bounds: turns>=3 turns<=8 is 3-8.
			if lo >= 0 {
				f.MinTurns = lo
			}
			if hi >= 0 {
				f.MaxTurns = hi
			}
		case "sort":
			f.Descending = strings.HasPrefix(v, "-")
			f.SortBy = strings.TrimPrefix(v, "-")
			if !slices.Contains([]string{"step", "reward", "advantage"}, f.SortBy) {
				return f, fmt.Errorf("filter %q: sort by step, reward or advantage", w)
			}
		case "step":
			lo, hi, ok := strings.Cut(v, "-")
			a, err1 := strconv.Atoi(lo)
			b := a
			var err2 error
			if ok {
				b, err2 = strconv.Atoi(hi)
			}
			if err1 != nil || err2 != nil {
				return f, fmt.Errorf("filter %q: step=N or step=N-M", w)
			}
			f.MinStep, f.MaxStep = a, b
		case "reward", "adv", "advantage":
			x, err := num()
			if err != nil {
				return f, err
			}
			lo, hi := &f.MinReward, &f.MaxReward
			if k != "reward" {
				lo, hi = &f.MinAdv, &f.MaxAdv
			}
			switch op {
			case ">=", ">":
				*lo = x
			case "<=", "<":
				*hi = x
			default:
				*lo, *hi = x, x
			}
		default:
			return f, fmt.Errorf("filter %q: no key %q (task, step, phase, outcome, reward, adv, text, end, turns, cmd, sort)", w, k)
		}
	}
	return f, nil
}

// intRange reads a count's bounds from "N", "N-M" (with op "="), ">=N",
// ">N", "<=N", "<N": the inclusive bounds, -1 where there is none.
func intRange(v, op string) (lo, hi int, err error) {
	a, b, isRange := strings.Cut(v, "-")
	if isRange && op != "=" {
		return 0, 0, fmt.Errorf("a range takes =")
	}
	n, err := strconv.Atoi(a)
	if err != nil || n < 0 {
		return 0, 0, fmt.Errorf("not a count: %q", a)
	}
	switch op {
	case "=":
		m := n
		if isRange {
			if m, err = strconv.Atoi(b); err != nil || m < n {
				return 0, 0, fmt.Errorf("not a range: %q", v)
			}
		}
		return n, m, nil
	case ">=":
		return n, -1, nil
	case ">":
		return n + 1, -1, nil
	case "<=":
		return -1, n, nil
	case "<":
		if n == 0 {
			return 0, 0, fmt.Errorf("<0 matches nothing")
		}
		return -1, n - 1, nil
	}
	return 0, 0, fmt.Errorf("no operator")
}

// words splits a filter into its words at spaces outside double quotes,
// the quotes dropped: cmd="git apply" is one word, cmd=git apply.
func words(s string) []string {
	var out []string
	var w strings.Builder
	quoted, in := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, in = !quoted, true
		case unicode.IsSpace(r) && !quoted:
			if in {
				out = append(out, w.String())
			}
			w.Reset()
			in = false
		default:
			w.WriteRune(r)
			in = true
		}
	}
	if in {
		out = append(out, w.String())
	}
	return out
}

// splitCond splits "key=v", "key>=v", "key<=v", "key>v", "key<v".
// The key ends at the first operator: cmd=a>b is cmd, "a>b".
func splitCond(w string) (key, value, op string) {
	i := strings.IndexAny(w, "<>=")
	if i <= 0 {
		return w, "", ""
	}
	op = w[i : i+1]
	if op != "=" && strings.HasPrefix(w[i+1:], "=") {
		op += "="
	}
	return w[:i], w[i+len(op):], op
}
