package task

import (
	"math/rand/v2"
	"strconv"
	"strings"
)

// The templates over text and formatted values: money, initials, codes,
// normalisation, truncation and durations.

func tplMoney(r *rand.Rand) fnInst {
	nm := pick(r, [][2]string{{"format_price", "cents"}, {"money", "amount_cents"}, {"format_total", "cents"}})
	cur := pick(r, []string{"$", "USD ", "EUR "})
	n, c := nm[0], nm[1]
	src := func(bug string) string {
		spec := ":02d"
		if bug != "" {
			spec = ""
		}
		return fill(`def <<n>>(<<c>>):
    """Format an amount in cents as "<<cur>>D.CC", e.g. <<n>>(1234) == "<<cur>>12.34"."""
    return f"<<cur>>{<<c>> // 100}.{<<c>> % 100`+spec+`}"
`, "n", n, "c", c, "cur", cur)
	}
	eval := func(bug string, a []any) any {
		v := a[0].(int)
		cents := strconv.Itoa(v % 100)
		if bug == "" && len(cents) < 2 {
			cents = "0" + cents
		}
		return cur + strconv.Itoa(v/100) + "." + cents
	}
	var cases [][]any
	for i := 0; i < 8; i++ {
		cases = append(cases, []any{between(r, 1, 999)*100 + (i%2)*between(r, 10, 99) + (1-i%2)*between(r, 0, 9)})
	}
	return fnInst{n, src, eval, []bugDef{{"fmt", FamFormatting, "pads_cents"}}, cases}
}

func tplInitials(r *rand.Rand) fnInst {
	nm := pick(r, [][2]string{{"initials", "name"}, {"monogram", "full_name"}, {"short_name", "person"}})
	n, x := nm[0], nm[1]
	src := func(bug string) string {
		guard := "    if not <<x>>:\n        return \"\"\n"
		if bug != "" {
			guard = ""
		}
		return fill(`def <<n>>(<<x>>):
    """Return the upper-case initials of <<x>>; "" when <<x>> is empty or None."""
`+guard+`    return "".join(part[0].upper() for part in <<x>>.split())
`, "n", n, "x", x)
	}
	eval := func(bug string, a []any) any {
		if a[0] == nil {
			if bug != "" {
				return pyErr{"AttributeError"}
			}
			return ""
		}
		var b strings.Builder
		for _, p := range strings.Fields(a[0].(string)) {
			b.WriteString(strings.ToUpper(p[:1]))
		}
		return b.String()
	}
	people := []string{"ada lovelace", "grace hopper", "alan mathison turing", "linus", "edsger wybe dijkstra",
		"barbara liskov", "ken thompson", "margaret hamilton", "donald knuth", "frances allen"}
	cases := [][]any{{nil}, {""}}
	r.Shuffle(len(people), func(i, j int) { people[i], people[j] = people[j], people[i] })
	for _, p := range people[:5] {
		cases = append(cases, []any{p})
	}
	return fnInst{n, src, eval, []bugDef{{"none", FamMissingCheck, "none_name"}}, cases}
}

func tplCode(r *rand.Rand) fnInst {
	nm := pick(r, [][2]string{{"is_valid_pin", "pin"}, {"is_valid_zip", "code"}, {"is_valid_otp", "token"}})
	n, c := nm[0], nm[1]
	size := between(r, 4, 6)
	src := func(bug string) string {
		op := "and"
		if bug != "" {
			op = "or"
		}
		return fill(`def <<n>>(<<c>>):
    """Return True when <<c>> is exactly <<size>> digits."""
    return len(<<c>>) == <<size>> <<op>> <<c>>.isdigit()
`, "n", n, "c", c, "size", strconv.Itoa(size), "op", op)
	}
	eval := func(bug string, a []any) any {
		s := a[0].(string)
		digits := s != ""
		for _, ch := range s {
			if ch < '0' || ch > '9' {
				digits = false
			}
		}
		if bug != "" {
			return len(s) == size || digits
		}
		return len(s) == size && digits
	}
	digits := func(k int) string {
		var b strings.Builder
		for i := 0; i < k; i++ {
			b.WriteByte(byte('0' + r.IntN(10)))
		}
		return b.String()
	}
	withLetter := func(k int) string {
		b := []byte(digits(k))
		b[r.IntN(k)] = byte('a' + r.IntN(26))
		return string(b)
	}
	cases := [][]any{{digits(size)}, {digits(size)}, {withLetter(size)}, {digits(size - 1)},
		{digits(size + 2)}, {"abc"}, {withLetter(size + 1)}}
	return fnInst{n, src, eval, []bugDef{{"or", FamBoolOperator, "rejects_bad_length"}}, cases}
}

func tplNormalize(r *rand.Rand) fnInst {
	nm := pick(r, [][2]string{{"normalize_tag", "tag"}, {"clean_username", "name"}, {"canonical_key", "key"}})
	n, t := nm[0], nm[1]
	src := func(bug string) string {
		body := "<<t>>.strip().lower()"
		if bug != "" {
			body = "<<t>>.lower()"
		}
		return fill(`def <<n>>(<<t>>):
    """Return <<t>> in lower case without surrounding whitespace."""
    return `+body+`
`, "n", n, "t", t)
	}
	eval := func(bug string, a []any) any {
		s := a[0].(string)
		if bug == "" {
			s = strings.TrimSpace(s)
		}
		return strings.ToLower(s)
	}
	words := []string{"Python", "RUST", "data", "Mixed Case", "go", "SQL", "web Dev", "Linux"}
	var cases [][]any
	for i := 0; i < 7; i++ {
		w := pick(r, words)
		if i%2 == 1 {
			w = strings.Repeat(" ", between(r, 0, 2)) + w + strings.Repeat(" ", between(r, 1, 2))
		}
		cases = append(cases, []any{w})
	}
	return fnInst{n, src, eval, []bugDef{{"strip", FamNormalization, "surrounding_spaces"}}, cases}
}

func tplTruncate(r *rand.Rand) fnInst {
	nm := pick(r, [][3]string{{"truncate", "text", "limit"}, {"shorten", "title", "width"}, {"clip_label", "label", "max_len"}})
	n, t, l := nm[0], nm[1], nm[2]
	src := func(bug string) string {
		cmp, cut := "<=", "3"
		switch bug {
		case "cmp":
			cmp = "<"
		case "obo":
			cut = "2"
		}
		return fill(`def <<n>>(<<t>>, <<l>>):
    """Return <<t>> cut to at most <<l>> characters, ending with "..." when it was cut."""
    if len(<<t>>) <<cmp>> <<l>>:
        return <<t>>
    return <<t>>[:<<l>> - <<cut>>] + "..."
`, "n", n, "t", t, "l", l, "cmp", cmp, "cut", cut)
	}
	eval := func(bug string, a []any) any {
		s, lim := a[0].(string), a[1].(int)
		fits := len(s) <= lim
		if bug == "cmp" {
			fits = len(s) < lim
		}
		if fits {
			return s
		}
		cut := 3
		if bug == "obo" {
			cut = 2
		}
		return s[:min(len(s), max(0, lim-cut))] + "..."
	}
	texts := []string{"hello world", "release notes", "quarterly report", "hi", "meeting at noon", "short", "a longer sentence here"}
	var cases [][]any
	for i := 0; i < 8; i++ {
		s := pick(r, texts)
		var lim int
		switch i % 3 {
		case 0:
			lim = len(s)
		case 1:
			lim = len(s) + between(r, 1, 4)
		default:
			lim = max(4, len(s)-between(r, 1, 6))
		}
		if lim < 4 {
			lim = 4
		}
		cases = append(cases, []any{s, lim})
	}
	return fnInst{n, src, eval, []bugDef{
		{"cmp", FamComparison, "exact_fit"},
		{"obo", FamOffByOne, "cut_length"},
	}, cases}
}

func tplDuration(r *rand.Rand) fnInst {
	nm := pick(r, [][2]string{{"format_duration", "seconds"}, {"clock", "total_seconds"}, {"mm_ss", "secs"}})
	n, s := nm[0], nm[1]
	src := func(bug string) string {
		spec := ":02d"
		if bug != "" {
			spec = ""
		}
		return fill(`def <<n>>(<<s>>):
    """Format a number of seconds as "M:SS", e.g. <<n>>(125) == "2:05"."""
    return f"{<<s>> // 60}:{<<s>> % 60`+spec+`}"
`, "n", n, "s", s)
	}
	eval := func(bug string, a []any) any {
		v := a[0].(int)
		sec := strconv.Itoa(v % 60)
		if bug == "" && len(sec) < 2 {
			sec = "0" + sec
		}
		return strconv.Itoa(v/60) + ":" + sec
	}
	var cases [][]any
	for i := 0; i < 8; i++ {
		cases = append(cases, []any{between(r, 0, 59)*60 + (i%2)*between(r, 10, 59) + (1-i%2)*between(r, 0, 9)})
	}
	return fnInst{n, src, eval, []bugDef{{"fmt", FamFormatting, "pads_seconds"}}, cases}
}
