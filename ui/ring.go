package ui

// ring is a bounded FIFO: once full, each Push drops the oldest value. It is
// how the console keeps memory flat over a 10,000-step run (history, logs,
// groups, events). The buffer grows on demand up to its capacity, so a ring
// per evaluation log costs nothing until lines arrive.
type ring[T any] struct {
	buf   []T
	start int // index of the oldest value once the buffer is full
	total int // values ever pushed: gives lines stable absolute positions
	limit int
}

func newRing[T any](capacity int) *ring[T] {
	if capacity < 1 {
		capacity = 1
	}
	return &ring[T]{limit: capacity}
}

// Push appends v, dropping the oldest value when the ring is full.
func (r *ring[T]) Push(v T) {
	r.total++
	if len(r.buf) < r.limit {
		r.buf = append(r.buf, v)
		return
	}
	r.buf[r.start] = v
	r.start = (r.start + 1) % r.limit
}

// Len is how many values the ring holds.
func (r *ring[T]) Len() int { return len(r.buf) }

// Total is how many values were ever pushed; Total()-Len() were dropped.
func (r *ring[T]) Total() int { return r.total }

// At returns the i-th held value, 0 being the oldest.
func (r *ring[T]) At(i int) T { return r.buf[(r.start+i)%len(r.buf)] }

// Ref points at the i-th held value, valid until the next Push.
func (r *ring[T]) Ref(i int) *T { return &r.buf[(r.start+i)%len(r.buf)] }

// Set replaces the i-th held value.
func (r *ring[T]) Set(i int, v T) { r.buf[(r.start+i)%len(r.buf)] = v }

// Last returns the newest value.
func (r *ring[T]) Last() (T, bool) {
	if len(r.buf) == 0 {
		var zero T
		return zero, false
	}
	return r.At(len(r.buf) - 1), true
}
