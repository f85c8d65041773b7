package prompt

import (
	"math"
	"slices"
	"testing"
)

// Hand-computed: N = 3 documents of 3, 2 and 4 terms (avgdl 3), k1 = 1.2,
// b = 0.75. idf(x) = ln(1 + 2.5/1.5) = 0.980829, idf(z) = ln(1 + 1.5/2.5) =
// 0.470004; d0 has x twice at average length: 0.980829·2·2.2/(2 + 1.2) =
// 1.348640; d1 has z once, dl 2: 0.470004·2.2/(1 + 1.2·0.75) = 0.544215;
// d2 has z three times, dl 4: 0.470004·6.6/(3 + 1.2·1.25) = 0.689339.
func TestBM25HandComputed(t *testing.T) {
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-6 }
	for _, tt := range []struct {
		n, df int
		want  float64
	}{{3, 1, 0.980829}, {3, 2, 0.470004}, {3, 3, 0.133531}, {10, 0, 3.091042}} {
		if got := BM25IDF(tt.n, tt.df); !near(got, tt.want) {
			t.Errorf("BM25IDF(%d, %d) = %.6f, want %.6f", tt.n, tt.df, got, tt.want)
		}
	}
	if got := BM25TermScore(0.980829, 2, 3, 3, BM25K1, BM25B); !near(got, 1.348640) {
		t.Errorf("term score %.6f", got)
	}
	if got := BM25TermScore(1, 0, 3, 3, BM25K1, BM25B); got != 0 {
		t.Errorf("an absent term scores %v", got)
	}
	ix := NewBM25Index([][]string{{"x", "y", "x"}, {"y", "z"}, {"z", "z", "z", "w"}})
	got := ix.Scores([]string{"x", "z", "x", "unknown"}) // repeats and unknown terms add nothing
	want := []float64{1.348640, 0.544215, 0.689339}
	for i := range want {
		if !near(got[i], want[i]) {
			t.Errorf("doc %d: %.6f, want %.6f", i, got[i], want[i])
		}
	}
	if s := NewBM25Index(nil).Scores([]string{"x"}); len(s) != 0 {
		t.Errorf("empty index: %v", s)
	}
}

func TestBM25Terms(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"Fix parse_args in getUserName()", []string{"fix", "parse_args", "parse", "args", "getusername", "get", "user", "name"}},
		{"the HTTPError is a b", []string{"httperror"}},
		{"x = load(path, 42)", []string{"load", "path", "42"}},
		{"__init__ naïve", []string{"__init__", "init", "naïve"}},
	}
	for _, tt := range tests {
		if got := BM25Terms(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("BM25Terms(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
