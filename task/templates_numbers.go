package task

import (
	"math/rand/v2"
	"strconv"
)

// The templates of arithmetic rules: clamping, grouping, percentages,
// grade and fee thresholds, discounts and leap years.

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
