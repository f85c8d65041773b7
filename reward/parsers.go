package reward

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/swetui/swetui/event"
)

// statuses in the order the harness's TestStatus enum lists them; the pytest
// parsers test line prefixes in this order.
var statuses = []event.Status{event.Failed, event.Passed, event.Skipped, event.Errored, event.XFail}

// Parser turns the test runner's output into per-test statuses. Parsers are
// ports of the official SWE-bench harness's log parsers (swebench/harness
// log_parsers), so grading reproduces the harness's reports exactly; a few
// extensions (verbose pytest lines, test ids with spaces) only add tests the
// harness would have missed.
type Parser func(log string) event.StatusMap

// Parser names. Task specs and instances (task.Instance.LogParser) name one of
// these; ParserFor also accepts the aliases in parserAliases.
const (
	ParserPytest        = "pytest"         // -rA summary lines, plus verbose lines
	ParserPytestOptions = "pytest_options" // as pytest, path-like parametrize options shortened
	ParserPytestV2      = "pytest_v2"      // ANSI colour stripped, old "id STATUS" lines
	ParserDjango        = "django"         // Django's runtests.py --verbosity 2
	ParserSympy         = "sympy"          // sympy's bin/test --verbose
	ParserSeaborn       = "seaborn"
	ParserMatplotlib    = "matplotlib"
	ParserUnittest      = "unittest" // python -m unittest -v
)

var parsers = map[string]Parser{
	ParserPytest:        summaryScoped(parsePytest),
	ParserPytestOptions: summaryScoped(parsePytestOptions),
	ParserPytestV2:      summaryScoped(parsePytestV2),
	ParserDjango:        parseDjango,
	ParserSympy:         parseSympy,
	ParserSeaborn:       summaryScoped(parseSeaborn),
	ParserMatplotlib:    summaryScoped(parseMatplotlib),
	ParserUnittest:      parseUnittest,
}

// summaryHeader opens pytest's -rA "short test summary info" section.
var summaryHeader = regexp.MustCompile(`^(?:\x1b\[[0-9;]*m)*=+ short test summary info =+`)

// summaryScoped guards a pytest-family parser against forged status lines.
// The harness reads "PASSED x" anywhere in the log, so a patch that prints
// such a line (captured output is replayed by -rA; atexit output follows
// it) could pass tests it fails. When the log has summary sections, only
// lines inside them (header to the next "=" line) are read, each section
// on its own, and a test seen in several keeps its worst status, so neither
// output before the real summary nor after it can upgrade a failure. Nested
// pytest runs (pytest's own tests) print sections of their own; their ids
// are relative to a temporary folder and do not collide with real ones.
func summaryScoped(parse Parser) Parser {
	return func(log string) event.StatusMap {
		var sections []string
		lines := splitLines(log)
		for i := 0; i < len(lines); i++ {
			if !summaryHeader.MatchString(lines[i]) {
				continue
			}
			j := i + 1
			for j < len(lines) && !strings.HasPrefix(stripControl(lines[j]), "=") {
				j++
			}
			sections = append(sections, strings.Join(lines[i+1:j], "\n"))
			i = j - 1
		}
		if len(sections) == 0 {
			return parse(log)
		}
		m := event.StatusMap{}
		for _, sec := range sections {
			for id, st := range parse(sec) {
				if old, ok := m[id]; !ok || statusRank(st) <= statusRank(old) {
					m[id] = st
				}
			}
		}
		// The harness reads every line, and published PASS_TO_PASS lists
		// hold the pseudo-tests that gives outside the summary: pytest -v's
		// progress column on a line of its own ("PASSED [100%]" yields
		// "[100%]", "PASSED [ 50%]" yields "["), as in replayed output of
		// nested runs (pytest-dev__pytest-5227). Take those as the harness
		// does, last line winning; they are no test a patch could fail.
		for id, st := range parse(log) {
			if isPseudoTest(id) {
				m[id] = st
			}
		}
		return m
	}
}

// isPseudoTest says whether a parsed id is a fragment of pytest's progress
// column rather than a test: every real id starts with its file's path.
func isPseudoTest(id string) bool { return strings.HasPrefix(id, "[") }

// statusRank orders statuses from worst (failures) to best.
func statusRank(s event.Status) int {
	switch s {
	case event.Failed, event.Errored:
		return 0
	case event.Skipped:
		return 1
	case event.XFail:
		return 2
	case event.Passed:
		return 3
	}
	return -1 // an unknown word (the harness's quirks) counts as worst
}

// parserAliases maps the harness's per-repository parser names (its
// parse_log_<name> functions) onto the parser they are bound to.
var parserAliases = map[string]string{
	"astroid":      ParserPytest,
	"flask":        ParserPytest,
	"marshmallow":  ParserPytest,
	"pvlib":        ParserPytest,
	"pyvista":      ParserPytest,
	"sqlfluff":     ParserPytest,
	"xarray":       ParserPytest,
	"pydicom":      ParserPytestOptions,
	"requests":     ParserPytestOptions,
	"pylint":       ParserPytestOptions,
	"astropy":      ParserPytestV2,
	"scikit":       ParserPytestV2,
	"scikit-learn": ParserPytestV2,
	"sphinx":       ParserPytestV2,
}

// repoParsers is the harness's MAP_REPO_TO_PARSER for Python repositories.
var repoParsers = map[string]string{
	"astropy/astropy":              ParserPytestV2,
	"django/django":                ParserDjango,
	"marshmallow-code/marshmallow": ParserPytest,
	"matplotlib/matplotlib":        ParserMatplotlib,
	"mwaskom/seaborn":              ParserSeaborn,
	"pallets/flask":                ParserPytest,
	"psf/requests":                 ParserPytestOptions,
	"pvlib/pvlib-python":           ParserPytest,
	"pydata/xarray":                ParserPytest,
	"pydicom/pydicom":              ParserPytestOptions,
	"pylint-dev/astroid":           ParserPytest,
	"pylint-dev/pylint":            ParserPytestOptions,
	"pytest-dev/pytest":            ParserPytest,
	"pyvista/pyvista":              ParserPytest,
	"scikit-learn/scikit-learn":    ParserPytestV2,
	"sqlfluff/sqlfluff":            ParserPytest,
	"sphinx-doc/sphinx":            ParserPytestV2,
	"sympy/sympy":                  ParserSympy,
}

// ParserFor returns the parser registered under name (or one of the harness's
// per-repository aliases such as "requests" or "astropy").
func ParserFor(name string) (Parser, error) {
	if p, ok := parsers[name]; ok {
		return p, nil
	}
	if canon, ok := parserAliases[name]; ok {
		return parsers[canon], nil
	}
	return nil, fmt.Errorf("log parser %q: unknown (known: %s)", name, strings.Join(ParserNames(), ", "))
}

// ParserNames lists the canonical parser names and aliases, sorted.
func ParserNames() []string {
	names := make([]string, 0, len(parsers)+len(parserAliases))
	for n := range parsers {
		names = append(names, n)
	}
	for n := range parserAliases {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ParserNameForRepo is the parser the official harness uses for a repository
// ("owner/name"), and false for repositories it does not know.
func ParserNameForRepo(repo string) (string, bool) {
	n, ok := repoParsers[repo]
	return n, ok
}

func startsWithStatus(line string) bool {
	for _, s := range statuses {
		if strings.HasPrefix(line, string(s)) {
			return true
		}
	}
	return false
}

// splitLines splits like Python's str.split("\n").
func splitLines(log string) []string { return strings.Split(log, "\n") }

// spacedID recognises a parametrized pytest id containing spaces, such as
// "t.py::test_x[a b]", at the start of rest (the text after the status word).
// The harness keeps only the first whitespace-separated token, and published
// FAIL_TO_PASS lists hold that broken prefix ("t.py::test_x[a"), so parsers
// record the status under both the prefix and the whole id.
func spacedID(rest string) (string, bool) {
	if i := strings.Index(rest, " - "); i >= 0 {
		rest = rest[:i]
	}
	rest = strings.TrimRight(rest, " \t\r")
	first, _, found := strings.Cut(rest, " ")
	if !found || !strings.Contains(first, "::") || !strings.Contains(first, "[") || !strings.HasSuffix(rest, "]") {
		return "", false
	}
	return rest, true
}

// verboseLine matches pytest -v lines: "t.py::test_a PASSED   [ 10%]".
var verboseLine = regexp.MustCompile(`^(\S.*?::.*?) (PASSED|FAILED|SKIPPED|ERROR|XFAIL)(?:\s+\[\s*\d+%\])?\s*$`)

// pytestSummary parses the -rA short summary lines ("STATUS id [- reason]")
// as the harness does, with fix applied to each id.
func pytestSummary(log string, fix func(string) string, normalise func(string) string) event.StatusMap {
	m := event.StatusMap{}
	verbose := event.StatusMap{}
	for _, line := range splitLines(log) {
		if normalise != nil {
			line = normalise(line)
		}
		if !startsWithStatus(line) {
			if v := verboseLine.FindStringSubmatch(line); v != nil {
				verbose[fix(v[1])] = event.Status(v[2])
			}
			continue
		}
		status, rest, _ := strings.Cut(line, " ")
		if id, ok := spacedID(strings.TrimLeft(rest, " ")); ok {
			m[fix(id)] = event.Status(status)
		}
		if strings.HasPrefix(line, string(event.Failed)) {
			line = strings.ReplaceAll(line, " - ", " ")
		}
		f := strings.Fields(line)
		if len(f) <= 1 {
			continue
		}
		m[fix(f[1])] = event.Status(f[0])
	}
	// Summary lines come last in a pytest log and are authoritative; verbose
	// lines only fill in tests that have none (runs without -rA).
	for id, s := range verbose {
		if _, ok := m[id]; !ok {
			m[id] = s
		}
	}
	return m
}

func identity(s string) string { return s }

func parsePytest(log string) event.StatusMap { return pytestSummary(log, identity, nil) }

func parseMatplotlib(log string) event.StatusMap {
	return pytestSummary(log, identity, func(line string) string {
		line = strings.ReplaceAll(line, "MouseButton.LEFT", "1")
		return strings.ReplaceAll(line, "MouseButton.RIGHT", "3")
	})
}

var optionPattern = regexp.MustCompile(`^(.*?)\[(.*)\]`)

// shortenOption is the harness's parse_log_pytest_options id rewrite: a
// parametrize option that is an absolute path keeps only its last element.
func shortenOption(id string) string {
	g := optionPattern.FindStringSubmatch(id)
	if g == nil {
		return id
	}
	main, option := g[1], g[2]
	if strings.HasPrefix(option, "/") && !strings.HasPrefix(option, "//") && !strings.Contains(option, "*") {
		parts := strings.Split(option, "/")
		option = "/" + parts[len(parts)-1]
	}
	return main + "[" + option + "]"
}

func parsePytestOptions(log string) event.StatusMap { return pytestSummary(log, shortenOption, nil) }

var ansiColour = regexp.MustCompile(`\[(\d+)m`)

func stripControl(line string) string {
	line = ansiColour.ReplaceAllString(line, "")
	return strings.Map(func(r rune) rune {
		if r >= 1 && r < 32 {
			return -1
		}
		return r
	}, line)
}

// parsePytestV2 is the harness's parse_log_pytest_v2 (astropy, scikit-learn,
// sphinx): colour codes stripped, and old pytest's "id STATUS" lines read as
// the harness reads them (first token the id, second the status).
func parsePytestV2(log string) event.StatusMap {
	m := event.StatusMap{}
	for _, line := range splitLines(log) {
		line = stripControl(line)
		if startsWithStatus(line) {
			status, rest, _ := strings.Cut(line, " ")
			if id, ok := spacedID(strings.TrimLeft(rest, " ")); ok {
				m[id] = event.Status(status)
			}
			if strings.HasPrefix(line, string(event.Failed)) {
				line = strings.ReplaceAll(line, " - ", " ")
			}
			if f := strings.Fields(line); len(f) >= 2 {
				m[f[1]] = event.Status(f[0])
			}
			continue
		}
		for _, s := range statuses {
			if strings.HasSuffix(line, string(s)) {
				if f := strings.Fields(line); len(f) >= 2 {
					m[f[0]] = event.Status(f[1])
				}
				break
			}
		}
	}
	return m
}

func parseSeaborn(log string) event.StatusMap {
	m := event.StatusMap{}
	for _, line := range splitLines(log) {
		switch {
		case strings.HasPrefix(line, string(event.Failed)):
			if f := strings.Fields(line); len(f) >= 2 {
				m[f[1]] = event.Failed
			}
		case strings.Contains(line, " "+string(event.Passed)+" "):
			if f := strings.Fields(line); len(f) >= 2 && f[1] == string(event.Passed) {
				m[f[0]] = event.Passed
			}
		case strings.HasPrefix(line, string(event.Passed)):
			if f := strings.Fields(line); len(f) >= 2 {
				m[f[1]] = event.Passed
			}
		}
	}
	return m
}

var sympyFailure = regexp.MustCompile(`(_*) (.*)\.py:(.*) (_*)`)

// parseSympy reads bin/test --verbose: "test_name ok|F|E" lines, and the
// "____ path.py:test_name ____" headers of failure reports.
func parseSympy(log string) event.StatusMap {
	m := event.StatusMap{}
	for _, g := range sympyFailure.FindAllStringSubmatch(log, -1) {
		m[g[2]+".py:"+g[3]] = event.Failed
	}
	for _, line := range splitLines(log) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "test_") {
			continue
		}
		f := strings.Fields(line)
		if strings.HasSuffix(line, " E") {
			m[f[0]] = event.Errored
		}
		if strings.HasSuffix(line, " F") {
			m[f[0]] = event.Failed
		}
		if strings.HasSuffix(line, " ok") {
			m[f[0]] = event.Passed
		}
	}
	return m
}

var djangoPassedAfterNoise = []*regexp.Regexp{
	regexp.MustCompile(`(?m)^(.*?)\s\.\.\.\sTesting against Django installed in ((?s:.*?)) silenced\)\.\nok$`),
	regexp.MustCompile(`(?m)^(.*?)\s\.\.\.\sInternal Server Error: \/(.*)\/\nok$`),
	regexp.MustCompile(`(?m)^(.*?)\s\.\.\.\sSystem check identified no issues \(0 silenced\)\nok$`),
}

// parseDjango is the harness's parse_log_django for runtests.py --verbosity 2:
// "name ... ok|FAIL|ERROR|skipped", "FAIL: name" headers, and a result word
// pushed to the next line by the test's own output.
func parseDjango(log string) event.StatusMap {
	m := event.StatusMap{}
	prev := ""
	havePrev := false
	for _, line := range splitLines(log) {
		line = strings.TrimSpace(line)
		if strings.Contains(line, "--version is equivalent to version") {
			m["--version is equivalent to version"] = event.Passed
		}
		if strings.Contains(line, " ... ") {
			prev, havePrev = strings.SplitN(line, " ... ", 2)[0], true
		}
		for _, suffix := range []string{" ... ok", " ... OK", " ...  OK"} {
			if strings.HasSuffix(line, suffix) {
				if strings.HasPrefix(line, "Applying sites.0002_alter_domain_unique...test_no_migrations") {
					line = strings.TrimSpace(strings.SplitN(line, "...", 2)[1])
				}
				m[line[:strings.LastIndex(line, suffix)]] = event.Passed
				break
			}
		}
		if strings.Contains(line, " ... skipped") {
			m[strings.SplitN(line, " ... skipped", 2)[0]] = event.Skipped
		}
		if strings.HasSuffix(line, " ... FAIL") {
			m[strings.SplitN(line, " ... FAIL", 2)[0]] = event.Failed
		}
		if strings.HasPrefix(line, "FAIL:") {
			if f := strings.Fields(line); len(f) >= 2 {
				m[f[1]] = event.Failed
			}
		}
		if strings.HasSuffix(line, " ... ERROR") {
			m[strings.SplitN(line, " ... ERROR", 2)[0]] = event.Errored
		}
		if strings.HasPrefix(line, "ERROR:") {
			if f := strings.Fields(line); len(f) >= 2 {
				m[f[1]] = event.Errored
			}
		}
		if strings.HasPrefix(line, "ok") && havePrev {
			m[prev] = event.Passed
		}
	}
	for _, re := range djangoPassedAfterNoise {
		for _, g := range re.FindAllStringSubmatch(log, -1) {
			m[g[1]] = event.Passed
		}
	}
	return m
}

// unittestResult maps the words `python -m unittest -v` prints after " ... ".
var unittestResult = map[string]event.Status{
	"ok":                 event.Passed,
	"FAIL":               event.Failed,
	"ERROR":              event.Errored,
	"expected failure":   event.XFail,
	"unexpected success": event.Failed,
}

// parseUnittest reads `python -m unittest -v` output: "test (mod.Class) ...
// ok|FAIL|ERROR|skipped 'why'|expected failure|unexpected success", with the
// result word possibly pushed to a later line by the test's own output, and
// the "FAIL: test (mod.Class)" headers of the failure reports.
func parseUnittest(log string) event.StatusMap {
	m := event.StatusMap{}
	pending := ""
	for _, line := range splitLines(log) {
		line = strings.TrimRight(line, " \r")
		if name, result, ok := strings.Cut(line, " ... "); ok {
			pending = ""
			if s, ok := unittestStatus(result); ok {
				m[name] = s
			} else {
				pending = name
			}
			continue
		}
		if h, ok := unittestHeader(line); ok {
			pending = ""
			if m[h.name] != event.Errored { // the report header repeats the verdict
				m[h.name] = h.status
			}
			continue
		}
		if pending != "" {
			if s, ok := unittestStatus(strings.TrimSpace(line)); ok {
				m[pending] = s
				pending = ""
			}
		}
	}
	return m
}

func unittestStatus(result string) (event.Status, bool) {
	if s, ok := unittestResult[result]; ok {
		return s, true
	}
	if strings.HasPrefix(result, "skipped") {
		return event.Skipped, true
	}
	return "", false
}

type unittestHead struct {
	name   string
	status event.Status
}

func unittestHeader(line string) (unittestHead, bool) {
	for prefix, s := range map[string]event.Status{"FAIL: ": event.Failed, "ERROR: ": event.Errored} {
		if strings.HasPrefix(line, prefix) {
			return unittestHead{strings.TrimSpace(line[len(prefix):]), s}, true
		}
	}
	return unittestHead{}, false
}
