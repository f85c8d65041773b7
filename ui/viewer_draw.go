package ui

// The viewer's screens: the list, one completion (its patch, completion,
// tokens, prompt and container log), a metric's chart.

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/history"
)

// View implements tea.Model.
func (v *Viewer) View() string {
	var lines []string
	switch v.screen {
	case screenList:
		lines = v.listLines()
	case screenCompletion:
		lines = v.completionLines()
	case screenChart:
		lines = v.chartLines()
	}
	for i := range lines {
		lines[i] = fitLine(lines[i], v.w)
	}
	for len(lines) < v.h {
		lines = append(lines, strings.Repeat(" ", max(v.w, 0)))
	}
	return strings.Join(lines[:v.h], "\n")
}

func (v *Viewer) header(title string) string {
	return styleBar.Render(fitLine(fmt.Sprintf(" swetui view  %s  %s  %d completions, %d tasks", cut(v.dir, 40), title,
		len(v.ix.Entries), len(v.ix.Tasks)), v.w))
}

func (v *Viewer) footer(keys string) []string {
	out := []string{}
	switch {
	case v.editing:
		out = append(out, styleFocus.Render("filter: ")+clean(v.input)+"_")
	case v.status != "":
		out = append(out, styleWarn.Render(clean(v.status)))
	default:
		out = append(out, "")
	}
	return append(out, styleDim.Render(keys))
}

// OutcomeWord is a completion's outcome in words, the list's last column.
func OutcomeWord(e history.Entry) string {
	var w []string
	switch {
	case e.Has(history.Infra):
		w = append(w, "INFRA")
	case e.Has(history.Resolved):
		w = append(w, "resolved")
	case e.Has(history.Applied):
		w = append(w, "applied")
	case e.Has(history.Valid):
		w = append(w, "valid")
	case e.Has(history.Empty):
		w = append(w, "empty")
	default:
		w = append(w, "malformed")
	}
	if e.Has(history.Noop) {
		w = append(w, "no-op")
	}
	if e.Has(history.Truncated) && !e.Agent() { // an agent's is unfinished: its end says why
		w = append(w, "truncated")
	}
	for _, h := range history.HackNames {
		if e.Has(history.HackBit(h)) {
			w = append(w, h)
		}
	}
	// The verifier gate's words (reward.verifier), as the Group pane says them.
	if e.Has(history.VerifierDisagrees) {
		w = append(w, "DISAGREES")
	}
	if e.Has(history.VerifierSpared) {
		w = append(w, "spared")
	}
	if e.Has(history.VerifierAudited) {
		w = append(w, "audited")
	}
	return strings.Join(w, " ")
}

func (v *Viewer) listLines() []string {
	expr := v.fexpr
	if expr == "" {
		expr = "all, by step"
	}
	// The task's column gives the outcome room on a narrow terminal.
	taskW := max(16, min(32, v.w-64))
	head := fmt.Sprintf("  %6s %-7s %-*s %-10s %7s %7s  %s", "step", "g.i", taskW, "task", "phase", "reward", "adv", "outcome")
	keys := "enter open  / filter (task= step=N-M phase= outcome= reward>= adv< text= sort=)  t this task across the run  s sort  m charts  E export selection  esc clear  q quit"
	// Agent trajectories: their turns and what ended them, before the
	// outcome.
	if v.agentRun {
		head = fmt.Sprintf("  %6s %-7s %-*s %-10s %7s %7s  %5s %-17s  %s", "step", "g.i", taskW, "task", "phase", "reward", "adv", "turns", "end", "outcome")
		keys = "enter open  / filter (task= step=N-M phase= outcome= reward>= adv< text= end= turns>= cmd= sort=)  t this task across the run  s sort  m charts  E export selection  esc clear  q quit"
	}
	out := []string{v.header(fmt.Sprintf("filter: %s (%d shown)", clean(expr), len(v.rows))), styleTitle.Render(head)}
	body := max(v.h-4, 1)
	if v.cursor < v.top {
		v.top = v.cursor
	}
	if v.cursor >= v.top+body {
		v.top = v.cursor - body + 1
	}
	for i := v.top; i < len(v.rows) && i < v.top+body; i++ {
		e := v.ix.Entries[v.rows[i]]
		mark := "  "
		if i == v.cursor {
			mark = "> " // the selection reads without colour too
		}
		row := fmt.Sprintf("%s%6d %-7s %-*s %-10s %7.3f %+7.3f  %s", mark, e.Step, fmt.Sprintf("%d.%d", e.Group, e.Index),
			taskW, cut(v.ix.Tasks[e.Task], taskW), history.Phases[e.Phase], e.Reward, e.Advantage, OutcomeWord(e))
		if v.agentRun {
			turns, end := "-", "-"
			if e.Agent() {
				turns, end = fmt.Sprint(e.Turns), e.EndName()
			}
			row = fmt.Sprintf("%s%6d %-7s %-*s %-10s %7.3f %+7.3f  %5s %-17s  %s", mark, e.Step, fmt.Sprintf("%d.%d", e.Group, e.Index),
				taskW, cut(v.ix.Tasks[e.Task], taskW), history.Phases[e.Phase], e.Reward, e.Advantage, turns, end, OutcomeWord(e))
		}
		if i == v.cursor {
			row = styleSelected.Render(fitLine(row, v.w))
		}
		out = append(out, row)
	}
	if len(v.rows) == 0 {
		out = append(out, styleDim.Render("  (no completion matches; esc clears the filter)"))
	}
	for len(out) < v.h-2 {
		out = append(out, "")
	}
	return append(out, v.footer(keys)...)
}

func (v *Viewer) completionLines() []string {
	c := v.cur
	b := c.Verdict
	out := []string{v.header(fmt.Sprintf("step %d, completion %d.%d of %s", c.Step, c.Group, c.Index, cut(b.InstanceID, 40)))}
	info := []string{
		fmt.Sprintf("phase %s  reward %.3f  advantage %+.3f  tokens %d  weights v%d%s", b.Phase, b.Reward, c.Advantage, c.Tokens,
			c.Version, map[bool]string{true: "  truncated", false: ""}[c.Truncated]),
		"verdict " + verdict(b),
		fmt.Sprintf("components: syntax %v  applied %v (%s)  hunks %d/%d  similarity %.3f  F2P %d/%d  P2P %d/%d broken %d",
			b.SyntaxOK, b.Applied, orDash(b.ApplyMethod, "-"), b.HunksApplied, b.HunksTotal, b.Similarity,
			b.F2PPassed, b.F2PTotal, b.P2PPassed, b.P2PTotal, b.P2PBroken),
	}
	if c.Agent != nil {
		info = append(info, trajectorySummary(c.Agent))
	}
	if s := b.VerifierScore; s != nil {
		line := fmt.Sprintf("verifier: %.3f that it resolves", *s)
		if b.Gate != "" {
			line += "; the gate " + b.Gate + " it"
		}
		if b.VerifierDisagrees() {
			line += "; DISAGREES with the grader"
		}
		info = append(info, line)
	}
	if p := b.Problem(); p != "" {
		info = append(info, "problem: "+p)
	}
	if ts := b.TestsStatus; ts != nil {
		info = append(info,
			"FAIL_TO_PASS passed: "+listOrNone(ts.FailToPass.Success), "FAIL_TO_PASS failed: "+listOrNone(ts.FailToPass.Failure),
			"PASS_TO_PASS failed: "+listOrNone(ts.PassToPass.Failure))
	}
	for _, l := range info {
		out = append(out, cut(l, v.w))
	}
	titles := map[diffMode]string{modeDiff: "-- patch (c: the completion, t: its tokens) --",
		modeRaw: "-- completion (c: the patch) --", modeTokens: "-- tokens by the sampler's probability (t: the patch) --",
		modeLog: "-- the evaluation's container log (L: the patch) --", modePrompt: "-- the exact prompt (P: the patch) --"}
	if c.Agent != nil {
		titles[modeDiff] = "-- the turns, then the patch (c: the replies in full, t: the tokens) --"
		titles[modeRaw] = "-- the replies in full (c: the turns) --"
		titles[modeTokens] = "-- tokens by the sampler's probability (t: the turns) --"
		titles[modeLog] = "-- the evaluation's container log (L: the turns) --"
		titles[modePrompt] = "-- the exact prompt (P: the turns) --"
	}
	out = append(out, styleTitle.Render(titles[v.curMode]))
	var body []string
	if c.Agent != nil && (v.curMode == modeDiff || v.curMode == modeRaw) {
		body = agentLines(c, v.curMode, v.w)
	} else if v.curMode == modePrompt {
		body = v.promptLines(c)
	} else if v.curMode == modeLog {
		body = v.logLines(c)
	} else if v.curMode == modeTokens {
		body = v.tokenLines(c)
	} else if v.curMode == modeRaw {
		body = wrap(c.Completion, v.w)
	} else if strings.TrimSpace(b.Patch) == "" {
		body = []string{"(no diff extracted: c shows the completion)"}
	} else {
		for _, l := range strings.Split(strings.TrimRight(b.Patch, "\n"), "\n") {
			body = append(body, colourDiff(clean(l)))
		}
	}
	room := max(v.h-len(out)-2, 1)
	v.scroll = min(v.scroll, max(len(body)-room, 0))
	for i := v.scroll; i < len(body) && i < v.scroll+room; i++ {
		out = append(out, body[i])
	}
	for len(out) < v.h-2 {
		out = append(out, "")
	}
	return append(out, v.footer("j k scroll  c completion  t tokens  P prompt  L container log  n p next/previous  e export patch  esc back  q quit")...)
}

// The completion screen's own modes: its tokens coloured by logprob, its
// evaluation's container log.
const (
	modeTokens diffMode = 100 + iota
	modeLog
	modePrompt
)

// promptLines is the exact prompt c answered, from the run's prompts.jsonl
// (read once, on first use).
func (v *Viewer) promptLines(c *event.CompletionScored) []string {
	if c.PromptHash == "" {
		return []string{"(no prompt recorded: the run predates kept prompts; swetui prompt --instance " + clean(c.Verdict.InstanceID) + " rebuilds it)"}
	}
	if v.prompts == nil {
		p, err := history.Prompts(v.dir)
		if err != nil {
			return []string{"(" + clean(err.Error()) + ")"}
		}
		v.prompts = p
	}
	text, ok := v.prompts[c.PromptHash]
	if !ok {
		// Written after the viewer read the file: read it again next time.
		v.prompts = nil
		return []string{"(prompt " + clean(c.PromptHash) + " is not in " + history.PromptsFile + " yet)"}
	}
	return wrap(text, v.w)
}

// logLines is the kept container log of c's evaluation.
func (v *Viewer) logLines(c *event.CompletionScored) []string {
	if c.LogFile == "" {
		return []string{"(no container log: none ran for this completion (the syntax phase, or a patch the host found not to apply), or the run predates kept logs)"}
	}
	log, err := history.ReadEvalLog(v.dir, c.LogFile)
	if err != nil {
		return []string{"(" + clean(err.Error()) + ": pruned, or the run's logs/ folder was removed)"}
	}
	return append([]string{"from " + clean(c.LogFile)}, wrap(log, v.w)...)
}

// Token colours by the sampler's probability p: none above 0.9, then
// yellow, orange and red below 0.1. A legend and the least likely tokens
// in words come first, so the screen reads the same without colour.
var tokenStyles = []struct {
	above float64 // logprob
	style lipgloss.Style
}{
	{-0.105, lipgloss.NewStyle()},
	{-0.693, lipgloss.NewStyle().Foreground(lipgloss.Color("3"))},
	{-2.303, lipgloss.NewStyle().Foreground(lipgloss.Color("0")).Background(lipgloss.Color("208"))},
	{math.Inf(-1), lipgloss.NewStyle().Foreground(lipgloss.Color("15")).Background(lipgloss.Color("1"))},
}

func tokenStyle(lp float64) lipgloss.Style {
	for _, t := range tokenStyles {
		if lp > t.above {
			return t.style
		}
	}
	return tokenStyles[len(tokenStyles)-1].style
}

// tokenLines draws c's tokens coloured by logprob, wrapped to the width.
func (v *Viewer) tokenLines(c *event.CompletionScored) []string {
	ids, lps, err := event.UnpackTokens(c.TokenLogprobs)
	if c.TokenLogprobs == "" || err != nil {
		return []string{"(no per-token values in this line: runs before swetui recorded them)"}
	}
	text := func(id int) string {
		if v.decode == nil {
			return fmt.Sprintf("<%d>", id)
		}
		return v.decode(id)
	}
	order := make([]int, len(ids))
	sum := 0.0
	for i := range order {
		order[i] = i
		sum += lps[i]
	}
	sort.SliceStable(order, func(a, b int) bool { return lps[order[a]] < lps[order[b]] })
	var least []string
	for _, i := range order[:min(6, len(order))] {
		least = append(least, fmt.Sprintf("%q %.2f", clean(text(ids[i])), math.Exp(lps[i])))
	}
	out := []string{
		fmt.Sprintf("%d tokens, mean logprob %.3f; colours: p>0.9 none, >0.5 yellow, >0.1 orange, else red", len(ids), sum/float64(max(len(ids), 1))),
		cut("least likely: "+strings.Join(least, ", "), v.w),
	}
	var b strings.Builder
	for i, id := range ids {
		st := tokenStyle(lps[i])
		parts := strings.Split(text(id), "\n")
		for j, p := range parts {
			if j > 0 {
				b.WriteString("\n")
			}
			if p != "" {
				b.WriteString(st.Render(clean(p)))
			}
		}
	}
	for _, l := range strings.Split(b.String(), "\n") {
		out = append(out, strings.Split(ansi.Wrap(l, max(v.w, 1), ""), "\n")...)
	}
	return out
}

func listOrNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}

func (v *Viewer) chartLines() []string {
	names := v.met.Names()
	if len(names) == 0 {
		out := []string{v.header("charts"), styleDim.Render("  (metrics.jsonl has no metrics yet)")}
		return append(out, v.footer("esc back  q quit")...)
	}
	name := names[v.metric%len(names)]
	pts := v.met.Series[name]
	vals := make([]float64, len(pts))
	for i, p := range pts {
		vals[i] = p.Value
	}
	out := []string{v.header(fmt.Sprintf("chart %d/%d: %s", v.metric%len(names)+1, len(names), name))}
	w, h := max(v.w-12, 10), max(v.h-8, 3)
	vals = bucket(len(vals), w*2, true, func(i int) float64 { return vals[i] })
	lo, hi := bounds(vals, nil)
	for i, l := range braille(vals, lo, hi, w, h) {
		label := "          "
		switch i {
		case 0:
			label = fmt.Sprintf("%9.3g ", hi)
		case h - 1:
			label = fmt.Sprintf("%9.3g ", lo)
		}
		out = append(out, label+l)
	}
	first, last := 0, 0
	if len(pts) > 0 {
		first, last = pts[0].Step, pts[len(pts)-1].Step
	}
	out = append(out, fmt.Sprintf("%10s steps %d-%d, %d points", "", first, last, len(pts)))
	var marks []string
	for _, m := range v.met.Marks {
		marks = append(marks, fmt.Sprintf("%s at %d", m.What, m.Step))
	}
	if len(marks) > 0 {
		out = append(out, cut("  marks: "+strings.Join(marks, ", "), v.w))
	}
	for len(out) < v.h-2 {
		out = append(out, "")
	}
	return append(out, v.footer("j k (or h l) another metric  esc back  q quit")...)
}
