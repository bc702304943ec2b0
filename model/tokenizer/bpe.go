package tokenizer

import (
	"sync"
	"unicode/utf8"
)

// mergeInfo is the rank of a merge and the id of the token it produces.
type mergeInfo struct {
	rank  int32
	newID int32
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// bpeModel is the HF "BPE" model restricted to what byte-level tokenizers
// use (no dropout, no continuing_subword_prefix / end_of_word_suffix).
type bpeModel struct {
	vocab        map[string]int32
	merges       map[uint64]mergeInfo
	runeIDs      map[rune]int32 // single-character vocabulary entries
	byteIDs      [256]int32     // byte-level fast path: id of byteToRune[b], -1 if absent
	unkID        int32          // -1 when there is no unk token
	fuseUnk      bool
	ignoreMerges bool

	cache wordCache
}

// wordCache memoizes the ids of a pre-token. It is safe for concurrent use.
type wordCache struct {
	mu sync.RWMutex
	m  map[string][]int32
}

const (
	cacheMaxEntries = 1 << 16
	cacheMaxWordLen = 256
)

func (c *wordCache) get(k string) ([]int32, bool) {
	c.mu.RLock()
	v, ok := c.m[k]
	c.mu.RUnlock()
	return v, ok
}

func (c *wordCache) put(k string, v []int32) {
	c.mu.Lock()
	if c.m == nil || len(c.m) >= cacheMaxEntries {
		c.m = make(map[string][]int32, 1024)
	}
	c.m[k] = v
	c.mu.Unlock()
}

// symbol is one node of the doubly linked list a word is merged in.
type symbol struct {
	id         int32
	prev, next int32
	size       int32 // 0 once merged into its left neighbour
}

// mergeCand is a queued merge: lower rank first, then leftmost position.
type mergeCand struct {
	rank, pos, newID int32
}

func candLess(a, b mergeCand) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.pos < b.pos
}

type candHeap []mergeCand

func (h *candHeap) push(c mergeCand) {
	*h = append(*h, c)
	q := *h
	i := len(q) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !candLess(q[i], q[p]) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *candHeap) pop() mergeCand {
	q := *h
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q = q[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(q) {
			break
		}
		m := l
		if r := l + 1; r < len(q) && candLess(q[r], q[l]) {
			m = r
		}
		if !candLess(q[m], q[i]) {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
	return top
}

// tokenize appends the ids of one pre-token to dst. When byteLevel is set,
// word holds raw bytes whose byte-level characters are looked up; otherwise
// each rune of word is looked up.
func (m *bpeModel) tokenize(dst []int32, word string, byteLevel bool) []int32 {
	if word == "" {
		return dst
	}
	cacheable := len(word) <= cacheMaxWordLen
	if cacheable {
		if ids, ok := m.cache.get(word); ok {
			return append(dst, ids...)
		}
	}
	ids := m.tokenizeUncached(word, byteLevel)
	if cacheable {
		m.cache.put(word, ids)
	}
	return append(dst, ids...)
}

func (m *bpeModel) tokenizeUncached(word string, byteLevel bool) []int32 {
	if m.ignoreMerges {
		key := word
		if byteLevel {
			key = byteLevelString(word)
		}
		if id, ok := m.vocab[key]; ok {
			return []int32{id}
		}
	}
	syms := make([]symbol, 0, len(word))
	// Unknown characters: dropped without an unk token (as HF does),
	// otherwise replaced by unk, consecutive ones fused when fuseUnk.
	pendingUnk := int32(0) // size of a pending unk symbol, 0 if none
	add := func(id, size int32) {
		if pendingUnk > 0 {
			syms = append(syms, symbol{id: m.unkID, size: pendingUnk})
			pendingUnk = 0
		}
		syms = append(syms, symbol{id: id, size: size})
	}
	miss := func(size int32) {
		if m.unkID < 0 {
			return
		}
		if pendingUnk > 0 && !m.fuseUnk {
			syms = append(syms, symbol{id: m.unkID, size: pendingUnk})
			pendingUnk = 0
		}
		pendingUnk += size
	}
	if byteLevel {
		for i := 0; i < len(word); i++ {
			if id := m.byteIDs[word[i]]; id >= 0 {
				add(id, 1)
			} else {
				miss(1)
			}
		}
	} else {
		for _, r := range word {
			n := int32(utf8.RuneLen(r))
			if id, ok := m.runeIDs[r]; ok {
				add(id, n)
			} else {
				miss(n)
			}
		}
	}
	if pendingUnk > 0 {
		syms = append(syms, symbol{id: m.unkID, size: pendingUnk})
	}
	for i := range syms {
		syms[i].prev = int32(i - 1)
		syms[i].next = int32(i + 1)
	}
	if len(syms) > 0 {
		syms[len(syms)-1].next = -1
	}

	var h candHeap
	for i := 0; i+1 < len(syms); i++ {
		if mi, ok := m.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			h.push(mergeCand{mi.rank, int32(i), mi.newID})
		}
	}
	for len(h) > 0 {
		top := h.pop()
		cur := &syms[top.pos]
		if cur.size == 0 || cur.next < 0 {
			continue
		}
		nextPos := cur.next
		right := syms[nextPos]
		// Skip stale entries: the pair must still produce the same token.
		if mi, ok := m.merges[pairKey(cur.id, right.id)]; !ok || mi.newID != top.newID {
			continue
		}
		cur.id = top.newID
		cur.size += right.size
		cur.next = right.next
		syms[nextPos].size = 0
		if right.next >= 0 {
			syms[right.next].prev = top.pos
		}
		if cur.prev >= 0 {
			if mi, ok := m.merges[pairKey(syms[cur.prev].id, cur.id)]; ok {
				h.push(mergeCand{mi.rank, cur.prev, mi.newID})
			}
		}
		if cur.next >= 0 {
			if mi, ok := m.merges[pairKey(cur.id, syms[cur.next].id)]; ok {
				h.push(mergeCand{mi.rank, top.pos, mi.newID})
			}
		}
	}
	ids := make([]int32, 0, len(syms))
	for _, s := range syms {
		if s.size != 0 {
			ids = append(ids, s.id)
		}
	}
	return ids
}
