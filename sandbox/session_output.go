package sandbox

import (
	"fmt"
	"io"
	"sync"
)

// A session command's output on its way back: gated once given up on,
// bounded to its head and tail as it streams.

// gateWriter passes writes on until it is closed, then drops them: a
// stream given up on may still be writing.
type gateWriter struct {
	mu     sync.Mutex
	w      io.Writer
	closed bool
}

func (g *gateWriter) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return len(p), nil
	}
	return g.w.Write(p)
}

func (g *gateWriter) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// headTail keeps the first and last halves of at most max bytes written,
// counting all of them: a command's output, bounded as it streams.
type headTail struct {
	max  int
	head []byte
	tail []byte // a ring of the last max/2 bytes once the head is full
	pos  int    // next write in tail
	full bool   // the ring has wrapped
	n    int64
}

func newHeadTail(max int) *headTail { return &headTail{max: max} }

func (h *headTail) Write(p []byte) (int, error) {
	h.n += int64(len(p))
	written := len(p)
	if room := h.max/2 + h.max%2 - len(h.head); room > 0 {
		k := min(room, len(p))
		h.head = append(h.head, p[:k]...)
		p = p[k:]
	}
	half := h.max / 2
	if half == 0 {
		return written, nil
	}
	for len(p) > 0 {
		if len(h.tail) < half {
			k := min(half-len(h.tail), len(p))
			h.tail = append(h.tail, p[:k]...)
			p = p[k:]
			continue
		}
		k := copy(h.tail[h.pos:], p)
		h.pos, p = (h.pos+k)%half, p[k:]
		h.full = true
	}
	return written, nil
}

// omitted is how many bytes written were not kept.
func (h *headTail) omitted() int64 {
	return max(0, h.n-int64(len(h.head)+len(h.tail)))
}

// String is the kept output, the cut said where it is.
func (h *headTail) String() string {
	tail := h.tail
	if h.full {
		tail = append(append([]byte(nil), h.tail[h.pos:]...), h.tail[:h.pos]...)
	}
	if cut := h.n - int64(len(h.head)+len(tail)); cut > 0 {
		return fmt.Sprintf("%s\n... [%d bytes not shown] ...\n%s", h.head, cut, tail)
	}
	return string(h.head) + string(tail)
}
