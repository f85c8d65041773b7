// Package ui owns the console: the Bubble Tea root model, its panes (header,
// rewards, group, diff, containers, footer), styles, key map and help. It turns
// the trainer's events into messages and the operator's keys into the trainer's
// non-blocking controls; it never calls Docker or the model itself.
package ui
