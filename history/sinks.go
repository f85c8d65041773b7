package history

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/internal/durable"
)

// Sinks write a run's record under run.out_dir: metrics.jsonl (one line per
// GRPO step and per warm-start step), rollouts.jsonl (every scored
// completion) and TensorBoard scalars. Every line is whole and flushed as it
// is written; a resumed run first drops what it is about to write again
// (see Cut), so each step is recorded once however often the run was killed.
type Sinks struct {
	metrics, rollouts *durable.Log
	tb                *TensorBoard
	// prompts.jsonl holds each distinct prompt once, by hash; rollouts
	// lines name theirs (CompletionScored.PromptHash).
	prompts     *durable.Log
	promptsSeen map[string]bool
}

// Cut is where a resumed run's history ends: GRPO steps after GRPOStep and
// warm-start steps after SFTStep were written after the checkpoint it
// resumes from, and are written again.
type Cut struct {
	GRPOStep, SFTStep int
}

// Keep reports whether a history line (metrics, rollouts or events) is
// before the cut. A line that is not JSON is damaged and dropped.
func (c Cut) Keep(line []byte) bool {
	var k struct {
		Step    *int `json:"step"`
		SFTStep *int `json:"sft_step"`
	}
	if json.Unmarshal(line, &k) != nil {
		return false
	}
	switch {
	case k.SFTStep != nil:
		return *k.SFTStep <= c.SFTStep
	case k.Step != nil:
		return *k.Step <= c.GRPOStep
	}
	return true
}

// keepScalars is Keep for a TensorBoard event: warm-start scalars are tagged
// sft/*.
func (c Cut) keepScalars(tags []string, step int64) bool {
	if strings.HasPrefix(tags[0], "sft/") {
		return step <= int64(c.SFTStep)
	}
	return step <= int64(c.GRPOStep)
}

// OpenSinks opens (appending) the record files in dir. With a cut (a
// resumed run or warm start) the history after it is dropped first; torn
// last lines are always repaired.
func OpenSinks(dir string, cut *Cut) (*Sinks, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("open sinks: %w", err)
	}
	var keep func([]byte) bool
	if cut != nil {
		keep = cut.Keep
		if err := RepairTensorBoard(filepath.Join(dir, TensorBoardDir), cut.keepScalars); err != nil {
			return nil, fmt.Errorf("open sinks: %w", err)
		}
	}
	s := &Sinks{}
	var err error
	if s.metrics, _, err = durable.OpenLog(filepath.Join(dir, MetricsFile), keep); err != nil {
		return nil, fmt.Errorf("open sinks: %w", err)
	}
	if s.rollouts, _, err = durable.OpenLog(filepath.Join(dir, RolloutsFile), keep); err != nil {
		s.metrics.Close()
		return nil, fmt.Errorf("open sinks: %w", err)
	}
	s.promptsSeen = map[string]bool{}
	seen := func(line []byte) bool {
		var p PromptLine
		if json.Unmarshal(line, &p) != nil || p.Hash == "" {
			return false
		}
		s.promptsSeen[p.Hash] = true
		return true
	}
	if s.prompts, _, err = durable.OpenLog(filepath.Join(dir, PromptsFile), seen); err != nil {
		s.metrics.Close()
		s.rollouts.Close()
		return nil, fmt.Errorf("open sinks: %w", err)
	}
	if s.tb, err = NewTensorBoard(filepath.Join(dir, TensorBoardDir)); err != nil {
		s.metrics.Close()
		s.rollouts.Close()
		s.prompts.Close()
		return nil, err
	}
	return s, nil
}

// Prompt records a prompt's text once and returns its hash.
func (s *Sinks) Prompt(instanceID, text string) (string, error) {
	h := PromptHash(text)
	if s.promptsSeen[h] {
		return h, nil
	}
	line, err := json.Marshal(PromptLine{Hash: h, InstanceID: instanceID, Prompt: text})
	if err != nil {
		return "", fmt.Errorf("write prompt: %w", err)
	}
	if err := s.prompts.Append(line); err != nil {
		return "", fmt.Errorf("write prompt: %w", err)
	}
	s.promptsSeen[h] = true
	return h, nil
}

// MetricsLine is one GRPO line of metrics.jsonl.
type MetricsLine struct {
	Stage   string    `json:"stage"` // "grpo"
	Step    int       `json:"step"`
	Phase   string    `json:"phase"`
	Version int       `json:"version"`
	Time    time.Time `json:"time"`
	event.Metrics
}

// SFTLine is one warm-start line of metrics.jsonl.
type SFTLine struct {
	Stage       string    `json:"stage"` // "sft"
	SFTStep     int       `json:"sft_step"`
	Time        time.Time `json:"time"`
	Loss        float64   `json:"sft/loss"`
	Heldout     *float64  `json:"sft/heldout_loss,omitempty"`
	LR          float64   `json:"sft/lr"`
	StepsPerSec float64   `json:"sft/steps_per_s"`
}

// swebrlAliases are the names the original recipe's dashboards read, written
// beside ours: each is the metric it names, or a count derived from the step.
var swebrlAliases = map[string]string{
	"swebrl/reward_mean":   "reward/mean",
	"swebrl/kl":            "grpo/kl",
	"swebrl/reward_time_s": "perf/reward_s",
	"swebrl/sample_time_s": "perf/sample_s",
}

// Metrics appends one GRPO step's metrics (and the recipe's swebrl/* names)
// to metrics.jsonl and TensorBoard.
func (s *Sinks) Metrics(step int, phase string, version int, m event.Metrics) error {
	now := time.Now()
	line, err := json.Marshal(MetricsLine{Stage: "grpo", Step: step, Phase: phase, Version: version, Time: now, Metrics: m})
	if err != nil {
		return fmt.Errorf("write metrics: %w", err)
	}
	var flat map[string]any
	if err := json.Unmarshal(line, &flat); err != nil {
		return fmt.Errorf("write metrics: %w", err)
	}
	for alias, name := range swebrlAliases {
		flat[alias] = flat[name]
	}
	if line, err = json.Marshal(flat); err != nil {
		return fmt.Errorf("write metrics: %w", err)
	}
	if err := s.metrics.Append(line); err != nil {
		return fmt.Errorf("write metrics: %w", err)
	}
	scalars := map[string]float64{}
	for k, v := range flat {
		if f, ok := v.(float64); ok && k != "step" && k != "version" {
			scalars[k] = f
		}
	}
	return s.tb.Scalars(step, now, scalars)
}

// SFTMetrics appends one warm-start step to metrics.jsonl and TensorBoard
// (tags sft/*, at the warm-start step).
func (s *Sinks) SFTMetrics(ev event.SFTStep) error {
	now := time.Now()
	l := SFTLine{Stage: "sft", SFTStep: ev.Step, Time: now, Loss: ev.Loss, LR: ev.LR}
	if done := ev.Step - ev.Resumed; done > 0 && ev.Elapsed > 0 {
		l.StepsPerSec = float64(done) / ev.Elapsed.Seconds()
	}
	scalars := map[string]float64{"sft/loss": ev.Loss, "sft/lr": ev.LR, "sft/steps_per_s": l.StepsPerSec}
	if ev.HeldoutOK && !math.IsNaN(ev.Heldout) {
		h := ev.Heldout
		l.Heldout = &h
		scalars["sft/heldout_loss"] = h
	}
	line, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("write metrics: %w", err)
	}
	if err := s.metrics.Append(line); err != nil {
		return fmt.Errorf("write metrics: %w", err)
	}
	return s.tb.Scalars(ev.Step, now, scalars)
}

// Rollout appends one scored completion.
func (s *Sinks) Rollout(ev event.CompletionScored) error {
	line, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("write rollout: %w", err)
	}
	if err := s.rollouts.Append(line); err != nil {
		return fmt.Errorf("write rollout: %w", err)
	}
	return nil
}

// Close flushes and closes every file.
func (s *Sinks) Close() error {
	return errors.Join(s.metrics.Close(), s.rollouts.Close(), s.prompts.Close(), s.tb.Close())
}
