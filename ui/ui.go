package ui

import (
	"context"
	"errors"
	"io"
	"os"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
)

// Options configure the console. The zero value works: every bound falls
// back to config.Default's [ui] values.
type Options struct {
	// UI holds the [ui] knobs: refresh_ms (the longest the console batches
	// events before drawing), log_lines (lines kept per evaluation log) and
	// history (finished steps kept for the charts).
	UI config.UI
	// Groups is how many steps' completions are kept for browsing (100).
	Groups int
	// Drops reports what the console's subscription lost because it did not
	// keep up (event.Sub.Dropped); nil shows nothing.
	Drops func() event.Drops
	// Decode names a token id (the run's tokenizer) for the history's
	// token view; nil shows ids.
	Decode func(id int) string
	// Input and Output replace the terminal (tests); nil means stdin/stdout.
	Input  io.Reader
	Output io.Writer
}

func (o Options) withDefaults() Options {
	d := config.Default().UI
	if o.UI.RefreshMS <= 0 {
		o.UI.RefreshMS = d.RefreshMS
	}
	if o.UI.LogLines <= 0 {
		o.UI.LogLines = d.LogLines
	}
	if o.UI.History <= 0 {
		o.UI.History = d.History
	}
	if o.Groups <= 0 {
		o.Groups = defaultGroups
	}
	return o
}

// Run shows the console on the terminal (alternate screen) until the
// operator quits or ctx is cancelled, and returns nil after a quit, ctx's
// error after a cancellation. NO_COLOR (any value) draws without colour.
//
// Quitting calls ctrl.Stop and, while a run is going, waits for its Stopped
// event (a second ctrl-c does not wait); Run itself does not wait for the
// trainer to finish its teardown: the caller does, after Run returns. If
// the program ends any other way (ctx, SIGINT, a panic) while the run is
// still going, Run calls ctrl.Stop itself, so the trainer never goes on
// unseen. Stop must therefore be idempotent.
func Run(ctx context.Context, ctrl Controller, events <-chan event.Event, opts Options) error {
	if _, ok := os.LookupEnv("NO_COLOR"); ok {
		lipgloss.SetColorProfile(termenv.Ascii)
	}
	m := New(ctrl, events, opts)
	// The pump's pending read ends with Run, not with the trainer's channel.
	pumpCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	m.pump.ctx = pumpCtx
	popts := []tea.ProgramOption{tea.WithAltScreen(), tea.WithContext(ctx)}
	if opts.Input != nil {
		popts = append(popts, tea.WithInput(opts.Input))
	}
	if opts.Output != nil {
		popts = append(popts, tea.WithOutput(opts.Output))
	}
	_, err := tea.NewProgram(m, popts...).Run()
	if !m.stopCalled && m.st.running() {
		ctrl.Stop()
	}
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil && errors.Is(err, tea.ErrProgramKilled):
		return ctx.Err()
	case errors.Is(err, tea.ErrInterrupted):
		return nil // SIGINT from outside the terminal: a quit
	}
	return err
}

// New builds the console's root model over a controller and the trainer's
// event channel; Run starts it, and tests drive it directly.
func New(ctrl Controller, events <-chan event.Event, opts Options) *Model {
	opts = opts.withDefaults()
	st := newState(opts, time.Now)
	m := &Model{
		ctrl: ctrl,
		opts: opts,
		st:   st,
		pump: &pump{ctx: context.Background(), ch: events, window: time.Duration(opts.UI.RefreshMS) * time.Millisecond},
		hdr:  &header{st: st},
	}
	m.rewards = &rewardsPane{st: st}
	m.group = newGroupPane(st)
	m.diff = &diffPane{st: st}
	m.containers = newContainersPane(st)
	m.gpus = &gpusPane{st: st}
	m.events = newEventsPane(st)
	m.panes = []pane{m.rewards, m.group, m.diff, m.containers, m.events}
	m.setFocus(1) // the group: where j/k and r mean the most
	m.resize(80, 24)
	return m
}
