package task

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

var hunkHeader = regexp.MustCompile(`^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$`)

// TrimContext keeps at most n lines of context before the first and after
// the last change of each hunk of a unified diff, with the hunk headers
// recounted: the same edit, with fewer lines a writer must copy exactly.
// git apply and patch read it as they read the original (a hunk keeps at
// least one line of context where it had one, so it is never taken for
// -U0). Context between two changes of a hunk is kept. Lines outside hunks
// are copied as they are. n < 1 returns patch unchanged; a hunk whose body
// does not match its header is an error naming it.
func TrimContext(patch string, n int) (string, error) {
	if n < 1 {
		return patch, nil
	}
	lines := strings.SplitAfter(patch, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	var out strings.Builder
	for i := 0; i < len(lines); {
		m := hunkHeader.FindStringSubmatch(strings.TrimRight(lines[i], "\r\n"))
		if m == nil {
			out.WriteString(lines[i])
			i++
			continue
		}
		h := strings.TrimSpace(lines[i])
		oldStart, oldCount := hunkNumbers(m[1], m[2])
		newStart, newCount := hunkNumbers(m[3], m[4])
		// The body: lines until both counts are used up, each with any
		// "\ No newline at end of file" marker that follows it.
		var body [][]string
		for o, w, j := oldCount, newCount, i+1; o > 0 || w > 0; j++ {
			if j >= len(lines) {
				return "", fmt.Errorf("trim context: hunk %q: body shorter than its header says", h)
			}
			l := lines[j]
			switch l[0] {
			case ' ', '\n', '\r':
				o--
				w--
			case '-':
				o--
			case '+':
				w--
			default:
				return "", fmt.Errorf("trim context: hunk %q: line %d is not a hunk line", h, j+1)
			}
			if o < 0 || w < 0 {
				return "", fmt.Errorf("trim context: hunk %q: body longer than its header says", h)
			}
			entry := []string{l}
			if j+1 < len(lines) && strings.HasPrefix(lines[j+1], `\`) {
				j++
				entry = append(entry, lines[j])
			}
			body = append(body, entry)
			i = j
		}
		i++
		if i < len(lines) && strings.ContainsRune(" +-", rune(lines[i][0])) && !strings.HasPrefix(lines[i], "--- ") {
			return "", fmt.Errorf("trim context: hunk %q: body longer than its header says", h)
		}
		isContext := func(e []string) bool { return e[0][0] != '-' && e[0][0] != '+' }
		lead := 0
		for lead < len(body) && isContext(body[lead]) {
			lead++
		}
		trail := 0
		for trail < len(body)-lead && isContext(body[len(body)-1-trail]) {
			trail++
		}
		dropLead, dropTrail := max(lead-n, 0), max(trail-n, 0)
		if lead == len(body) { // all context: nothing to trim around
			dropLead, dropTrail = 0, 0
		}
		oldStart += dropLead
		newStart += dropLead
		oldCount -= dropLead + dropTrail
		newCount -= dropLead + dropTrail
		fmt.Fprintf(&out, "@@ -%s +%s @@%s\n", headerRange(oldStart, oldCount), headerRange(newStart, newCount), m[5])
		for _, e := range body[dropLead : len(body)-dropTrail] {
			out.WriteString(strings.Join(e, ""))
		}
	}
	return out.String(), nil
}

// hunkNumbers reads a hunk header's "start[,count]" (count defaults to 1).
func hunkNumbers(start, count string) (int, int) {
	s, _ := strconv.Atoi(start)
	c := 1
	if count != "" {
		c, _ = strconv.Atoi(count)
	}
	return s, c
}

// headerRange writes a 1-based "start,count" the way git does (a count of
// one is left out).
func headerRange(start, count int) string {
	if count == 1 {
		return strconv.Itoa(start)
	}
	return fmt.Sprintf("%d,%d", start, count)
}
