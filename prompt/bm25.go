package prompt

import (
	"math"
	"strings"
	"unicode"
)

// Okapi BM25 (Robertson and Zaragoza's formulation, as Lucene and pyserini
// score; SWE-bench's bm25_13K/27K prompts were retrieved with pyserini).
// The parameters are the textbook ones.
const (
	BM25K1 = 1.2  // term-frequency saturation
	BM25B  = 0.75 // document-length normalisation
)

// BM25IDF is a term's inverse document frequency among n documents, df of
// which hold it: ln(1 + (n - df + 0.5) / (df + 0.5)), never negative.
func BM25IDF(n, df int) float64 {
	return math.Log(1 + (float64(n)-float64(df)+0.5)/(float64(df)+0.5))
}

// BM25TermScore is one query term's share of a document's score: idf times
// tf·(k1+1) / (tf + k1·(1 - b + b·docLen/avgLen)).
func BM25TermScore(idf float64, tf, docLen int, avgLen, k1, b float64) float64 {
	if tf == 0 {
		return 0
	}
	norm := 1 - b
	if avgLen > 0 {
		norm += b * float64(docLen) / avgLen
	}
	return idf * float64(tf) * (k1 + 1) / (float64(tf) + k1*norm)
}

// BM25Index holds the term counts of a set of documents.
type BM25Index struct {
	tf     []map[string]int
	length []int
	df     map[string]int
	avgLen float64
}

// NewBM25Index indexes docs, each a list of terms (BM25Terms).
func NewBM25Index(docs [][]string) *BM25Index {
	ix := &BM25Index{tf: make([]map[string]int, len(docs)), length: make([]int, len(docs)), df: map[string]int{}}
	total := 0
	for i, terms := range docs {
		m := make(map[string]int, len(terms)/2+1)
		for _, t := range terms {
			m[t]++
		}
		for t := range m {
			ix.df[t]++
		}
		ix.tf[i], ix.length[i] = m, len(terms)
		total += len(terms)
	}
	if len(docs) > 0 {
		ix.avgLen = float64(total) / float64(len(docs))
	}
	return ix
}

// Scores is every document's BM25 score for query, each distinct query term
// counted once.
func (ix *BM25Index) Scores(query []string) []float64 {
	out := make([]float64, len(ix.tf))
	seen := map[string]bool{}
	for _, q := range query {
		if seen[q] || ix.df[q] == 0 {
			continue
		}
		seen[q] = true
		idf := BM25IDF(len(ix.tf), ix.df[q])
		for i, m := range ix.tf {
			out[i] += BM25TermScore(idf, m[q], ix.length[i], ix.avgLen, BM25K1, BM25B)
		}
	}
	return out
}

// bm25Stopwords are Lucene's English stop words: in an issue they match
// every docstring and say nothing of where the bug is.
var bm25Stopwords = map[string]bool{}

func init() {
	for _, w := range strings.Fields("a an and are as at be but by for if in into is it no not of on or such that the their then there these they this to was will with") {
		bm25Stopwords[w] = true
	}
}

// BM25Terms splits text into lower-case terms: each word of letters, digits
// and underscores, and, for an identifier such as parse_args, parseArgs or
// __init__, its parts too, so an issue naming a function matches both its
// definition and prose about it. Stop words and one-letter terms are left
// out.
func BM25Terms(text string) []string {
	var out []string
	add := func(t string) {
		if len(t) > 1 && !bm25Stopwords[t] {
			out = append(out, t)
		}
	}
	isWord := func(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }
	for _, w := range strings.FieldsFunc(text, func(r rune) bool { return !isWord(r) }) {
		lower := strings.ToLower(w)
		add(lower)
		if parts := identParts(w); len(parts) > 1 || len(parts) == 1 && parts[0] != w {
			for _, p := range parts {
				add(strings.ToLower(p))
			}
		}
	}
	return out
}

// identParts splits an identifier at underscores and lower-to-upper case
// changes: "parse_args" and "parseArgs" -> "parse", "args" (an acronym
// stays whole: "HTTPError" -> "HTTPError").
func identParts(w string) []string {
	var parts []string
	for _, s := range strings.FieldsFunc(w, func(r rune) bool { return r == '_' }) {
		start, prev := 0, rune(0)
		for i, r := range s {
			if i > 0 && unicode.IsUpper(r) && unicode.IsLower(prev) {
				parts = append(parts, s[start:i])
				start = i
			}
			prev = r
		}
		parts = append(parts, s[start:])
	}
	return parts
}
