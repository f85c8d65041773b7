package sandbox

import (
	"bytes"
	"strings"
	"sync"
)

// limitedBuffer keeps the first max bytes written to b and drops the rest
// without failing the write (a step's small output, read whole).
type limitedBuffer struct {
	b   *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// capWriter keeps the first max bytes written and signals full once when
// more arrive. It never fails a write, so the stream keeps draining.
type capWriter struct {
	mu        sync.Mutex
	max       int
	buf       bytes.Buffer
	truncated bool
	onLog     func([]byte)
	full      chan struct{}
	fullOnce  sync.Once
	panicV    any
	panicC    chan struct{} // closed when onLog panicked
	panicOnce sync.Once
}

func (w *capWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	keep := p
	if w.max > 0 {
		room := w.max - w.buf.Len()
		if room < 0 {
			room = 0
		}
		if len(keep) > room {
			keep = keep[:room]
			w.truncated = true
			w.fullOnce.Do(func() { close(w.full) })
		}
	}
	w.buf.Write(keep)
	w.mu.Unlock()
	if len(keep) > 0 && w.onLog != nil {
		// A consumer's panic ends the evaluation (ErrPanic), not the
		// engine's stream goroutine that called Write.
		defer func() {
			if v := recover(); v != nil {
				w.setPanic(v)
			}
		}()
		w.onLog(keep)
	}
	return len(p), nil
}

func (w *capWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func (w *capWriter) setPanic(v any) {
	w.panicOnce.Do(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.panicV = v
		close(w.panicC)
	})
}

func (w *capWriter) panicValue() any {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.panicV
}

// lineSplitter turns output chunks into batches of complete lines; the
// chunks Docker delivers are the natural batches.
type lineSplitter struct {
	partial []byte
	emit    func([]string)
}

func (s *lineSplitter) write(b []byte) {
	s.partial = append(s.partial, b...)
	i := strings.LastIndexByte(string(s.partial), '\n')
	if i < 0 {
		return
	}
	text := string(s.partial[:i])
	s.partial = append(s.partial[:0], s.partial[i+1:]...)
	s.emit(strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n"))
}

func (s *lineSplitter) flush() {
	if len(s.partial) > 0 {
		s.emit([]string{string(s.partial)})
		s.partial = nil
	}
}
