package ui

import (
	"fmt"
	"strings"
	"time"
)

// header is the top two lines: what the run is and where it stands. It is
// not focusable and has no keys. The state is a word (RUNNING, PAUSED,
// STOPPING...) so that it can be read, and grepped from tmux, without colour.
type header struct {
	st *state
	w  int
}

func (h *header) Lines() []string {
	st := h.st
	name := st.info.Name
	if name == "" {
		name = "swetui"
	}
	phase := strings.ToUpper(orDash(st.phase, "-"))
	if st.auto {
		phase += " auto"
	}
	rs := st.runState()
	state := rs.String()
	if rs == stateStopped && st.stop.Reason != "" {
		state += " (" + st.stop.Reason + ")"
	}
	progress := fmt.Sprintf("step %d", max(st.step, st.finished))
	if st.info.MaxSteps > 0 {
		progress += fmt.Sprintf("/%d", st.info.MaxSteps)
	}
	if st.inFlight {
		progress += "*"
	}
	when := "elapsed " + clock(st.elapsed())
	if eta, ok := st.eta(); ok && rs != stateStopped {
		when += " · eta " + clock(eta)
	}
	left := styleBold.Render(name) + "  " + phaseStyle(st.phase).Render(phase) + "  " +
		stateStyle(rs).Render(state) + "  " + progress
	if h.w >= 100 && st.info.MaxSteps > 0 {
		left += " " + bar(float64(st.finished)/float64(st.info.MaxSteps), 20)
	}
	line1 := spread(left, when, h.w)

	parts := []string{fmt.Sprintf("weights v%d", st.version)}
	if st.stage.Stage != "" {
		stage := "stage " + st.stage.Stage
		if st.stage.Progress > 0 && st.stage.Progress < 1 {
			stage += fmt.Sprintf(" %.0f%%", 100*st.stage.Progress)
		}
		if st.stage.Detail != "" && h.w >= 100 {
			stage += " (" + st.stage.Detail + ")"
		}
		parts = append(parts, stage)
	}
	if st.info.GroupSize > 0 {
		parts = append(parts, fmt.Sprintf("G=%d", st.info.GroupSize))
	}
	parts = append(parts, "blas "+orDash(st.info.BLAS, "-"))
	hosts := "local"
	if len(st.info.Hosts) > 0 {
		hosts = st.info.Hosts[0]
		if len(st.info.Hosts) > 1 {
			hosts += fmt.Sprintf(" +%d", len(st.info.Hosts)-1)
		}
	}
	parts = append(parts, "docker "+hosts)
	if h.w >= 100 && st.info.OutDir != "" {
		parts = append(parts, "out "+st.info.OutDir)
	}
	line2 := styleDim.Render(strings.Join(parts, " · "))
	return block([]string{line1, line2}, h.w, 2)
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
