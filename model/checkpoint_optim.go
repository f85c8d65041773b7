package model

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// write streams the optimiser's moments, step and hyper-parameters as
// safetensors (a checkpoint's state/optimizer.safetensors).
func (o *AdamW) write(w io.Writer) error {
	moments := []stOut{namedTensor{"exp_avg", []int{len(o.m)}, o.m}.out(), namedTensor{"exp_avg_sq", []int{len(o.v)}, o.v}.out()}
	return writeSafetensors(w, F32, moments, o.meta())
}

func (o *AdamW) meta() map[string]string {
	return map[string]string{"step": strconv.Itoa(o.Step), "beta1": fmtF(o.Beta1), "beta2": fmtF(o.Beta2),
		"eps": fmtF(o.Eps), "weight_decay": fmtF(o.WeightDecay)}
}

func fmtF(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// writeStreamed is write for moments read a parameter at a time (a
// device's) over layout's parameters.
func (o *AdamW) writeStreamed(w io.Writer, layout *Model, read func(i, which int, dst []float32) error) error {
	var buf []float32
	moment := func(which int) func(emit func([]float32) error) error {
		return func(emit func([]float32) error) error {
			for i := range layout.Params {
				n := prod(layout.Params[i].Shape)
				buf = slices.Grow(buf[:0], n)[:n]
				if err := read(i, which, buf); err != nil {
					return fmt.Errorf("optimizer %s: %w", layout.Params[i].Name, err)
				}
				if err := emit(buf); err != nil {
					return err
				}
			}
			return nil
		}
	}
	n := []int{layout.NumParams()}
	return writeSafetensors(w, F32, []stOut{{"exp_avg", n, moment(1)}, {"exp_avg_sq", n, moment(2)}}, o.meta())
}

// readOptim reads what AdamW.write wrote for n weights; nil when the file
// does not exist.
func readOptim(path string, n int) (*AdamW, error) {
	ots, meta, err := readSafetensors(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	name := filepath.Base(path)
	o, err := optimFromMeta(name, meta)
	if err != nil {
		return nil, err
	}
	o.m, o.v = ots["exp_avg"].data, ots["exp_avg_sq"].data
	if nonFinite(o.m) >= 0 || nonFinite(o.v) >= 0 {
		return nil, fmt.Errorf("%s: the AdamW moments are not finite", name)
	}
	if len(o.m) != n || len(o.v) != n {
		return nil, fmt.Errorf("%s: optimizer state has %d/%d values for %d weights", name, len(o.m), len(o.v), n)
	}
	return o, nil
}

// optimFromMeta is an optimiser's step and hyper-parameters from its
// file's metadata (name for errors).
func optimFromMeta(name string, meta map[string]string) (*AdamW, error) {
	o := &AdamW{}
	var err error
	if o.Step, err = strconv.Atoi(meta["step"]); err != nil {
		return nil, fmt.Errorf("%s: step %q: %w", name, meta["step"], err)
	}
	for _, f := range []struct {
		key string
		dst *float64
	}{{"beta1", &o.Beta1}, {"beta2", &o.Beta2}, {"eps", &o.Eps}, {"weight_decay", &o.WeightDecay}} {
		if *f.dst, err = strconv.ParseFloat(meta[f.key], 64); err != nil {
			return nil, fmt.Errorf("%s: %s %q: %w", name, f.key, meta[f.key], err)
		}
	}
	return o, nil
}

// writeExtra writes a checkpoint's opaque trainer files under extra/.
func writeExtra(tmp string, extra map[string][]byte) error {
	for name, data := range extra {
		if err := writeFile(tmp, "extra/"+name, bytesOf(data)); err != nil {
			return err
		}
	}
	return nil
}

// readExtra reads dir/extra/ (none: an empty map).
func readExtra(dir string) (map[string][]byte, error) {
	extra := map[string][]byte{}
	entries, err := os.ReadDir(filepath.Join(dir, "extra"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	for _, e := range entries {
		if e.Type().IsRegular() {
			if extra[e.Name()], err = os.ReadFile(filepath.Join(dir, "extra", e.Name())); err != nil {
				return nil, err
			}
		}
	}
	return extra, nil
}
