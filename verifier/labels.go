package verifier

import (
	"bufio"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/history"
)

// Example is one labelled candidate: a docker-phase verdict of a run.
type Example struct {
	InstanceID string
	// Patch is the graded diff; Summary, for a trajectory, says how it
	// went (its end and commands), "" for a single reply.
	Patch, Summary string
	Resolved       bool // the label
	Applied        bool
	// Where is its line, file:line, for errors and for reading it again.
	Where string
}

// maxSummaryCommands bounds the commands a trajectory's summary lists.
const maxSummaryCommands = 12

// Labels reads the docker-phase verdicts of the run in dir (its
// rollouts.jsonl): each candidate a container graded (not an
// infrastructure failure, not one the verifier's gate spared) is an
// example, labelled resolved or not. A last line without its newline is
// one a run still training is writing, left for later. A folder without
// any is an error naming the file.
func Labels(dir string) ([]Example, error) {
	path := filepath.Join(dir, history.RolloutsFile)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("verifier labels: %w", err)
	}
	defer f.Close()
	var out []Example
	r := bufio.NewReaderSize(f, 1<<20)
	lines := 0
	for {
		line, err := r.ReadBytes('\n')
		if err == io.EOF {
			break // a last line without its newline is being written (a run still training): not read yet
		}
		if err != nil {
			return nil, fmt.Errorf("verifier labels: %s: %w", path, err)
		}
		lines++
		var c event.CompletionScored
		if err := json.Unmarshal(line, &c); err != nil {
			return nil, fmt.Errorf("verifier labels: %s:%d: %w", path, lines, err)
		}
		v := c.Verdict
		if v.Phase != "docker" || v.Infra || v.Gate == event.GateSpared { // no container graded these
			continue
		}
		out = append(out, Example{InstanceID: v.InstanceID, Patch: v.Patch, Summary: Summary(c.Agent), Resolved: v.Resolved,
			Applied: v.Applied, Where: fmt.Sprintf("%s:%d", path, lines)})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("verifier labels: %s holds no docker-phase verdict (%d lines): the verifier learns from the docker phase's grades", path, lines)
	}
	return out, nil
}

// Summary is what the verifier reads of a trajectory beside its final
// diff: how it ended, its turns and its commands (the first
// maxSummaryCommands). "" for a single reply (nil).
func Summary(tr *event.Trajectory) string {
	if tr == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "The agent ran %d turns and ended: %s.", len(tr.Turns), tr.End)
	n := 0
	for _, t := range tr.Turns {
		if t.Command == "" {
			continue
		}
		if n == maxSummaryCommands {
			b.WriteString("\n...")
			break
		}
		n++
		cmd, _, _ := strings.Cut(t.Command, "\n")
		fmt.Fprintf(&b, "\n$ %s  (exit %d)", cmd, t.ExitCode)
	}
	return b.String()
}

// HeldOut reports whether a task is held out: a fixed share of the tasks,
// by a hash of the instance id, so that every run's examples of one task
// fall on the same side.
func HeldOut(instanceID string, share float64) bool {
	h := fnv.New64a()
	h.Write([]byte(instanceID))
	return float64(h.Sum64()%10000) < share*10000
}

// Split splits examples by task (HeldOut).
func Split(exs []Example, share float64) (train, heldout []Example) {
	for _, e := range exs {
		if HeldOut(e.InstanceID, share) {
			heldout = append(heldout, e)
		} else {
			train = append(train, e)
		}
	}
	return train, heldout
}

// Balance repeats the rarer label's examples, in order, until both labels
// are as many: the verifier learns both answers alike.
func Balance(exs []Example) []Example {
	var pos, neg []Example
	for _, e := range exs {
		if e.Resolved {
			pos = append(pos, e)
		} else {
			neg = append(neg, e)
		}
	}
	if len(pos) == 0 || len(neg) == 0 {
		return exs
	}
	few, many := pos, neg
	if len(few) > len(many) {
		few, many = many, few
	}
	out := append([]Example(nil), many...)
	for i := 0; i < len(many); i++ {
		out = append(out, few[i%len(few)])
	}
	return out
}
