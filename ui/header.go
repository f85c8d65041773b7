package ui

import (
	"fmt"
	"github.com/swetui/swetui/event"
	"strings"
	"time"

	"github.com/charmbracelet/x/ansi"
)

// header is the top two lines: what the run is and where it stands. It is
// not focusable and has no keys. The state is a word (RUNNING, PAUSED,
// STOPPING...) so that it can be read, and grepped from tmux, without colour.
//
// The first line is name, phase, state, progress (GRPO's step n/N, or the
// warm start's) and, on the right, elapsed time and ETA. When it does not
// fit, it sheds in order: the long progress bar, the word "elapsed", the bar
// (for a percentage), the name beyond 12 cells, elapsed time, the
// percentage; the ETA stays as long as the state and step do.
type header struct {
	st *state
	w  int
}

func (h *header) Lines() []string {
	return block([]string{h.line1(), styleDim.Render(h.line2())}, h.w, 2)
}

// hdrForm is one way of drawing the first line, from the richest down.
type hdrForm struct {
	bar         int  // progress bar cells, 0 for none
	pct         bool // a percentage instead of the bar
	elapsedWord bool
	elapsed     bool
}

var hdrForms = []hdrForm{
	{bar: 20, elapsedWord: true, elapsed: true},
	{bar: 10, elapsedWord: true, elapsed: true},
	{bar: 10, elapsed: true},
	{pct: true, elapsed: true},
	{pct: true},
	{},
}

func (h *header) line1() string {
	st := h.st
	name := orDash(st.info.Name, "swetui")
	phase := strings.ToUpper(orDash(st.phase, "-"))
	if st.auto {
		phase += " auto"
	}
	rs := st.runState()
	state := rs.String()
	if rs == stateStopped && st.stop.Reason != "" {
		state += " (" + cut(st.stop.Reason, 40) + ")"
	}
	progress, frac, haveFrac := h.progress()
	var eta time.Duration
	haveETA := false
	if rs != stateStopped {
		if st.inSFT() {
			eta, haveETA = st.sftETA()
		} else {
			eta, haveETA = st.eta()
		}
	}
	compose := func(f hdrForm) (rest, when string) {
		prog := progress
		switch {
		case !haveFrac:
		case f.bar > 0:
			prog += " " + bar(frac, f.bar)
		case f.pct:
			prog += fmt.Sprintf(" %.0f%%", 100*frac)
		}
		var right []string
		if f.elapsed {
			e := clock(st.elapsed())
			if f.elapsedWord {
				e = "elapsed " + e
			}
			right = append(right, e)
		}
		if haveETA {
			right = append(right, "eta "+clock(eta))
		}
		return "  " + phaseStyle(st.phase).Render(phase) + "  " + stateStyle(rs).Render(state) + "  " + prog,
			strings.Join(right, " · ")
	}
	n := ansi.StringWidth(name)
	var rest, when string
	room := 0
	for i, f := range hdrForms {
		rest, when = compose(f)
		room = h.w - ansi.StringWidth(rest) - 2 - ansi.StringWidth(when) // two spaces before when
		// From the fourth form on, which shed more than decoration, a long
		// name gives way down to 12 cells first.
		if n <= room || (i >= 3 && room >= min(n, 12)) {
			break
		}
	}
	if n > room {
		name = cut(name, max(room, 1))
	}
	return spread(styleBold.Render(name)+rest, when, h.w)
}

// progress is the first line's progress text: the GRPO step (with * while
// one is in flight) or the warm start's step, and how far along it is.
func (h *header) progress() (text string, frac float64, ok bool) {
	st := h.st
	if st.inSFT() {
		if !st.haveSFT {
			return "warm start", 0, false
		}
		text = fmt.Sprintf("warm start %d", st.sft.Step)
		if st.sft.Steps > 0 {
			return text + fmt.Sprintf("/%d", st.sft.Steps), float64(st.sft.Step) / float64(st.sft.Steps), true
		}
		return text, 0, false
	}
	text = fmt.Sprintf("step %d", max(st.step, st.finished))
	if st.info.MaxSteps > 0 {
		text += fmt.Sprintf("/%d", st.info.MaxSteps)
	}
	if st.inFlight {
		text += "*"
	}
	if st.info.MaxSteps > 0 {
		return text, float64(st.finished) / float64(st.info.MaxSteps), true
	}
	return text, 0, false
}

// line2 is the stage's numbers (the warm start's losses and speed, or the
// weight version) and then the run's fixed facts.
func (h *header) line2() string {
	st := h.st
	var parts []string
	switch {
	case st.inSFT() && st.haveSFT:
		parts = append(parts, "loss "+num3(st.sft.Loss))
		if k := st.sftHeld.Len(); k > 0 {
			parts = append(parts, "held-out "+num3(st.sftHeld.At(k-1).V))
		} else {
			parts = append(parts, "held-out -")
		}
		if rate, ok := st.sftRate(); ok {
			parts = append(parts, stepsPerSecond(rate))
		}
		if st.sft.LR > 0 {
			parts = append(parts, fmt.Sprintf("lr %.1e", st.sft.LR))
		}
		if st.sft.Resumed > 0 {
			parts = append(parts, fmt.Sprintf("resumed at %d", st.sft.Resumed))
		}
	case st.inSFT():
		stage := "warm start"
		if st.stage.Detail != "" {
			stage += " " + clean(st.stage.Detail)
		}
		parts = append(parts, stage)
	default:
		parts = append(parts, fmt.Sprintf("weights v%d", st.version))
		if st.stage.Stage != "" {
			stage := "stage " + clean(st.stage.Stage)
			if st.stage.Progress > 0 && st.stage.Progress < 1 {
				stage += fmt.Sprintf(" %.0f%%", 100*st.stage.Progress)
			}
			if st.stage.Detail != "" && h.w >= 100 {
				stage += " (" + clean(st.stage.Detail) + ")"
			}
			parts = append(parts, stage)
		}
	}
	// The gate's totals come before where the run is: an 80-column
	// header cuts the line's end, and the miss rate is what to watch.
	if g := st.gate; g.spared+g.audits > 0 {
		miss := "-"
		if g.audits > 0 {
			miss = fmt.Sprintf("%.0f%%", 100*float64(g.misses)/float64(g.audits))
		}
		parts = append(parts, fmt.Sprintf("verifier spared %d, audited %d, missed %s", g.spared, g.audits, miss))
	}
	if g := groupSizeText(st.info, st.phase); g != "" {
		parts = append(parts, g)
	}
	parts = append(parts, runWhere(st.info)...)
	hosts := "local"
	if len(st.info.Hosts) > 0 {
		hosts = clean(st.info.Hosts[0])
		if len(st.info.Hosts) > 1 {
			hosts += fmt.Sprintf(" +%d", len(st.info.Hosts)-1)
		}
	}
	parts = append(parts, "docker "+hosts)
	if h.w >= 100 && st.info.OutDir != "" {
		parts = append(parts, "out "+clean(st.info.OutDir))
	}
	return strings.Join(parts, " · ")
}

// stepsPerSecond formats a rate with the precision slow rates need.
func stepsPerSecond(r float64) string {
	switch {
	case r >= 10:
		return fmt.Sprintf("%.0f steps/s", r)
	case r >= 1:
		return fmt.Sprintf("%.1f steps/s", r)
	}
	return fmt.Sprintf("%.2f steps/s", r)
}

// clock formats a duration as h:mm:ss.
func clock(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	s := int(d.Round(time.Second).Seconds())
	return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
}

// bar draws progress in [0, 1] as w cells.
func bar(f float64, w int) string {
	f = max(0, min(f, 1))
	n := int(f*float64(w) + 0.5)
	return "[" + strings.Repeat("#", n) + strings.Repeat("-", w-n) + "]"
}

// groupSizeText is the header's G: the current phase's where
// grpo.group_size_by_phase sets it, named so.
func groupSizeText(info event.RunInfo, phase string) string {
	if g, ok := info.GroupSizes[phase]; ok {
		return fmt.Sprintf("G=%d (%s)", g, phase)
	}
	if info.GroupSize > 0 {
		return fmt.Sprintf("G=%d", info.GroupSize)
	}
	return ""
}

// runWhere is what the run trains on and how, for the header and the
// headless log: the CPU kernels' build, the device, agent mode, LoRA.
func runWhere(info event.RunInfo) []string {
	parts := []string{"blas " + orDash(clean(info.Build), "-")}
	if info.Device != "" {
		parts = append(parts, "warm start and GRPO on "+clean(info.Device))
	}
	if info.LoRARank > 0 {
		parts = append(parts, fmt.Sprintf("LoRA rank %d", info.LoRARank))
	}
	if info.Mode != "" {
		parts = append(parts, clean(info.Mode)+" mode")
	}
	return parts
}

// RunWhere is runWhere joined as the header shows it.
func RunWhere(info event.RunInfo) string { return strings.Join(runWhere(info), " · ") }
