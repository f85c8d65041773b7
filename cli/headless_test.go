package cli

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/swetui/swetui/event"
)

func TestEventLines(t *testing.T) {
	tests := []struct {
		ev   event.Event
		want string
	}{
		{event.StepFinished{Step: 3, Phase: "syntax", Duration: 1500 * time.Millisecond, Metrics: event.Metrics{RewardMean: 0.15, RewardMax: 0.3, SyntaxRate: 0.5, KL: 0.0012, Loss: -0.02, InfraFailures: 1}},
			"[00:01:05] step 3 syntax     reward 0.150 (max 0.30) valid 0.50 applied 0.00 resolved 0.00 kl 0.0012 loss -0.0200 zero-std 0.00 infra 1  1.5s"},
		{event.PhaseChanged{Step: 20, From: "syntax", To: "apply-only", Auto: true, Reason: "syntax-valid rate 0.85 ≥ 0.80 over 20 steps"},
			"[00:01:05] phase syntax -> apply-only at step 20 (auto: syntax-valid rate 0.85 ≥ 0.80 over 20 steps)"},
		{event.CheckpointSaved{Step: 25, Path: "runs/checkpoints/step-00000025"}, "[00:01:05] checkpoint step 25 -> runs/checkpoints/step-00000025"},
		{event.Message{Level: event.Warn, Text: "docker unreachable"}, "[00:01:05] warn: docker unreachable"},
		{event.Stopped{Step: 9, Reason: "error", Err: errors.New("boom")}, "[00:01:05] stopped at step 9: error: boom"},
		{event.StageChanged{Stage: "sft", Progress: 0.33, Detail: "x"}, ""},
		{event.StageChanged{Stage: "sft", Progress: 1, Detail: "loaded runs/sft"}, "[00:01:05] stage sft loaded runs/sft"},
		{event.SFTStep{Step: 33, Steps: 100, Loss: 1.2}, ""},
		{event.SFTStep{Step: 50, Steps: 100, Loss: 1.2, Heldout: 1.5, HeldoutOK: true, Elapsed: 25 * time.Second},
			"[00:01:05] sft step 50/100 loss 1.200 held-out 1.500 (2.00 steps/s, 00:00:25 left)"},
		{event.LogBatch{Lines: []string{"x"}}, ""},
		// What the pool says through an outage (sandbox's TestPoolOutageLeavesNoContainer).
		{event.Message{Level: event.Warn, Text: "docker host unix:///var/run/docker.sock is down (connection refused); its evaluations go to the other hosts, and it is tried again in 30s"},
			"[00:01:05] warn: docker host unix:///var/run/docker.sock is down (connection refused); its evaluations go to the other hosts, and it is tried again in 30s"},
		{event.Message{Level: event.Info, Text: "docker host unix:///var/run/docker.sock is back"}, "[00:01:05] info: docker host unix:///var/run/docker.sock is back"},
	}
	for _, tt := range tests {
		if got := eventLine(tt.ev, 65*time.Second); got != tt.want {
			t.Errorf("%T:\n got %q\nwant %q", tt.ev, got, tt.want)
		}
	}
}

func TestPrintEventsDrainsUntilClosed(t *testing.T) {
	ch := make(chan event.Event, 3)
	ch <- event.Paused{Step: 1}
	ch <- event.Resumed{Step: 1}
	close(ch)
	var buf bytes.Buffer
	printEvents(&buf, ch, time.Now())
	if got := buf.String(); got != "[00:00:00] paused after step 1\n[00:00:00] resumed at step 1\n" {
		t.Fatalf("got %q", got)
	}
}

// TestMessagePrinter: score prints the pool's messages, and only those.
func TestMessagePrinter(t *testing.T) {
	var buf bytes.Buffer
	p := &messagePrinter{w: &buf, start: time.Now()}
	p.Publish(event.Message{Level: event.Warn, Text: "evaluation of x failed for infrastructure reasons (boom): retry 1 of 2 in 1s"})
	p.Publish(event.LogBatch{Lines: []string{"noise"}})
	p.Publish(event.PoolState{})
	if got := buf.String(); got != "[00:00:00] warn: evaluation of x failed for infrastructure reasons (boom): retry 1 of 2 in 1s\n" {
		t.Errorf("printed %q", got)
	}
}

func TestResumeCommandResumes(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--headless", "run.out_dir=runs/a"}, "swetui run --headless run.out_dir=runs/a"},
		{[]string{"--headless", "run.resume=never", "run.seed=2"}, "swetui run --headless run.seed=2 run.resume=auto"},
		{[]string{"run.name=a b"}, "swetui run 'run.name=a b'"},
	} {
		if got := resumeCommand(tt.args); got != tt.want {
			t.Errorf("resumeCommand(%q) = %q, want %q", tt.args, got, tt.want)
		}
	}
}
