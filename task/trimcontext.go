package task

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

var hunkHeader = regexp.MustCompile(`^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$`)

// TrimContext keeps at most keep lines of context before the first and after
// the last change of each hunk of a unified diff, with the hunk headers
// recounted: the same edit, with fewer lines a writer must copy exactly.
// git apply and patch read it as they read the original (a hunk keeps at
// least one line of context where it had one, so it is never taken for
// -U0). Context between two changes of a hunk is kept. Lines outside hunks
// are copied as they are. keep < 1 returns patch unchanged; a hunk whose body
// does not match its header is an error naming it.
func TrimContext(patch string, keep int) (string, error) {
	if keep < 1 {
		return patch, nil
	}
	lines := strings.Split(patch, "\n")
	ended := lines[len(lines)-1] == "" // the patch's last line has its newline
	if ended {
		lines = lines[:len(lines)-1]
	}
	var out []string
	for i := 0; i < len(lines); {
		m := hunkHeader.FindStringSubmatch(strings.TrimSuffix(lines[i], "\r"))
		if m == nil {
			out = append(out, lines[i])
			i++
			continue
		}
		h := strings.TrimSpace(lines[i])
		oldStart, oldCount := hunkNumbers(m[1], m[2])
		newStart, newCount := hunkNumbers(m[3], m[4])
		// The body as PatchFiles reads it, then held to the header: each line
		// with any "\ No newline at end of file" marker that follows it.
		rest := lines[i+1:]
		n := hunkLength(lines[i], rest)
		var body [][]string
		o, w := 0, 0
		for _, l := range rest[:n] {
			switch {
			case strings.HasPrefix(l, `\`):
				if len(body) > 0 {
					body[len(body)-1] = append(body[len(body)-1], l)
				}
				continue
			case strings.HasPrefix(l, "-"):
				o++
			case strings.HasPrefix(l, "+"):
				w++
			default:
				o++
				w++
			}
			body = append(body, []string{l})
		}
		switch {
		case o > oldCount || w > newCount || n < len(rest) && rest[n] != "" && strings.ContainsRune(" +-", rune(rest[n][0])) && !strings.HasPrefix(rest[n], "--- "):
			return "", fmt.Errorf("trim context: hunk %q: body longer than its header says", h)
		case (o < oldCount || w < newCount) && n < len(rest):
			return "", fmt.Errorf("trim context: hunk %q: line %d is not a hunk line", h, i+n+2)
		case o < oldCount || w < newCount:
			return "", fmt.Errorf("trim context: hunk %q: body shorter than its header says", h)
		}
		i += 1 + n
		isContext := func(e []string) bool { return !strings.HasPrefix(e[0], "-") && !strings.HasPrefix(e[0], "+") }
		lead := 0
		for lead < len(body) && isContext(body[lead]) {
			lead++
		}
		trail := 0
		for trail < len(body)-lead && isContext(body[len(body)-1-trail]) {
			trail++
		}
		dropLead, dropTrail := max(lead-keep, 0), max(trail-keep, 0)
		if lead == len(body) { // all context: nothing to trim around
			dropLead, dropTrail = 0, 0
		}
		oldStart += dropLead
		newStart += dropLead
		oldCount -= dropLead + dropTrail
		newCount -= dropLead + dropTrail
		out = append(out, fmt.Sprintf("@@ -%s +%s @@%s", headerRange(oldStart, oldCount), headerRange(newStart, newCount), m[5]))
		for _, e := range body[dropLead : len(body)-dropTrail] {
			out = append(out, e...)
		}
	}
	if ended {
		out = append(out, "")
	}
	return strings.Join(out, "\n"), nil
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
