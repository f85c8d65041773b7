package history

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
)

// Point is one step's value of a metric.
type Point struct {
	Step  int
	Value float64
}

// Mark is a step where the run changed course: a phase change or a resume.
type Mark struct {
	Step int
	What string // "phase apply-only", "resumed"
}

// Metrics are the GRPO series of metrics.jsonl, by name, with the marks the
// charts draw.
type Metrics struct {
	Series map[string][]Point
	Marks  []Mark
}

// Names lists the series in name order.
func (m Metrics) Names() []string {
	out := make([]string, 0, len(m.Series))
	for n := range m.Series {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// resumedRe reads the trainer's "resumed from DIR at step N" message.
var resumedRe = regexp.MustCompile(`resumed from .* at step (\d+)`)

// ReadMetrics reads dir's metrics.jsonl (GRPO lines; warm-start lines are
// sft/* series by sft_step) and the resumes events.jsonl records. Missing
// files give empty metrics; damaged lines are skipped.
func ReadMetrics(dir string) (Metrics, error) {
	m := Metrics{Series: map[string][]Point{}}
	phase := ""
	err := eachLine(filepath.Join(dir, MetricsFile), func(line []byte) {
		var raw map[string]any
		if json.Unmarshal(line, &raw) != nil {
			return
		}
		stepKey := "step"
		if raw["stage"] == "sft" {
			stepKey = "sft_step"
		}
		s, ok := raw[stepKey].(float64)
		if !ok {
			return
		}
		step := int(s)
		if p, _ := raw["phase"].(string); p != "" && p != phase {
			if phase != "" {
				m.Marks = append(m.Marks, Mark{Step: step, What: "phase " + p})
			}
			phase = p
		}
		for k, v := range raw {
			if f, ok := v.(float64); ok && k != "step" && k != "sft_step" && k != "version" {
				m.Series[k] = append(m.Series[k], Point{Step: step, Value: f})
			}
		}
	})
	if err != nil {
		return m, err
	}
	err = eachLine(filepath.Join(dir, EventsFile), func(line []byte) {
		var ev struct {
			Text string `json:"text"`
		}
		if json.Unmarshal(line, &ev) != nil {
			return
		}
		if g := resumedRe.FindStringSubmatch(ev.Text); g != nil {
			n, _ := strconv.Atoi(g[1])
			m.Marks = append(m.Marks, Mark{Step: n, What: "resumed"})
		}
	})
	sort.SliceStable(m.Marks, func(i, j int) bool { return m.Marks[i].Step < m.Marks[j].Step })
	return m, err
}

func eachLine(path string, fn func([]byte)) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		fn(sc.Bytes())
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("history: read %s: %w", path, err)
	}
	return nil
}
