package task

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// The generator models each template's Python function in Go, so that it
// knows, before anything runs, which inputs expose a planted bug (they become
// FAIL_TO_PASS tests) and which do not (PASS_TO_PASS). These are the Python
// values the models use: int, float64, string, bool, nil (None), []any
// (list), dict (a str -> int dict) and pyErr (an exception).

type dict map[string]int

// pyErr is an exception a call raises.
type pyErr struct{ typ string }

// pyRepr writes v as Python's repr would.
func pyRepr(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case int:
		return strconv.Itoa(x)
	case float64:
		// 'f' matches repr for the magnitudes the templates produce (repr
		// switches to exponents only below 1e-4 and from 1e16).
		s := strconv.FormatFloat(x, 'f', -1, 64)
		if !strings.ContainsAny(s, ".n") {
			s += ".0"
		}
		return s
	case string:
		q := "'"
		if strings.Contains(x, "'") && !strings.Contains(x, `"`) {
			q = `"`
		}
		s := strings.ReplaceAll(x, `\`, `\\`)
		if q == "'" {
			s = strings.ReplaceAll(s, "'", `\'`)
		}
		return q + s + q
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = pyRepr(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case dict:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = pyRepr(k) + ": " + strconv.Itoa(x[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case pyErr:
		return x.typ
	default:
		panic(fmt.Sprintf("pyRepr: unsupported %T", v))
	}
}

// pyArgs writes a call's argument list.
func pyArgs(args []any) string {
	parts := make([]string, len(args))
	for i, a := range args {
		parts[i] = pyRepr(a)
	}
	return strings.Join(parts, ", ")
}

// pyEqual is Python's == on the model's values (1 == 1.0 included).
func pyEqual(a, b any) bool {
	if _, ok := a.(pyErr); ok {
		return false
	}
	if _, ok := b.(pyErr); ok {
		return false
	}
	if x, ok := num(a); ok {
		if y, ok := num(b); ok {
			return x == y
		}
	}
	return reflect.DeepEqual(a, b)
}

func num(v any) (float64, bool) {
	switch x := v.(type) {
	case int:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

func ints(xs ...int) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

func strs(xs ...string) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}
