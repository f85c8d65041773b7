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

// cache keeps the last verdicts by key, least recently used out first.
// Safe for concurrent use; a zero-sized cache keeps nothing.
type cache struct {
	size int

	mu    sync.Mutex
	order *list.List // front: most recent; values are *cacheEntry
	byKey map[string]*list.Element
}

type cacheEntry struct {
	key string
	v   event.Verdict
}

func newCache(size int) *cache {
	return &cache{size: size, order: list.New(), byKey: map[string]*list.Element{}}
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

// put keeps v under key, evicting the least recently used past the size.
func (c *cache) put(key string, v event.Verdict) {
	if c.size <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[key]; ok {
		e.Value.(*cacheEntry).v = v
		c.order.MoveToFront(e)
		return
	}
	c.byKey[key] = c.order.PushFront(&cacheEntry{key: key, v: v})
	for c.order.Len() > c.size {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.byKey, last.Value.(*cacheEntry).key)
	}
}

func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
