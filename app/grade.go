package app

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/reward"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/task"
)

// GradeReport is what `swetui grade` prints.
type GradeReport struct {
	InstanceID  string            `json:"instance_id"`
	Parser      string            `json:"parser"`
	Frame       string            `json:"frame"` // swetui, harness or whole-log
	Statuses    event.StatusMap   `json:"statuses"`
	Resolved    bool              `json:"resolved"`
	TestsStatus event.TestsStatus `json:"tests_status"`
	Applied     bool              `json:"applied"`
	ApplyMethod string            `json:"apply_method,omitempty"`
	ExitStatus  *int              `json:"exit_status,omitempty"`
	Complete    bool              `json:"complete"`
	Forged      bool              `json:"forged_markers,omitempty"`
	F2PPassed   int               `json:"f2p_passed"`
	F2PTotal    int               `json:"f2p_total"`
	P2PPassed   int               `json:"p2p_passed"`
	P2PBroken   int               `json:"p2p_broken"`
	P2PTotal    int               `json:"p2p_total"`
	Weights     reward.Weights    `json:"weights"`
	Reward      float64           `json:"reward"`
}

// ReadInstance reads one instance from a JSON object or the first line of a
// JSONL file, and fills its execution fields from the spec table.
func ReadInstance(path string) (task.Instance, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return task.Instance{}, fmt.Errorf("read instance: %w", err)
	}
	data = bytes.TrimSpace(bytes.TrimPrefix(data, task.BOM))
	var in task.Instance
	if err := json.Unmarshal(data, &in); err != nil {
		// A JSONL file: take its first line.
		line, _, _ := bytes.Cut(data, []byte("\n"))
		if err2 := json.Unmarshal(line, &in); err2 != nil {
			return in, fmt.Errorf("read instance %s: line 1: %w", path, err2)
		}
	}
	if in.InstanceID == "" {
		return in, fmt.Errorf("read instance %s: no instance_id", path)
	}
	in.ApplySpec()
	return in, nil
}

// Newer harness versions print these around the tests (with set -x, as
// "+ : '>>>>> Start Test Output'"); v2.0.x printed none.
const (
	harnessStart = ">>>>> Start Test Output"
	harnessEnd   = ">>>>> End Test Output"
)

// GradeLog grades one log: a swetui eval log is read along its protocol
// lines (the nonce of its last start marker), a harness log between the
// harness's markers, anything else whole.
func GradeLog(in *task.Instance, log, parserName string, w reward.Weights) (GradeReport, error) {
	if parserName == "" {
		n, err := reward.ParserNameOf(in)
		if err != nil {
			return GradeReport{}, fmt.Errorf("%v (name one with --parser)", err)
		}
		parserName = n
	}
	parser, err := reward.ParserFor(parserName)
	if err != nil {
		return GradeReport{}, err
	}
	rep := GradeReport{InstanceID: in.InstanceID, Parser: parserName, Weights: w, Applied: true, Complete: true}
	text := log
	nonce, isSwetui := sandbox.LogNonce(log)
	switch {
	case isSwetui:
		o := sandbox.ParseOutput(log, nonce)
		rep.Frame, rep.ApplyMethod = "swetui", o.ApplyMethod
		rep.Applied = o.Applied
		rep.Complete = o.Complete
		rep.Forged = o.Forged
		if o.Complete {
			st := o.ExitStatus
			rep.ExitStatus = &st
			text = o.TestLog
		} else {
			text = "" // an unfinished run's output is not graded
		}
	case strings.Contains(log, harnessStart):
		rep.Frame = "harness"
		g, _, err := reward.GradeLog(log, reward.Frame{Start: harnessStart, End: harnessEnd}, parser, in.FailToPass, in.PassToPass)
		if err != nil {
			rep.Complete, text = false, ""
			rep.Applied = !strings.Contains(log, ">>>>> Patch Apply Failed")
		} else {
			text = ""
			rep.fill(g)
			return rep.finish(w), nil
		}
	default:
		rep.Frame = "whole-log"
	}
	rep.fill(reward.GradeStatuses(parser(text), in.FailToPass, in.PassToPass))
	return rep.finish(w), nil
}

func (r *GradeReport) fill(g reward.Grade) {
	r.Statuses, r.TestsStatus = g.Statuses, g.TestsStatus
	r.Resolved = g.Resolved && r.Complete && r.Applied
	r.F2PPassed, r.F2PTotal = g.F2PPassed, g.F2PTotal
	r.P2PPassed, r.P2PBroken, r.P2PTotal = g.P2PPassed, g.P2PBroken, g.P2PTotal
}

func (r GradeReport) finish(w reward.Weights) GradeReport {
	res := event.Verdict{Phase: config.PhaseDocker, Applied: r.Applied, Resolved: r.Resolved,
		F2PPassed: r.F2PPassed, F2PTotal: r.F2PTotal, P2PPassed: r.P2PPassed, P2PBroken: r.P2PBroken, P2PTotal: r.P2PTotal}
	r.Reward = w.Compose(&res)
	if r.Statuses == nil {
		r.Statuses = event.StatusMap{}
	}
	return r
}

// scanLines is bufio.Scanner with room for long JSONL lines.
func scanLines(r *bufio.Reader) *bufio.Scanner {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 256<<20)
	return sc
}
