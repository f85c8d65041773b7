package serve

import (
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/task"
)

// instanceHash is a content hash of everything about an instance that its
// grading reads: its JSON (every dataset field) and the execution fields
// JSON leaves out. Two requests naming the same id with other contents do
// not share verdicts.
func instanceHash(in *task.Instance) (string, error) {
	b, err := json.Marshal(in)
	if err != nil {
		return "", fmt.Errorf("hash instance %s: %w", in.InstanceID, err)
	}
	h := sha256.New()
	h.Write(b)
	fmt.Fprintf(h, "\x00checkout_base=%v", in.CheckoutBase)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// cacheKey is the content hash of (instance, patch, phase).
func cacheKey(instHash, phase, patch string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", instHash, phase)
	h.Write([]byte(patch))
	return hex.EncodeToString(h.Sum(nil))
}

// cache keeps the last verdicts by key, least recently used out first,
// within a number of entries and of bytes (a verdict holds its patch,
// which a client makes as large as serve.max_body_kb allows). Safe for
// concurrent use; a zero-sized cache keeps nothing.
type cache struct {
	size     int
	maxBytes int64

	mu    sync.Mutex
	order *list.List // front: most recent; values are *cacheEntry
	byKey map[string]*list.Element
	bytes int64
}

type cacheEntry struct {
	key   string
	v     event.Verdict
	bytes int64
}

func newCache(size int, maxBytes int64) *cache {
	return &cache{size: size, maxBytes: maxBytes, order: list.New(), byKey: map[string]*list.Element{}}
}

// verdictBytes is about what v holds in memory: its strings and maps, and
// a fixed share for the rest.
func verdictBytes(v *event.Verdict) int64 {
	n := 512 + len(v.InstanceID) + len(v.Phase) + len(v.Form) + len(v.Patch) + len(v.SyntaxError) + len(v.ApplyMethod) +
		len(v.ApplyOutput) + len(v.TestsError) + len(v.InfraCause) + len(v.Log)
	for k, st := range v.Statuses {
		n += 48 + len(k) + len(st)
	}
	for _, h := range append(v.Hacks, v.HacksUndone...) {
		n += 16 + len(h)
	}
	if v.TestsStatus != nil {
		b, _ := json.Marshal(v.TestsStatus)
		n += len(b)
	}
	return int64(n)
}

func (c *cache) get(key string) (event.Verdict, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[key]
	if !ok {
		return event.Verdict{}, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*cacheEntry).v, true
}

// put keeps v under key, evicting the least recently used past the size or
// the bytes. A verdict larger than all the bytes is not kept.
func (c *cache) put(key string, v event.Verdict) {
	n := int64(len(key)) + verdictBytes(&v)
	if c.size <= 0 || n > c.maxBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[key]; ok {
		old := e.Value.(*cacheEntry)
		c.bytes += n - old.bytes
		old.v, old.bytes = v, n
		c.order.MoveToFront(e)
	} else {
		c.byKey[key] = c.order.PushFront(&cacheEntry{key: key, v: v, bytes: n})
		c.bytes += n
	}
	for c.order.Len() > c.size || c.bytes > c.maxBytes {
		last := c.order.Back()
		c.order.Remove(last)
		e := last.Value.(*cacheEntry)
		delete(c.byKey, e.key)
		c.bytes -= e.bytes
	}
}

func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

// held is the bytes the cache holds.
func (c *cache) held() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}
