package event

import (
	"math"
	"slices"
	"testing"
)

func TestPackTokens(t *testing.T) {
	tests := []struct {
		ids    []int
		lps    []float64
		wantLp []float64
	}{
		{nil, nil, nil},
		{[]int{5, 300, 151643}, []float64{-0.01, -2.3, -40}, []float64{0, -2.25, -31.875}},
		{[]int{7}, []float64{math.NaN()}, []float64{-31.875}},
	}
	for _, tt := range tests {
		ids, lps, err := UnpackTokens(PackTokens(tt.ids, tt.lps))
		if err != nil || !slices.Equal(ids, tt.ids) || !slices.Equal(lps, tt.wantLp) {
			t.Errorf("round trip of %v %v: %v %v %v, want logprobs %v", tt.ids, tt.lps, ids, lps, err, tt.wantLp)
		}
	}
	if _, _, err := UnpackTokens("!!"); err == nil {
		t.Error("not base64: no error")
	}
	if _, _, err := UnpackTokens(PackTokens([]int{1 << 20}, []float64{0})[:3]); err == nil {
		t.Error("truncated: no error")
	}
}
