package prompt

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/internal/realdata"
	"github.com/swetui/swetui/model"
	"github.com/swetui/swetui/reward"
	"github.com/swetui/swetui/task"
)

// TestPromptRecall measures how much of the gold patch each prompt setting
// shows, on SWE-style instances from the real repositories' bundles
// (internal/realdata): the share of gold hunks whose changed lines are
// all in the prompt, per setting and token budget. It prints the table
// (go test ./train -run TestPromptRecall -v) and checks only what must
// hold whatever the data: a larger budget never shows less, and choosing
// chunks by relevance shows at least what cutting files from their end does.
//
// Two sets of instances: task/testdata/realrepos.jsonl (swetui mine's,
// tests run in Docker) when it exists, and candidates mined here without
// Docker: every non-merge commit that changes test files and Python files
// outside the tests (the gold patch is its diff of the latter, the base its
// parent, the issue its message), the newest minedPerRepo of each
// repository. Tokens are counted by a byte-level BPE of model.vocab_size's
// default trained as a run with data.prompt = bm25 trains it: on its
// prompts (counted by the estimate) and gold replies.
func TestPromptRecall(t *testing.T) {
	if testing.Short() {
		t.Skip("mines and tokenises four repositories")
	}
	bundles, err := filepath.Glob(filepath.Join(realdata.Dir(t), "repos", "*.bundle"))
	if err != nil || len(bundles) == 0 {
		t.Fatalf("no bundles in shared/realdata/repos (%v)", err)
	}
	dirs := cloneBundles(t, bundles)
	if mined := filepath.Join("..", "task", "testdata", "realrepos.jsonl"); fileExists(mined) {
		t.Run("verified", func(t *testing.T) {
			measureRecall(t, loadVerified(t, mined, dirs), dirs, "task/testdata/realrepos.jsonl")
		})
	}
	t.Run("mined", func(t *testing.T) {
		var insts []*task.Instance
		for repo, dir := range dirs {
			insts = append(insts, mineCommits(t, repo, dir, minedPerRepo)...)
		}
		slices.SortFunc(insts, func(a, b *task.Instance) int { return strings.Compare(a.InstanceID, b.InstanceID) })
		measureRecall(t, insts, dirs, fmt.Sprintf("mined here from the bundles' commits, at most %d a repository", minedPerRepo))
	})
}

// measureRecall prints the table for insts and checks its sanity.
func measureRecall(t *testing.T, insts []*task.Instance, dirs map[string]string, source string) {
	if len(insts) < 20 {
		t.Fatalf("%d instances: too few to measure", len(insts))
	}
	ctx := context.Background()
	repoDir := func(_ context.Context, in *task.Instance) (string, error) { return dirs[in.Repo], nil }

	var texts []string
	for _, in := range insts {
		p, err := Repo{RepoDir: repoDir, Setting: config.PromptBM25, Budget: 8192}.Prompt(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, p, ChatFormat{}.GoldCompletion(in.Patch))
	}
	tok, err := model.TrainBPE(ctx, slices.Values(texts), config.Default().Model.VocabSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The same files are counted at every budget: count each text once.
	memo := map[string]int{}
	count := func(s string) int {
		n, ok := memo[s]
		if !ok {
			n = len(tok.Encode(s))
			memo[s] = n
		}
		return n
	}

	budgets := []int{2048, 8192, 32768}
	settings := []string{"oracle, cut from the end", "oracle, chunks", "bm25"}
	type cell struct{ hunks, files, tokens int }
	table := map[string]map[int]*cell{}
	totalHunks, totalFiles := 0, 0
	for _, in := range insts {
		hunks := goldHunks(in.Patch)
		files := map[string]bool{}
		for _, h := range hunks {
			files[h.path] = true
		}
		totalHunks += len(hunks)
		totalFiles += len(files)
		for _, s := range settings {
			if table[s] == nil {
				table[s] = map[int]*cell{}
			}
			for _, b := range budgets {
				var shown map[string]func(line int) bool
				var tokens int
				if s == settings[0] {
					shown, tokens = headCutShown(t, ctx, dirs[in.Repo], in, b, count)
				} else {
					setting := config.PromptOracle
					if s == "bm25" {
						setting = config.PromptBM25
					}
					p := Repo{RepoDir: repoDir, Setting: setting, Budget: b, Count: count, Cache: NewCache()}
					plan, err := p.Plan(ctx, in)
					if err != nil {
						t.Fatal(err)
					}
					text, err := p.Prompt(ctx, in)
					if err != nil {
						t.Fatal(err)
					}
					if tokens = count(text); tokens > b && len(plan.Files) > 0 {
						t.Errorf("%s, %s at %d: %d tokens", in.InstanceID, s, b, tokens)
					}
					shown = planShown(plan)
				}
				c := table[s][b]
				if c == nil {
					c = &cell{}
					table[s][b] = c
				}
				c.tokens += tokens
				for _, h := range hunks {
					if in, ok := shown[h.path]; ok && !slices.ContainsFunc(h.lines, func(l int) bool { return !in(l) }) {
						c.hunks++
					}
				}
				for f := range files {
					if _, ok := shown[f]; ok {
						c.files++
					}
				}
			}
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "%d instances, %d gold hunks in %d files existing at base (%s)\n", len(insts), totalHunks, totalFiles, source)
	fmt.Fprintf(&b, "gold hunks wholly in the prompt (gold files at least partly shown; mean prompt tokens)\n")
	fmt.Fprintf(&b, "| setting | 2k tokens | 8k tokens | 32k tokens |\n|---|---|---|---|\n")
	pct := func(n, of int) string { return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(max(of, 1))) }
	for _, s := range settings {
		fmt.Fprintf(&b, "| %s |", s)
		for _, bu := range budgets {
			c := table[s][bu]
			fmt.Fprintf(&b, " %s (%s; %d) |", pct(c.hunks, totalHunks), pct(c.files, totalFiles), c.tokens/len(insts))
		}
		b.WriteString("\n")
	}
	t.Log("\n" + b.String())

	if table["bm25"][32768].hunks < table["bm25"][2048].hunks {
		t.Errorf("bm25 shows fewer gold hunks at 32k tokens than at 2k")
	}
	for _, bu := range budgets {
		if table["oracle, chunks"][bu].hunks < table[settings[0]][bu].hunks {
			t.Errorf("at %d tokens the chunked oracle shows fewer gold hunks (%d) than cutting files from their end (%d)",
				bu, table["oracle, chunks"][bu].hunks, table[settings[0]][bu].hunks)
		}
	}
}

// minedPerRepo bounds the instances taken from one repository, so the
// largest history does not decide the figures alone.
const minedPerRepo = 40

// cloneBundles clones each owner__name.bundle and returns the clones by
// repository name.
func cloneBundles(t *testing.T, bundles []string) map[string]string {
	t.Helper()
	root := t.TempDir()
	dirs := map[string]string{}
	for _, b := range bundles {
		name := strings.TrimSuffix(filepath.Base(b), ".bundle")
		dir := filepath.Join(root, name)
		if out, err := exec.Command("git", "clone", "-q", b, dir).CombinedOutput(); err != nil {
			t.Fatalf("clone %s: %v\n%s", b, err, out)
		}
		dirs[strings.Replace(name, "__", "/", 1)] = dir
	}
	return dirs
}

// loadVerified reads the instances mined with their tests run (swetui
// mine) whose repository has a bundle.
func loadVerified(t *testing.T, path string, dirs map[string]string) []*task.Instance {
	t.Helper()
	cfg := config.Default()
	cfg.Data.Source, cfg.Data.Split = path, task.SplitAll
	all, err := task.Load(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out []*task.Instance
	for i := range all {
		if dirs[all[i].Repo] != "" {
			out = append(out, &all[i])
		}
	}
	return out
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// mineCommits turns the newest commits of dir that change tests and
// Python code outside them into instances.
func mineCommits(t *testing.T, repo, dir string, most int) []*task.Instance {
	t.Helper()
	git := func(args ...string) string {
		out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).Output()
		if err != nil {
			t.Fatalf("git %v: %v", args, err)
		}
		return string(out)
	}
	var out []*task.Instance
	for _, c := range strings.Fields(git("rev-list", "--no-merges", "HEAD")) {
		if len(out) == most {
			break
		}
		parents := strings.Fields(git("rev-list", "--parents", "-n", "1", c))
		if len(parents) != 2 {
			continue // the root commit
		}
		var tests, code []string
		for _, p := range strings.Split(strings.TrimSpace(git("diff", "--name-only", "--no-renames", parents[1], c)), "\n") {
			switch {
			case p == "":
			case reward.IsTestPath(p):
				tests = append(tests, p)
			case path.Ext(p) == ".py":
				code = append(code, p)
			}
		}
		msg := strings.TrimSpace(git("log", "-1", "--format=%B", c))
		if len(tests) == 0 || len(code) == 0 || strings.HasPrefix(msg, "[pre-commit.ci]") {
			continue
		}
		patch := git(append([]string{"diff", "--no-renames", parents[1], c, "--"}, code...)...)
		if len(goldHunks(patch)) == 0 || strings.Count(patch, "\n") > 400 {
			continue // new files only, or a sweeping change
		}
		out = append(out, &task.Instance{InstanceID: fmt.Sprintf("%s-%s", strings.Replace(repo, "/", "__", 1), c[:10]),
			Repo: repo, BaseCommit: parents[1], Patch: patch, ProblemStatement: msg})
	}
	return out
}

// goldHunk is one hunk of a gold patch: its file and the base lines
// (0-based) it needs shown: those it removes, and the line before each
// run of added lines (the first line for an insertion at the top).
type goldHunk struct {
	path  string
	lines []int
}

// goldHunks reads a patch's hunks in files that exist at base.
func goldHunks(patch string) []goldHunk {
	var out []goldHunk
	file, old := "", 0
	added := false
	sc := bufio.NewScanner(strings.NewReader(patch))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "diff --git "):
			file = ""
		case strings.HasPrefix(l, "--- "):
			file = strings.TrimPrefix(strings.TrimPrefix(l, "--- "), "a/")
			if file == "/dev/null" {
				file = ""
			}
		case strings.HasPrefix(l, "+++ "):
		case strings.HasPrefix(l, "@@ "):
			if file == "" {
				continue
			}
			f := strings.Fields(l) // @@ -a,b +c,d @@
			start, _, _ := strings.Cut(strings.TrimPrefix(f[1], "-"), ",")
			n, _ := strconv.Atoi(start)
			old, added = max(n-1, 0), false
			if n == 0 || strings.HasSuffix(f[1], ",0") {
				old = n // an empty old range starts after line n
			}
			out = append(out, goldHunk{path: file})
		case file == "" || len(out) == 0:
		case strings.HasPrefix(l, "-"):
			h := &out[len(out)-1]
			h.lines = append(h.lines, old)
			old, added = old+1, false
		case strings.HasPrefix(l, "+"):
			if !added {
				h := &out[len(out)-1]
				h.lines = append(h.lines, max(old-1, 0))
				added = true
			}
		case strings.HasPrefix(l, " "):
			old, added = old+1, false
		}
	}
	return out
}

// planShown is, for each file a plan shows, whether it shows a base line.
func planShown(plan Plan) map[string]func(int) bool {
	out := map[string]func(int) bool{}
	for _, f := range plan.Files {
		rs := f.Shown
		out[f.Path] = func(l int) bool {
			return rs == nil || slices.ContainsFunc(rs, func(r LineRange) bool { return l >= r.Start && l < r.End })
		}
	}
	return out
}

// headCutShown is the oracle prompt as the default shows it, with the
// budget in tokens: the gold files in the patch's order, the first that
// does not fit cut after the last of its lines that does, then no more.
func headCutShown(t *testing.T, ctx context.Context, dir string, in *task.Instance, budget int, count func(string) int) (map[string]func(int) bool, int) {
	t.Helper()
	paths := oraclePaths(in)
	blobs, err := blobsAt(ctx, dir, in.BaseCommit, paths)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]func(int) bool{}
	var files []CodeFile
	room := budget - count(chatmlPrompt(in.ProblemStatement, nil))
	for i, b := range blobs {
		if b == nil {
			continue
		}
		head, text := "\n\n["+paths[i]+"]\n", string(b)
		if cost := count(head + strings.TrimRight(text, "\n")); cost <= room {
			room -= cost
			files = append(files, CodeFile{Path: paths[i], Text: text})
			out[paths[i]] = func(int) bool { return true }
			continue
		}
		lines := splitLines(text)
		fits := func(n int) bool {
			return count(head+strings.Join(lines[:n], "\n")+TruncationMarker) <= room
		}
		lo, hi := 0, len(lines) // the most lines that fit, by bisection
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if fits(mid) {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		if lo > 0 {
			files = append(files, CodeFile{Path: paths[i], Text: strings.Join(lines[:lo], "\n") + TruncationMarker})
			shownLines := lo
			out[paths[i]] = func(l int) bool { return l < shownLines }
		}
		break
	}
	return out, count(chatmlPrompt(in.ProblemStatement, files))
}
