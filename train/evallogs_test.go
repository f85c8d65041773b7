package train

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/swetui/swetui/history"
)

func TestEvalLogs(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("a", evalLogMax) + strings.Repeat("b", 1000)
	for step := 1; step <= 5; step++ {
		rel, err := writeEvalLog(dir, step, 0, 1, "log of step "+string(rune('0'+step))+"\n"+long)
		if err != nil {
			t.Fatal(err)
		}
		if rel != history.EvalLogPath(step, 0, 1) {
			t.Fatalf("path %s", rel)
		}
	}
	got, err := history.ReadEvalLog(dir, history.EvalLogPath(3, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got, "log of step 3\n") || !strings.HasSuffix(got, "bbb") || !strings.Contains(got, "bytes not kept") ||
		len(got) > evalLogMax+100 {
		t.Errorf("capped log: %d bytes, head %q", len(got), got[:20])
	}
	// Keep the newest 3; a resume from step 4 drops step 5's too.
	if err := pruneEvalLogs(dir, 3, -1); err != nil {
		t.Fatal(err)
	}
	if err := pruneEvalLogs(dir, 3, 4); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, history.EvalLogsDir))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "step-00000003 step-00000004" {
		t.Errorf("kept %v", names)
	}
}
