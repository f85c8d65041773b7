package verifier

import (
	"math"
	"sort"
)

// AUC is the area under the ROC curve of scores against labels: the
// chance that a positive scores above a negative, ties counting half
// (the Mann-Whitney U over the pairs). NaN without both labels.
func AUC(scores []float64, labels []bool) float64 {
	type pt struct {
		s   float64
		pos bool
	}
	pts := make([]pt, len(scores))
	for i := range scores {
		pts[i] = pt{scores[i], labels[i]}
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i].s < pts[j].s })
	var pos, neg, rankSum float64
	for i := 0; i < len(pts); {
		j := i
		for j < len(pts) && pts[j].s == pts[i].s {
			j++
		}
		rank := float64(i+j+1) / 2 // the tied run's mean rank, from 1
		for k := i; k < j; k++ {
			if pts[k].pos {
				pos++
				rankSum += rank
			} else {
				neg++
			}
		}
		i = j
	}
	if pos == 0 || neg == 0 {
		return math.NaN()
	}
	return (rankSum - pos*(pos+1)/2) / (pos * neg)
}

// Sigmoid is 1/(1+e^-x).
func Sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// ECE is the expected calibration error of probabilities against labels
// over bins equal-width bins: the bins' |accuracy - confidence| weighted
// by their share of the examples (Guo et al., 2017).
func ECE(probs []float64, labels []bool, bins int) float64 {
	count := make([]float64, bins)
	conf := make([]float64, bins)
	acc := make([]float64, bins)
	for i, p := range probs {
		b := min(int(p*float64(bins)), bins-1)
		count[b]++
		conf[b] += p
		if labels[i] {
			acc[b]++
		}
	}
	e := 0.0
	for b := range bins {
		if count[b] > 0 {
			e += math.Abs(acc[b]-conf[b]) / float64(len(probs))
		}
	}
	return e
}

// NLL is the mean negative log-likelihood of labels under
// sigmoid(logit / t).
func NLL(logits []float64, labels []bool, t float64) float64 {
	s := 0.0
	for i, z := range logits {
		p := Sigmoid(z / t)
		if labels[i] {
			s -= math.Log(max(p, 1e-12))
		} else {
			s -= math.Log(max(1-p, 1e-12))
		}
	}
	return s / float64(len(logits))
}

// FitTemperature is the temperature scaling of Guo et al. (2017): the t in
// [0.05, 20] that minimises NLL(logits, labels, t), by golden-section
// search on log t.
func FitTemperature(logits []float64, labels []bool) float64 {
	lo, hi := math.Log(0.05), math.Log(20)
	g := (math.Sqrt(5) - 1) / 2
	f := func(x float64) float64 { return NLL(logits, labels, math.Exp(x)) }
	a, b := hi-g*(hi-lo), lo+g*(hi-lo)
	fa, fb := f(a), f(b)
	for range 100 {
		if fa < fb {
			hi, b, fb = b, a, fa
			a = hi - g*(hi-lo)
			fa = f(a)
		} else {
			lo, a, fa = a, b, fb
			b = lo + g*(hi-lo)
			fb = f(b)
		}
	}
	return math.Exp((lo + hi) / 2)
}

// Threshold is a decision threshold and what it gives.
type Threshold struct {
	At        float64 `json:"at"`
	Precision float64 `json:"precision"`
	Recall    float64 `json:"recall"`
	F1        float64 `json:"f1"`
}

// BestThreshold is the threshold on probs (one of them: at or above it is
// YES) with the highest F1 against labels; ties keep the higher
// threshold, which spares more Docker runs.
func BestThreshold(probs []float64, labels []bool) Threshold {
	var best Threshold
	for _, at := range probs {
		var tp, fp, fn float64
		for i, p := range probs {
			switch {
			case p >= at && labels[i]:
				tp++
			case p >= at:
				fp++
			case labels[i]:
				fn++
			}
		}
		if tp == 0 {
			continue
		}
		t := Threshold{At: at, Precision: tp / (tp + fp), Recall: tp / (tp + fn)}
		t.F1 = 2 * t.Precision * t.Recall / (t.Precision + t.Recall)
		if t.F1 > best.F1 || t.F1 == best.F1 && at > best.At {
			best = t
		}
	}
	return best
}

// Logistic is a logistic regression: P(yes) = sigmoid(w·x + b).
type Logistic struct {
	W []float64
	B float64
}

// Score is the model's logit of x.
func (m Logistic) Score(x []float64) float64 {
	z := m.B
	for i, w := range m.W {
		z += w * x[i]
	}
	return z
}

// FitLogistic fits a logistic regression of labels on features by
// gradient descent on the mean log-loss (a small L2 term keeps separable
// data finite): the baseline the verifier must beat.
func FitLogistic(features [][]float64, labels []bool) Logistic {
	if len(features) == 0 {
		return Logistic{}
	}
	m := Logistic{W: make([]float64, len(features[0]))}
	const lr, l2 = 0.5, 1e-3
	n := float64(len(features))
	for range 2000 {
		gw := make([]float64, len(m.W))
		gb := 0.0
		for i, x := range features {
			y := 0.0
			if labels[i] {
				y = 1
			}
			d := Sigmoid(m.Score(x)) - y
			for j := range gw {
				gw[j] += d * x[j] / n
			}
			gb += d / n
		}
		for j := range m.W {
			m.W[j] -= lr * (gw[j] + l2*m.W[j])
		}
		m.B -= lr * gb
	}
	return m
}

// BaselineFeatures are what the baseline knows of a candidate: whether its
// patch applied and its size (log lines).
func BaselineFeatures(e Example) []float64 {
	applied := 0.0
	if e.Applied {
		applied = 1
	}
	lines := 0
	for _, c := range e.Patch {
		if c == '\n' {
			lines++
		}
	}
	return []float64{applied, math.Log1p(float64(lines))}
}
