package task

import (
	"math/rand/v2"
	"sort"
)

// The templates over lists and tallies: counting, chunking, averaging,
// searching, merging and the median.

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
