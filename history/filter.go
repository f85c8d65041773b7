package history

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Filter selects completions; NoFilter selects every one. The fields
// combine (all must hold); range bounds are inclusive.
type Filter struct {
	Task             string // a substring of the instance id
	MinStep, MaxStep int    // 0 = no bound
	Phase            string // "" any
	Outcome          string // one of Outcomes, "" any
	MinReward        float64
	MaxReward        float64 // NaN = no bound (see NoFilter)
	MinAdv, MaxAdv   float64 // NaN = no bound
	Text             string  // a substring of the completion (read from the file)
	SortBy           string  // "step" (default), "reward", "advantage"
	Descending       bool
}

// NoFilter selects every completion in step order.
func NoFilter() Filter {
	nan := math.NaN()
	return Filter{MinReward: nan, MaxReward: nan, MinAdv: nan, MaxAdv: nan}
}

// Outcomes are the names Filter.Outcome takes, each a test on an Entry.
var Outcomes = func() map[string]func(*Entry) bool {
	m := map[string]func(*Entry) bool{
		"malformed": func(e *Entry) bool { return !e.Has(Valid) },
		"valid":     func(e *Entry) bool { return e.Has(Valid) },
		"applied":   func(e *Entry) bool { return e.Has(Applied) },
		"resolved":  func(e *Entry) bool { return e.Has(Resolved) },
		"noop":      func(e *Entry) bool { return e.Has(Noop) },
		"infra":     func(e *Entry) bool { return e.Has(Infra) },
		"truncated": func(e *Entry) bool { return e.Has(Truncated) },
		"flagged":   func(e *Entry) bool { return e.Has(Flagged) },
	}
	for _, h := range HackNames {
		bit := hackBit[h]
		m[h] = func(e *Entry) bool { return e.Has(bit) }
	}
	return m
}()

// OutcomeNames are Outcomes' keys in a fixed order, for help and cycling.
var OutcomeNames = append([]string{"malformed", "valid", "applied", "resolved", "noop", "infra", "truncated", "flagged"}, HackNames...)

// Select returns the positions in ix.Entries that f selects, sorted as it
// says. text, when f.Text is set, returns a completion's text (a lazy read).
func (ix *Index) Select(f Filter, text func(Entry) string) ([]int, error) {
	outcome := Outcomes[f.Outcome]
	if f.Outcome != "" && outcome == nil {
		return nil, fmt.Errorf("history: no outcome %q (one of %s)", f.Outcome, strings.Join(OutcomeNames, ", "))
	}
	phase := -1
	if f.Phase != "" {
		if phase = slices.Index(Phases, f.Phase); phase < 0 {
			return nil, fmt.Errorf("history: no phase %q (one of %s)", f.Phase, strings.Join(Phases, ", "))
		}
	}
	var tasks map[uint32]bool
	if f.Task != "" {
		tasks = map[uint32]bool{}
		for i, t := range ix.Tasks {
			if strings.Contains(t, f.Task) {
				tasks[uint32(i)] = true
			}
		}
	}
	in := func(v float64, lo, hi float64) bool {
		return (math.IsNaN(lo) || v >= lo-1e-6) && (math.IsNaN(hi) || v <= hi+1e-6)
	}
	var out []int
	for i := range ix.Entries {
		e := &ix.Entries[i]
		switch {
		case tasks != nil && !tasks[e.Task],
			f.MinStep > 0 && int(e.Step) < f.MinStep,
			f.MaxStep > 0 && int(e.Step) > f.MaxStep,
			phase >= 0 && int(e.Phase) != phase,
			outcome != nil && !outcome(e),
			!in(float64(e.Reward), f.MinReward, f.MaxReward),
			!in(float64(e.Advantage), f.MinAdv, f.MaxAdv):
			continue
		}
		if f.Text != "" && (text == nil || !strings.Contains(text(*e), f.Text)) {
			continue
		}
		out = append(out, i)
	}
	key := func(i int) float64 {
		switch f.SortBy {
		case "reward":
			return float64(ix.Entries[i].Reward)
		case "advantage":
			return float64(ix.Entries[i].Advantage)
		}
		return float64(ix.Entries[i].Step)
	}
	slices.SortStableFunc(out, func(a, b int) int {
		c := cmp.Compare(key(a), key(b))
		if f.Descending {
			return -c
		}
		return c
	})
	return out, nil
}

// ParseFilter reads a filter from words such as
// "task=slug step=10-20 phase=docker outcome=applied reward>=0.3 adv<0
// text=foo sort=-reward", each word one condition.
func ParseFilter(s string) (Filter, error) {
	f := NoFilter()
	for _, w := range strings.Fields(s) {
		k, v, op := splitCond(w)
		num := func() (float64, error) {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("filter %q: %q is not a number", w, v)
			}
			return x, nil
		}
		switch k {
		case "task":
			f.Task = v
		case "phase":
			f.Phase = v
		case "outcome", "is":
			f.Outcome = v
		case "text":
			f.Text = v
		case "sort":
			f.Descending = strings.HasPrefix(v, "-")
			f.SortBy = strings.TrimPrefix(v, "-")
			if !slices.Contains([]string{"step", "reward", "advantage"}, f.SortBy) {
				return f, fmt.Errorf("filter %q: sort by step, reward or advantage", w)
			}
		case "step":
			lo, hi, ok := strings.Cut(v, "-")
			a, err1 := strconv.Atoi(lo)
			b := a
			var err2 error
			if ok {
				b, err2 = strconv.Atoi(hi)
			}
			if err1 != nil || err2 != nil {
				return f, fmt.Errorf("filter %q: step=N or step=N-M", w)
			}
			f.MinStep, f.MaxStep = a, b
		case "reward", "adv", "advantage":
			x, err := num()
			if err != nil {
				return f, err
			}
			lo, hi := &f.MinReward, &f.MaxReward
			if k != "reward" {
				lo, hi = &f.MinAdv, &f.MaxAdv
			}
			switch op {
			case ">=", ">":
				*lo = x
			case "<=", "<":
				*hi = x
			default:
				*lo, *hi = x, x
			}
		default:
			return f, fmt.Errorf("filter %q: no key %q (task, step, phase, outcome, reward, adv, text, sort)", w, k)
		}
	}
	return f, nil
}

// splitCond splits "key=v", "key>=v", "key<=v", "key>v", "key<v".
func splitCond(w string) (key, value, op string) {
	for _, o := range []string{">=", "<=", "=", ">", "<"} {
		if i := strings.Index(w, o); i > 0 {
			return w[:i], w[i+len(o):], o
		}
	}
	return w, "", ""
}
