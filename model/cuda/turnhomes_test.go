package cuda

import "testing"

// A trajectory's next turn goes to the rank that played its last one; a
// context that extends none has no home; the bound forgets the oldest.
func TestTurnHomes(t *testing.T) {
	var h turnHomes
	h.keep(1, []int{1, 2, 3}, []int{4, 5, 9}, 3) // holds 1 2 3 4 5
	h.keep(0, []int{1, 2, 3}, []int{7, 9}, 3)    // another trajectory of the same prompt: 1 2 3 7
	h.keep(2, []int{8, 8}, []int{9}, 3)          // holds 8 8
	for _, tt := range []struct {
		context []int
		want    int
	}{
		{[]int{1, 2, 3, 4, 5, 6}, 1},
		{[]int{1, 2, 3, 7, 1}, 0},
		{[]int{1, 2, 3, 4, 5}, -1}, // a proper prefix only: nothing to add is no turn
		{[]int{1, 2, 3}, -1},
		{[]int{8, 8, 0}, 2},
		{[]int{5}, -1},
	} {
		if got := h.of(tt.context); got != tt.want {
			t.Errorf("home of %v: %d, want %d", tt.context, got, tt.want)
		}
	}
	// The trajectory's next turn replaces its last: still three kept.
	h.keep(1, []int{1, 2, 3, 4, 5, 6}, []int{6, 9}, 3)
	if len(h.homes) != 3 || h.of([]int{1, 2, 3, 4, 5, 6, 6, 0}) != 1 {
		t.Errorf("after the next turn: %+v", h.homes)
	}
	h.keep(0, []int{4}, []int{4, 9}, 3)
	if len(h.homes) != 3 || h.of([]int{1, 2, 3, 7, 1}) != -1 {
		t.Errorf("the oldest is not forgotten: %+v", h.homes)
	}
}
