package train

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/history"
	"github.com/swetui/swetui/internal/durable"
)

// Store saves and restores the policy's side of a checkpoint (weights,
// optimiser state, reference, tokenizer, model config, sampler RNG) into a
// folder the trainer gives it.
type Store interface {
	Save(ctx context.Context, dir string) error
	Load(ctx context.Context, dir string) error
}

// Checkpoint layout: <run.out_dir>/checkpoints/step-00000025/ holding the
// Store's files, config.toml and, written last, state.json. A checkpoint is
// built in a temporary folder beside it and renamed into place, so a crash or
// kill -9 leaves either the old set or the new one, never a torn folder.
const (
	stateFile  = "state.json"
	configFile = "config.toml"
)

func (t *Trainer) checkpointRoot() string { return history.RunDir(t.cfg.Run.OutDir).Checkpoints() }

// save writes a checkpoint of the current step. When the disk is full it
// removes the older checkpoints (all but the newest), says so, and tries
// once more: a run that can still save its newest state beats one that
// keeps old ones and can save nothing.
func (t *Trainer) save(ctx context.Context) error {
	err := t.saveOnce(ctx)
	if err == nil || !errors.Is(err, syscall.ENOSPC) {
		return err
	}
	steps, lerr := listCheckpoints(t.checkpointRoot())
	if lerr != nil || len(steps) <= 1 {
		return err
	}
	for _, old := range steps[:len(steps)-1] {
		os.RemoveAll(old)
	}
	t.warn(event.Warn, fmt.Sprintf("disk full while saving step %d: removed %d older checkpoints to make room, kept %s", t.st.Step, len(steps)-1, steps[len(steps)-1]))
	return t.saveOnce(ctx)
}

func (t *Trainer) saveOnce(ctx context.Context) error {
	if t.d.Store == nil {
		return nil
	}
	root := t.checkpointRoot()
	final := filepath.Join(root, fmt.Sprintf("step-%08d", t.st.Step))
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	tmp, err := os.MkdirTemp(root, ".tmp-")
	if err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	defer os.RemoveAll(tmp) // no-op after the rename
	t.model.Lock()          // no update may run while the weights are written
	err = t.d.Store.Save(ctx, tmp)
	t.model.Unlock()
	if err != nil {
		return fmt.Errorf("save checkpoint %s: %w", final, err)
	}
	cfgText, err := config.Marshal(t.cfg)
	if err != nil {
		return err
	}
	state, err := json.MarshalIndent(t.st, "", " ")
	if err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{configFile, cfgText}, {stateFile, state}} {
		if err := durable.WriteFile(filepath.Join(tmp, f.name), f.data); err != nil {
			return fmt.Errorf("save checkpoint %s: %w", final, err)
		}
	}
	if err := durable.SyncDir(tmp); err != nil {
		return fmt.Errorf("save checkpoint %s: %w", final, err)
	}
	if err := durable.ReplaceDir(tmp, final); err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	t.savedStep = t.st.Step
	t.publish(event.CheckpointSaved{Step: t.st.Step, Path: final})
	return t.prune()
}

// prune keeps the newest run.keep_last checkpoints.
func (t *Trainer) prune() error {
	steps, err := listCheckpoints(t.checkpointRoot())
	if err != nil {
		return err
	}
	for len(steps) > t.cfg.Run.KeepLast {
		if err := os.RemoveAll(steps[0]); err != nil {
			return fmt.Errorf("prune checkpoints: %w", err)
		}
		steps = steps[1:]
	}
	return nil
}

// listCheckpoints returns the complete checkpoints under root, oldest first.
func listCheckpoints(root string) ([]string, error) {
	entries, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, "step-") || strings.Contains(name, ".old") {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, name, stateFile)); err != nil {
			continue
		}
		out = append(out, filepath.Join(root, name))
	}
	sort.Strings(out) // zero-padded step numbers sort in order
	return out, nil
}

// LatestCheckpoint returns the newest complete checkpoint of a run folder, or "".
func LatestCheckpoint(outDir string) (string, error) {
	steps, err := listCheckpoints(history.RunDir(outDir).Checkpoints())
	if err != nil || len(steps) == 0 {
		return "", err
	}
	return steps[len(steps)-1], nil
}

// resume restores a checkpoint as run.resume says and reports whether it
// did. With auto, a damaged newest checkpoint (a file unreadable, torn or
// missing) gives way to the newest intact one, with a warning naming what
// was wrong; a checkpoint that does not match the config is an error.
func (t *Trainer) resume(ctx context.Context) (bool, error) {
	if t.d.Store == nil {
		return false, nil
	}
	switch dir := t.cfg.Run.Resume; dir {
	case "never":
		return false, nil
	case "auto":
		steps, err := listCheckpoints(t.checkpointRoot())
		if err != nil || len(steps) == 0 {
			return false, err
		}
		for i := len(steps) - 1; i >= 0; i-- {
			err := t.restore(ctx, steps[i])
			var damaged *damagedError
			switch {
			case err == nil:
				return true, nil
			case !errors.As(err, &damaged):
				return false, err
			case i > 0:
				t.warn(event.Warn, fmt.Sprintf("checkpoint %s is damaged (%v); resuming from %s instead", steps[i], damaged.err, steps[i-1]))
			default:
				return false, fmt.Errorf("resume: every checkpoint is damaged; the oldest: %w (set run.resume=never to start afresh)", err)
			}
		}
		return false, nil
	default:
		return true, t.restore(ctx, dir)
	}
}

// damagedError marks a checkpoint that cannot be read as written (as
// opposed to one that does not fit the config).
type damagedError struct {
	dir string
	err error
}

func (e *damagedError) Error() string { return fmt.Sprintf("checkpoint %s: %v", e.dir, e.err) }
func (e *damagedError) Unwrap() error { return e.err }

// restore loads the checkpoint in dir into the trainer and the policy.
func (t *Trainer) restore(ctx context.Context, dir string) error {
	if err := CheckCompatible(dir, t.cfg); err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return &damagedError{dir, err}
	}
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		return &damagedError{dir, fmt.Errorf("%s: %w", stateFile, err)}
	}
	if err := t.d.Store.Load(ctx, dir); err != nil {
		return &damagedError{dir, err}
	}
	cur := t.st.Curriculum
	t.st = st
	if t.st.Pool == nil { // a checkpoint from before the pool
		t.st.Pool = &TaskPool{}
	}
	// Thresholds come from the current config; the phase and window from the checkpoint.
	t.st.Curriculum.Window, t.st.Curriculum.SyntaxToApply = cur.Window, cur.SyntaxToApply
	t.st.Curriculum.ApplyToDocker, t.st.Curriculum.StepBackBelow = cur.ApplyToDocker, cur.StepBackBelow
	t.st.Curriculum.DockerOK = cur.DockerOK
	t.warn(event.Info, fmt.Sprintf("resumed from %s at step %d (phase %s)", dir, st.Step, st.Curriculum.Phase))
	return nil
}

// CheckCompatible refuses a checkpoint whose model or data order differs
// from cfg, naming the first field that differs.
func CheckCompatible(dir string, cfg config.Config) error {
	path := filepath.Join(dir, configFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return &damagedError{dir, err}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		// Empty, it would read as the defaults and be compared as such.
		return &damagedError{dir, fmt.Errorf("%s is empty", path)}
	}
	saved, err := config.Load(path, data, nil)
	if err != nil {
		return &damagedError{dir, err}
	}
	type field struct {
		key         string
		saved, here any
	}
	fields := []field{{"run.seed", saved.Run.Seed, cfg.Run.Seed}, {"data.source", saved.Data.Source, cfg.Data.Source}}
	sv, hv := reflect.ValueOf(saved.Model), reflect.ValueOf(cfg.Model)
	for i := 0; i < sv.NumField(); i++ {
		tag, _, _ := strings.Cut(sv.Type().Field(i).Tag.Get("toml"), ",")
		switch tag {
		case "init_ckpt", "tokenizer", "device", "cuda_libs":
			continue // where the weights came from or run, not what they are
		}
		fields = append(fields, field{"model." + tag, sv.Field(i).Interface(), hv.Field(i).Interface()})
	}
	if saved.GRPO.KLCoef == 0 && cfg.GRPO.KLCoef > 0 {
		return fmt.Errorf("checkpoint %s does not match this config: its %s says grpo.kl_coef = 0, so it holds no reference for this run's KL term (grpo.kl_coef = %v): resume with grpo.kl_coef=0, or set run.resume=never",
			dir, configFile, cfg.GRPO.KLCoef)
	}
	for _, f := range fields {
		if !reflect.DeepEqual(f.saved, f.here) {
			return fmt.Errorf("checkpoint %s does not match this config: its %s says %s = %v, this run has %v (set run.resume=never to start afresh)",
				dir, configFile, f.key, f.saved, f.here)
		}
	}
	return nil
}
