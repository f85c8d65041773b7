package history

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// EvalLogsDir holds each docker-phase evaluation's container log, gzipped,
// one folder a step (the trainer writes them with WriteEvalLog).
const EvalLogsDir = "logs"

// EvalLogPath is where the log of completion group.index of step lives,
// relative to the run's folder.
func EvalLogPath(step, group, index int) string {
	return filepath.Join(EvalLogsDir, fmt.Sprintf("step-%08d", step), fmt.Sprintf("%d.%d.log.gz", group, index))
}

// ReadEvalLog reads a kept log (rel as CompletionScored.LogFile has it).
func ReadEvalLog(dir, rel string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dir, rel))
	if err != nil {
		return "", fmt.Errorf("history: %w", err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return "", fmt.Errorf("history: %s: %w", rel, err)
	}
	var b bytes.Buffer
	if _, err := b.ReadFrom(zr); err != nil {
		return "", fmt.Errorf("history: %s: %w", rel, err)
	}
	return b.String(), nil
}

// Each docker-phase evaluation's container log is kept under the run's
// folder, gzipped, one folder a step (logs/step-NNNNNNNN/G.I.log.gz), so
// `swetui view` can show it after it scrolled out of the console. Logs are
// capped (EvalLogMax, the head and the tail kept) and pruned by step: the
// newest EvalLogSteps steps with a log are kept.
const (
	EvalLogMax   = 256 << 10
	EvalLogSteps = 500
)

// capLog keeps the head and the tail of a long log, marking the cut.
func capLog(log string) string {
	if len(log) <= EvalLogMax {
		return log
	}
	half := EvalLogMax / 2
	return log[:half] + fmt.Sprintf("\n... [%d bytes not kept] ...\n", len(log)-2*half) + log[len(log)-half:]
}

// WriteEvalLog writes one evaluation's log under dir and returns its path
// relative to dir. A log that cannot be written is not the run's failure:
// the caller reports it and goes on.
func WriteEvalLog(dir string, step, group, index int, log string) (string, error) {
	rel := EvalLogPath(step, group, index)
	path := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", fmt.Errorf("keep eval log: %w", err)
	}
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(capLog(log))); err != nil {
		return "", fmt.Errorf("keep eval log: %w", err)
	}
	if err := zw.Close(); err != nil {
		return "", fmt.Errorf("keep eval log: %w", err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return "", fmt.Errorf("keep eval log: %w", err)
	}
	return rel, nil
}

// PruneEvalLogs removes the oldest step folders beyond keep, and those of
// steps after cut (a resumed run writes them again; cut < 0: none).
func PruneEvalLogs(dir string, keep, cut int) error {
	entries, err := os.ReadDir(filepath.Join(dir, EvalLogsDir))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("prune eval logs: %w", err)
	}
	var steps []string
	for _, e := range entries {
		var n int
		if e.IsDir() && strings.HasPrefix(e.Name(), "step-") {
			if _, err := fmt.Sscanf(e.Name(), "step-%d", &n); err == nil {
				if cut >= 0 && n > cut {
					os.RemoveAll(filepath.Join(dir, EvalLogsDir, e.Name()))
					continue
				}
				steps = append(steps, e.Name())
			}
		}
	}
	sort.Strings(steps)
	for _, s := range steps[:max(len(steps)-keep, 0)] {
		if err := os.RemoveAll(filepath.Join(dir, EvalLogsDir, s)); err != nil {
			return fmt.Errorf("prune eval logs: %w", err)
		}
	}
	return nil
}
