package train

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/swetui/swetui/event"
)

// Sinks write a run's record under run.out_dir: metrics.jsonl (one line per
// step), rollouts.jsonl (every scored completion) and TensorBoard scalars.
type Sinks struct {
	metrics, rollouts *os.File
	mw, rw            *bufio.Writer
	tb                *TensorBoard
}

// OpenSinks opens (appending) the record files in dir.
func OpenSinks(dir string) (*Sinks, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("open sinks: %w", err)
	}
	open := func(name string) (*os.File, error) {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, fmt.Errorf("open sinks: %w", err)
		}
		return f, nil
	}
	s := &Sinks{}
	var err error
	if s.metrics, err = open("metrics.jsonl"); err != nil {
		return nil, err
	}
	if s.rollouts, err = open("rollouts.jsonl"); err != nil {
		s.metrics.Close()
		return nil, err
	}
	if s.tb, err = NewTensorBoard(filepath.Join(dir, "tb")); err != nil {
		s.metrics.Close()
		s.rollouts.Close()
		return nil, err
	}
	s.mw, s.rw = bufio.NewWriter(s.metrics), bufio.NewWriter(s.rollouts)
	return s, nil
}

// MetricsLine is one line of metrics.jsonl.
type MetricsLine struct {
	Step    int       `json:"step"`
	Phase   string    `json:"phase"`
	Version int       `json:"version"`
	Time    time.Time `json:"time"`
	event.Metrics
}

// Metrics appends one step's metrics and flushes, so a reader (or a crash)
// sees whole lines.
func (s *Sinks) Metrics(step int, phase string, version int, m event.Metrics) error {
	now := time.Now()
	line, err := json.Marshal(MetricsLine{Step: step, Phase: phase, Version: version, Time: now, Metrics: m})
	if err != nil {
		return fmt.Errorf("write metrics: %w", err)
	}
	if err := writeLine(s.mw, line); err != nil {
		return fmt.Errorf("write metrics: %w", err)
	}
	scalars := map[string]float64{}
	var flat map[string]any
	if err := json.Unmarshal(line, &flat); err == nil {
		for k, v := range flat {
			if f, ok := v.(float64); ok && k != "step" && k != "version" {
				scalars[k] = f
			}
		}
	}
	return s.tb.Scalars(step, now, scalars)
}

// Rollout appends one scored completion.
func (s *Sinks) Rollout(ev event.CompletionScored) error {
	line, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("write rollout: %w", err)
	}
	if err := writeLine(s.rw, line); err != nil {
		return fmt.Errorf("write rollout: %w", err)
	}
	return nil
}

func writeLine(w *bufio.Writer, line []byte) error {
	if _, err := w.Write(append(line, '\n')); err != nil {
		return err
	}
	return w.Flush()
}

// Close flushes and closes every file.
func (s *Sinks) Close() error {
	var first error
	for _, c := range []func() error{s.mw.Flush, s.rw.Flush, s.metrics.Close, s.rollouts.Close, s.tb.Close} {
		if err := c(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
