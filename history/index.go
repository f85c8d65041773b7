// Package history owns a run's folder: the files a run writes (Sinks:
// metrics.jsonl, rollouts.jsonl, prompts.jsonl and TensorBoard scalars; the
// docker phase's evaluation logs; Cut, where a resumed run's history ends)
// and reading them back for looking at a run (`swetui view`): an index of
// every completion in rollouts.jsonl, kept beside it and extended as the run
// writes more, filters over it, lazy reads of one completion, and the series
// of metrics.jsonl. The trainer calls the writers; events.jsonl is written
// by the command line's recorder under EventsFile.
package history

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/internal/durable"
)

// The files of a run's folder (run.out_dir) that this package writes and
// reads; PromptsFile, EvalLogsDir and the TensorBoard folder beside them.
const (
	MetricsFile    = "metrics.jsonl"  // a line per GRPO step and per warm-start step
	RolloutsFile   = "rollouts.jsonl" // a line per scored completion
	EventsFile     = "events.jsonl"   // what the headless printer says, by step
	IndexFile      = ".rollouts.idx"  // this package's index of RolloutsFile
	TensorBoardDir = "tb"
)

// Outcome bits of an Entry: what a completion was, for filters.
const (
	Valid uint32 = 1 << iota // a well-formed diff
	Applied
	Resolved
	Noop
	Infra
	Truncated
	Flagged // a costly hack flag
	Undone  // a flag the eval's reset undid
	Empty   // no text at all
	// The verifier gate's (reward.verifier): the verifier scored it, the
	// gate spared its container, audited it, and the verifier was sure
	// and the grader decided otherwise (event.Verdict.VerifierDisagrees).
	VerifierScored
	VerifierSpared
	VerifierAudited
	VerifierDisagrees
)

// hackBit is the bit of each hack flag, above the outcome bits.
var hackBit = map[string]uint32{}

// HackNames are the flags an Entry records, in bit order.
var HackNames = []string{"touches_tests", "touches_conftest", "touches_test_config", "deletes_tests",
	"shadows_runner", "reaches_runner", "escapes_repo", "forged_markers"}

func init() {
	for i, h := range HackNames {
		hackBit[h] = 1 << (16 + i)
	}
}

// HackBit is the Entry.Flags bit of a hack flag (0 for an unknown one).
func HackBit(name string) uint32 { return hackBit[name] }

// Phases are the curriculum phases in Entry.Phase order.
var Phases = []string{"syntax", "apply-only", "docker"}

// Ends are the end reasons of agent trajectories (event.TrajectoryEnds)
// in Entry.End order, from 1.
var Ends = func() []string {
	var out []string
	for _, e := range event.TrajectoryEnds {
		out = append(out, string(e))
	}
	return out
}()

// endOther is Entry.End for an end reason not in Ends (a newer swetui's).
const endOther = 255

// Entry is one completion as the index holds it: where its line is and what
// the filters and sorts read, 40 bytes.
type Entry struct {
	Off       int64
	Len       int32
	Step      int32
	Group     int16
	Index     int16
	Reward    float32
	Advantage float32
	Flags     uint32
	Task      uint32 // into Index.Tasks
	Phase     uint8
	// End is an agent trajectory's end reason, Ends[End-1]; 0 for a
	// single-shot completion, which has none. Turns counts its turns
	// (65535 at most).
	End   uint8
	Turns uint16
}

// Has reports whether e has every bit of mask.
func (e *Entry) Has(mask uint32) bool { return e.Flags&mask == mask }

// Agent reports whether e is an agent trajectory.
func (e *Entry) Agent() bool { return e.End != 0 }

// EndName is e's end reason, "" for a single-shot completion.
func (e *Entry) EndName() string {
	switch {
	case e.End == 0:
		return ""
	case int(e.End) <= len(Ends):
		return Ends[e.End-1]
	}
	return "other"
}

// Index is every completion of a run's rollouts.jsonl.
type Index struct {
	Entries []Entry
	Tasks   []string
	taskID  map[string]uint32
	covered int64  // bytes of the file indexed
	tail    []byte // the last bytes indexed, to tell a rewritten file
}

const (
	indexMagic = "SWIDX3\n" // 2: entries hold the agent's end and turns; 3: the verifier's bits
	tailLen    = 64
)

// Open reads the index of dir's rollouts.jsonl, extends it with what the
// file gained since it was written (rebuilding it if the file was rewritten,
// as a resumed run does) and saves it when it grew. A missing rollouts file
// is an empty index.
func Open(dir string) (*Index, error) {
	ix := readIndex(filepath.Join(dir, IndexFile))
	grew, err := ix.Update(dir)
	if err != nil {
		return nil, err
	}
	if grew {
		// The index is a cache: a folder it cannot be written to (a
		// finished run on a read-only disk) is read without it.
		_ = ix.save(filepath.Join(dir, IndexFile))
	}
	return ix, nil
}

// Update reads what rollouts.jsonl gained since the index last looked,
// starting over when the file no longer begins with what was indexed. It
// reports whether entries were added; a torn last line waits for the next
// call.
func (ix *Index) Update(dir string) (bool, error) {
	f, err := os.Open(filepath.Join(dir, RolloutsFile))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("history: %w", err)
	}
	defer f.Close()
	if !ix.matches(f) {
		*ix = Index{}
	}
	if ix.taskID == nil {
		ix.taskID = make(map[string]uint32, len(ix.Tasks))
		for i, t := range ix.Tasks {
			ix.taskID[t] = uint32(i)
		}
	}
	if _, err := f.Seek(ix.covered, io.SeekStart); err != nil {
		return false, fmt.Errorf("history: %w", err)
	}
	r := bufio.NewReaderSize(f, 1<<20)
	off, n := ix.covered, len(ix.Entries)
	for {
		line, err := r.ReadBytes('\n')
		if err == io.EOF {
			break // a line without its newline is still being written
		}
		if err != nil {
			return false, fmt.Errorf("history: read %s: %w", RolloutsFile, err)
		}
		if e, ok := ix.entry(line); ok {
			e.Off, e.Len = off, int32(len(line))
			ix.Entries = append(ix.Entries, e)
		}
		off += int64(len(line))
		ix.tail = lastBytes(line, ix.tail)
	}
	ix.covered = off
	return len(ix.Entries) > n, nil
}

// lastBytes is the last tailLen bytes of prev followed by line.
func lastBytes(line, prev []byte) []byte {
	if len(line) >= tailLen {
		return append([]byte(nil), line[len(line)-tailLen:]...)
	}
	b := append(append([]byte(nil), prev...), line...)
	return b[max(len(b)-tailLen, 0):]
}

// matches reports whether f still holds what the index covered.
func (ix *Index) matches(f *os.File) bool {
	if ix.covered == 0 {
		return true
	}
	st, err := f.Stat()
	if err != nil || st.Size() < ix.covered {
		return false
	}
	b := make([]byte, len(ix.tail))
	if _, err := f.ReadAt(b, ix.covered-int64(len(b))); err != nil {
		return false
	}
	return bytes.Equal(b, ix.tail)
}

// indexLine is what the index reads of a rollouts line.
type indexLine struct {
	Step      int     `json:"step"`
	Group     int     `json:"group"`
	Index     int     `json:"index"`
	Advantage float64 `json:"advantage"`
	Truncated bool    `json:"truncated"`
	Verdict   struct {
		InstanceID  string   `json:"instance_id"`
		Phase       string   `json:"phase"`
		Reward      float64  `json:"reward"`
		NonEmpty    bool     `json:"nonempty"`
		SyntaxOK    bool     `json:"syntax_ok"`
		Applied     bool     `json:"applied"`
		Resolved    bool     `json:"resolved"`
		Noop        bool     `json:"noop"`
		Infra       bool     `json:"infra_failure"`
		Hacks       []string `json:"hacks"`
		HacksUndone []string `json:"hacks_undone"`
		Gate        string   `json:"verifier_gate"`
		Score       *float64 `json:"verifier_score"`
	} `json:"verdict"`
	Agent *struct {
		End   string     `json:"end"`
		Turns []struct{} `json:"turns"` // counted, not read
	} `json:"agent"`
}

func (ix *Index) entry(line []byte) (Entry, bool) {
	var l indexLine
	if json.Unmarshal(line, &l) != nil {
		return Entry{}, false // damaged: the trainer drops such lines too
	}
	v := &l.Verdict
	e := Entry{Step: int32(l.Step), Group: int16(l.Group), Index: int16(l.Index),
		Reward: float32(v.Reward), Advantage: float32(l.Advantage)}
	for _, b := range []struct {
		on  bool
		bit uint32
	}{{v.SyntaxOK, Valid}, {v.Applied, Applied}, {v.Resolved, Resolved}, {v.Noop, Noop}, {v.Infra, Infra},
		{l.Truncated, Truncated}, {len(v.Hacks) > 0, Flagged}, {len(v.HacksUndone) > 0, Undone}, {!v.NonEmpty, Empty},
		{v.Score != nil, VerifierScored}, {v.Gate == event.GateSpared, VerifierSpared}, {v.Gate == event.GateAudited, VerifierAudited},
		{event.Verdict{VerifierScore: v.Score, Gate: v.Gate, Infra: v.Infra, Resolved: v.Resolved}.VerifierDisagrees(), VerifierDisagrees}} {
		if b.on {
			e.Flags |= b.bit
		}
	}
	for _, h := range append(v.Hacks, v.HacksUndone...) {
		e.Flags |= hackBit[h]
	}
	for i, p := range Phases {
		if p == v.Phase {
			e.Phase = uint8(i)
		}
	}
	if a := l.Agent; a != nil {
		e.End = endOther
		if i := slices.Index(Ends, a.End); i >= 0 {
			e.End = uint8(i + 1)
		}
		e.Turns = uint16(min(len(a.Turns), math.MaxUint16))
	}
	id, ok := ix.taskID[v.InstanceID]
	if !ok {
		id = uint32(len(ix.Tasks))
		ix.Tasks = append(ix.Tasks, v.InstanceID)
		ix.taskID[v.InstanceID] = id
	}
	e.Task = id
	return e, true
}

// Reader reads completions out of a run's rollouts.jsonl, the file opened
// once for as many reads as a filter or an export needs.
type Reader struct{ f *os.File }

// OpenReader opens dir's rollouts.jsonl for reading entries.
func OpenReader(dir string) (*Reader, error) {
	f, err := os.Open(filepath.Join(dir, RolloutsFile))
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	return &Reader{f: f}, nil
}

// Close closes the file.
func (r *Reader) Close() error { return r.f.Close() }

// Line returns e's line as rollouts.jsonl holds it.
func (r *Reader) Line(e Entry) ([]byte, error) {
	b := make([]byte, e.Len)
	if _, err := r.f.ReadAt(b, e.Off); err != nil {
		return nil, fmt.Errorf("history: read %s at %d: %w", RolloutsFile, e.Off, err)
	}
	return b, nil
}

// Read returns e's completion.
func (r *Reader) Read(e Entry) (event.CompletionScored, error) {
	b, err := r.Line(e)
	if err != nil {
		return event.CompletionScored{}, err
	}
	var c event.CompletionScored
	if err := json.Unmarshal(b, &c); err != nil {
		return event.CompletionScored{}, fmt.Errorf("history: %s at %d: %w", RolloutsFile, e.Off, err)
	}
	return c, nil
}

// Completion is e's completion, nil when it cannot be read: Select's read
// function.
func (r *Reader) Completion(e Entry) *event.CompletionScored {
	c, err := r.Read(e)
	if err != nil {
		return nil
	}
	return &c
}

// Read returns the completion of e, read from dir's rollouts.jsonl.
func Read(dir string, e Entry) (event.CompletionScored, error) {
	r, err := OpenReader(dir)
	if err != nil {
		return event.CompletionScored{}, err
	}
	defer r.Close()
	return r.Read(e)
}

// SelectIn is ix.Select with the filters that read lines (text=, cmd=)
// reading dir's file, opened once for the whole selection (and not at all
// without them).
func (ix *Index) SelectIn(dir string, f Filter) ([]int, error) {
	if !f.readsLines() {
		return ix.Select(f, nil)
	}
	r, err := OpenReader(dir)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return ix.Select(f, r.Completion)
}

// save writes the index atomically: header, covered size, tail, tasks,
// entries.
func (ix *Index) save(path string) error {
	var b bytes.Buffer
	b.WriteString(indexMagic)
	w := func(v any) { _ = binary.Write(&b, binary.LittleEndian, v) }
	w(ix.covered)
	w(uint32(len(ix.tail)))
	b.Write(ix.tail)
	w(uint32(len(ix.Tasks)))
	for _, t := range ix.Tasks {
		w(uint32(len(t)))
		b.WriteString(t)
	}
	w(uint64(len(ix.Entries)))
	w(ix.Entries)
	return durable.ReplaceFile(path, b.Bytes())
}

// readIndex reads a saved index; anything it cannot read is an empty index
// (rebuilt from the file).
func readIndex(path string) *Index {
	data, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(data, []byte(indexMagic)) {
		return &Index{}
	}
	r := bytes.NewReader(data[len(indexMagic):])
	var ix Index
	rd := func(v any) bool { return binary.Read(r, binary.LittleEndian, v) == nil }
	var n uint32
	if !rd(&ix.covered) || !rd(&n) || n > tailLen {
		return &Index{}
	}
	ix.tail = make([]byte, n)
	if _, err := io.ReadFull(r, ix.tail); err != nil || !rd(&n) {
		return &Index{}
	}
	for i := uint32(0); i < n; i++ {
		var l uint32
		if !rd(&l) || int64(l) > int64(r.Len()) {
			return &Index{}
		}
		s := make([]byte, l)
		if _, err := io.ReadFull(r, s); err != nil {
			return &Index{}
		}
		ix.Tasks = append(ix.Tasks, string(s))
	}
	var m uint64
	if !rd(&m) || m > uint64(r.Len())/uint64(binary.Size(Entry{})) {
		return &Index{}
	}
	ix.Entries = make([]Entry, m)
	if !rd(ix.Entries) {
		return &Index{}
	}
	return &ix
}
