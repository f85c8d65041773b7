package history

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/swetui/swetui/event"
)

// completion is a rollouts line of step s, completion i of task t.
func completion(s, i int, t string, reward, adv float64, v event.Verdict) []byte {
	v.InstanceID, v.Reward = t, reward
	b, _ := json.Marshal(event.CompletionScored{Step: s, Index: i, Completion: fmt.Sprintf("reply %d.%d to %s", s, i, t),
		Verdict: v, Advantage: adv, Tokens: 10})
	return append(b, '\n')
}

func writeLines(t *testing.T, path string, lines ...[]byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, l := range lines {
		if _, err := f.Write(l); err != nil {
			t.Fatal(err)
		}
	}
}

func TestIndexFollowsTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, RolloutsFile)
	applied := event.Verdict{Phase: "apply-only", NonEmpty: true, SyntaxOK: true, Applied: true}
	writeLines(t, path,
		completion(1, 0, "a__x-1", 0.3, 0.5, applied),
		completion(1, 1, "a__x-1", 0, -0.5, event.Verdict{Phase: "apply-only", NonEmpty: true}),
		[]byte("{torn"+"\n"), // a damaged line is skipped, as the trainer skips it
	)
	ix, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ix.Entries) != 2 || !ix.Entries[0].Has(Valid|Applied) || ix.Entries[1].Has(Valid) || ix.Tasks[0] != "a__x-1" {
		t.Fatalf("entries %+v tasks %v", ix.Entries, ix.Tasks)
	}
	c, err := Read(dir, ix.Entries[1])
	if err != nil || c.Completion != "reply 1.1 to a__x-1" {
		t.Fatalf("read %q, %v", c.Completion, err)
	}
	// A line still being written waits; the rest of it arrives.
	line := completion(2, 0, "b__y-2", 1, 1, event.Verdict{Phase: "docker", NonEmpty: true, SyntaxOK: true, Applied: true,
		Resolved: true, Hacks: []string{"escapes_repo"}, HacksUndone: []string{"touches_test_config"}})
	writeLines(t, path, line[:20])
	if grew, err := ix.Update(dir); grew || err != nil {
		t.Fatalf("a torn line was indexed (%v, %v)", grew, err)
	}
	writeLines(t, path, line[20:])
	if grew, err := ix.Update(dir); !grew || err != nil || len(ix.Entries) != 3 {
		t.Fatalf("update: %v %v, %d entries", grew, err, len(ix.Entries))
	}
	e := ix.Entries[2]
	if !e.Has(Resolved|Flagged|Undone|HackBit("escapes_repo")|HackBit("touches_test_config")) || Phases[e.Phase] != "docker" {
		t.Errorf("entry %+v", e)
	}
	// The saved index is read back, and extended.
	if _, err := Open(dir); err != nil {
		t.Fatal(err)
	}
	saved := readIndex(filepath.Join(dir, IndexFile))
	if len(saved.Entries) != 3 || !slices.Equal(saved.Tasks, []string{"a__x-1", "b__y-2"}) {
		t.Fatalf("saved index: %d entries, tasks %v", len(saved.Entries), saved.Tasks)
	}
	// A resumed run cuts the file and writes again: the index starts over.
	if err := os.WriteFile(path, completion(1, 0, "c__z-3", 0.5, 0, applied), 0o644); err != nil {
		t.Fatal(err)
	}
	ix, err = Open(dir)
	if err != nil || len(ix.Entries) != 1 || ix.Tasks[0] != "c__z-3" {
		t.Fatalf("after a rewrite: %v, %+v %v", err, ix.Entries, ix.Tasks)
	}
	// A damaged index file is rebuilt.
	os.WriteFile(filepath.Join(dir, IndexFile), []byte(indexMagic+"garbage"), 0o644)
	if ix, err := Open(dir); err != nil || len(ix.Entries) != 1 {
		t.Fatalf("damaged index: %v, %d entries", err, len(ix.Entries))
	}
}

func TestSelect(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, RolloutsFile)
	ok := event.Verdict{Phase: "docker", NonEmpty: true, SyntaxOK: true, Applied: true}
	res := ok
	res.Resolved = true
	noop := ok
	noop.Noop = true
	writeLines(t, path,
		completion(1, 0, "acme__slugs-1", 0.3, 0.2, ok),
		completion(1, 1, "acme__slugs-1", 1, 1.1, res),
		completion(2, 0, "acme__calc-2", 0, -0.7, noop),
		completion(3, 0, "acme__calc-2", 0, -0.1, event.Verdict{Phase: "syntax", NonEmpty: true}),
	)
	ix, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		filter string
		want   []int
	}{
		{"", []int{0, 1, 2, 3}},
		{"task=slugs", []int{0, 1}},
		{"step=2-3", []int{2, 3}},
		{"step=1", []int{0, 1}},
		{"phase=syntax", []int{3}},
		{"outcome=resolved", []int{1}},
		{"is=noop", []int{2}},
		{"outcome=malformed", []int{3}},
		{"reward>=0.3", []int{0, 1}},
		{"adv<0", []int{2, 3}},
		{"adv<0 task=calc step=3", []int{3}},
		{"text=1.1", []int{1}},
		{"sort=-reward", []int{1, 0, 2, 3}},
		{"sort=advantage", []int{2, 3, 0, 1}},
	}
	for _, tt := range tests {
		f, err := ParseFilter(tt.filter)
		if err != nil {
			t.Fatalf("%q: %v", tt.filter, err)
		}
		got, err := ix.SelectIn(dir, f)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("%q: %v (%v), want %v", tt.filter, got, err, tt.want)
		}
	}
	for _, bad := range []string{"colour=red", "step=x", "reward>=high", "sort=colour"} {
		if _, err := ParseFilter(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if _, err := ix.Select(Filter{Outcome: "great", MinReward: math.NaN(), MaxReward: math.NaN(), MinAdv: math.NaN(), MaxAdv: math.NaN()}, nil); err == nil {
		t.Error("unknown outcome: no error")
	}
}

// BenchmarkOpen opens the index of a run of 2,000 steps of 32 completions
// (the big run) once it was built: what `swetui view` costs to start.
func BenchmarkOpen(b *testing.B) {
	dir := b.TempDir()
	f, err := os.Create(filepath.Join(dir, RolloutsFile))
	if err != nil {
		b.Fatal(err)
	}
	v := event.Verdict{Phase: "docker", NonEmpty: true, SyntaxOK: true, Applied: true, Patch: "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"}
	for s := 1; s <= 2000; s++ {
		for i := 0; i < 32; i++ {
			f.Write(completion(s, i, fmt.Sprintf("acme__t-%d", (s*32+i)%300), 0.3, 0.1, v))
		}
	}
	f.Close()
	if _, err := Open(dir); err != nil { // builds and saves the index
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		ix, err := Open(dir)
		if err != nil || len(ix.Entries) != 64000 {
			b.Fatalf("%v, %d entries", err, len(ix.Entries))
		}
	}
}

func TestReadMetrics(t *testing.T) {
	dir := t.TempDir()
	writeLines(t, filepath.Join(dir, "metrics.jsonl"),
		[]byte(`{"stage":"sft","sft_step":1,"sft/loss":2.5}`+"\n"),
		[]byte(`{"stage":"grpo","step":1,"phase":"syntax","version":1,"reward/mean":0.1}`+"\n"),
		[]byte(`{"stage":"grpo","step":2,"phase":"apply-only","version":2,"reward/mean":0.2}`+"\n"),
		[]byte("{torn\n"),
		[]byte(`{"stage":"grpo","step":3,"phase":"apply-only","version":3,"reward/mean":0.4}`+"\n"))
	writeLines(t, filepath.Join(dir, "events.jsonl"),
		[]byte(`{"kind":"message","text":"resumed from runs/x/checkpoints/step-00000002 at step 2 (phase apply-only)"}`+"\n"))
	m, err := ReadMetrics(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Series["reward/mean"]; len(got) != 3 || got[2] != (Point{3, 0.4}) {
		t.Errorf("reward/mean %v", got)
	}
	if got := m.Series["sft/loss"]; len(got) != 1 || got[0] != (Point{1, 2.5}) {
		t.Errorf("sft/loss %v", got)
	}
	if want := []Mark{{2, "phase apply-only"}, {2, "resumed"}}; !slices.Equal(m.Marks, want) {
		t.Errorf("marks %v, want %v", m.Marks, want)
	}
}

// trajectory is a rollouts line of an agent trajectory of task t, as the
// trainer writes it: no completion text, the turns.
func trajectory(s, i int, t string, reward float64, v event.Verdict, tr *event.Trajectory) []byte {
	v.InstanceID, v.Reward = t, reward
	b, _ := json.Marshal(event.CompletionScored{Step: s, Index: i, Verdict: v, Tokens: 300, Agent: tr})
	return append(b, '\n')
}

func TestSelectAgent(t *testing.T) {
	dir := t.TempDir()
	ok := event.Verdict{Phase: "docker", NonEmpty: true, SyntaxOK: true, Applied: true}
	cmd := func(c, obs string) event.Turn {
		return event.Turn{Reply: "```bash\n" + c + "\n```", Command: c, Duration: 40 * time.Millisecond, Observation: "exit code 0\n" + obs}
	}
	writeLines(t, filepath.Join(dir, RolloutsFile),
		completion(1, 0, "acme__calc-2", 0.3, 0, ok), // single-shot lines have no end and no turns
		trajectory(2, 0, "acme__calc-2", 1, ok, &event.Trajectory{End: "submitted", Turns: []event.Turn{
			cmd("cat -n calc/ops.py", "     1\tdef divide(a, b):"),
			{Reply: "I will fix it.\n```bash\ncat > /tmp/fix.patch <<'E'\n...\nE\ngit apply /tmp/fix.patch\n```",
				Command: "cat > /tmp/fix.patch <<'E'\n...\nE\ngit apply /tmp/fix.patch", Observation: "exit code 0\n(no output)"},
			{Reply: "SUBMIT"}}}),
		trajectory(2, 1, "acme__calc-2", 0, ok, &event.Trajectory{End: "turn_limit", Turns: []event.Turn{
			cmd("ls", "setup.py"), {Reply: "hmm", Observation: "No command found."}}}),
		trajectory(3, 0, "acme__slugs-1", 0, event.Verdict{Phase: "docker", Infra: true}, &event.Trajectory{End: "container_failure",
			Detail: "no session: docker gone"}),
		trajectory(3, 1, "acme__slugs-1", 0, ok, &event.Trajectory{End: "timeout_budget", Turns: []event.Turn{
			cmd("PYTHONPATH=. python3 -m pytest", "killed"), cmd("sleep 100", ""), cmd("sleep 100", ""), cmd("sleep 100", "")}}),
	)
	ix, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ends []string
	var turns []uint16
	for _, e := range ix.Entries {
		ends, turns = append(ends, e.EndName()), append(turns, e.Turns)
	}
	if !slices.Equal(ends, []string{"", "submitted", "turn_limit", "container_failure", "timeout_budget"}) ||
		!slices.Equal(turns, []uint16{0, 3, 2, 0, 4}) {
		t.Fatalf("ends %q, turns %v", ends, turns)
	}
	tests := []struct {
		filter string
		want   []int
	}{
		{"end=submitted", []int{1}},
		{"end=turn_limit", []int{2}},
		{"end=unfinished", []int{2, 3, 4}},
		{"end=unfinished task=slugs", []int{3, 4}},
		{"turns>=3", []int{1, 4}},
		{"turns>3", []int{4}},
		{"turns<3", []int{2, 3}},
		{"turns<=2", []int{2, 3}},
		{"turns<1", []int{3}},
		{"turns=2", []int{2}},
		{"turns=2-3", []int{1, 2}},
		{"turns>=1 turns<=3", []int{1, 2}},
		{`cmd="git apply"`, []int{1}},
		{"cmd=GIT", []int{1}},
		{"cmd=pythonpath=.", []int{4}},
		{"cmd=ls", []int{2}},
		{"cmd=sleep end=timeout_budget", []int{4}},
		{"cmd=sleep end=submitted", nil},
		{"text=setup.py", []int{2}},         // an observation
		{`text="I will fix it."`, []int{1}}, // a reply's words around its command
		{"text=docker", []int{3}},           // the end's detail
		{"text=reply", []int{0}},            // single-shot: its completion
		{"end=submitted sort=-reward", []int{1}},
	}
	for _, tt := range tests {
		f, err := ParseFilter(tt.filter)
		if err != nil {
			t.Fatalf("%q: %v", tt.filter, err)
		}
		got, err := ix.SelectIn(dir, f)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("%q: %v (%v), want %v", tt.filter, got, err, tt.want)
		}
	}
	for _, bad := range []string{"end=finished", "end=", "turns<0", "turns=x", "turns>=2-3", "turns=5-2", "turns=-1"} {
		if _, err := ParseFilter(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestFilterWords(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"  step=1   end=submitted ", []string{"step=1", "end=submitted"}},
		{`cmd="git apply" turns>=2`, []string{"cmd=git apply", "turns>=2"}},
		{`text="a  b"`, []string{"text=a  b"}},
		{`text=""`, []string{"text="}},
	}
	for _, tt := range tests {
		if got := words(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("words(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	for _, tt := range []struct{ in, key, value, op string }{
		{"turns>=2", "turns", "2", ">="},
		{"turns<2", "turns", "2", "<"},
		{"cmd=a>=b", "cmd", "a>=b", "="},
		{"text=x<y", "text", "x<y", "="},
		{"reward<=0.5", "reward", "0.5", "<="},
	} {
		if k, v, op := splitCond(tt.in); k != tt.key || v != tt.value || op != tt.op {
			t.Errorf("splitCond(%q) = %q %q %q", tt.in, k, v, op)
		}
	}
}

// The index keeps 40 bytes a completion; one an older swetui saved (its
// entries without ends and turns) is built again.
func TestIndexEntrySize(t *testing.T) {
	if n := binary.Size(Entry{}); n != 40 {
		t.Errorf("an entry is %d bytes on disk", n)
	}
	if n := unsafe.Sizeof(Entry{}); n != 40 {
		t.Errorf("an entry is %d bytes in memory", n)
	}
	dir := t.TempDir()
	writeLines(t, filepath.Join(dir, RolloutsFile), trajectory(1, 0, "a__x-1", 0, event.Verdict{}, &event.Trajectory{End: "submitted"}))
	ix, err := Open(dir)
	if err != nil || len(ix.Entries) != 1 {
		t.Fatalf("%v, %d entries", err, len(ix.Entries))
	}
	old, err := os.ReadFile(filepath.Join(dir, IndexFile))
	if err != nil {
		t.Fatal(err)
	}
	// As version 1 saved it: the same layout, the end and turns bytes 0.
	old = append([]byte("SWIDX1\n"), old[len(indexMagic):]...)
	old[len(old)-3] = 0
	if err := os.WriteFile(filepath.Join(dir, IndexFile), old, 0o644); err != nil {
		t.Fatal(err)
	}
	if ix, err := Open(dir); err != nil || len(ix.Entries) != 1 || ix.Entries[0].EndName() != "submitted" {
		t.Errorf("an old index: %v, %+v", err, ix.Entries)
	}
}
