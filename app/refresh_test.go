package app

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/history"
	"github.com/swetui/swetui/model/cuda"
	"github.com/swetui/swetui/task"
)

// The verifier is retrained every `every` steps in the background: a step
// never waits (the tap returns while the training runs), a refresh under
// way makes the next step's wait its turn, the trained one takes the
// gate's place, and a failed one leaves the gate its verifier, said.
func TestVerifierRefresh(t *testing.T) {
	gate := NewGate(&phaseGrader{}, fixedVerifier(0.1), gateConfig(0, 1), 1, nil)
	release := make(chan struct{})
	var mu sync.Mutex
	var trained []int
	var said []string
	r := &refresher{every: 2, gate: gate, ctx: context.Background(),
		train: func(_ context.Context, step int) (PatchVerifier, string, error) {
			mu.Lock()
			trained = append(trained, step)
			mu.Unlock()
			<-release
			if step == 6 {
				return nil, "", errors.New("no docker-phase verdict yet")
			}
			return fixedVerifier(0.9), "fine", nil
		},
		say: func(_ event.Level, s string) { mu.Lock(); said = append(said, s); mu.Unlock() }}
	seen := &stepRecorder{}
	tap := stepTap{Publisher: seen, stepEnded: r.stepEnded}
	tap.Publish(event.StepFinished{Step: 1})
	tap.Publish(event.StepFinished{Step: 2}) // starts a refresh, and returns
	tap.Publish(event.StepFinished{Step: 4}) // one is under way: not another
	if len(seen.steps) != 3 {
		t.Fatalf("the tap passed on %v", seen.steps)
	}
	close(release)
	r.close()
	vs, _ := gate.Score(context.Background(), &task.Instance{InstanceID: "a__x-1"}, []string{"ok-fix"}, config.PhaseDocker)
	if vs[0].Gate != "" || !vs[0].Resolved {
		t.Errorf("after the refresh the gate still spares: %+v", vs[0])
	}
	tap.Publish(event.StepFinished{Step: 6})
	r.close()
	mu.Lock()
	defer mu.Unlock()
	if len(trained) != 2 || trained[0] != 2 || trained[1] != 6 {
		t.Errorf("refreshes at %v, want at steps 2 and 6", trained)
	}
	if len(said) != 2 || !strings.Contains(said[0], "refreshed") || !strings.Contains(said[1], "keeps the verifier it has") {
		t.Errorf("said %q", said)
	}
}

// stepRecorder keeps the steps it is told of.
type stepRecorder struct{ steps []int }

func (s *stepRecorder) Publish(ev event.Event) {
	if sf, ok := ev.(event.StepFinished); ok {
		s.steps = append(s.steps, sf.Step)
	}
}

// A run on a GPU retrains its verifier on that GPU (here the CUDA
// emulator's), yielding it: while the run's work holds the GPU the
// refresh waits; once the GPU is idle it trains, and its verifier.json
// names the device.
func TestVerifierRefreshOnTheEmulatedGPU(t *testing.T) {
	libs, err := filepath.Abs(filepath.Join("..", "build", "cudaemu"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(libs, "libcuda.so.1")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the CUDA emulator is not built (%v): make cuda-emu (make test builds it)", err)
		}
		t.Skip("the CUDA emulator is not built: make cuda-emu (make test builds it)")
	}
	if testing.Short() {
		t.Skip("a verifier's training on the emulated GPU")
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // the compiled kernels' cache
	ctx := context.Background()
	cfg := config.Default()
	cfg.Model.Device, cfg.Model.CUDALibs = "cuda:0", []string{libs}
	cfg.Reward.Verifier, err = filepath.Abs(filepath.Join("..", "warmstart", "shipped"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.SFT.BatchSize, cfg.Run.OutDir = 1, t.TempDir()
	insts, err := task.Load(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Each task's gold patch resolved, an empty one not: both labels on
	// both sides of the split.
	var lines []byte
	for _, in := range insts[:12] {
		for _, v := range []event.Verdict{
			{InstanceID: in.InstanceID, Phase: config.PhaseDocker, Patch: in.Patch, Applied: true, Resolved: true, Reward: 1},
			{InstanceID: in.InstanceID, Phase: config.PhaseDocker},
		} {
			line, _ := json.Marshal(event.CompletionScored{Verdict: v})
			lines = append(append(lines, line...), '\n')
		}
	}
	if err := os.WriteFile(filepath.Join(cfg.Run.OutDir, history.RolloutsFile), lines, 0o644); err != nil {
		t.Fatal(err)
	}

	// The run's own work on the GPU, held.
	run, err := cuda.OpenCUDA(ctx, 0, &cuda.Loader{ConfigDirs: []string{libs}})
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	release, held := make(chan struct{}), make(chan struct{})
	go run.Do(func() error { close(held); <-release; return nil })
	<-held
	type result struct {
		v    PatchVerifier
		what string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		v, what, err := trainRefresh(cfg, 2)(ctx, 4)
		done <- result{v, what, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("the refresh ended while the run held the GPU: %+v", r)
	case <-time.After(2 * time.Second):
	}
	close(release)
	var r result
	select {
	case r = <-done:
	case <-time.After(5 * time.Minute):
		t.Fatal("the refresh did not end once the GPU was idle")
	}
	if r.err != nil && !strings.Contains(r.err.Error(), "no better than chance") {
		t.Fatalf("refresh: %v", r.err)
	}
	if c, ok := r.v.(interface{ Close() }); ok {
		c.Close()
	}
	b, err := os.ReadFile(filepath.Join(history.RunDir(cfg.Run.OutDir).Verifier(4), VerifierFile))
	if err != nil {
		t.Fatal(err)
	}
	var rep VerifierReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.Device, "cuda:0 cudaemu") || rep.Examples != 24 || rep.Steps != 2 {
		t.Errorf("verifier.json: trained on %q, %d examples, %d steps", rep.Device, rep.Examples, rep.Steps)
	}
	t.Logf("refreshed on %s: %s %v", rep.Device, r.what, r.err)
}

func TestVerifierDevice(t *testing.T) {
	for _, tt := range []struct{ run, want string }{
		{"cpu", "cpu"}, {"cuda", "cuda:0"}, {"cuda:3", "cuda:3"}, {"cuda:2,5", "cuda:2"}, {"cuda:all", "cuda:0"}, {"tpu", "cpu"},
	} {
		if got := verifierDevice(tt.run); got != tt.want {
			t.Errorf("verifierDevice(%q) = %q, want %q", tt.run, got, tt.want)
		}
	}
}
