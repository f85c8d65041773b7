package history

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEvalLogs(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("a", EvalLogMax) + strings.Repeat("b", 1000)
	for step := 1; step <= 5; step++ {
		rel, err := WriteEvalLog(dir, step, 0, 1, "log of step "+string(rune('0'+step))+"\n"+long)
		if err != nil {
			t.Fatal(err)
		}
		if rel != EvalLogPath(step, 0, 1) {
			t.Fatalf("path %s", rel)
		}
	}
	got, err := ReadEvalLog(dir, EvalLogPath(3, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got, "log of step 3\n") || !strings.HasSuffix(got, "bbb") || !strings.Contains(got, "bytes not kept") ||
		len(got) > EvalLogMax+100 {
		t.Errorf("capped log: %d bytes, head %q", len(got), got[:20])
	}
	// Keep the newest 3; a resume from step 4 drops step 5's too.
	if err := PruneEvalLogs(dir, 3, -1); err != nil {
		t.Fatal(err)
	}
	if err := PruneEvalLogs(dir, 3, 4); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, EvalLogsDir))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "step-00000003 step-00000004" {
		t.Errorf("kept %v", names)
	}
}
