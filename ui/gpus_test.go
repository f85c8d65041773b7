package ui

import (
	"fmt"
	"testing"
	"time"

	"github.com/swetui/swetui/event"
)

// gpuEvents are the GPUs' reports after each of steps: two H100s, the
// second slower in training at the last.
func gpuEvents(steps ...int) []event.Event {
	var out []event.Event
	for i, step := range steps {
		n := time.Duration(i + 1)
		out = append(out, event.GPUs{Step: step, Shares: []event.GPUShare{
			{Device: "cuda:0 NVIDIA H100 80GB HBM3", Samples: 8 * int(n), Sample: n * 4100 * time.Millisecond, Train: n * 1200 * time.Millisecond,
				Collective: n * 300 * time.Millisecond, MemUsed: 61 << 30, MemTotal: 80 << 30},
			{Device: "cuda:1 NVIDIA H100 80GB HBM3", Samples: 7 * int(n), Sample: n * 4000 * time.Millisecond, Train: n * n * 1200 * time.Millisecond,
				Collective: n * 100 * time.Millisecond, MemUsed: 62 << 30, MemTotal: 80 << 30},
		}})
	}
	return out
}

// A GPU is behind when its training time is over 1.25 times the median's
// and 50 ms more.
func TestGPUsBehind(t *testing.T) {
	ms := func(ds ...int) []event.GPUShare {
		var out []event.GPUShare
		for _, d := range ds {
			out = append(out, event.GPUShare{Train: time.Duration(d) * time.Millisecond})
		}
		return out
	}
	for _, tt := range []struct {
		train []int
		want  map[int]bool
	}{
		{[]int{1000}, nil},
		{[]int{1000, 1000}, map[int]bool{}},
		{[]int{1000, 1300}, map[int]bool{}},        // median 1150: 1300 < 1437
		{[]int{1000, 2400}, map[int]bool{1: true}}, // median 1700: 2400 > 2125
		{[]int{100, 130, 100}, map[int]bool{}},     // 30 ms: within the 50 ms floor
		{[]int{1000, 1000, 1300}, map[int]bool{2: true}},
		{[]int{1000, 1000, 1200}, map[int]bool{}},
	} {
		got := gpusBehind(ms(tt.train...))
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("%v: behind %v, want %v", tt.train, got, tt.want)
		}
	}
}
