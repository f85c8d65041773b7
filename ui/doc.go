// Package ui owns the console: the Bubble Tea root model, its panes (header,
// rewards, group, diff, containers, events), styles, key map and help. It turns
// the trainer's events into messages and the operator's keys into the trainer's
// non-blocking controls; it never calls Docker or the model itself.
//
// `swetui run` starts it with
//
//	err := ui.Run(ctx, ctrl, events, ui.Options{UI: cfg.UI})
//
// Events: one self-re-arming tea.Cmd (the pump) reads the channel outside
// Update and returns what arrives within one refresh window (ui.refresh_ms)
// as a single batch, container logs merged per evaluation and pool states
// reduced to the last, so a flood costs one Update and one frame per window.
// The channel is an event.Bus subscription, read continuously; when the
// console falls behind, the bus drops high-rate events for it and counts
// them (shown in the events pane), so publishing never blocks training.
//
// Quitting (q, ctrl-c): with a step in flight the console asks first; then
// it calls Stop and exits when Stopped arrives (or the channel closes). With
// no run going (before RunInfo, after Stopped) it exits at once; a second
// ctrl-c while stopping exits without waiting. Run calls Stop itself if the
// program ends any other way while the run goes on, so Stop must be
// idempotent, and the caller waits for the trainer's teardown after Run.
//
// The warm start (stage "sft") is a view of its own: the header shows its
// step, losses, speed and ETA, the Rewards pane charts its training and
// held-out losses (and keeps them, zoomed, below GRPO's charts), the Group
// and Diff panes say that completions come with GRPO, and controls that only
// GRPO uses say so when pressed.
//
// Memory is bounded over any run length: ui.history finished steps (and as
// many warm-start steps) for the charts, the completions of the last 100
// steps, ui.log_lines lines for each of the last 8 evaluations' logs, and
// 500 event-log lines.
//
// Whatever text the trainer forwards (completions, issue texts, logs,
// errors) is drawn only with runes that every terminal draws as wide as the
// console counts them (see clean), so no content can wrap a line and shift
// the screen.
//
// Colour is decoration: states are words (RUNNING, PAUSED, STOPPING...) and
// focus is a heavy rule, so NO_COLOR, tmux and the ASCII goldens read the
// same.
package ui
