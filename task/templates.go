package task

import (
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
)

// A function template is a small, genuine Python function with a few
// names and constants drawn at random, the bugs that can be planted in it,
// and a Go model of what every variant returns, from which the generator
// picks the inputs that expose the bug (FAIL_TO_PASS) and those that do not
// (PASS_TO_PASS).

// Bug families.
const (
	FamComparison    = "comparison"     // < vs <=, > vs >=
	FamOffByOne      = "off-by-one"     // range/slice bounds
	FamWrongConstant = "wrong-constant" // a threshold or rate that is off
	FamSwappedArgs   = "swapped-args"   // arguments passed in the wrong order
	FamMissingCheck  = "missing-check"  // no None/empty guard
	FamWrongReturn   = "wrong-return"   // returns the wrong value on one path
	FamFormatting    = "formatting"     // wrong format spec
	FamBoolOperator  = "bool-operator"  // and vs or
	FamNormalization = "normalization"  // missing strip
	FamLostUpdate    = "lost-update"    // = instead of accumulating
	FamWrongOperator = "wrong-operator" // + vs -
	FamMissingCase   = "missing-case"   // a rule left out of a condition
)

type bugDef struct {
	id     string // the variant passed to src and eval
	family string
	slug   string // names the FAIL_TO_PASS test
}

// fnInst is one drawn instance of a template.
type fnInst struct {
	name  string // the function the tests call
	src   func(bug string) string
	eval  func(bug string, args []any) any
	bugs  []bugDef
	cases [][]any
}

type fnTemplate struct {
	id   string
	make func(r *rand.Rand) fnInst
}

// fill replaces <<key>> markers; Python's own braces stay untouched.
func fill(s string, kv ...string) string {
	pairs := make([]string, 0, len(kv))
	for i := 0; i+1 < len(kv); i += 2 {
		pairs = append(pairs, "<<"+kv[i]+">>", kv[i+1])
	}
	return strings.NewReplacer(pairs...).Replace(s)
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

func between(r *rand.Rand, lo, hi int) int { return lo + r.IntN(hi-lo+1) }

func randInts(r *rand.Rand, n, lo, hi int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = between(r, lo, hi)
	}
	return out
}

func anyInts(xs []int) []any { return ints(xs...) }

func asInts(v any) []int {
	l := v.([]any)
	out := make([]int, len(l))
	for i, x := range l {
		out[i] = x.(int)
	}
	return out
}

func floorDiv(a, b int) int {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

var templates = []fnTemplate{
	{"count", tplCount},
	{"clamp", tplClamp},
	{"chunk", tplChunk},
	{"groups", tplGroups},
	{"money", tplMoney},
	{"mean", tplMean},
	{"initials", tplInitials},
	{"percent", tplPercent},
	{"grade", tplGrade},
	{"fee", tplFee},
	{"code", tplCode},
	{"normalize", tplNormalize},
	{"index", tplIndex},
	{"merge", tplMerge},
	{"truncate", tplTruncate},
	{"duration", tplDuration},
	{"median", tplMedian},
	{"discount", tplDiscount},
	{"leap", tplLeap},
}

func tplCount(r *rand.Rand) fnInst {
	strict := r.IntN(2) == 0
	names := pick(r, [][3]string{{"count_at_least", "values", "limit"}, {"count_passing", "scores", "pass_mark"}, {"count_heavy", "weights", "min_weight"}})
	op, bad, what := ">=", ">", "at least"
	if strict {
		names = pick(r, [][3]string{{"count_above", "values", "limit"}, {"count_over_budget", "costs", "budget"}, {"count_late", "delays", "grace"}})
		op, bad, what = ">", ">=", "greater than"
	}
	n, xs, lim := names[0], names[1], names[2]
	src := func(bug string) string {
		o := op
		if bug != "" {
			o = bad
		}
		return fill(`def <<n>>(<<xs>>, <<lim>>):
    """Return how many of <<xs>> are <<what>> <<lim>>."""
    return sum(1 for x in <<xs>> if x <<op>> <<lim>>)
`, "n", n, "xs", xs, "lim", lim, "what", what, "op", o)
	}
	eval := func(bug string, a []any) any {
		ge := !strict
		if bug != "" {
			ge = !ge
		}
		c, l := 0, a[1].(int)
		for _, x := range asInts(a[0]) {
			if x > l || (ge && x == l) {
				c++
			}
		}
		return c
	}
	var cases [][]any
	for i := 0; i < 8; i++ {
		l := between(r, 5, 15)
		xs := randInts(r, between(r, 3, 6), 0, 20)
		if i%2 == 0 {
			xs[r.IntN(len(xs))] = l
		} else {
			for j := range xs {
				if xs[j] == l {
					xs[j] = l + 1
				}
			}
		}
		cases = append(cases, []any{anyInts(xs), l})
	}
	return fnInst{n, src, eval, []bugDef{{"cmp", FamComparison, "counts_boundary"}}, cases}
}

func tplClamp(r *rand.Rand) fnInst {
	nm := pick(r, [][4]string{{"clamp", "value", "low", "high"}, {"limit_volume", "level", "quiet", "loud"}, {"fit_range", "x", "lo", "hi"}})
	n, v, lo, hi := nm[0], nm[1], nm[2], nm[3]
	src := func(bug string) string {
		ret := hi
		if bug != "" {
			ret = lo
		}
		return fill(`def <<n>>(<<v>>, <<lo>>, <<hi>>):
    """Limit <<v>> to the range <<lo>>..<<hi>> (both ends included)."""
    if <<v>> < <<lo>>:
        return <<lo>>
    if <<v>> > <<hi>>:
        return <<ret>>
    return <<v>>
`, "n", n, "v", v, "lo", lo, "hi", hi, "ret", ret)
	}
	eval := func(bug string, a []any) any {
		x, l, h := a[0].(int), a[1].(int), a[2].(int)
		switch {
		case x < l:
			return l
		case x > h && bug != "":
			return l
		case x > h:
			return h
		}
		return x
	}
	var cases [][]any
	for i := 0; i < 8; i++ {
		l := between(r, 0, 10)
		h := l + between(r, 5, 20)
		var x int
		switch i % 3 {
		case 0:
			x = l - between(r, 1, 5)
		case 1:
			x = between(r, l, h)
		default:
			x = h + between(r, 1, 9)
		}
		cases = append(cases, []any{x, l, h})
	}
	return fnInst{n, src, eval, []bugDef{{"ret", FamWrongReturn, "above_range"}}, cases}
}

func tplChunk(r *rand.Rand) fnInst {
	nm := pick(r, [][3]string{{"chunk", "items", "size"}, {"batches", "records", "batch_size"}, {"split_pages", "lines", "per_page"}})
	n, items, size := nm[0], nm[1], nm[2]
	src := func(bug string) string {
		stop := "len(<<items>>)"
		if bug != "" {
			stop = "len(<<items>>) - 1"
		}
		return fill(`def <<n>>(<<items>>, <<size>>):
    """Split <<items>> into consecutive lists of <<size>> elements; the last may be shorter."""
    return [<<items>>[i:i + <<size>>] for i in range(0, `+stop+`, <<size>>)]
`, "n", n, "items", items, "size", size)
	}
	eval := func(bug string, a []any) any {
		xs, s := a[0].([]any), a[1].(int)
		stop := len(xs)
		if bug != "" {
			stop--
		}
		out := []any{}
		for i := 0; i < stop; i += s {
			out = append(out, append([]any{}, xs[i:min(i+s, len(xs))]...))
		}
		return out
	}
	var cases [][]any
	for i := 0; i < 8; i++ {
		s := between(r, 2, 4)
		l := between(r, 2, 10)
		cases = append(cases, []any{anyInts(randInts(r, l, 1, 9)), s})
	}
	return fnInst{n, src, eval, []bugDef{{"obo", FamOffByOne, "keeps_last_item"}}, cases}
}

func tplGroups(r *rand.Rand) fnInst {
	nm := pick(r, [][3]string{{"page_count", "total", "per_page"}, {"boxes_needed", "items", "per_box"}, {"trips_needed", "passengers", "seats"}})
	n, total, per := nm[0], nm[1], nm[2]
	src := func(bug string) string {
		body := "(<<total>> + <<per>> - 1) // <<per>>"
		if bug != "" {
			body = "<<total>> // <<per>> + 1"
		}
		return fill(`def <<n>>(<<total>>, <<per>>):
    """Return how many groups of at most <<per>> are needed for <<total>> items."""
    return `+body+`
`, "n", n, "total", total, "per", per)
	}
	eval := func(bug string, a []any) any {
		t, p := a[0].(int), a[1].(int)
		if bug != "" {
			return floorDiv(t, p) + 1
		}
		return floorDiv(t+p-1, p)
	}
	var cases [][]any
	for i := 0; i < 8; i++ {
		p := between(r, 2, 8)
		t := p*between(r, 1, 6) + (i%2)*between(r, 1, p-1)
		cases = append(cases, []any{t, p})
	}
	return fnInst{n, src, eval, []bugDef{{"obo", FamOffByOne, "exact_multiple"}}, cases}
}

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

func tplMean(r *rand.Rand) fnInst {
	nm := pick(r, [][2]string{{"mean", "values"}, {"average_score", "scores"}, {"mean_latency", "samples"}})
	n, xs := nm[0], nm[1]
	src := func(bug string) string {
		guard := "    if not <<xs>>:\n        return None\n"
		if bug != "" {
			guard = ""
		}
		return fill(`def <<n>>(<<xs>>):
    """Return the arithmetic mean of <<xs>>, or None when there are none."""
`+guard+`    return sum(<<xs>>) / len(<<xs>>)
`, "n", n, "xs", xs)
	}
	eval := func(bug string, a []any) any {
		v := asInts(a[0])
		if len(v) == 0 {
			if bug != "" {
				return pyErr{"ZeroDivisionError"}
			}
			return nil
		}
		s := 0
		for _, x := range v {
			s += x
		}
		return float64(s) / float64(len(v))
	}
	cases := [][]any{{[]any{}}}
	for i := 0; i < 6; i++ {
		l := between(r, 1, 5)
		v := randInts(r, l, 0, 40)
		// A whole mean keeps the test literals short (12.0, not 12.333...).
		s := 0
		for _, x := range v {
			s += x
		}
		v[0] += (l - s%l) % l
		cases = append(cases, []any{anyInts(v)})
	}
	return fnInst{n, src, eval, []bugDef{{"empty", FamMissingCheck, "empty_input"}}, cases}
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

func tplPercent(r *rand.Rand) fnInst {
	nm := pick(r, [][4]string{{"progress_label", "done", "total", "percent"}, {"completion", "finished", "planned", "share_percent"}, {"upload_status", "sent", "size", "as_percent"}})
	n, done, total, pct := nm[0], nm[1], nm[2], nm[3]
	src := func(bug string) string {
		args := "<<done>>, <<total>>"
		if bug != "" {
			args = "<<total>>, <<done>>"
		}
		return fill(`def <<pct>>(part, whole):
    """Return part as a whole-number percentage of whole (rounded down)."""
    return 100 * part // whole


def <<n>>(<<done>>, <<total>>):
    """Return a label such as "40%" for <<done>> out of <<total>>."""
    return f"{<<pct>>(`+args+`)}%"
`, "n", n, "done", done, "total", total, "pct", pct)
	}
	eval := func(bug string, a []any) any {
		d, t := a[0].(int), a[1].(int)
		if bug != "" {
			d, t = t, d
		}
		if t == 0 {
			return pyErr{"ZeroDivisionError"}
		}
		return strconv.Itoa(floorDiv(100*d, t)) + "%"
	}
	var cases [][]any
	for i := 0; i < 7; i++ {
		t := between(r, 2, 20)
		d := between(r, 1, t-1)
		if i%3 == 0 {
			d = t
		}
		cases = append(cases, []any{d, t})
	}
	return fnInst{n, src, eval, []bugDef{{"swap", FamSwappedArgs, "partial_progress"}}, cases}
}

func tplGrade(r *rand.Rand) fnInst {
	nm := pick(r, [][2]string{{"letter_grade", "score"}, {"grade", "points"}, {"rating", "percent"}})
	n, s := nm[0], nm[1]
	t1 := pick(r, []int{90, 85, 80})
	t2 := t1 - pick(r, []int{10, 15})
	t3 := t2 - pick(r, []int{10, 15})
	src := func(bug string) string {
		op1, c2 := ">=", t2
		switch bug {
		case "const":
			c2 = t2 + 5
		case "cmp":
			op1 = ">"
		}
		return fill(`def <<n>>(<<s>>):
    """Return "A" for <<s>> >= <<t1>>, "B" for >= <<t2>>, "C" for >= <<t3>>, otherwise "F"."""
    if <<s>> <<op1>> <<t1>>:
        return "A"
    if <<s>> >= <<c2>>:
        return "B"
    if <<s>> >= <<t3>>:
        return "C"
    return "F"
`, "n", n, "s", s, "t1", strconv.Itoa(t1), "t2", strconv.Itoa(t2), "t3", strconv.Itoa(t3),
			"op1", op1, "c2", strconv.Itoa(c2))
	}
	eval := func(bug string, a []any) any {
		x := a[0].(int)
		b1, b2 := x >= t1, x >= t2
		switch bug {
		case "const":
			b2 = x >= t2+5
		case "cmp":
			b1 = x > t1
		}
		switch {
		case b1:
			return "A"
		case b2:
			return "B"
		case x >= t3:
			return "C"
		}
		return "F"
	}
	cases := [][]any{{t1}, {t2}, {t2 + 2}, {t3 + 1}, {between(r, t1+1, 100)}, {between(r, 0, t3-1)}, {t1 - 1}}
	return fnInst{n, src, eval, []bugDef{
		{"const", FamWrongConstant, "b_threshold"},
		{"cmp", FamComparison, "a_boundary"},
	}, cases}
}

func tplFee(r *rand.Rand) fnInst {
	nm := pick(r, [][3]string{{"shipping_cost", "weight", "SHIPPING"}, {"parking_fee", "hours", "PARKING"}, {"overage_charge", "gigabytes", "DATA"}})
	n, w, p := nm[0], nm[1], nm[2]
	base, free, rate := between(r, 2, 9), between(r, 1, 5), between(r, 2, 6)
	src := func(bug string) string {
		rt := rate
		if bug != "" {
			rt = rate + 1
		}
		return fill(`<<p>>_BASE = <<base>>
<<p>>_FREE = <<free>>
<<p>>_RATE = <<rt>>


def <<n>>(<<w>>):
    """Return <<base>> plus <<rate>> for every unit of <<w>> above <<free>>."""
    extra = max(0, <<w>> - <<p>>_FREE)
    return <<p>>_BASE + <<p>>_RATE * extra
`, "n", n, "w", w, "p", p, "base", strconv.Itoa(base), "free", strconv.Itoa(free),
			"rate", strconv.Itoa(rate), "rt", strconv.Itoa(rt))
	}
	eval := func(bug string, a []any) any {
		x, rt := a[0].(int), rate
		if bug != "" {
			rt++
		}
		return base + rt*max(0, x-free)
	}
	var cases [][]any
	for i := 0; i < 7; i++ {
		if i%2 == 0 {
			cases = append(cases, []any{between(r, 0, free)})
		} else {
			cases = append(cases, []any{free + between(r, 1, 12)})
		}
	}
	return fnInst{n, src, eval, []bugDef{{"const", FamWrongConstant, "above_free_allowance"}}, cases}
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

func tplIndex(r *rand.Rand) fnInst {
	nm := pick(r, [][3]string{{"find_index", "items", "target"}, {"position_of", "names", "wanted"}, {"locate", "values", "needle"}})
	n, items, target := nm[0], nm[1], nm[2]
	src := func(bug string) string {
		miss := "-1"
		if bug != "" {
			miss = "None"
		}
		return fill(`def <<n>>(<<items>>, <<target>>):
    """Return the position of the first of <<items>> equal to <<target>>, or -1 if there is none."""
    for i, item in enumerate(<<items>>):
        if item == <<target>>:
            return i
    return <<miss>>
`, "n", n, "items", items, "target", target, "miss", miss)
	}
	eval := func(bug string, a []any) any {
		for i, x := range a[0].([]any) {
			if x == a[1] {
				return i
			}
		}
		if bug != "" {
			return nil
		}
		return -1
	}
	pool := []string{"red", "green", "blue", "cyan", "amber", "teal", "plum"}
	var cases [][]any
	for i := 0; i < 7; i++ {
		r.Shuffle(len(pool), func(a, b int) { pool[a], pool[b] = pool[b], pool[a] })
		k := between(r, 2, 5)
		t := pool[r.IntN(k)]
		if i%3 == 2 {
			t = pool[k]
		}
		cases = append(cases, []any{strs(pool[:k]...), t})
	}
	return fnInst{n, src, eval, []bugDef{{"ret", FamWrongReturn, "missing_item"}}, cases}
}

func tplMerge(r *rand.Rand) fnInst {
	nm := pick(r, [][3]string{{"merge_counts", "a", "b"}, {"combine_tallies", "first", "second"}, {"add_inventories", "left", "right"}})
	n, a, b := nm[0], nm[1], nm[2]
	src := func(bug string) string {
		upd := "merged.get(key, 0) + count"
		if bug != "" {
			upd = "count"
		}
		return fill(`def <<n>>(<<a>>, <<b>>):
    """Combine two {name: count} tallies, adding the counts of names found in both."""
    merged = dict(<<a>>)
    for key, count in <<b>>.items():
        merged[key] = `+upd+`
    return merged
`, "n", n, "a", a, "b", b)
	}
	eval := func(bug string, args []any) any {
		out := dict{}
		for k, v := range args[0].(dict) {
			out[k] = v
		}
		for k, v := range args[1].(dict) {
			if bug != "" {
				out[k] = v
			} else {
				out[k] += v
			}
		}
		return out
	}
	keys := []string{"apple", "pear", "plum", "fig", "kiwi", "lime"}
	var cases [][]any
	for i := 0; i < 7; i++ {
		r.Shuffle(len(keys), func(x, y int) { keys[x], keys[y] = keys[y], keys[x] })
		d1, d2 := dict{}, dict{}
		k1 := between(r, 1, 3)
		for _, k := range keys[:k1] {
			d1[k] = between(r, 1, 9)
		}
		start := k1
		if i%2 == 0 {
			start = r.IntN(k1) // overlap
		}
		for _, k := range keys[start : start+between(r, 1, 2)] {
			d2[k] = between(r, 1, 9)
		}
		cases = append(cases, []any{d1, d2})
	}
	return fnInst{n, src, eval, []bugDef{{"lost", FamLostUpdate, "shared_names"}}, cases}
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

func tplMedian(r *rand.Rand) fnInst {
	nm := pick(r, [][2]string{{"median", "values"}, {"middle_value", "samples"}, {"median_price", "prices"}})
	n, xs := nm[0], nm[1]
	src := func(bug string) string {
		pair := "ordered[mid - 1] + ordered[mid]"
		if bug != "" {
			pair = "ordered[mid] + ordered[mid + 1]"
		}
		return fill(`def <<n>>(<<xs>>):
    """Return the median of a non-empty list of numbers."""
    ordered = sorted(<<xs>>)
    mid = len(ordered) // 2
    if len(ordered) % 2 == 1:
        return ordered[mid]
    return (`+pair+`) / 2
`, "n", n, "xs", xs)
	}
	eval := func(bug string, a []any) any {
		v := asInts(a[0])
		sort.Ints(v)
		mid := len(v) / 2
		if len(v)%2 == 1 {
			return v[mid]
		}
		i, j := mid-1, mid
		if bug != "" {
			i, j = mid, mid+1
		}
		if j >= len(v) {
			return pyErr{"IndexError"}
		}
		return float64(v[i]+v[j]) / 2
	}
	var cases [][]any
	for i := 0; i < 8; i++ {
		cases = append(cases, []any{anyInts(randInts(r, between(r, 1, 6), 0, 30))})
	}
	return fnInst{n, src, eval, []bugDef{{"obo", FamOffByOne, "even_length"}}, cases}
}

func tplDiscount(r *rand.Rand) fnInst {
	nm := pick(r, [][3]string{{"apply_discount", "price", "percent"}, {"sale_price", "cost", "off"}, {"reduced_fare", "fare", "rebate"}})
	n, p, pc := nm[0], nm[1], nm[2]
	src := func(bug string) string {
		op := "-"
		if bug != "" {
			op = "+"
		}
		return fill(`def <<n>>(<<p>>, <<pc>>):
    """Return <<p>> minus <<pc>> percent of it (the reduction is rounded down)."""
    return <<p>> <<op>> <<p>> * <<pc>> // 100
`, "n", n, "p", p, "pc", pc, "op", op)
	}
	eval := func(bug string, a []any) any {
		x, q := a[0].(int), a[1].(int)
		if bug != "" {
			return x + floorDiv(x*q, 100)
		}
		return x - floorDiv(x*q, 100)
	}
	var cases [][]any
	for i := 0; i < 7; i++ {
		q := 0
		if i%3 != 0 {
			q = pick(r, []int{5, 10, 15, 20, 25, 50})
		}
		cases = append(cases, []any{between(r, 20, 500), q})
	}
	return fnInst{n, src, eval, []bugDef{{"op", FamWrongOperator, "reduces_price"}}, cases}
}

func tplLeap(r *rand.Rand) fnInst {
	nm := pick(r, [][2]string{{"is_leap_year", "year"}, {"leap", "y"}, {"has_feb_29", "year"}})
	n, y := nm[0], nm[1]
	src := func(bug string) string {
		body := "<<y>> % 4 == 0 and (<<y>> % 100 != 0 or <<y>> % 400 == 0)"
		if bug != "" {
			body = "<<y>> % 4 == 0 and <<y>> % 100 != 0"
		}
		return fill(`def <<n>>(<<y>>):
    """Return True when <<y>> is a leap year in the Gregorian calendar."""
    return `+body+`
`, "n", n, "y", y)
	}
	eval := func(bug string, a []any) any {
		v := a[0].(int)
		if bug != "" {
			return v%4 == 0 && v%100 != 0
		}
		return v%4 == 0 && (v%100 != 0 || v%400 == 0)
	}
	cases := [][]any{{between(r, 1901, 2099) / 4 * 4}, {2023}, {1900}, {pick(r, []int{1600, 2000, 2400})}, {2100}, {between(r, 1801, 1899)}}
	return fnInst{n, src, eval, []bugDef{{"case", FamMissingCase, "every_400_years"}}, cases}
}
