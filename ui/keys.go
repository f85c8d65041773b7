package ui

import "github.com/charmbracelet/bubbles/key"

// globalKeys work whatever pane has the focus.
type globalKeys struct {
	Pause, Syntax, Apply, Docker, Auto, Save, Replay key.Binding
	Next, Prev, Zoom, Help, Quit, Raw, Issue, Back   key.Binding
	History                                          key.Binding
}

// navKeys move inside the focused pane; each pane says which it uses.
type navKeys struct {
	Up, Down, PageUp, PageDown, Top, Bottom, Left, Right, Follow key.Binding
}

var keys = globalKeys{
	Pause:   key.NewBinding(key.WithKeys(" ", "p"), key.WithHelp("space/p", "pause / resume")),
	Syntax:  key.NewBinding(key.WithKeys("1"), key.WithHelp("1", "phase syntax")),
	Apply:   key.NewBinding(key.WithKeys("2"), key.WithHelp("2", "phase apply-only")),
	Docker:  key.NewBinding(key.WithKeys("3"), key.WithHelp("3", "phase docker")),
	Auto:    key.NewBinding(key.WithKeys("a"), key.WithHelp("a", "auto-curriculum on/off")),
	Save:    key.NewBinding(key.WithKeys("s"), key.WithHelp("s", "save a checkpoint now")),
	Replay:  key.NewBinding(key.WithKeys("r"), key.WithHelp("r", "replay the selection")),
	Next:    key.NewBinding(key.WithKeys("tab"), key.WithHelp("tab", "focus next pane")),
	Prev:    key.NewBinding(key.WithKeys("shift+tab"), key.WithHelp("shift+tab", "focus previous pane")),
	Zoom:    key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "zoom the pane / back")),
	Help:    key.NewBinding(key.WithKeys("?"), key.WithHelp("?", "this help")),
	Quit:    key.NewBinding(key.WithKeys("q", "ctrl+c"), key.WithHelp("q/ctrl+c", "stop the run and quit")),
	Raw:     key.NewBinding(key.WithKeys("c"), key.WithHelp("c", "raw completion / patch")),
	Issue:   key.NewBinding(key.WithKeys("i"), key.WithHelp("i", "the task's issue text")),
	History: key.NewBinding(key.WithKeys("v"), key.WithHelp("v", "the run's whole history (swetui view); q back")),
	Back:    key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "unzoom, close help")),
}

var nav = navKeys{
	Up:       key.NewBinding(key.WithKeys("k", "up"), key.WithHelp("k/↑", "up")),
	Down:     key.NewBinding(key.WithKeys("j", "down"), key.WithHelp("j/↓", "down")),
	PageUp:   key.NewBinding(key.WithKeys("pgup", "ctrl+u"), key.WithHelp("pgup", "page up")),
	PageDown: key.NewBinding(key.WithKeys("pgdown", "ctrl+d"), key.WithHelp("pgdn", "page down")),
	Top:      key.NewBinding(key.WithKeys("g", "home"), key.WithHelp("g/home", "top")),
	Bottom:   key.NewBinding(key.WithKeys("G", "end"), key.WithHelp("G/end", "bottom")),
	Left:     key.NewBinding(key.WithKeys("h", "left"), key.WithHelp("h/←", "older step")),
	Right:    key.NewBinding(key.WithKeys("l", "right"), key.WithHelp("l/→", "newer step")),
	Follow:   key.NewBinding(key.WithKeys("f"), key.WithHelp("f", "follow the newest")),
}

// withHelp relabels a binding's help for one pane.
func withHelp(b key.Binding, desc string) key.Binding {
	b.SetHelp(b.Help().Key, desc)
	return b
}

// confirmKeys answer the quit question.
var (
	confirmYes = key.NewBinding(key.WithKeys("y", "Y", "q", "ctrl+c", "enter"))
	confirmNo  = key.NewBinding(key.WithKeys("n", "N", "esc"))
)
