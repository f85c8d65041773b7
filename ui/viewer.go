package ui

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/history"
)

// ViewOptions configure `swetui view`.
type ViewOptions struct {
	Dir    string        // the run's folder (run.out_dir)
	Follow time.Duration // how often to look for new lines (0: 1 s)
	Filter string        // the filter to start with (history.ParseFilter)
	// Decode turns one token id into its text (the run's tokenizer), for
	// the completion's tokens coloured by logprob; nil shows ids.
	Decode func(id int) string
	Input  *os.File // tests: replace the terminal
	Output *os.File
}

// Viewer is `swetui view`: the console's look over a run's history files,
// finished or still training. Screens: the list of completions (filtered,
// sorted), one completion (its patch, the completion, every reward
// component, the test lists), and a metric's chart over the run.
type Viewer struct {
	dir    string
	ix     *history.Index
	met    history.Metrics
	filter history.Filter
	fexpr  string
	rows   []int // positions in ix.Entries, as the filter selects them
	cursor int
	top    int

	screen  viewScreen
	cur     *event.CompletionScored // the completion screen's
	curMode diffMode
	scroll  int
	metric  int // into met.Names()

	decode    func(int) string
	agentRun  bool // some completions are agent trajectories: the list shows their turns and ends
	inConsole bool // opened from the live console: q returns to it
	prompts   map[string]string
	editing   bool // typing a filter
	input     string
	status    string
	w, h      int
	follow    time.Duration
}

type viewScreen int

const (
	screenList viewScreen = iota
	screenCompletion
	screenChart
)

type viewTick struct{}

// NewViewer opens a run's history: the index of its rollouts.jsonl (built
// once and kept beside it) and its metrics.
func NewViewer(o ViewOptions) (*Viewer, error) {
	if st, err := os.Stat(o.Dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("view: %s is not a run folder", o.Dir)
	}
	ix, err := history.Open(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("view: %w", err)
	}
	if len(ix.Entries) == 0 {
		if _, err := os.Stat(filepath.Join(o.Dir, history.RolloutsFile)); err != nil {
			return nil, fmt.Errorf("view: %s has no %s: is it a run's out_dir?", o.Dir, history.RolloutsFile)
		}
	}
	met, err := history.ReadMetrics(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("view: %w", err)
	}
	v := &Viewer{dir: o.Dir, ix: ix, met: met, follow: o.Follow, filter: history.NoFilter(), w: 100, h: 30, decode: o.Decode}
	if v.follow <= 0 {
		v.follow = time.Second
	}
	v.indexed()
	if o.Filter != "" {
		if err := v.setFilter(o.Filter); err != nil {
			return nil, fmt.Errorf("view: %w", err)
		}
	} else {
		v.reselect()
	}
	return v, nil
}

// RunViewer shows the viewer on the terminal until the operator quits.
func RunViewer(ctx context.Context, o ViewOptions) error {
	if _, ok := os.LookupEnv("NO_COLOR"); ok {
		lipgloss.SetColorProfile(termenv.Ascii)
	}
	v, err := NewViewer(o)
	if err != nil {
		return err
	}
	popts := []tea.ProgramOption{tea.WithAltScreen(), tea.WithContext(ctx)}
	if o.Input != nil {
		popts = append(popts, tea.WithInput(o.Input))
	}
	if o.Output != nil {
		popts = append(popts, tea.WithOutput(o.Output))
	}
	_, err = tea.NewProgram(v, popts...).Run()
	if errors.Is(err, tea.ErrInterrupted) || (err != nil && ctx.Err() != nil) {
		return nil
	}
	return err
}

func (v *Viewer) tick() tea.Cmd {
	return tea.Tick(v.follow, func(time.Time) tea.Msg { return viewTick{} })
}

// Init implements tea.Model.
func (v *Viewer) Init() tea.Cmd { return v.tick() }

// indexed notes what the index holds once it grew: whether the run has
// agent trajectories.
func (v *Viewer) indexed() {
	v.agentRun = v.agentRun || slices.ContainsFunc(v.ix.Entries, func(e history.Entry) bool { return e.Agent() })
}

func (v *Viewer) setFilter(expr string) error {
	f, err := history.ParseFilter(expr)
	if err != nil {
		return err
	}
	rows, err := v.ix.SelectIn(v.dir, f)
	if err != nil {
		return err
	}
	v.filter, v.fexpr, v.rows, v.cursor, v.top = f, expr, rows, 0, 0
	return nil
}

func (v *Viewer) reselect() {
	rows, err := v.ix.SelectIn(v.dir, v.filter)
	if err != nil {
		v.status = err.Error()
		return
	}
	v.rows = rows
	v.cursor = min(v.cursor, max(len(rows)-1, 0))
}

// Update implements tea.Model.
func (v *Viewer) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		v.w, v.h = msg.Width, msg.Height
	case viewTick:
		if grew, err := v.ix.Update(v.dir); err == nil && grew {
			v.indexed()
			v.reselect()
			if met, err := history.ReadMetrics(v.dir); err == nil {
				v.met = met
			}
		}
		return v, v.tick()
	case tea.KeyMsg:
		return v, v.key(msg)
	}
	return v, nil
}

func (v *Viewer) key(msg tea.KeyMsg) tea.Cmd {
	k := msg.String()
	if v.editing {
		switch msg.Type {
		case tea.KeyEnter:
			v.editing = false
			if err := v.setFilter(v.input); err != nil {
				v.status = err.Error()
			} else {
				v.status = ""
			}
		case tea.KeyEsc:
			v.editing = false
		case tea.KeyBackspace:
			if v.input != "" {
				v.input = v.input[:len(v.input)-1]
			}
		case tea.KeyRunes, tea.KeySpace:
			if !msg.Paste {
				v.input += string(msg.Runes)
			}
		}
		return nil
	}
	switch k {
	case "q", "ctrl+c":
		return tea.Quit
	}
	switch v.screen {
	case screenList:
		return v.listKey(k)
	case screenCompletion:
		return v.completionKey(k)
	case screenChart:
		switch k {
		case "esc", "m":
			v.screen = screenList
		case "j", "down", "l", "right":
			v.metric++
		case "k", "up", "h", "left":
			v.metric--
		}
		if n := len(v.met.Series); n > 0 {
			v.metric = (v.metric%n + n) % n
		}
	}
	return nil
}

func (v *Viewer) listKey(k string) tea.Cmd {
	page := max(v.h-6, 1)
	switch k {
	case "j", "down":
		v.cursor++
	case "k", "up":
		v.cursor--
	case "pgdown", "ctrl+d":
		v.cursor += page
	case "pgup", "ctrl+u":
		v.cursor -= page
	case "g", "home":
		v.cursor = 0
	case "G", "end":
		v.cursor = len(v.rows) - 1
	case "/":
		v.editing, v.input = true, v.fexpr
	case "esc":
		_ = v.setFilter("")
		v.status = ""
	case "enter":
		v.open()
	case "t":
		// The selected task's completions across the run, in step order.
		if e, ok := v.selected(); ok {
			v.status = ""
			if err := v.setFilter("task=" + v.ix.Tasks[e.Task]); err != nil {
				v.status = err.Error()
			}
		}
	case "s":
		// Cycle the sort: step, reward (best first), advantage (best first).
		next := map[string]string{"": "-reward", "step": "-reward", "reward": "-advantage", "advantage": "step"}[v.filter.SortBy]
		expr := strings.TrimSpace(removeWord(v.fexpr, "sort=") + " sort=" + next)
		if err := v.setFilter(expr); err != nil {
			v.status = err.Error()
		}
	case "m":
		if v.screen = screenChart; v.metric == 0 {
			// Start on the reward, not the alphabet's first metric.
			for i, n := range v.met.Names() {
				if n == "reward/mean" {
					v.metric = i
				}
			}
		}
	case "E":
		v.status = v.exportSet()
	}
	v.cursor = max(min(v.cursor, len(v.rows)-1), 0)
	return nil
}

func (v *Viewer) completionKey(k string) tea.Cmd {
	switch k {
	case "esc", "backspace":
		v.screen = screenList
	case "j", "down":
		v.scroll++
	case "k", "up":
		v.scroll--
	case "pgdown", "ctrl+d":
		v.scroll += max(v.h-4, 1)
	case "pgup", "ctrl+u":
		v.scroll -= max(v.h-4, 1)
	case "c":
		v.curMode, v.scroll = map[bool]diffMode{true: modeDiff, false: modeRaw}[v.curMode == modeRaw], 0
	case "t":
		v.curMode, v.scroll = map[bool]diffMode{true: modeDiff, false: modeTokens}[v.curMode == modeTokens], 0
	case "L":
		v.curMode, v.scroll = map[bool]diffMode{true: modeDiff, false: modeLog}[v.curMode == modeLog], 0
	case "P":
		v.curMode, v.scroll = map[bool]diffMode{true: modeDiff, false: modePrompt}[v.curMode == modePrompt], 0
	case "n":
		v.cursor = min(v.cursor+1, len(v.rows)-1)
		v.open()
	case "p":
		v.cursor = max(v.cursor-1, 0)
		v.open()
	case "e":
		v.status = v.exportPatch()
	}
	v.scroll = max(v.scroll, 0)
	return nil
}

func removeWord(expr, prefix string) string {
	var out []string
	for _, w := range strings.Fields(expr) {
		if !strings.HasPrefix(w, prefix) {
			out = append(out, w)
		}
	}
	return strings.Join(out, " ")
}

func (v *Viewer) selected() (history.Entry, bool) {
	if v.cursor < 0 || v.cursor >= len(v.rows) {
		return history.Entry{}, false
	}
	return v.ix.Entries[v.rows[v.cursor]], true
}

func (v *Viewer) open() {
	e, ok := v.selected()
	if !ok {
		return
	}
	c, err := history.Read(v.dir, e)
	if err != nil {
		v.status = err.Error()
		return
	}
	v.cur, v.screen, v.scroll, v.curMode = &c, screenCompletion, 0, modeDiff
}

// exportPatch writes the open completion's patch beside the run, as
// exports/step-S-G.I.patch.
func (v *Viewer) exportPatch() string {
	c := v.cur
	if c == nil || strings.TrimSpace(c.Verdict.Patch) == "" {
		return "nothing to export: no patch was extracted"
	}
	path := filepath.Join(history.RunDir(v.dir).Exports(), fmt.Sprintf("step-%d-%d.%d.patch", c.Step, c.Group, c.Index))
	if err := writeExport(path, []byte(c.Verdict.Patch)); err != nil {
		return err.Error()
	}
	return "wrote " + path
}

// exportSet writes every selected completion's line, as rollouts.jsonl has
// it, to exports/selection-<time>.jsonl.
func (v *Viewer) exportSet() string {
	r, err := history.OpenReader(v.dir)
	if err != nil {
		return err.Error()
	}
	defer r.Close()
	var b strings.Builder
	for _, i := range v.rows {
		line, err := r.Line(v.ix.Entries[i])
		if err != nil {
			return err.Error()
		}
		b.Write(line) // the line as rollouts.jsonl holds it, newline included
	}
	path := filepath.Join(history.RunDir(v.dir).Exports(), "selection-"+time.Now().Format("20060102-150405")+".jsonl")
	if err := writeExport(path, []byte(b.String())); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("wrote %d completions to %s", len(v.rows), path)
}

func writeExport(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	return nil
}
