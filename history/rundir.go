package history

import (
	"fmt"
	"path/filepath"
)

// RunDir is a run's folder (run.out_dir): the one place that names what
// it holds. Other packages ask it for a path; none spells one.
type RunDir string

// Sub-folders and files of a run's folder beside the history's own
// (MetricsFile, RolloutsFile, EventsFile, TensorBoardDir).
const (
	CheckpointsDir = "checkpoints"    // GRPO checkpoints, step-00000025/ each
	SFTDir         = "sft"            // the finished warm start's checkpoint
	TokenizerFile  = "tokenizer.json" // the tokenizer swetui trained for the run
	ExportsDir     = "exports"        // what `swetui view` exports
	VerifierDir    = "verifier"       // the verifiers a run retrained (reward.verifier_refresh_steps)
)

func (d RunDir) path(name string) string { return filepath.Join(string(d), name) }

// Checkpoints is the folder of the GRPO checkpoints.
func (d RunDir) Checkpoints() string { return d.path(CheckpointsDir) }

// SFT is the finished warm start's checkpoint folder.
func (d RunDir) SFT() string { return d.path(SFTDir) }

// PartialOf is the folder an interrupted warm start writing to sftDir
// keeps its last state in (written atomically): <sftDir>-partial.
func PartialOf(sftDir string) string { return sftDir + "-partial" }

// Tokenizer is the run's own tokenizer file.
func (d RunDir) Tokenizer() string { return d.path(TokenizerFile) }

// Exports is the folder `swetui view` writes patches and selections to.
func (d RunDir) Exports() string { return d.path(ExportsDir) }

// Verifier is where a run's refreshed verifier of step lives
// (reward.verifier_refresh_steps): verifier/step-NNNNNNNN.
func (d RunDir) Verifier(step int) string {
	return filepath.Join(d.path(VerifierDir), fmt.Sprintf("step-%08d", step))
}

// Metrics, Rollouts and Events are the history's files.
func (d RunDir) Metrics() string  { return d.path(MetricsFile) }
func (d RunDir) Rollouts() string { return d.path(RolloutsFile) }
func (d RunDir) Events() string   { return d.path(EventsFile) }
