package train

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"

	"github.com/swetui/swetui/prompt"
	"github.com/swetui/swetui/task"
)

// A synthetic fix is an extra SFT example made from a training task's own
// files: one small bug is injected into a function (a mutation-testing
// operator: a flipped comparison, an off-by-one constant, a swapped boolean
// operator) and the reply is the diff that reverts it, under an issue that
// names the function. A split of a few hundred tasks is learnt by heart long
// before a small policy learns to copy paths, hunk headers and context lines
// from its prompt; thousands of distinct fixes over the same files teach the
// copying instead. Nothing of the held-out split is read.

// Mutation is one injected bug: line Line (0-based) of File changed from
// Fixed to Buggy.
type Mutation struct {
	File         string
	Func         string
	Line         int
	Fixed, Buggy string
}

// mutationContext is the lines of unchanged context a fix needs on each side,
// as git's default diff shows.
const mutationContext = 3

// swaps are the operators' textual forms, longest first so "<=" is never
// read as "<".
var swaps = []struct{ from, to string }{
	{" <= ", " < "}, {" >= ", " > "}, {" == ", " != "}, {" != ", " == "},
	{" < ", " <= "}, {" > ", " >= "}, {" + ", " - "}, {" - ", " + "},
	{" // ", " / "}, {" and ", " or "}, {" or ", " and "}, {"not ", ""},
	{"True", "False"}, {"False", "True"}, {"min(", "max("}, {"max(", "min("},
}

var (
	defRe = regexp.MustCompile(`^(\s*)def (\w+)\(`)
	intRe = regexp.MustCompile(`\b\d+\b`)
)

// Mutations lists every single-operator bug that can be injected into the
// function bodies of a file's visible text (before prompt.TruncationMarker, and far
// enough from the cut that the fix's context is whole). Docstrings, comments
// and string literals are left alone.
func Mutations(f prompt.CodeFile) []Mutation {
	text, _, _ := strings.Cut(f.Text, prompt.TruncationMarker)
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if strings.Contains(f.Text, prompt.TruncationMarker) {
		lines = lines[:max(0, len(lines)-1)] // the last line may be cut mid-way
	}
	var out []Mutation
	fn, indent := "", -1
	docQuote := "" // the quotes of the docstring being read, if any
	for i, l := range lines {
		trimmed := strings.TrimSpace(l)
		if docQuote != "" {
			if strings.Contains(l, docQuote) {
				docQuote = ""
			}
			continue
		}
		if m := defRe.FindStringSubmatch(l); m != nil {
			fn, indent = m[2], len(m[1])
			continue
		}
		lead := len(l) - len(strings.TrimLeft(l, " \t"))
		if trimmed != "" && lead <= indent {
			fn, indent = "", -1 // left the function
		}
		if strings.HasPrefix(trimmed, `"""`) || strings.HasPrefix(trimmed, `'''`) {
			if q := trimmed[:3]; strings.Count(trimmed, q) == 1 {
				docQuote = q // a docstring that goes on past this line
			}
			continue
		}
		if fn == "" || trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if i < mutationContext || i+mutationContext >= len(lines) {
			continue
		}
		for _, buggy := range lineMutations(l) {
			out = append(out, Mutation{File: f.Path, Func: fn, Line: i, Fixed: l, Buggy: buggy})
		}
	}
	return out
}

// lineMutations returns each variant of a code line with one operator or
// integer literal changed outside string literals and comments.
func lineMutations(l string) []string {
	code := codeMask(l)
	var out []string
	for _, s := range swaps {
		for at := 0; ; {
			k := strings.Index(l[at:], s.from)
			if k < 0 {
				break
			}
			k += at
			at = k + 1
			if !code[k] || !code[k+len(s.from)-1] || (isIdent(s.from[0]) && k > 0 && isIdent(l[k-1])) ||
				(isIdent(s.from[len(s.from)-1]) && k+len(s.from) < len(l) && isIdent(l[k+len(s.from)])) {
				continue // in a string, or part of a longer name
			}
			out = append(out, l[:k]+s.to+l[k+len(s.from):])
		}
	}
	for _, loc := range intRe.FindAllStringIndex(l, -1) {
		if !code[loc[0]] || (loc[0] > 0 && (l[loc[0]-1] == '.' || l[loc[0]-1] == '_')) {
			continue
		}
		n, err := strconv.Atoi(l[loc[0]:loc[1]])
		if err != nil {
			continue
		}
		for _, v := range []int{n + 1, n - 1} {
			if v >= 0 {
				out = append(out, l[:loc[0]]+strconv.Itoa(v)+l[loc[1]:])
			}
		}
	}
	return out
}

func isIdent(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// codeMask marks the bytes of l that are code: not inside a string literal
// and not in a trailing comment.
func codeMask(l string) []bool {
	mask := make([]bool, len(l))
	var quote byte
	for i := 0; i < len(l); i++ {
		c := l[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '#':
			return mask
		case c == '"' || c == '\'':
			quote = c
		default:
			mask[i] = true
		}
	}
	return mask
}

// Apply returns the file's text with the bug injected.
func (m Mutation) Apply(f prompt.CodeFile) prompt.CodeFile {
	lines := strings.Split(f.Text, "\n")
	lines[m.Line] = m.Buggy
	return prompt.CodeFile{Path: f.Path, Text: strings.Join(lines, "\n")}
}

// Fix is the patch that reverts the injected bug: what the policy should
// reply when shown the buggy file.
func (m Mutation) Fix(buggy prompt.CodeFile) string {
	text, _, _ := strings.Cut(buggy.Text, prompt.TruncationMarker)
	lines := strings.Split(text, "\n")
	// Only the hunk's lines matter; the rest of a cut file is left out so the
	// diff does not see the cut as a change.
	end := min(len(lines), m.Line+mutationContext+1)
	old := strings.Join(lines[:end], "\n") + "\n"
	lines[m.Line] = m.Fixed
	return task.UnifiedDiff(m.File, old, strings.Join(lines[:end], "\n")+"\n")
}

// syntheticIssue words a report of a bug in fn the way the embedded suite's
// users do, without saying which line is wrong.
func syntheticIssue(r *rand.Rand, path, fn string) string {
	mod := strings.TrimSuffix(strings.ReplaceAll(path, "/", "."), ".py")
	titles := []string{
		fmt.Sprintf("%s() returns the wrong result", fn),
		fmt.Sprintf("Unexpected result from %s.%s", mod, fn),
		fmt.Sprintf("Bug in %s for some inputs", fn),
		fmt.Sprintf("%s gives an incorrect answer", fn),
	}
	bodies := []string{
		"For some inputs `%s` does not do what its docstring says.\n",
		"`%s` gives a different answer than documented on a few inputs.\n",
		"I think `%s` is broken: the results do not match the docstring.\n",
	}
	return titles[r.IntN(len(titles))] + "\n\n" + fmt.Sprintf(bodies[r.IntN(len(bodies))], fn)
}

// SyntheticFixes draws up to n distinct synthetic fixes from files, each as
// the user's turn of its prompt (prompt.UserTurn: the issue and the files, one
// with the bug) and the patch that is its reply. The same r gives the same
// examples.
func SyntheticFixes(r *rand.Rand, files []prompt.CodeFile, n int) (users, patches []string) {
	type cand struct {
		file int
		m    Mutation
	}
	var all []cand
	for i, f := range files {
		for _, m := range Mutations(f) {
			all = append(all, cand{i, m})
		}
	}
	r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	for _, c := range all[:min(n, len(all))] {
		shown := append([]prompt.CodeFile(nil), files...)
		shown[c.file] = c.m.Apply(files[c.file])
		users = append(users, prompt.UserTurn(syntheticIssue(r, c.m.File, c.m.Func), shown))
		patches = append(patches, c.m.Fix(shown[c.file]))
	}
	return users, patches
}

// renameSalt keeps the renaming's random stream apart from the fixes' own,
// so turning it on leaves which fixes are drawn unchanged.
const renameSalt = 0x9e3779b97f4a7c15

// RenamePackages gives the top-level folders of files made-up names
// throughout a synthetic example: the user's turn (its issue and files; the
// chat frame is rendered after) and the patch. A policy shown only the
// training split's few package names learns to recall a path instead of
// copying it from the prompt, and then writes a training package's path
// for a held-out task.
func RenamePackages(r *rand.Rand, files []prompt.CodeFile, user, patch string) (string, string) {
	seen := map[string]bool{}
	var olds []string
	for _, f := range files {
		if dir, _, ok := strings.Cut(f.Path, "/"); ok && !seen[dir] {
			seen[dir] = true
			olds = append(olds, dir)
		}
	}
	if len(olds) == 0 {
		return user, patch
	}
	names := map[string]string{}
	var alts []string
	for _, o := range olds {
		names[o] = madeUpName(r)
		alts = append(alts, regexp.QuoteMeta(o))
	}
	re := regexp.MustCompile(`\b(` + strings.Join(alts, "|") + `)\b`)
	rename := func(s string) string { return re.ReplaceAllStringFunc(s, func(o string) string { return names[o] }) }
	return rename(user), rename(patch)
}

// madeUpName is three consonant-vowel syllables, such as "kavemo".
func madeUpName(r *rand.Rand) string {
	const consonants, vowels = "bdfgklmnprstvz", "aeiou"
	var b strings.Builder
	for range 3 {
		b.WriteByte(consonants[r.IntN(len(consonants))])
		b.WriteByte(vowels[r.IntN(len(vowels))])
	}
	return b.String()
}
