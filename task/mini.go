package task

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// The embedded suite: every task is a small Python package with one planted
// bug, generated from (seed, task number) alone, so a task does not change
// when data.mini_tasks grows, and the same seed gives byte-identical
// repositories, patches and commit hashes everywhere.

const (
	// MiniGenVersion changes whenever the generator's output changes; it
	// keys the on-disk cache and the image label.
	MiniGenVersion = 1
	// MiniTestCmd runs a task's tests; the directives are test files.
	// The cache provider is off so that running tests leaves the checkout clean.
	MiniTestCmd = "python3 -m pytest -rA -p no:cacheprovider"
	// MiniReposDir holds the repositories inside the suite's image.
	MiniReposDir = "/repos"
	// miniPromptTarget bounds issue text plus the buggy module: with a
	// byte-level BPE at about 3 bytes a token this stays within the prompt
	// share of a 1024-token context.
	miniPromptMin, miniPromptMax = 500, 2300
	miniEpoch                    = 1704067200 // 2024-01-01T00:00:00Z
)

// MiniTask is one task of the embedded suite with its repository.
type MiniTask struct {
	Instance Instance
	Family   string            // bug family
	BugFile  string            // the file the gold patch fixes
	Files    map[string]string // the repository at base_commit

	repo *gitRepo
}

// MiniSuite is the generated suite.
type MiniSuite struct {
	Seed  int64
	Tasks []MiniTask
}

// Digest identifies the suite's repositories (generator version, seed and
// task count); it names the on-disk cache and labels the image.
func (s *MiniSuite) Digest() string {
	h := sha256.New()
	fmt.Fprintf(h, "mini v%d seed %d\n", MiniGenVersion, s.Seed)
	for _, t := range s.Tasks {
		fmt.Fprintf(h, "%s %s\n", t.Instance.InstanceID, t.Instance.BaseCommit)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

var pkgWords = []string{"tally", "ledger", "parcel", "roster", "meter", "depot", "atlas", "quill", "harbor",
	"beacon", "cobalt", "willow", "summit", "canvas", "orbit", "pebble", "lantern", "meadow", "falcon", "timber",
	"ember", "signal", "cinder", "marble", "juniper", "vertex", "anchor", "bramble", "copper", "delta"}

var modWords = []string{"core", "utils", "helpers", "calc", "text", "report", "pricing", "stats", "formatting",
	"rules", "scoring", "records"}

var blurbs = []string{"small helpers for a shop's back office", "utilities for a club's membership records",
	"tools for a course's grading sheets", "helpers for a warehouse's shipments",
	"functions for a team's weekly reports", "bits and pieces for a booking system"}

// GenerateMini generates n tasks from seed; testFraction of them (by a hash
// of the instance id) are in the test split. image names the image holding
// the repositories.
func GenerateMini(seed int64, n int, testFraction float64, image string) (*MiniSuite, error) {
	if n < 1 {
		return nil, fmt.Errorf("generate mini suite: %d tasks, want at least 1", n)
	}
	s := &MiniSuite{Seed: seed, Tasks: make([]MiniTask, n)}
	for i := range s.Tasks {
		t, err := generateTask(seed, i)
		if err != nil {
			return nil, fmt.Errorf("generate mini task %d (seed %d): %w", i, seed, err)
		}
		t.Instance.Image = image
		t.Instance.Split = SplitTrain
		if IsTest(t.Instance.InstanceID, testFraction) {
			t.Instance.Split = SplitTest
		}
		s.Tasks[i] = t
	}
	return s, nil
}

// fnPlan is a drawn function with its tests.
type fnPlan struct {
	inst  fnInst
	bug   *bugDef
	p2p   [][]any
	f2p   [][]any
	bytes int
}

func generateTask(seed int64, i int) (MiniTask, error) {
	r := rand.New(rand.NewPCG(uint64(seed), uint64(i)^0x6d696e69))
	word := pick(r, pkgWords)
	name := fmt.Sprintf("%s-%04d", word, i)
	id := "mini__" + name
	mods := slices.Clone(modWords)
	r.Shuffle(len(mods), func(a, b int) { mods[a], mods[b] = mods[b], mods[a] })
	order := r.Perm(len(templates))

	// The buggy function comes first in the draw; its bug is uniform among
	// the template's bugs.
	buggy, err := planBuggy(r, templates[order[0]])
	if err != nil {
		return MiniTask{}, err
	}
	// Fill the buggy module up to a drawn size: prompts range from short to
	// close to the context.
	target := between(r, miniPromptMin, miniPromptMax)
	plans := []fnPlan{buggy}
	size := buggy.bytes + 350 // the issue text
	next := 1
	for next < len(order) && (len(plans) < 2 || size < target) {
		p := planClean(r, templates[order[next]])
		next++
		if len(plans) >= 2 && size+p.bytes > target {
			break
		}
		plans = append(plans, p)
		size += p.bytes
	}
	// Where the buggy function sits in its module.
	pos := r.IntN(len(plans))
	plans[0], plans[pos] = plans[pos], plans[0]

	files := map[string]string{
		"README.md":           fmt.Sprintf("# %s\n\n%s: %s.\n\nRun the tests with `python3 -m pytest`.\n", word, word, pick(r, blurbs)),
		"pytest.ini":          "[pytest]\npythonpath = .\ntestpaths = tests\n",
		".gitignore":          "__pycache__/\n*.pyc\n.pytest_cache/\n",
		word + "/__init__.py": fmt.Sprintf("\"\"\"%s: %s.\"\"\"\n", word, pick(r, blurbs)),
	}
	bugMod := mods[0]
	bugFile := word + "/" + bugMod + ".py"
	testFile := "tests/test_" + bugMod + ".py"
	files[bugFile] = moduleSource(plans, true)
	base, p2p := testSource(word, bugMod, plans)
	files[testFile] = base

	// Other modules, all correct, with their own tests: the repository is
	// more than the file the prompt shows.
	for m, extra := 1, r.IntN(3); m <= extra; m++ {
		var others []fnPlan
		for k := between(r, 2, 3); k > 0 && next < len(order); k-- {
			others = append(others, planClean(r, templates[order[next]]))
			next++
		}
		if len(others) == 0 {
			break
		}
		files[word+"/"+mods[m]+".py"] = moduleSource(others, false)
		files["tests/test_"+mods[m]+".py"], _ = testSource(word, mods[m], others)
	}

	fixed := moduleSource(plans, false)
	withF2P, f2p := appendF2P(base, bugMod, plans)
	ts := int64(miniEpoch + i*3607)
	repo := buildGitRepo(files, ts, "Initial import of "+word)
	bp := findBuggy(plans)
	in := Instance{
		InstanceID:             id,
		Repo:                   "mini/" + name,
		BaseCommit:             repo.commit.hex(),
		ProblemStatement:       issueText(r, word, bugMod, bp),
		Patch:                  UnifiedDiff(bugFile, files[bugFile], fixed),
		TestPatch:              UnifiedDiff(testFile, base, withF2P),
		FailToPass:             f2p,
		PassToPass:             p2p,
		Version:                "1.0",
		EnvironmentSetupCommit: repo.commit.hex(),
		CreatedAt:              time.Unix(ts, 0).UTC().Format(time.RFC3339),
		Workdir:                MiniReposDir + "/" + id,
		TestCmd:                MiniTestCmd,
		TestDirectives:         []string{testFile},
		LogParser:              ParserPytest,
	}
	return MiniTask{Instance: in, Family: bp.bug.family, BugFile: bugFile, Files: files, repo: repo}, nil
}

func findBuggy(plans []fnPlan) fnPlan {
	for _, p := range plans {
		if p.bug != nil {
			return p
		}
	}
	panic("mini: no buggy function")
}

// planBuggy draws a template instance and a bug until some of its cases
// expose the bug.
func planBuggy(r *rand.Rand, t fnTemplate) (fnPlan, error) {
	for try := 0; try < 20; try++ {
		inst := t.make(r)
		inst.cases = uniqueCases(inst.cases)
		bug := inst.bugs[r.IntN(len(inst.bugs))]
		var same, diff [][]any
		for _, c := range inst.cases {
			if pyEqual(inst.eval("", c), inst.eval(bug.id, c)) {
				same = append(same, c)
			} else {
				diff = append(diff, c)
			}
		}
		if len(diff) == 0 {
			continue
		}
		p := fnPlan{inst: inst, bug: &bug, p2p: firstN(same, 2), f2p: firstN(diff, between(r, 1, 2))}
		p.bytes = len(inst.src(bug.id))
		return p, nil
	}
	return fnPlan{}, fmt.Errorf("template %s: no case exposes its bug", t.id)
}

func planClean(r *rand.Rand, t fnTemplate) fnPlan {
	inst := t.make(r)
	inst.cases = uniqueCases(inst.cases)
	p := fnPlan{inst: inst, p2p: firstN(inst.cases, between(r, 2, 3))}
	p.bytes = len(inst.src(""))
	return p
}

// uniqueCases drops repeated inputs, so that no two tests are the same.
func uniqueCases(cs [][]any) [][]any {
	seen := map[string]bool{}
	out := cs[:0:0]
	for _, c := range cs {
		k := pyArgs(c)
		if !seen[k] {
			seen[k] = true
			out = append(out, c)
		}
	}
	return out
}

func firstN(cs [][]any, n int) [][]any { return cs[:min(n, len(cs))] }

// moduleSource writes a module; buggy plants each plan's bug.
func moduleSource(plans []fnPlan, buggy bool) string {
	parts := make([]string, len(plans))
	for i, p := range plans {
		bug := ""
		if buggy && p.bug != nil {
			bug = p.bug.id
		}
		parts[i] = p.inst.src(bug)
	}
	return strings.Join(parts, "\n\n")
}

// assertion writes a test's assert line; None and booleans compare by
// identity, as in idiomatic pytest.
func assertion(call string, want any) string {
	switch want.(type) {
	case nil, bool:
		return fmt.Sprintf("    assert %s is %s\n", call, pyRepr(want))
	}
	return fmt.Sprintf("    assert %s == %s\n", call, pyRepr(want))
}

// testSource writes a module's test file at base_commit and returns it with
// its test ids (all of them pass on the buggy code).
func testSource(pkg, mod string, plans []fnPlan) (string, []string) {
	names := make([]string, len(plans))
	for i, p := range plans {
		names[i] = p.inst.name
	}
	var b strings.Builder
	fmt.Fprintf(&b, "from %s.%s import %s\n", pkg, mod, strings.Join(names, ", "))
	var ids []string
	for _, p := range plans {
		for k, c := range p.p2p {
			test := fmt.Sprintf("test_%s_%d", p.inst.name, k+1)
			call := fmt.Sprintf("%s(%s)", p.inst.name, pyArgs(c))
			fmt.Fprintf(&b, "\n\ndef %s():\n%s", test, assertion(call, p.inst.eval("", c)))
			ids = append(ids, "tests/test_"+mod+".py::"+test)
		}
	}
	return b.String(), ids
}

// appendF2P adds the tests that fail on the bug to the test file.
func appendF2P(base, mod string, plans []fnPlan) (string, []string) {
	p := findBuggy(plans)
	var b strings.Builder
	b.WriteString(base)
	var ids []string
	for k, c := range p.f2p {
		test := fmt.Sprintf("test_%s_%s", p.inst.name, p.bug.slug)
		if k > 0 {
			test += fmt.Sprintf("_%d", k+1)
		}
		call := fmt.Sprintf("%s(%s)", p.inst.name, pyArgs(c))
		fmt.Fprintf(&b, "\n\ndef %s():\n%s", test, assertion(call, p.inst.eval("", c)))
		ids = append(ids, "tests/test_"+mod+".py::"+test)
	}
	return b.String(), ids
}

// issueText reports the bug as a user would: what they called, what they
// got, what they expected. It never says where the fix is.
func issueText(r *rand.Rand, pkg, mod string, p fnPlan) string {
	fn := p.inst.name
	c := p.f2p[0]
	call := fmt.Sprintf("%s(%s)", fn, pyArgs(c))
	want, got := p.inst.eval("", c), p.inst.eval(p.bug.id, c)
	var b strings.Builder
	titles := []string{
		fmt.Sprintf("%s() returns the wrong result", fn),
		fmt.Sprintf("Unexpected result from %s.%s.%s", pkg, mod, fn),
		fmt.Sprintf("Bug in %s for some inputs", fn),
		fmt.Sprintf("%s gives an incorrect answer", fn),
	}
	if e, ok := got.(pyErr); ok {
		titles = []string{fmt.Sprintf("%s() raises %s", fn, e.typ), fmt.Sprintf("%s crashes on some input", fn)}
	}
	b.WriteString(pick(r, titles) + "\n\n")
	if e, ok := got.(pyErr); ok {
		fmt.Fprintf(&b, "Calling `%s` raises `%s` instead of returning `%s`.\n", call, e.typ, pyRepr(want))
	} else {
		fmt.Fprintf(&b, pick(r, []string{
			"When I call `%s` I get `%s`, but I expected `%s`.\n",
			"`%s` returns `%s`; it should return `%s`.\n",
			"I ran `%s` and it gave me `%s`. The expected result is `%s`.\n",
		}), call, pyRepr(got), pyRepr(want))
	}
	if r.IntN(2) == 0 {
		fmt.Fprintf(&b, "\nTo reproduce:\n\n```python\n>>> from %s.%s import %s\n>>> %s\n", pkg, mod, fn, call)
		if e, ok := got.(pyErr); ok {
			fmt.Fprintf(&b, "Traceback (most recent call last):\n  ...\n%s\n```\n", e.typ)
		} else {
			fmt.Fprintf(&b, "%s\n```\n", pyRepr(got))
		}
	}
	if len(p.f2p) > 1 {
		c2 := p.f2p[1]
		fmt.Fprintf(&b, "\nThe same happens with `%s(%s)`.\n", fn, pyArgs(c2))
	}
	if r.IntN(3) == 0 {
		b.WriteString(pick(r, []string{
			"\nThe docstring describes the expected behaviour.\n",
			"\nOther inputs I tried look fine.\n",
			"\nThis breaks our nightly report.\n",
		}))
	}
	return b.String()
}

// MarshalJSONL writes the suite's instances, one JSON object per line,
// in the format Load reads.
func (s *MiniSuite) MarshalJSONL() ([]byte, error) {
	var b strings.Builder
	for _, t := range s.Tasks {
		line, err := json.Marshal(t.Instance)
		if err != nil {
			return nil, fmt.Errorf("marshal %s: %w", t.Instance.InstanceID, err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return []byte(b.String()), nil
}
