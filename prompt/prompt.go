package prompt

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"os/exec"
	"slices"
	"strings"
	"sync"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/task"
)

// SystemPrompt tells the policy what to write.
const System = "You fix bugs. Reply with a unified diff in a ```diff block."

// RepoPrompter renders a task's prompt from its issue text and code read at
// base_commit from the task's repository on the host: the files the gold
// patch touches ("oracle", as SWE-bench's oracle setting) or the
// repository's files ranked by BM25 against the issue ("bm25", as its
// bm25_13K/27K prompts). With a token Budget, files are added until it is
// spent and a file too long for what is left shows its most relevant whole
// functions and classes (pickChunks). Without one, oracle files are cut
// from their end to MaxContextBytes in total, marked with TruncationMarker:
// the prompts the shipped warm start was trained on. This is the one place
// prompts are defined: SystemPrompt and the user's turn (UserTurn) in the
// Chat format, by default swetui's ChatML:
//
//	<|im_start|>system
//	You fix bugs. Reply with a unified diff in a ```diff block.<|im_end|>
//	<|im_start|>user
//	<issue text>
//
//	[path/of/file.py]
//	<file at base_commit><|im_end|>
//	<|im_start|>assistant
//
// and the SFT target (ChatFormat.GoldCompletion) is the gold patch in a
// ```diff fence closed by the format's end of turn (<|im_end|>).
type Repo struct {
	// RepoDir returns the host path of the instance's git repository.
	RepoDir         func(ctx context.Context, inst *task.Instance) (string, error)
	MaxContextBytes int
	// Setting is config.PromptOracle ("" too) or config.PromptBM25.
	Setting string
	// Budget > 0 bounds the whole prompt (chat frame and issue included)
	// to Budget tokens as Count counts them; bm25 needs one.
	Budget int
	// Count is the run's token count of a text; nil estimates three bytes
	// a token, for the prompts a tokenizer is trained on before it exists.
	Count func(text string) int
	// Cache, when set, keeps each instance's choice of code, so a prompt
	// rendered again reads only the files it shows.
	Cache *Cache
	// Chat is the chat format prompts are written in (zero: ChatML).
	Chat ChatFormat
}

// PromptPlan says what code a prompt shows, for `swetui prompt` and the
// cache.
type Plan struct {
	Setting string // config.PromptOracle, PromptBM25 or PromptText
	Note    string // why another setting stood in, if one did
	Budget  int    // tokens the whole prompt may take; 0 = MaxContextBytes bytes of files
	Files   []ShownFile
	// NotShown are files the setting chose that had no room: the gold
	// patch's (oracle), or the next ranked (bm25, at most maxNotShown).
	NotShown []string
}

// ShownFile is one file of a prompt and how much of it is shown.
type ShownFile struct {
	Path  string
	Lines int
	// Shown is nil for the whole file, else the lines shown, the other
	// lines replaced by ElisionLines; Chunks and Elided name its units.
	Shown          []LineRange
	Chunks, Elided []string
	Score          float64 // BM25 score against the issue (bm25)
	CutBytes       int     // > 0: cut from its end to this many bytes (no token budget)
}

// PromptCache holds instances' PromptPlans; safe for concurrent use.
type Cache struct {
	mu    sync.Mutex
	plans map[string]Plan
}

// NewPromptCache returns an empty cache.
func NewCache() *Cache { return &Cache{plans: map[string]Plan{}} }

// maxNotShown bounds the next-ranked files a bm25 plan lists.
const maxNotShown = 5

// minFileTokens is the least room worth showing a file or a chunk in.
const minFileTokens = 16

// maxBytesPerToken is more bytes than a token of code holds on average in
// any BPE (about 3-5 in small and large vocabularies alike).
const maxBytesPerToken = 12

// Prompt implements Prompter.
func (p Repo) Prompt(ctx context.Context, inst *task.Instance) (string, error) {
	files, err := p.Files(ctx, inst)
	if err != nil {
		return "", err
	}
	return p.Chat.RenderPrompt(inst.ProblemStatement, files)
}

func (p Repo) setting() string {
	if p.Setting == config.PromptBM25 {
		return config.PromptBM25
	}
	return config.PromptOracle
}

// headCut is the prompter without a token budget: oracle files cut from
// their end (today's default, which the shipped warm start is tied to).
func (p Repo) headCut() bool { return p.Budget <= 0 && p.setting() == config.PromptOracle }

// Files returns the code the prompt shows for inst.
func (p Repo) Files(ctx context.Context, inst *task.Instance) ([]CodeFile, error) {
	if p.RepoDir == nil {
		return nil, nil
	}
	if p.headCut() {
		files, _, err := p.headFiles(ctx, inst)
		return files, err
	}
	plan, files, err := p.plan(ctx, inst, true)
	if err != nil || files != nil {
		return files, err
	}
	return p.render(ctx, inst, plan)
}

// Plan says what code inst's prompt shows.
func (p Repo) Plan(ctx context.Context, inst *task.Instance) (Plan, error) {
	if p.RepoDir == nil {
		return Plan{Setting: p.setting(), Budget: p.Budget}, nil
	}
	if p.headCut() {
		_, plan, err := p.headFiles(ctx, inst)
		return plan, err
	}
	plan, _, err := p.plan(ctx, inst, false)
	return plan, err
}

// headFiles returns the files the gold patch touches at base_commit, cut
// to MaxContextBytes in total.
func (p Repo) headFiles(ctx context.Context, inst *task.Instance) ([]CodeFile, Plan, error) {
	plan := Plan{Setting: config.PromptOracle}
	dir, err := p.RepoDir(ctx, inst)
	if err != nil {
		return nil, plan, fmt.Errorf("prompt %s: %w", inst.InstanceID, err)
	}
	var files []CodeFile
	budget := p.MaxContextBytes
	paths := oraclePaths(inst)
	for i, path := range paths {
		out, err := exec.CommandContext(ctx, "git", "-C", dir, "show", inst.BaseCommit+":"+path).Output()
		if err != nil {
			continue // not at base_commit: nothing to show
		}
		text := string(out)
		shown := ShownFile{Path: path, Lines: len(splitLines(text))}
		if p.MaxContextBytes > 0 && len(text) > budget {
			text = text[:max(budget, 0)] + TruncationMarker
			shown.CutBytes = max(budget, 0)
		}
		budget -= len(text)
		files = append(files, CodeFile{Path: path, Text: text})
		plan.Files = append(plan.Files, shown)
		if p.MaxContextBytes > 0 && budget <= 0 {
			plan.NotShown = paths[i+1:]
			break
		}
	}
	return files, plan, nil
}

// oraclePaths are the files the gold patch changes that exist at
// base_commit, in the patch's order.
func oraclePaths(inst *task.Instance) []string {
	var out []string
	for _, c := range task.PatchFiles(inst.Patch) {
		if c.Old != "" { // a file the gold patch creates has no base version
			out = append(out, c.Old)
		}
	}
	return out
}

func (p Repo) count() func(string) int {
	if p.Count != nil {
		return p.Count
	}
	return func(s string) int { return (len(s) + 2) / 3 }
}

func planKey(inst *task.Instance) string { return inst.InstanceID + "@" + inst.BaseCommit }

// plan chooses inst's code within the token budget, or takes the cached
// choice (files nil then; render reads them). withFiles asks for the
// files when they are read anyway.
func (p Repo) plan(ctx context.Context, inst *task.Instance, withFiles bool) (Plan, []CodeFile, error) {
	if p.Cache != nil {
		p.Cache.mu.Lock()
		plan, ok := p.Cache.plans[planKey(inst)]
		p.Cache.mu.Unlock()
		if ok {
			return plan, nil, nil
		}
	}
	plan := Plan{Setting: p.setting(), Budget: p.Budget}
	if p.Budget <= 0 {
		return plan, nil, fmt.Errorf("prompt %s: data.prompt = %s needs a token budget", inst.InstanceID, plan.Setting)
	}
	dir, err := p.RepoDir(ctx, inst)
	if err != nil {
		return plan, nil, fmt.Errorf("prompt %s: %w", inst.InstanceID, err)
	}
	var cands []CodeFile
	var scores []float64
	if plan.Setting == config.PromptBM25 {
		if cands, scores, err = rankFiles(ctx, dir, inst); err != nil {
			return plan, nil, fmt.Errorf("prompt %s: %w", inst.InstanceID, err)
		}
	} else {
		paths := oraclePaths(inst)
		blobs, err := blobsAt(ctx, dir, inst.BaseCommit, paths)
		if err != nil {
			return plan, nil, fmt.Errorf("prompt %s: %w", inst.InstanceID, err)
		}
		for i, b := range blobs {
			if b != nil { // not at base_commit: nothing to show
				cands = append(cands, CodeFile{Path: paths[i], Text: string(b)})
			}
		}
	}
	count := p.count()
	query := BM25Terms(inst.ProblemStatement)
	frame, err := p.Chat.RenderPrompt(inst.ProblemStatement, nil)
	if err != nil {
		return plan, nil, fmt.Errorf("prompt %s: %w", inst.InstanceID, err)
	}
	// Tokens of a concatenation are not quite the sum of its parts'; fit
	// again with less room while the rendered prompt overshoots.
	room := p.Budget - count(frame)
	var files []CodeFile
	for range 4 {
		plan.Files, plan.NotShown, files = fitFiles(cands, scores, query, room, plan.Setting == config.PromptBM25, count)
		text, err := p.Chat.RenderPrompt(inst.ProblemStatement, files)
		if err != nil {
			return plan, nil, fmt.Errorf("prompt %s: %w", inst.InstanceID, err)
		}
		over := count(text) - p.Budget
		if over <= 0 || len(files) == 0 {
			break
		}
		room -= over
	}
	if p.Cache != nil {
		p.Cache.mu.Lock()
		p.Cache.plans[planKey(inst)] = plan
		p.Cache.mu.Unlock()
	}
	if !withFiles {
		files = nil
	}
	return plan, files, nil
}

// rankFiles returns the repository's text files at base_commit that share
// a term with the issue, best BM25 score first (ties by path), and their
// scores. A document is its path and its text, as SWE-bench indexed them.
func rankFiles(ctx context.Context, dir string, inst *task.Instance) ([]CodeFile, []float64, error) {
	all, err := repoTextFiles(ctx, dir, inst.BaseCommit)
	if err != nil {
		return nil, nil, err
	}
	docs := make([][]string, len(all))
	for i, f := range all {
		docs[i] = BM25Terms(f.Path + "\n" + f.Text)
	}
	scores := NewBM25Index(docs).Scores(BM25Terms(inst.ProblemStatement))
	order := make([]int, 0, len(all))
	for i := range all {
		if scores[i] > 0 {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if c := cmp.Compare(scores[b], scores[a]); c != 0 {
			return c
		}
		return strings.Compare(all[a].Path, all[b].Path)
	})
	files, out := make([]CodeFile, len(order)), make([]float64, len(order))
	for k, i := range order {
		files[k], out[k] = all[i], scores[i]
	}
	return files, out, nil
}

// fitFiles shows cands within room tokens. Ranked (bm25) files are added
// best first, the first that does not fit whole cut to its chunks, then no
// more. The oracle's files are all needed: each gets a fair share of the
// room (fairShares), in the patch's order, and what a cut file leaves of
// its share goes to the next.
func fitFiles(cands []CodeFile, scores []float64, query []string, room int, ranked bool, count func(string) int) (shown []ShownFile, notShown []string, files []CodeFile) {
	costs := make([]int, len(cands))
	for i, f := range cands {
		costs[i] = wholeCost(f, room, count)
	}
	shares := costs
	if !ranked {
		shares = fairShares(costs, room)
	}
	carry := 0 // room a file left unused, for the next
	for i, f := range cands {
		if ranked && room < minFileTokens {
			notShown = append(notShown, paths(cands[i:])...)
			break
		}
		sf := ShownFile{Path: f.Path, Lines: len(splitLines(f.Text))}
		if scores != nil {
			sf.Score = scores[i]
		}
		give := room
		if !ranked {
			give, carry = shares[i]+carry, 0
		}
		if costs[i] <= give {
			shown, files = append(shown, sf), append(files, f)
			room, carry = room-costs[i], give-costs[i]
			continue
		}
		used := 0
		if pick, ok := fitChunks(f, query, give, count); ok {
			sf.Shown, sf.Chunks, sf.Elided = pick.Shown, pick.Chunks, pick.Elided
			used = pick.Tokens
			shown, files = append(shown, sf), append(files, CodeFile{Path: f.Path, Text: pick.Text})
		} else {
			notShown = append(notShown, f.Path)
		}
		room, carry = room-used, give-used
		if ranked {
			notShown = append(notShown, paths(cands[i+1:])...)
			break
		}
	}
	if ranked && len(notShown) > maxNotShown {
		notShown = notShown[:maxNotShown]
	}
	return shown, notShown, files
}

// fitChunks is pickChunks for f within room tokens, its header included
// (in Tokens too).
func fitChunks(f CodeFile, query []string, room int, count func(string) int) (chunkPick, bool) {
	if room < minFileTokens {
		return chunkPick{}, false
	}
	head := count("\n\n[" + f.Path + "]\n")
	pick, ok := pickChunks(f.Path, splitLines(f.Text), query, room-head, count)
	pick.Tokens += head
	return pick, ok
}

// wholeCost is the tokens f takes in the prompt whole, its header
// included; a file of more than maxBytesPerToken bytes a token of room is
// not counted (math.MaxInt): it would not fit.
func wholeCost(f CodeFile, room int, count func(string) int) int {
	text := "\n\n[" + f.Path + "]\n" + strings.TrimRight(f.Text, "\n")
	if len(text) > maxBytesPerToken*max(room, 0) {
		return math.MaxInt
	}
	return count(text)
}

// fairShares splits room between items of the given costs, max-min fair:
// an item costing less than an even share of what is left gets its cost,
// the others split the rest evenly.
func fairShares(costs []int, room int) []int {
	order := make([]int, len(costs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(costs[a], costs[b]) })
	out := make([]int, len(costs))
	left := max(room, 0)
	for k, i := range order {
		out[i] = min(costs[i], left/(len(order)-k))
		left -= out[i]
	}
	return out
}

func paths(files []CodeFile) []string {
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f.Path
	}
	return out
}

// render reads a cached plan's files and shows them as planned.
func (p Repo) render(ctx context.Context, inst *task.Instance, plan Plan) ([]CodeFile, error) {
	dir, err := p.RepoDir(ctx, inst)
	if err != nil {
		return nil, fmt.Errorf("prompt %s: %w", inst.InstanceID, err)
	}
	blobs, err := blobsAt(ctx, dir, inst.BaseCommit, paths(shownAsFiles(plan.Files)))
	if err != nil {
		return nil, fmt.Errorf("prompt %s: %w", inst.InstanceID, err)
	}
	files := make([]CodeFile, 0, len(plan.Files))
	for i, sf := range plan.Files {
		if blobs[i] == nil {
			return nil, fmt.Errorf("prompt %s: %s is gone from %s at %s", inst.InstanceID, sf.Path, dir, inst.BaseCommit)
		}
		text := string(blobs[i])
		if sf.Shown != nil {
			text = renderShown(splitLines(text), sf.Shown)
		}
		files = append(files, CodeFile{Path: sf.Path, Text: text})
	}
	return files, nil
}

func shownAsFiles(fs []ShownFile) []CodeFile {
	out := make([]CodeFile, len(fs))
	for i, f := range fs {
		out[i].Path = f.Path
	}
	return out
}

// TextPrompter shows an instance's own text field (SWE-bench's prompt
// datasets carry the whole user turn there) in Fallback's chat format, and
// Fallback's prompt for an instance without one. It lists no files, so the
// warm start makes no synthetic fixes from it.
type Text struct {
	Fallback Repo
}

// Prompt implements Prompter.
func (p Text) Prompt(ctx context.Context, inst *task.Instance) (string, error) {
	if inst.Text != "" {
		return p.Fallback.Chat.RenderPrompt(inst.Text, nil)
	}
	return p.Fallback.Prompt(ctx, inst)
}

// TextFallback is PromptPlan.Note for an instance without a text field.
const TextFallback = "no text field: the oracle prompt instead"

// Plan says what inst's prompt shows.
func (p Text) Plan(ctx context.Context, inst *task.Instance) (Plan, error) {
	if inst.Text != "" {
		return Plan{Setting: config.PromptText, Budget: p.Fallback.Budget}, nil
	}
	plan, err := p.Fallback.Plan(ctx, inst)
	plan.Note = TextFallback
	return plan, err
}

// TruncationMarker ends a file cut to fit the context, so neither the policy
// nor a person reading rollouts mistakes it for the file's end.
const TruncationMarker = "\n... [truncated to fit the context]"

// CodeFile is one file shown to the policy.
type CodeFile struct {
	Path, Text string
}

// FitPrompt keeps the end of prompt (the chat turn the reply follows) when
// it would not leave reserve tokens free in a context of contextLen.
func Fit(prompt []int, contextLen, reserve int) []int {
	if room := contextLen - reserve; len(prompt) > room {
		return prompt[len(prompt)-max(room, 0):]
	}
	return prompt
}

// PromptTokens renders inst's prompt and encodes it to fit a context of
// contextLen with maxNew tokens left for the reply: what GRPO and eval
// sample from.
func Tokens(ctx context.Context, p Prompter, tok Tokenizer, inst *task.Instance, contextLen, maxNew int) ([]int, error) {
	text, err := p.Prompt(ctx, inst)
	if err != nil {
		return nil, fmt.Errorf("prompt %s: %w", inst.InstanceID, err)
	}
	return Fit(tok.Encode(text), contextLen, maxNew), nil
}
