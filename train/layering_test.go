package train

import (
	"os/exec"
	"strings"
	"testing"
)

// TestTrainLinksNoModel: the trainer reaches the model only through its
// ports; the adapters live in package policy (docs/ARCHITECTURE.md §2).
func TestTrainLinksNoModel(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to list the imports with")
	}
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.Contains(dep, "gorgonia") || dep == "github.com/swetui/swetui/model" || dep == "github.com/swetui/swetui/model/cuda" {
			t.Errorf("train depends on %s", dep)
		}
	}
}
