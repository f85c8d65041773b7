package reward

import (
	"context"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/task"
)

// shaping is what the shaping terms (similarity, hunk credit, the no-op
// check) need for one group: the base files and the oracle, read once.
type shaping struct {
	base      map[string]string // path -> content at base_commit; nil when unknown
	oracle    []FileDiff        // the gold patch; nil when it has none or it does not parse
	oracleRes map[string]*fileResult
}

// shapingOn reports whether any shaping term counts.
func (w Weights) shapingOn() bool {
	return w.SimilarityWeight > 0 || w.HunkCredit > 0 || w.RejectNoop
}

// newShaping parses the gold patch and reads, through the Applier, the base
// files that it and patches touch. Without an Applier, or when the files
// cannot be read, base stays nil and the terms use the diffs as they are:
// shaping never makes an infrastructure failure.
func (s *Scorer) newShaping(ctx context.Context, inst *task.Instance, patches []*Patch) *shaping {
	sh := &shaping{}
	var paths []string
	seen := map[string]bool{}
	add := func(p *Patch) {
		for _, q := range p.Paths() {
			if !seen[q] {
				seen[q] = true
				paths = append(paths, q)
			}
		}
	}
	if inst.Patch != "" {
		if p, err := ValidateDiff(NormalizeDiff(inst.Patch)); err == nil {
			sh.oracle = p.Files
			add(p)
		}
	}
	for _, p := range patches {
		if p != nil {
			add(p)
		}
	}
	if s.Applier == nil || len(paths) == 0 {
		return sh
	}
	if err := s.acquire(ctx); err != nil {
		return sh
	}
	base, err := s.Applier.ReadFiles(ctx, inst, paths)
	s.release()
	if err != nil {
		return sh
	}
	sh.base = base
	if sh.oracle != nil {
		sh.oracleRes = applyPatch(sh.oracle, base)
	}
	return sh
}

// shape fills r's shaping components from its patch p (r.Patch parsed):
// the no-op flag, the similarity to the gold patch and, for a patch that
// does not apply as a whole, how many of its hunks apply on their own.
func (sh *shaping) shape(r *event.Verdict, p *Patch) {
	if r.Infra || p == nil {
		return
	}
	files := p.Files
	var res map[string]*fileResult
	if sh.base != nil {
		res = applyPatch(files, sh.base)
	}
	r.Noop = r.Noop || noopFiles(files) || (res != nil && noopResult(res))
	if sh.oracle != nil {
		r.Similarity = similarity(files, res, sh.oracle, sh.oracleRes)
	}
	switch {
	case r.Applied:
		for _, f := range files {
			r.HunksTotal += len(f.hunks)
		}
		r.HunksApplied = r.HunksTotal
	case sh.base != nil:
		r.HunksApplied, r.HunksTotal = hunksApplying(files, sh.base)
	}
}

// similarity is PatchSimilarity of pred against oracle. A path that every
// side touching it applied in memory is compared re-diffed (ChangedLines on
// its base and patched lines), any other as the diffs write it
// (FileChanges): the two sides of a path are always in the same form.
// res and oracleRes are nil when the base files are unknown.
func similarity(pred []FileDiff, res map[string]*fileResult, oracle []FileDiff, oracleRes map[string]*fileResult) float64 {
	rawP, rawO := FileChanges(pred), FileChanges(oracle)
	touched := func(files []FileDiff) map[string]bool {
		t := map[string]bool{}
		for _, f := range files {
			t[f.Path()] = true
		}
		return t
	}
	inP, inO := touched(pred), touched(oracle)
	applied := func(res map[string]*fileResult, path string) bool {
		r := res[path]
		return r != nil && r.ok
	}
	p, o := map[string]string{}, map[string]string{}
	put := func(m map[string]string, path, change string) {
		if change != "" {
			m[path] = change
		}
	}
	union := map[string]bool{}
	for _, set := range []map[string]bool{inP, inO} {
		for path := range set {
			union[path] = true
		}
	}
	for path := range union {
		if (!inP[path] || applied(res, path)) && (!inO[path] || applied(oracleRes, path)) {
			if inP[path] {
				put(p, path, ChangedLines(res[path].old, res[path].new))
			}
			if inO[path] {
				put(o, path, ChangedLines(oracleRes[path].old, oracleRes[path].new))
			}
			continue
		}
		put(p, path, rawP[path])
		put(o, path, rawO[path])
	}
	return PatchSimilarity(p, o)
}
