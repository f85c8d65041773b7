package ui

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/charmbracelet/x/ansi"
	"github.com/swetui/swetui/event"
)

// gpusPane is each GPU's share of a run on several (event.GPUs), drawn
// above the reward pool's pane: the sampling calls it ran, its memory, and
// its time in the last step in sampling, in training's passes and in the
// collectives. It is not focusable: it has nothing to scroll.
type gpusPane struct {
	frame
	st *state
}

// gpuRows is the height the pane wants: a title and a line a GPU, none
// before the first report.
func (st *state) gpuRows() int {
	if len(st.gpus.Shares) == 0 {
		return 0
	}
	return len(st.gpus.Shares) + 1
}

// behindRatio: a GPU whose training passes in the last step took this
// much longer than the median GPU's (and 50 ms more) holds the others up
// at the collective, and is marked.
const behindRatio = 1.25

func (p *gpusPane) Lines() []string {
	if p.h <= 0 || len(p.st.gpus.Shares) == 0 {
		return nil
	}
	now, prev := p.st.gpus, p.st.prevGPUs
	last := make([]event.GPUShare, len(now.Shares))
	for i, s := range now.Shares {
		last[i] = s
		if i < len(prev.Shares) && prev.Shares[i].Device == s.Device {
			last[i].Sample -= prev.Shares[i].Sample
			last[i].Train -= prev.Shares[i].Train
			last[i].Collective -= prev.Shares[i].Collective
		}
	}
	behind := gpusBehind(last)
	span := "since the start"
	if len(prev.Shares) > 0 {
		span = fmt.Sprintf("step %d", now.Step)
	}
	info := fmt.Sprintf("%d · times of %s", len(now.Shares), span)
	if n := len(behind); n > 0 {
		info += fmt.Sprintf(" · %d behind", n)
	}
	out := []string{titleLine("GPUs", info, p.w, false)}
	for i, s := range now.Shares {
		// The times first: what shows a GPU falling behind fits a narrow
		// column; the model of the card last.
		id, card, _ := strings.Cut(s.Device, " ")
		flag := ""
		if behind[i] {
			flag = " BEHIND"
		}
		mem := "mem -"
		if s.MemTotal > 0 {
			mem = memUsed(s.MemUsed, s.MemTotal)
		}
		line := fmt.Sprintf("  %s%s · train %s · collective %s · sample %s · %d sampled · %s",
			clean(id), flag, seconds(last[i].Train), seconds(last[i].Collective), seconds(last[i].Sample), s.Samples, mem)
		if card != "" {
			line += " · " + clean(card)
		}
		line = ansi.Truncate(line, p.w, "…")
		if behind[i] {
			line = styleWarn.Render(line)
		}
		out = append(out, line)
	}
	return block(out, p.w, p.h)
}

// gpusBehind marks the GPUs whose training time is over behindRatio times
// the median's and 50 ms more.
func gpusBehind(shares []event.GPUShare) map[int]bool {
	if len(shares) < 2 {
		return nil
	}
	times := make([]time.Duration, len(shares))
	for i, s := range shares {
		times[i] = s.Train
	}
	slices.Sort(times)
	median := times[len(times)/2]
	if len(times)%2 == 0 {
		median = (times[len(times)/2-1] + times[len(times)/2]) / 2
	}
	out := map[int]bool{}
	for i, s := range shares {
		if float64(s.Train) > behindRatio*float64(median) && s.Train-median > 50*time.Millisecond {
			out[i] = true
		}
	}
	return out
}

// seconds formats a GPU's time with a tenth of a second.
func seconds(d time.Duration) string {
	return fmt.Sprintf("%.1fs", max(d, 0).Seconds())
}

// memUsed formats a GPU's memory in use out of its whole: MiB under a GiB,
// so that a small model's share does not read 0.0.
func memUsed(used, total uint64) string {
	if used < 1<<30 {
		return fmt.Sprintf("%d MiB/%.1f GiB", used>>20, float64(total)/(1<<30))
	}
	return fmt.Sprintf("%.1f/%.1f GiB", float64(used)/(1<<30), float64(total)/(1<<30))
}
