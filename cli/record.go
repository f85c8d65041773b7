package cli

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/swetui/swetui/history"
)

// printRunSummary tells, once the console is gone, why the run stopped, where
// it stands, and the commands that resume it and show its curves.
func printRunSummary(w io.Writer, s history.RunSummary, out, resume string) {
	if !s.HaveStop {
		return
	}
	fmt.Fprintln(w)
	why := s.Stopped.Reason
	if s.Stopped.Err != nil {
		why += ": " + s.Stopped.Err.Error()
	}
	fmt.Fprintf(w, "swetui: run stopped (%s)\n", why)
	if s.Stage == "sft" || s.Stopped.Step == 0 && s.SFTStep > 0 && s.SFTStep < s.SFTSteps {
		fmt.Fprintf(w, "  warm start at step %d of %d", s.SFTStep, s.SFTSteps)
		if s.SFTStep < s.SFTSteps {
			fmt.Fprintf(w, " (saved in %s; the next run continues it)", history.PartialOf(history.RunDir(out).SFT()))
		}
		fmt.Fprintln(w)
	} else {
		fmt.Fprintf(w, "  last GRPO step %d\n", s.Stopped.Step)
	}
	if s.Checkpoint != "" {
		fmt.Fprintf(w, "  checkpoint   %s\n", s.Checkpoint)
	}
	fmt.Fprintf(w, "  resume       %s\n", resume)
	fmt.Fprintf(w, "  curves       tensorboard --logdir %s\n", filepath.Join(out, history.TensorBoardDir))
	run := history.RunDir(out)
	fmt.Fprintf(w, "  history      %s, %s, %s\n", run.Metrics(), run.Rollouts(), run.Events())
	fmt.Fprintf(w, "  browse       swetui view %s\n", out)
}
