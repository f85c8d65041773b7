package train

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/swetui/swetui/history"
)

// Each docker-phase evaluation's container log is kept under the run's
// folder, gzipped, one folder a step (logs/step-NNNNNNNN/G.I.log.gz), so
// `swetui view` can show it after it scrolled out of the console. Logs are
// capped (evalLogMax, the head and the tail kept) and pruned by step: the
// newest evalLogSteps steps with a log are kept.
const (
	evalLogMax   = 256 << 10
	evalLogSteps = 500
)

// capLog keeps the head and the tail of a long log, marking the cut.
func capLog(log string) string {
	if len(log) <= evalLogMax {
		return log
	}
	half := evalLogMax / 2
	return log[:half] + fmt.Sprintf("\n... [%d bytes not kept] ...\n", len(log)-2*half) + log[len(log)-half:]
}

// writeEvalLog writes one evaluation's log under dir and returns its path
// relative to dir. A log that cannot be written is not the run's failure:
// the caller reports it and goes on.
func writeEvalLog(dir string, step, group, index int, log string) (string, error) {
	rel := history.EvalLogPath(step, group, index)
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

// pruneEvalLogs removes the oldest step folders beyond keep, and those of
// steps after cut (a resumed run writes them again; cut < 0: none).
func pruneEvalLogs(dir string, keep, cut int) error {
	entries, err := os.ReadDir(filepath.Join(dir, history.EvalLogsDir))
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
					os.RemoveAll(filepath.Join(dir, history.EvalLogsDir, e.Name()))
					continue
				}
				steps = append(steps, e.Name())
			}
		}
	}
	sort.Strings(steps)
	for _, s := range steps[:max(len(steps)-keep, 0)] {
		if err := os.RemoveAll(filepath.Join(dir, history.EvalLogsDir, s)); err != nil {
			return fmt.Errorf("prune eval logs: %w", err)
		}
	}
	return nil
}
