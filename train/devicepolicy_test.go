package train

import (
	"testing"

	"github.com/swetui/swetui/model/cuda"
)

// TestGRPOOnTheDevicePolicyLearns runs the trainer on the device backend's
// CPU implementation (the same orchestration a GPU runs): GRPO raises the
// rewarded share of "a", and its checkpoint loads into the CPU policy.
func TestGRPOOnTheDevicePolicyLearns(t *testing.T) {
	cfg := shareOfAConfig(t)
	host, tok := tinyModelPolicy(t, 3, 3e-2)
	dev := cuda.NewCPU()
	p, err := cuda.NewPolicy(dev, host.Model, cuda.F32, host.Optim, host.Schedule, host.GradClip, host.stop, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Temp = 1
	r, err := cuda.NewReference(dev, host.Model, cuda.F32, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref := &DeviceReference{R: r}
	pol := &DevicePolicy{P: p, Host: host.Model.Clone(), Tokenizer: tok, Ref: ref}
	learnShareOfA(t, cfg, pol, ref, pol, tok)
	q := reloaded(t, cfg.Run.OutDir)
	if q.Version() != p.Version() {
		t.Fatalf("checkpoint version %d, device policy %d", q.Version(), p.Version())
	}
	onDevice := host.Model.Clone()
	if err := p.Sync(onDevice); err != nil {
		t.Fatal(err)
	}
	for i, w := range onDevice.Weights() {
		if q.Model.Weights()[i] != w {
			t.Fatalf("weight %d: checkpoint %v, device %v", i, q.Model.Weights()[i], w)
		}
	}
}
