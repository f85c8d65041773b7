package history

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/internal/durable"
)

// EventRecord is one line of EventsFile: what the headless printer (and
// the console's event log) says, with the step it belongs to, so that a
// resumed run drops the lines it is about to write again.
type EventRecord struct {
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	Level   string    `json:"level,omitempty"`
	Step    *int      `json:"step,omitempty"`
	SFTStep *int      `json:"sft_step,omitempty"`
	Text    string    `json:"text"`
}

// RunSummary is what the terminal shows when a run ends, as RecordEvents
// gathers it.
type RunSummary struct {
	Stopped    event.Stopped
	HaveStop   bool
	Stage      string
	SFTStep    int
	SFTSteps   int
	Checkpoint string // newest GRPO checkpoint written by this run
}

// RecordEvents appends the run's events to dir's events.jsonl until events
// closes, each as line renders it ("" leaves it out; the text after its
// "[elapsed]" prefix is kept), and returns what the exit summary needs. The file is repaired
// (torn last line) when opened, and cut like the other history files once
// the trainer's RunInfo says where a resumed run picks up.
func RecordEvents(dir RunDir, events <-chan event.Event, line func(event.Event) string) (RunSummary, error) {
	var sum RunSummary
	path := dir.Events()
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
				cut := Cut{GRPOStep: e.ResumedStep, SFTStep: e.ResumedSFTStep}
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
		text := line(ev)
		if text == "" {
			continue
		}
		rec := EventRecord{Time: time.Now(), Kind: KindOf(ev), Text: strings.TrimSpace(text[strings.IndexByte(text, ']')+1:])}
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

// KindOf names an event for events.jsonl: its type in snake case
// (StepFinished → step_finished, SFTStep → sft_step).
func KindOf(ev event.Event) string {
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
