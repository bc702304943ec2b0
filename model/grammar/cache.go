package grammar

import (
	"container/list"
	"sync"
)

// Cache keeps the most recently used compiled grammars of one vocabulary,
// so that requests with the same schema share one automaton and its masks.
type Cache struct {
	vocab *Vocab
	size  int

	mu    sync.Mutex
	order *list.List // of *cacheEntry, most recent first
	byKey map[string]*list.Element
}

type cacheEntry struct {
	key string
	g   *Grammar
}

// NewCache returns a cache of up to size grammars for vocab.
func NewCache(vocab *Vocab, size int) *Cache {
	return &Cache{vocab: vocab, size: max(size, 1), order: list.New(), byKey: map[string]*list.Element{}}
}

// Vocab returns the cache's vocabulary.
func (c *Cache) Vocab() *Vocab { return c.vocab }

// Get returns the grammar cached under kind and src, compiling it with
// compile on a miss. Errors are not cached.
func (c *Cache) Get(kind, src string, compile func(v *Vocab) (*Grammar, error)) (*Grammar, error) {
	key := kind + "\x00" + src
	c.mu.Lock()
	if e, ok := c.byKey[key]; ok {
		c.order.MoveToFront(e)
		c.mu.Unlock()
		return e.Value.(*cacheEntry).g, nil
	}
	c.mu.Unlock()
	g, err := compile(c.vocab)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[key]; ok { // compiled concurrently: keep the first
		return e.Value.(*cacheEntry).g, nil
	}
	c.byKey[key] = c.order.PushFront(&cacheEntry{key, g})
	for c.order.Len() > c.size {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.byKey, last.Value.(*cacheEntry).key)
	}
	return g, nil
}
