package task

import (
	"math/rand/v2"
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
