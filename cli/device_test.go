package cli

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/model/cuda"
)

// TestSFTThenEvalOnTheDevicePath: with model.device set, `swetui sft`
// trains on the device engine and `swetui eval` samples there, through the
// one opener run uses too. The engine runs on its CPU kernels here (the
// same orchestration a GPU runs): the loss falls, the checkpoint written
// from the device's weights loads, and eval scores its replies.
func TestSFTThenEvalOnTheDevicePath(t *testing.T) {
	saved := openDevice
	openDevice = func(context.Context, config.Config) (cuda.Device, error) { return cuda.NewCPU(), nil }
	t.Cleanup(func() { openDevice = saved })
	out := t.TempDir()
	common := []string{"run.out_dir=" + out, "model.device=cuda", "data.mini_tasks=20", "data.train_limit=1", "model.layers=1",
		"model.d_model=32", "model.heads=2", "model.kv_heads=1", "model.d_ff=64", "model.vocab_size=400", "sample.max_new_tokens=160"}
	code, stdout, stderr := runCLI(t, append([]string{"sft", "sft.steps=30", "sft.lr=2e-2", "sft.synthetic_per_task=0",
		"sft.batch_size=1", "sft.heldout_every=0"}, common...)...)
	if code != ExitOK {
		t.Fatalf("sft: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "trains on the device engine on its CPU kernels") {
		t.Errorf("sft does not say it trains on the device:\n%s", stderr)
	}
	m := regexp.MustCompile(`loss: 1:(\d+\.\d+) .* 30:(\d+\.\d+)`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no loss curve:\n%s", stdout)
	}
	first, _ := strconv.ParseFloat(m[1], 64)
	last, _ := strconv.ParseFloat(m[2], 64)
	t.Logf("warm start on the device engine: loss %.3f -> %.3f", first, last)
	if last > first/2 {
		t.Errorf("loss %v -> %v on the device path: it did not learn", first, last)
	}
	preds := filepath.Join(out, "preds.jsonl")
	code, stdout, stderr = runCLI(t, append([]string{"eval", "--ckpt", filepath.Join(out, "sft"), "--phase", "syntax", "--samples", "2",
		"--split", "train", "--out", preds}, common...)...)
	if code != ExitOK {
		t.Fatalf("eval: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "eval: sampling on the device engine on its CPU kernels") || !strings.Contains(stdout, "syntax-valid") {
		t.Errorf("eval on the device:\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
	if b, err := os.ReadFile(preds); err != nil || !strings.Contains(string(b), "mini__") {
		t.Errorf("predictions: %v\n%s", err, b)
	}
}
