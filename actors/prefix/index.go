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
	// orphan: Reset forgot the block while requests still held it; it
	// matches nothing and leaves the index at its last Release.
	orphan bool
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
		if b, ok := x.byPage[p]; !ok || b.orphan {
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
// the most recently used of the idle pages. freed reports that the page
// left the index instead (Reset had forgotten it while it was held): the
// caller frees it.
func (x *Index) Release(page int32) (freed bool, err error) {
	b, ok := x.byPage[page]
	if !ok {
		return false, fmt.Errorf("prefix: release page %d: not cached", page)
	}
	if b.refs == 0 {
		return false, fmt.Errorf("prefix: release page %d: no holder left (double release)", page)
	}
	if b.orphan {
		if b.refs--; b.refs == 0 {
			delete(x.byPage, page)
			return true, nil
		}
		return false, nil
	}
	drop(&b.refs, &b.idle, &x.idle, b)
	return false, nil
}

// Contains reports whether page is in the index (cached, or forgotten by
// Reset but still held): its holders Release it instead of freeing it.
func (x *Index) Contains(page int32) bool {
	_, ok := x.byPage[page]
	return ok
}

// Holders is the number of requests holding page (0 when it is idle or not
// in the index).
func (x *Index) Holders(page int32) int {
	if b, ok := x.byPage[page]; ok {
		return b.refs
	}
	return 0
}

// hold adds one count; the first takes the item (at *e) out of l.
func hold(n *int, e **list.Element, l *list.List) {
	if *n == 0 {
		l.Remove(*e)
		*e = nil
	}
	*n++
}

// drop takes one count off (the count must be positive); the last puts v
// at the back of l (at *e).
func drop(n *int, e **list.Element, l *list.List, v any) {
	if *n--; *n == 0 {
		*e = l.PushBack(v)
	}
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

// Cached is the number of pages in the index (orphans included).
func (x *Index) Cached() int { return len(x.byPage) }

// Idle is the number of cached pages no request holds (the evictable ones).
func (x *Index) Idle() int { return x.idle.Len() }

// Reset forgets every block (a rebuilt rank group starts with an empty
// cache: the pages' contents are gone; or the cache was reset by hand). It
// returns the idle pages, which the caller frees; a page still held leaves
// the index at its last Release, which reports it freed.
func (x *Index) Reset() []int32 {
	var freed []int32
	for e := x.idle.Front(); e != nil; e = e.Next() {
		freed = append(freed, e.Value.(*block).page)
	}
	held := map[int32]*block{}
	for p, b := range x.byPage {
		if b.refs > 0 {
			b.orphan = true
			held[p] = b
		}
	}
	*x = Index{byHash: map[Hash]*block{}, byPage: held}
	return freed
}
