package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/task"
)

// TestBadInput: each bad input ends in a clean error that names the key,
// file, line or instance, with the usage or failure exit code and no Go
// stack trace; a byte-order mark at the start of a file is skipped.
func TestBadInput(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	tmp := t.TempDir()
	cfg := config.Default()
	cfg.Data.MiniTasks = 3
	suite, err := task.GenerateMiniFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gold := suite.Tasks[0].Instance
	write := func(name, body string) string {
		p := filepath.Join(tmp, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pred, _ := json.Marshal(map[string]any{"instance_id": gold.InstanceID, "model_name_or_path": "m", "model_patch": gold.Patch})
	inst, _ := json.Marshal(gold)
	bomPreds := write("bom-preds.jsonl", "\xef\xbb\xbf"+string(pred)+"\n")
	bomDataset := write("bom-dataset.jsonl", "\xef\xbb\xbf"+string(inst)+"\n")
	bomConfig := write("bom.toml", "\xef\xbb\xbf[run]\nmax_steps = 3\n")
	brokenDataset := write("broken.jsonl", string(inst)+"\n{\"instance_id\": \n")
	nanFile := write("nan.toml", "[optim]\nlr = nan\n")
	tests := []struct {
		name string
		args []string
		code int
		want string // in stderr (or stdout for successes)
	}{
		{"NaN learning rate", []string{"config", "optim.lr=nan"}, ExitUsage, "optim.lr = NaN: must be a finite number"},
		{"infinite SFT learning rate", []string{"sft", "sft.lr=inf"}, ExitUsage, "sft.lr = +Inf: must be a finite number"},
		{"negative infinite temperature", []string{"config", "sample.temperature=-inf"}, ExitUsage, "sample.temperature = -Inf"},
		{"NaN in a config file", []string{"config", "--config", nanFile}, ExitUsage, "optim.lr = NaN"},
		{"NaN reward weight", []string{"score", "--predictions", "gold", "--mode", "syntax", "reward.hack_penalty=nan"}, ExitUsage, "reward.hack_penalty = NaN"},
		{"huge mini suite", []string{"config", "data.mini_tasks=100000000"}, ExitUsage, "data.mini_tasks = 100000000: must be at most 2000"},
		{"negative eval temperature", []string{"eval", "--ckpt", tmp, "--temperature", "-1"}, ExitUsage, "--temperature -1: must be 0 (greedy) or positive"},
		{"NaN eval temperature", []string{"eval", "--ckpt", tmp, "--temperature", "nan"}, ExitUsage, "--temperature NaN: must be a finite number"},
		{"broken dataset line", []string{"score", "--predictions", "gold", "--dataset", brokenDataset, "--mode", "syntax"}, ExitFailure, "broken.jsonl:2"},
		{"BOM in predictions is skipped", []string{"score", "--predictions", bomPreds, "--mode", "syntax", "data.mini_tasks=3",
			"--out", filepath.Join(tmp, "r1.json")}, ExitOK, "1 "},
		{"BOM in a dataset is skipped", []string{"score", "--predictions", "gold", "--dataset", bomDataset, "--mode", "syntax",
			"--out", filepath.Join(tmp, "r2.json")}, ExitOK, "1 "},
		{"BOM in a config file is skipped", []string{"config", "--config", bomConfig}, ExitOK, "max_steps = 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, tt.args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, stdout, stderr)
			}
			where := stderr
			if code == ExitOK {
				where = stdout
			}
			if !strings.Contains(where, tt.want) {
				t.Errorf("output lacks %q:\nstdout: %s\nstderr: %s", tt.want, stdout, stderr)
			}
			if strings.Contains(stderr, "goroutine ") || strings.Contains(stderr, "panic:") {
				t.Errorf("a Go stack trace:\n%s", stderr)
			}
		})
	}
}
