package reward

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// hostileFixtureEnv names the folder TestHostileFixture writes to.
const hostileFixtureEnv = "SWETUI_HOSTILE_FIXTURE"

// TestHostileFixture writes the cases of TestDockerHostilePatches as files
// that the command line and the reward server score (cli's serve tests run
// it): dataset.jsonl, one instance per case on the hostile tests' image
// (built here), predictions.jsonl with each case's diff, cases.json with
// the flag each must raise, and repos/acme__widget, the repository for
// reward.repos_dir. The cases stay those of the integrity test, however it
// grows. It runs only when $SWETUI_HOSTILE_FIXTURE names a folder.
func TestHostileFixture(t *testing.T) {
	out := os.Getenv(hostileFixtureEnv)
	if out == "" {
		t.Skip(hostileFixtureEnv + " unset: this writes the hostile cases for cli's serve tests")
	}
	d := dockerClient(t)
	image := dockerImage(t, d)
	dir, commit := makeRepo(t, dockerRepo)
	repo := filepath.Join(out, "repos", RepoDirName("acme/widget"))
	if err := os.MkdirAll(filepath.Dir(repo), 0o755); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("git", "clone", "-q", dir, repo).CombinedOutput(); err != nil {
		t.Fatalf("clone: %v\n%s", err, b)
	}
	type caseFile struct {
		InstanceID string `json:"instance_id"`
		Name       string `json:"name"`
		Flag       string `json:"flag"`
		Contained  bool   `json:"contained"`
	}
	var dataset, preds []byte
	var cases []caseFile
	for i, c := range hostileCases() {
		inst := dockerInstance(image, commit)
		inst.InstanceID = fmt.Sprintf("%s-hostile-%d", inst.InstanceID, i)
		line, err := json.Marshal(inst)
		if err != nil {
			t.Fatal(err)
		}
		dataset = append(append(dataset, line...), '\n')
		line, err = json.Marshal(map[string]string{"instance_id": inst.InstanceID, "model_name_or_path": c.name,
			"model_patch": diffAgainst(t, dockerRepo, c.changes)})
		if err != nil {
			t.Fatal(err)
		}
		preds = append(append(preds, line...), '\n')
		cases = append(cases, caseFile{inst.InstanceID, c.name, c.flag, c.contained})
	}
	caseJSON, err := json.MarshalIndent(cases, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"dataset.jsonl": dataset, "predictions.jsonl": preds, "cases.json": caseJSON} {
		if err := os.WriteFile(filepath.Join(out, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
