package policy_test

import (
	"context"
	"testing"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/model/cuda"
	"github.com/swetui/swetui/policy"
	"github.com/swetui/swetui/policy/policytest"
	"github.com/swetui/swetui/train"
)

// onDevice is p on the device engine's CPU kernels, with a reference that
// is a copy of its weights.
func onDevice(t *testing.T, p *policy.Model) *policy.Device {
	t.Helper()
	dev := cuda.NewCPU()
	o := cuda.Options{Act: cuda.F32}
	cp, err := cuda.NewPolicy(dev, p.Model, o, p.Optim, p.Schedule, p.GradClip, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := cuda.NewReference(dev, p.Model, o, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ref.Engine.Close(); cp.Close(); dev.Close() })
	return &policy.Device{P: cp, Host: p.Model, Ref: &policy.DeviceReference{R: ref}}
}

// param reads parameter i's slot s from e.
func param(t *testing.T, e *cuda.Engine, m *model.Model, i int, s cuda.Slot) []float32 {
	t.Helper()
	dst := make([]float32, len(m.Params[i].W))
	if err := e.ReadParam(i, s, dst); err != nil {
		t.Fatal(err)
	}
	return dst
}

// A stage (the warm start) trains on the device with its own optimiser and
// schedule; Restart then gives the policy its own optimiser back with zero
// moments and makes the reference a copy of the trained weights, all on the
// device: the host copy of the weights is never read or written.
func TestDeviceStageKeepsTheWeightsOnTheDevice(t *testing.T) {
	p, tok := policytest.Tiny(t, 3, 1e-2)
	d := onDevice(t, p)
	host := p.Model.Clone() // what the host holds throughout
	own := d.P.Optim
	oc := config.Default().Optim
	oc.LR, oc.Warmup = 5e-2, 0
	stageOpt := model.NewAdamW(oc, p.Model.NumParams())
	stageSched, err := model.NewSchedule(oc, 10)
	if err != nil {
		t.Fatal(err)
	}
	end, err := d.BeginStage(nil, stageOpt, stageSched)
	if err != nil {
		t.Fatal(err)
	}
	if d.P.Optim != stageOpt {
		t.Fatal("the stage does not train with its own optimiser")
	}
	seqs := []train.Sequence{{Prompt: tok.Encode("fix the"), Completion: tok.Encode(" bug in add")}}
	cot := [][]float64{make([]float64, len(seqs[0].Completion))}
	for i := range cot[0] {
		cot[0][i] = -1
	}
	for range 3 {
		if _, _, err := d.Backward(context.Background(), seqs, cot); err != nil {
			t.Fatal(err)
		}
		d.Step()
	}
	if stageOpt.Step != 3 || own.Step != 0 {
		t.Fatalf("steps: stage %d, own %d; want 3 and 0", stageOpt.Step, own.Step)
	}
	end()
	if d.P.Optim != own {
		t.Fatal("end does not give the policy its own optimiser back")
	}
	if err := d.Restart(); err != nil {
		t.Fatal(err)
	}
	moved := false
	for i := range p.Model.Params {
		w := param(t, d.P.Engine, p.Model, i, cuda.Weights)
		r := param(t, d.Ref.R.Engine, p.Model, i, cuda.Weights)
		h := host.Params[i].W
		for j := range w {
			if w[j] != r[j] {
				t.Fatalf("param %d[%d]: reference %v, policy %v: the reference is not the trained weights", i, j, r[j], w[j])
			}
			moved = moved || w[j] != h[j]
		}
		for _, s := range []cuda.Slot{cuda.Moment1, cuda.Moment2} {
			for j, v := range param(t, d.P.Engine, p.Model, i, s) {
				if v != 0 {
					t.Fatalf("param %d slot %d[%d] = %v after Restart, want fresh moments", i, s, j, v)
				}
			}
		}
	}
	if !moved {
		t.Fatal("the stage's steps did not change the weights on the device")
	}
	for i, prm := range p.Model.Params {
		h := host.Params[i].W
		for j, v := range prm.W {
			if v != h[j] {
				t.Fatalf("host param %d[%d] changed: the weights travelled back to the host", i, j)
			}
		}
	}
}
