package history

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
)

// EvalLogsDir holds each docker-phase evaluation's container log, gzipped,
// one folder a step (the trainer writes them; see train/evallogs.go).
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
