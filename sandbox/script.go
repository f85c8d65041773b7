package sandbox

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// The eval script's output protocol. An evaluation runs two processes in
// its container, each started by the Docker daemon: the prepare script
// (model patch, test-infrastructure reset, test files, test patch), whose
// exit status says what it did, then the test runner. The host, not the
// container, writes the protocol lines around their output, with a nonce
// drawn per evaluation that never enters the container: nothing the code
// under test can read, print or kill can forge one. The runner's exit status
// is the daemon's word on its process. Parse only lines that equal a
// protocol line exactly, and take the last of each kind.
//
//	... the prepare script's output ...
//	SWETUI-APPLY <nonce> <method>         method: git-apply | git-apply-reject | patch | failed | empty
//	SWETUI-TESTPATCH <nonce> ok|failed    the reference test patch (absent when there is none)
//	SWETUI-START <nonce>                  the test runner's output follows
//	... test runner output (stdout and stderr merged, in order) ...
//	SWETUI-END <nonce>                    preceded by a newline the host adds
//	SWETUI-EXIT <nonce> <status>          the test runner's exit status
//
// The lines come in this order because the script applies the model patch
// first, then resets the test files and applies the test patch (the
// harness's order: whatever the model did to the tests is undone).
//
// When the model patch applies with none of the methods, the tests do not
// run and the evaluation's exit code is ExitPatchFailed; when the test patch
// fails, ExitTestPatchFailed. Otherwise it is the runner's status.
const (
	ApplyPrefix     = "SWETUI-APPLY"
	TestPatchPrefix = "SWETUI-TESTPATCH"
	StartPrefix     = "SWETUI-START"
	EndPrefix       = "SWETUI-END"
	ExitPrefix      = "SWETUI-EXIT"
)

// Apply methods, in the order the script tries them.
const (
	ApplyGit       = "git-apply"
	ApplyGitReject = "git-apply-reject"
	ApplyPatch     = "patch"
	ApplyFailed    = "failed"
	ApplyEmpty     = "empty" // the model patch file was empty: nothing to apply
)

// applied are the methods that succeed, in the order of their index in the
// prepare script's exit status.
var applied = []string{ApplyGit, ApplyGitReject, ApplyPatch, ApplyEmpty}

// Evaluation exit statuses that are not the test runner's.
const (
	ExitPatchFailed     = 98
	ExitTestPatchFailed = 97
	ExitWorkdirMissing  = 96
	ExitRepoSetupFailed = 95 // the instance's repo_setup failed before the model patch
	ExitSetupChanged    = 94 // setup changed the files the prepare step left: no tests ran
)

// SetupCheckPrefix starts the one line the test process prints after the
// instance's setup and before the test command: SetupCheckOK, or
// "changed" and the files setup changed. The host reads the first such
// line of the runner's output: only setup runs before it, and the code
// under test can print only after it.
const (
	SetupCheckPrefix = "swetui: setup check "
	SetupCheckOK     = "ok"
)

// preparedSum is where the prepare script records the files the tests are
// to see (path, tab, content hash), for the test process's setup check:
// the tmpfs, which the user the scripts run as can write (/swetui belongs
// to root). Only the prepare script and setup run before the check reads it.
const preparedSum = "/tmp/swetui-prepared.sum"

func (s ScriptSpec) sumPath() string {
	if s.SumPath != "" {
		return s.SumPath
	}
	return preparedSum
}

// The prepare script exits with exitPrepared + 10*test patch state + method
// index (test patch state: 0 none, 1 applied, 2 failed).
const exitPrepared = 80

// Paths inside the container where Run and EvalScript put their files.
const (
	ScriptPath     = "/swetui/eval.sh"
	ModelPatchPath = "/swetui/model.patch"
	TestPatchPath  = "/swetui/test.patch"
)

// ApplyLine reports which method applied the model patch (lines are
// without their newline).
func ApplyLine(nonce, method string) string { return ApplyPrefix + " " + nonce + " " + method }

// TestPatchLine is the test patch's outcome line, ok true or false.
func TestPatchLine(nonce string, ok bool) string {
	if ok {
		return TestPatchPrefix + " " + nonce + " ok"
	}
	return TestPatchPrefix + " " + nonce + " failed"
}

// StartLine opens the test runner's output.
func StartLine(nonce string) string { return StartPrefix + " " + nonce }

// EndLine closes the test runner's output.
func EndLine(nonce string) string { return EndPrefix + " " + nonce }

// ExitLine reports the runner's exit status.
func ExitLine(nonce string, status int) string {
	return ExitPrefix + " " + nonce + " " + strconv.Itoa(status)
}

// NewNonce returns a fresh random nonce (32 hex digits).
func NewNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// Opening is what the host writes after the prepare script, given its exit
// status: the apply and test-patch lines and, when the tests are to run (a
// test command exists and the script got them ready), the start line. exit
// is the evaluation's exit code should the tests not run.
func Opening(nonce string, status int, tests bool) (lines string, run bool, exit int) {
	if status == ExitPatchFailed {
		return ApplyLine(nonce, ApplyFailed) + "\n", false, ExitPatchFailed
	}
	code := status - exitPrepared
	if code < 0 || code%10 >= len(applied) || code/10 > 2 {
		return "", false, status // the script did not get that far
	}
	lines = "\n" + ApplyLine(nonce, applied[code%10]) + "\n"
	switch code / 10 {
	case 1:
		lines += TestPatchLine(nonce, true) + "\n"
	case 2:
		return lines + TestPatchLine(nonce, false) + "\n", false, ExitTestPatchFailed
	}
	if !tests {
		return lines, false, 0
	}
	return lines + StartLine(nonce) + "\n", true, 0
}

// Closing is what the host writes after the test runner's output.
func Closing(nonce string, status int) string {
	return "\n" + EndLine(nonce) + "\n" + ExitLine(nonce, status) + "\n"
}

// ScriptSpec says what the eval script does; see EvalScript.
type ScriptSpec struct {
	Workdir    string   // the repository inside the container
	BaseCommit string   // commit the test files are reset to
	TestFiles  []string // files the test patch touches, relative to Workdir
	// TestPatchPath and ModelPatchPath are files inside the container; an
	// empty TestPatchPath skips the test patch.
	TestPatchPath  string
	ModelPatchPath string
	// Setup runs in the test process before TestCmd (environment
	// activation: source, export). It must leave the repository's files as
	// the prepare step did: the test process checks the files the patches
	// touched (GuardFiles) after it and runs no tests if they changed.
	Setup []string
	// RepoSetup runs in the prepare script after the checkout and before
	// the model patch (repository setup: whatever the patches apply to).
	RepoSetup []string
	// GuardFiles are the files of the model patch and the test patch
	// (relative to Workdir) that Setup must leave as prepared.
	GuardFiles []string
	// SumPath is where the prepare script records them ("" is
	// /tmp/swetui-prepared.sum, in the container).
	SumPath string
	TestCmd string // the test runner's command line; "" runs no tests
	Nonce   string // "" draws a new one

	// Checkout, when set, is checked out (forced) before the model patch:
	// an image may hold the repository at another commit (one image for a
	// repository's instances). A commit the image lacks stops the script
	// as a missing workdir does: an infrastructure failure.
	Checkout string

	// Importable are the top-level names the image's Python imports from
	// outside the work tree (ImportableNames); with the static ones they
	// say which new modules are shadows (Shadowing).
	Importable []string
	// TestPaths are the test files (relative to Workdir) whose folders the
	// test run puts on sys.path: pytest's rootdir-less import inserts the
	// first folder upward from a test file that is not a package, so a new
	// module there shadows as one at the root does.
	TestPaths []string
}

// ShadowPrefix starts the line the prepare script prints for each new file
// it removed as a shadow (Shadowing): the prepare script runs before any
// code of the patch, and its output comes before the host's apply line, so
// no test can forge one (ParseOutput reads them only there).
const ShadowPrefix = "swetui: shadow removed: "

// Scripts are an evaluation's two processes: Prepare, a bash script (copy
// it to ScriptPath), then Tests, a bash command line ("" when there is no
// test command), and the nonce of the lines the host writes around them
// (Opening, Closing).
type Scripts struct {
	Prepare, Tests, Nonce string
	// SetupChecked: Tests checks the guard files after the instance's
	// setup and prints the SetupCheckPrefix line.
	SetupChecked bool
}

// gitEnv makes git trust repositories that belong to another user than the
// one running it, and run no hook or fsmonitor that a repository configures.
const gitEnv = "export GIT_CONFIG_COUNT=3 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0='*' " +
	"GIT_CONFIG_KEY_1=core.hooksPath GIT_CONFIG_VALUE_1=/dev/null GIT_CONFIG_KEY_2=core.fsmonitor GIT_CONFIG_VALUE_2=false"

// EvalScript writes an evaluation's scripts. Prepare, in Workdir: applies
// the model patch with the harness's fallback chain (git apply, git apply
// --reject, patch --fuzz=5 --forward), reverting a partial attempt before
// the next; resets what the patch did to test infrastructure (runner
// configuration back to BaseCommit, new modules that shadow the runner or
// the standard library removed; see RunnerConfig and ShadowsRunner); resets
// TestFiles to BaseCommit (so the model cannot rewrite the tests that judge
// it); applies the test patch. Tests runs Setup, then TestCmd.
func EvalScript(s ScriptSpec) Scripts {
	nonce := s.Nonce
	if nonce == "" {
		nonce = NewNonce()
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("#!/bin/bash")
	w("# Generated by swetui's sandbox; protocol in sandbox/script.go.")
	w("set -uo pipefail")
	w("exec 2>&1 </dev/null # one ordered stream")
	w("%s", gitEnv)
	w("cd %s || { echo 'swetui: workdir %s missing'; exit %d; }", shq(s.Workdir), s.Workdir, ExitWorkdirMissing)
	// The commit the image holds: the repository's own modules are those of
	// the base commit and of this one (an image built at a later commit).
	w("swetui_image_head=$(git rev-parse -q --verify HEAD 2>/dev/null || true)")
	if s.Checkout != "" {
		w("git -c advice.detachedHead=false checkout -q -f %s || { echo %s; exit %d; }", shq(s.Checkout),
			shq("swetui: commit "+s.Checkout+" is not in this image (swetui prepare builds images that hold it)"), ExitWorkdirMissing)
	}
	if len(s.RepoSetup) > 0 {
		w("")
		w("# The instance's repository setup, before the patches.")
		w("swetui_repo_setup() {")
		for _, c := range s.RepoSetup {
			w("%s", c)
		}
		w("}")
		w(`( swetui_repo_setup ) || { st=$?; echo %s"$st"; exit %d; }`, shq("swetui: repo_setup failed with status "), ExitRepoSetupFailed)
		w("cd %s || { echo 'swetui: workdir %s missing'; exit %d; }", shq(s.Workdir), s.Workdir, ExitWorkdirMissing)
	}
	w("")
	w("# Undo what a failed attempt wrote to the files the patch names.")
	w("revert_touched() {")
	w(`  sed -n -E 's#^(\+\+\+ b/|--- a/|rename from |rename to )##p' "$1" | sed -E 's#\t.*$##' | sort -u |`)
	w(`  while IFS= read -r f; do`)
	w(`    [ -z "$f" ] && continue`)
	w(`    if git ls-files --error-unmatch -- "$f" >/dev/null 2>&1; then git checkout -q -- "$f"; else rm -f -- "$f"; fi`)
	w(`    rm -f -- "$f.rej" "$f.orig"`)
	w(`  done`)
	w("}")
	b.WriteString(protectFunction(s.BaseCommit, s.Importable))
	w("")
	w("declare -A untracked # files not in git before the patch: not the patch's")
	w(`while IFS= read -r -d '' f; do untracked[$f]=1; done < <(git ls-files -z --others)`)
	mp := shq(s.ModelPatchPath)
	w("if [ ! -s %s ]; then", mp)
	w("  method=3")
	w("elif git apply --verbose %s; then", mp)
	w("  method=0")
	w("elif revert_touched %s; git apply --verbose --reject %s; then", mp, mp)
	w("  method=1")
	w("elif revert_touched %s; patch --batch --fuzz=5 -p1 --forward --no-backup-if-mismatch -i %s; then", mp, mp)
	w("  method=2")
	w("else")
	w("  revert_touched %s", mp)
	w("  exit %d", ExitPatchFailed)
	w("fi")
	w("")
	w("# What configures or shadows the test runner is not the model's to change.")
	if len(s.TestPaths) > 0 {
		paths := append([]string(nil), s.TestPaths...)
		sort.Strings(paths)
		paths = slices.Compact(paths)
		w("# The folders the test run puts on sys.path: each test file's first folder upward that is no package.")
		w("for f in %s; do", shqAll(paths))
		w(`  d=${f%%/*}; [ "$d" = "$f" ] && d=`)
		w(`  while [ -n "$d" ] && [ -f "$d/__init__.py" ]; do case "$d" in */*) d=${d%%/*};; *) d=;; esac; done`)
		w(`  swetui_path+=("$d")`)
		w("done")
	}
	w(`while IFS= read -r -d '' f; do`)
	w(`  protected "$f" 0 || continue`)
	w(`  if git cat-file -e %s:"$f" 2>/dev/null; then git checkout -q %s -- "$f"; else rm -f -- "$f"; fi`, shq(s.BaseCommit), shq(s.BaseCommit))
	w(`  echo "swetui: $f reset to the base commit (test infrastructure)"`)
	w(`done < <(git diff --name-only -z)`)
	w(`while IFS= read -r -d '' f; do`)
	w(`  [ -n "${untracked[$f]:-}" ] && continue`)
	w(`  protected "$f" 1 || continue`)
	w(`  rm -f -- "$f"`)
	w(`  if protected "$f" 0; then echo "swetui: $f removed (test infrastructure)"; else echo %s"$f"; fi`, shq(ShadowPrefix))
	w(`done < <(git ls-files -z --others)`)
	w("")
	if len(s.TestFiles) > 0 {
		files := append([]string(nil), s.TestFiles...)
		sort.Strings(files)
		w("# Reset the test files to the base commit; files new in the test patch go.")
		w("for f in %s; do", shqAll(files))
		w(`  if git cat-file -e %s:"$f" 2>/dev/null; then git checkout -q %s -- "$f"; else rm -f -- "$f"; fi`,
			shq(s.BaseCommit), shq(s.BaseCommit))
		w("done")
	}
	tp := ""
	if s.TestPatchPath != "" {
		w("if git apply --verbose %s; then tp=1; else tp=2; fi", shq(s.TestPatchPath))
		tp = "10*tp + "
	}
	guard := len(s.Setup) > 0 && len(s.GuardFiles) > 0 && s.TestCmd != ""
	if guard {
		w("")
		w("# What the tests are to see, for the check after setup.")
		w("%s", sumFunction)
		w("swetui_sum %s > %s || { echo %s; exit %d; }", shqAll(s.GuardFiles), shq(s.sumPath()), shq("swetui: cannot write "+s.sumPath()), ExitWorkdirMissing)
	}
	w("exit $((%d + %smethod))", exitPrepared, tp)
	sc := Scripts{Prepare: b.String(), Nonce: nonce, SetupChecked: guard}
	if s.TestCmd != "" {
		var t strings.Builder
		fmt.Fprintf(&t, "set -uo pipefail\nexec 2>&1 </dev/null\n%s\n", gitEnv)
		fmt.Fprintf(&t, "cd %s || { echo 'swetui: workdir %s missing'; exit %d; }\n", shq(s.Workdir), s.Workdir, ExitWorkdirMissing)
		for _, c := range s.Setup {
			t.WriteString(c + "\n")
		}
		if guard {
			// Setup may have changed folder; the check reads the workdir.
			t.WriteString(sumFunction + "\n")
			fmt.Fprintf(&t, "[ -r %s ] || { echo %s; exit %d; }\n", shq(s.sumPath()), shq(SetupCheckPrefix+"changed: no record of the prepared files"), ExitSetupChanged)
			fmt.Fprintf(&t, "swetui_changed=$(cd %s && while IFS=$'\\t' read -r f h; do "+
				"[ \"$(swetui_sum \"$f\" | cut -f2)\" = \"$h\" ] || printf ' %%s' \"$f\"; done < %s)\n", shq(s.Workdir), shq(s.sumPath()))
			fmt.Fprintf(&t, "if [ -n \"$swetui_changed\" ]; then echo \"%schanged$swetui_changed\"; exit %d; fi\n", SetupCheckPrefix, ExitSetupChanged)
			fmt.Fprintf(&t, "echo %s\n", shq(SetupCheckPrefix+SetupCheckOK))
		}
		t.WriteString(s.TestCmd + "\n")
		sc.Tests = t.String()
	}
	return sc
}

// sumFunction prints, for each path, the path, a tab and what it holds: a
// file's SHA-256, a symlink's target, or "absent".
const sumFunction = `swetui_sum() { local f; for f in "$@"; do if [ -L "$f" ]; then printf '%s\tlink:%s\n' "$f" "$(readlink -- "$f")"; ` +
	`elif [ -f "$f" ]; then printf '%s\t%s\n' "$f" "$(sha256sum < "$f" | cut -c1-64)"; else printf '%s\tabsent\n' "$f"; fi; done; }`

// Output is what the eval script's protocol lines say about one run.
type Output struct {
	ApplyMethod string // one of the Apply* constants, "" if the line is missing
	Applied     bool   // the model patch applied (or was empty)
	TestPatch   string // "ok", "failed" or "" (none or not reached)
	Started     bool   // the start marker was seen
	Complete    bool   // start, end and exit lines were all seen, in order
	TestLog     string // the runner's output between the last start and end markers
	ExitStatus  int    // the runner's exit status; -1 when not Complete
	Forged      bool   // protocol-looking lines the script did not print appear
	// SetupCheck is what the first setup-check line of the runner's output
	// says (SetupCheckOK, or "changed ..."); "" when there is none.
	SetupCheck string
	// Shadowed are the new files the prepare script removed as shadows
	// (ShadowPrefix), one a line; "" when none. Only the prepare script's
	// output is read for them: the lines before the host's apply line.
	Shadowed string
}

// ParseOutput reads the protocol lines of nonce from an eval script's log.
// It takes the last marker pair and ignores any line that is not exactly a
// protocol line of this nonce, so test output cannot forge them.
func ParseOutput(log, nonce string) Output {
	out := Output{ExitStatus: -1}
	applyP := ApplyPrefix + " " + nonce + " "
	tpP := TestPatchPrefix + " " + nonce + " "
	start, end, exitP := StartLine(nonce), EndLine(nonce), ExitPrefix+" "+nonce+" "
	var (
		body     []string
		inTests  bool
		sawEnd   bool
		prepared bool // past the prepare script's output
		shadowed []string
	)
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if !prepared {
			if f, ok := strings.CutPrefix(line, ShadowPrefix); ok {
				shadowed = append(shadowed, f)
			}
		}
		switch {
		case line == start:
			prepared = true
			out.Started, inTests, sawEnd, body = true, true, false, body[:0]
			out.Complete, out.ExitStatus, out.SetupCheck = false, -1, ""
		case line == end && inTests:
			inTests, sawEnd = false, true
			out.TestLog = strings.Join(body, "\n")
			// The script adds a newline before the end marker.
			out.TestLog = strings.TrimSuffix(out.TestLog, "\n")
		case strings.HasPrefix(line, exitP) && sawEnd && !inTests:
			if n, err := strconv.Atoi(strings.TrimPrefix(line, exitP)); err == nil {
				out.ExitStatus, out.Complete = n, true
			}
		case inTests:
			body = append(body, line)
			if rest, ok := strings.CutPrefix(line, SetupCheckPrefix); ok && out.SetupCheck == "" {
				out.SetupCheck = rest
			}
		case strings.HasPrefix(line, applyP):
			prepared = true
			out.ApplyMethod = strings.TrimPrefix(line, applyP)
			out.Applied = out.ApplyMethod != ApplyFailed
		case strings.HasPrefix(line, tpP):
			out.TestPatch = strings.TrimPrefix(line, tpP)
		}
	}
	if inTests {
		out.TestLog = strings.Join(body, "\n")
	}
	out.Shadowed = strings.Join(shadowed, "\n")
	out.Forged = forgedMarkers(log, nonce)
	return out
}

// LogNonce returns the nonce of an eval log read without its scripts: that
// of the first protocol line. The host writes the apply line before any code
// of the patch runs, so the first one is the host's own; look-alikes the
// tests print come later, and ParseOutput reports them as Forged.
func LogNonce(log string) (string, bool) {
	for _, line := range strings.Split(log, "\n") {
		line = strings.TrimSuffix(line, "\r")
		for _, prefix := range []string{ApplyPrefix, StartPrefix} {
			if rest, ok := strings.CutPrefix(line, prefix+" "); ok {
				nonce, _, _ := strings.Cut(rest, " ")
				if nonce != "" {
					return nonce, true
				}
			}
		}
	}
	return "", false
}

// forgedMarkers reports protocol-looking lines with another nonce, or more
// than one start marker of this one: output the script did not print.
func forgedMarkers(log, nonce string) bool {
	starts := 0
	for _, line := range strings.Split(log, "\n") {
		line = strings.TrimSuffix(line, "\r")
		for _, prefix := range []string{ApplyPrefix, TestPatchPrefix, StartPrefix, EndPrefix, ExitPrefix} {
			rest, ok := strings.CutPrefix(strings.TrimSpace(line), prefix+" ")
			if !ok {
				continue
			}
			if !strings.HasPrefix(rest, nonce) {
				return true
			}
			if prefix == StartPrefix {
				starts++
			}
		}
	}
	return starts > 1
}

// ShellQuote quotes s for sh and bash (as it is when nothing in it needs
// quoting).
func ShellQuote(s string) string { return shq(s) }

// shq quotes s for bash.
func shq(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '_' || r == '-' || r == ':' || r == '=' ||
			('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9'))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func shqAll(ss []string) string {
	var b bytes.Buffer
	for i, s := range ss {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(shq(s))
	}
	return b.String()
}
