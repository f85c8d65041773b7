package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/history"
	"github.com/swetui/swetui/internal/durable"
)

// eventRecord is one line of events.jsonl: what the headless printer (and
// the console's event log) says, with the step it belongs to, so that a
// resumed run drops the lines it is about to write again.
type eventRecord struct {
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	Level   string    `json:"level,omitempty"`
	Step    *int      `json:"step,omitempty"`
	SFTStep *int      `json:"sft_step,omitempty"`
	Text    string    `json:"text"`
}

// runSummary is what the terminal shows when a run ends.
type runSummary struct {
	Stopped    event.Stopped
	HaveStop   bool
	Stage      string
	SFTStep    int
	SFTSteps   int
	Checkpoint string // newest GRPO checkpoint written by this run
}

// recordEvents appends the run's events to <out>/events.jsonl until events
// closes, and returns what the exit summary needs. The file is repaired
// (torn last line) when opened, and cut like the other history files once
// the trainer's RunInfo says where a resumed run picks up.
func recordEvents(out string, events <-chan event.Event, start time.Time) (runSummary, error) {
	var sum runSummary
	path := filepath.Join(out, history.EventsFile)
	log, _, err := durable.OpenLog(path, nil)
	if err != nil {
		for range events { // keep the bus from waiting on us
		}
		return sum, err
	}
	defer func() { log.Close() }()
	var firstErr error
	for ev := range events {
		switch e := ev.(type) {
		case event.RunInfo:
			if e.ResumedStep > 0 || e.ResumedSFTStep > 0 {
				cut := history.Cut{GRPOStep: e.ResumedStep, SFTStep: e.ResumedSFTStep}
				if e.ResumedStep > 0 {
					cut.SFTStep = math.MaxInt
				}
				log.Close()
				if log, _, err = durable.OpenLog(path, cut.Keep); err != nil {
					return sum, err
				}
			}
		case event.StageChanged:
			sum.Stage = e.Stage
		case event.SFTStep:
			sum.SFTStep, sum.SFTSteps = e.Step, e.Steps
		case event.CheckpointSaved:
			sum.Checkpoint = e.Path
		case event.Stopped:
			sum.Stopped, sum.HaveStop = e, true
		}
		line := eventLine(ev, time.Since(start))
		if line == "" {
			continue
		}
		rec := eventRecord{Time: time.Now(), Kind: kindOf(ev), Text: strings.TrimSpace(line[strings.IndexByte(line, ']')+1:])}
		switch e := ev.(type) {
		case event.Message:
			rec.Level = e.Level.String()
		case event.StepFinished:
			rec.Step = &e.Step
		case event.CheckpointSaved:
			rec.Step = &e.Step
		case event.PhaseChanged:
			rec.Step = &e.Step
		case event.SFTStep:
			rec.SFTStep = &e.Step
		}
		data, err := json.Marshal(rec)
		if err == nil {
			err = log.Append(data)
		}
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("events.jsonl: %w", err)
		}
	}
	return sum, firstErr
}

// kindOf names an event for events.jsonl: its type in snake case
// (StepFinished → step_finished, SFTStep → sft_step).
func kindOf(ev event.Event) string {
	name := []rune(reflect.TypeOf(ev).Name())
	upper := func(r rune) bool { return 'A' <= r && r <= 'Z' }
	var b strings.Builder
	for i, r := range name {
		if upper(r) {
			if i > 0 && (!upper(name[i-1]) || i+1 < len(name) && !upper(name[i+1])) {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// printRunSummary tells, once the console is gone, why the run stopped, where
// it stands, and the commands that resume it and show its curves.
func printRunSummary(w io.Writer, s runSummary, out, resume string) {
	if !s.HaveStop {
		return
	}
	fmt.Fprintln(w)
	why := s.Stopped.Reason
	if s.Stopped.Err != nil {
		why += ": " + s.Stopped.Err.Error()
	}
	fmt.Fprintf(w, "swetui: run stopped (%s)\n", why)
	if s.Stage == "sft" || s.Stopped.Step == 0 && s.SFTStep > 0 && s.SFTStep < s.SFTSteps {
		fmt.Fprintf(w, "  warm start at step %d of %d", s.SFTStep, s.SFTSteps)
		if s.SFTStep < s.SFTSteps {
			fmt.Fprintf(w, " (saved in %s-partial; the next run continues it)", filepath.Join(out, "sft"))
		}
		fmt.Fprintln(w)
	} else {
		fmt.Fprintf(w, "  last GRPO step %d\n", s.Stopped.Step)
	}
	if s.Checkpoint != "" {
		fmt.Fprintf(w, "  checkpoint   %s\n", s.Checkpoint)
	}
	fmt.Fprintf(w, "  resume       %s\n", resume)
	fmt.Fprintf(w, "  curves       tensorboard --logdir %s\n", filepath.Join(out, history.TensorBoardDir))
	fmt.Fprintf(w, "  history      %s, %s, %s\n", filepath.Join(out, history.MetricsFile), filepath.Join(out, history.RolloutsFile), filepath.Join(out, history.EventsFile))
	fmt.Fprintf(w, "  browse       swetui view %s\n", out)
}
