package prefix

import (
	"container/list"
	"fmt"
)

// Index maps full token blocks to the KV pages that hold them. A page is
// cached from Insert until Evict; while any request holds it (refs > 0) it
// is never evicted, and once the last holder releases it, it waits in least
// recently used order for Evict. The caller (the planner) owns the page
// allocator: it takes fresh pages first and Evict's pages when none is left.
type Index struct {
	byHash map[Hash]*block
	byPage map[int32]*block
	idle   list.List // blocks with no holder, least recently released first
}

type block struct {
	hash Hash
	page int32
	refs int
	idle *list.Element // in Index.idle while refs == 0
}

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{byHash: map[Hash]*block{}, byPage: map[int32]*block{}}
}

// Match returns the pages of the longest prefix of hashes that is cached,
// in order. It takes no reference: Acquire the pages to use them.
func (x *Index) Match(hashes []Hash) []int32 {
	var pages []int32
	for _, h := range hashes {
		b, ok := x.byHash[h]
		if !ok {
			break
		}
		pages = append(pages, b.page)
	}
	return pages
}

// Acquire adds a holder to each cached page.
func (x *Index) Acquire(pages []int32) error {
	for _, p := range pages {
		if _, ok := x.byPage[p]; !ok {
			return fmt.Errorf("prefix: acquire page %d: not cached", p)
		}
	}
	for _, p := range pages {
		b := x.byPage[p]
		hold(&b.refs, &b.idle, &x.idle)
	}
	return nil
}

// Insert caches page, just filled by its one holder, as the block named
// h. It returns false, caching nothing, when h is already cached (another
// request filled the same block): the caller keeps its page private.
func (x *Index) Insert(h Hash, page int32) (bool, error) {
	if _, ok := x.byPage[page]; ok {
		return false, fmt.Errorf("prefix: insert page %d: already cached", page)
	}
	if _, ok := x.byHash[h]; ok {
		return false, nil
	}
	b := &block{hash: h, page: page, refs: 1}
	x.byHash[h], x.byPage[page] = b, b
	return true, nil
}

// Release drops one holder of a cached page; the last one leaves it idle,
// the most recently used of the idle pages.
func (x *Index) Release(page int32) error {
	b, ok := x.byPage[page]
	if !ok {
		return fmt.Errorf("prefix: release page %d: not cached", page)
	}
	if !drop(&b.refs, &b.idle, &x.idle, b) {
		return fmt.Errorf("prefix: release page %d: no holder left (double release)", page)
	}
	return nil
}

// hold adds one count; the first takes the item (at *e) out of l.
func hold(n *int, e **list.Element, l *list.List) {
	if *n == 0 {
		l.Remove(*e)
		*e = nil
	}
	*n++
}

// drop takes one count off; the last puts v at the back of l (at *e). It
// reports false, changing nothing, when the count is already zero.
func drop(n *int, e **list.Element, l *list.List, v any) bool {
	if *n == 0 {
		return false
	}
	*n--
	if *n == 0 {
		*e = l.PushBack(v)
	}
	return true
}

// Evict removes the least recently released idle page from the cache and
// returns it to the caller's allocator; false when no page is idle.
func (x *Index) Evict() (int32, bool) {
	e := x.idle.Front()
	if e == nil {
		return 0, false
	}
	b := x.idle.Remove(e).(*block)
	delete(x.byHash, b.hash)
	delete(x.byPage, b.page)
	return b.page, true
}

// Cached is the number of cached pages, Idle those without a holder.
func (x *Index) Cached() int { return len(x.byPage) }

// Idle is the number of cached pages no request holds (the evictable ones).
func (x *Index) Idle() int { return x.idle.Len() }

// Reset forgets every page (a rebuilt rank group starts with an empty
// cache: the pages' contents are gone).
func (x *Index) Reset() {
	*x = Index{byHash: map[Hash]*block{}, byPage: map[int32]*block{}}
}
