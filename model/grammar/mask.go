package grammar

import (
	"errors"

	"cohort/model/sample"
)

// maskEntry is a state's cached mask: the tokens that may come next
// whatever the budget, and the largest completion distance any of them
// leads to (a budget at least that large needs no filtering).
type maskEntry struct {
	mask    *sample.Mask
	maxDist int
}

// ErrNoVocab is returned for masks of a grammar built without a vocabulary.
var ErrNoVocab = errors.New("grammar: no vocabulary to mask")

// Mask returns the tokens that may come next. budget is how many tokens
// the request may still generate, this one included: a token is allowed
// only if the match can still complete within the rest, and stop tokens
// are allowed where the grammar may end. The mask is shared: do not
// modify it.
func (m *Matcher) Mask(budget int) (*sample.Mask, error) {
	g := m.g
	if g.vocab == nil {
		return nil, ErrNoVocab
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	d := m.d
	if m.ended || d == dead {
		return sample.NewMask(g.vocab.size), nil
	}
	e := d.mask
	if e == nil {
		e = g.walkMask(d, inf)
		if g.masks < maxMasks {
			d.mask = e
			g.masks++
		}
	}
	if g.err != nil || e.maxDist <= budget-1 {
		return e.mask, g.err
	}
	return g.walkMask(d, budget-1).mask, g.err
}

// maxMasks bounds the masks a grammar caches (one is vocabulary/8 bytes:
// 31 KiB for 248k ids, so 16 MiB a grammar at most); past it a state's mask
// is walked each time.
const maxMasks = 512

// walkMask walks the trie from d for the tokens after which the completion
// distance is at most limit, plus the stop tokens where d may end.
func (g *Grammar) walkMask(d *dstate, limit int) *maskEntry {
	w := walker{g: g, v: g.vocab, limit: limit, out: sample.NewMask(g.vocab.size)}
	w.walk(0, d)
	if d.accept {
		for _, id := range g.vocab.stops {
			w.out.Set(id)
		}
	}
	return &maskEntry{mask: w.out, maxDist: w.maxDist}
}

// walker fills a mask by walking the vocabulary trie from a state.
type walker struct {
	g       *Grammar
	v       *Vocab
	limit   int // a token is allowed only if the completion distance after it is at most this
	out     *sample.Mask
	maxDist int
}

// walk visits the children of trie node at, reached in state d.
func (w *walker) walk(at int32, d *dstate) {
	n := &w.v.nodes[at]
	var loop *ByteSet // computed only where a subtree could be skipped
	for _, e := range w.v.edges[n.first : n.first+n.count] {
		child := &w.v.nodes[e.node]
		if child.below >= 0 && child.hi-child.lo > 1 && loop == nil {
			loop = w.g.loopSet(d)
		}
		if loop != nil && child.below >= 0 && loop.Has(e.c) && w.v.below[child.below].subsetOf(loop) {
			w.allowRange(child, d) // every token below stays in d
			continue
		}
		next := w.g.step(d, e.c)
		if next == dead {
			continue
		}
		if child.tok >= 0 && next.dist <= w.limit {
			w.out.Set(child.tok)
			w.maxDist = max(w.maxDist, next.dist)
		}
		if child.count > 0 {
			w.walk(e.node, next)
		}
	}
}

// allowRange allows every token of child's subtree, each of which ends in d.
func (w *walker) allowRange(child *tnode, d *dstate) {
	if d.dist > w.limit {
		return
	}
	for _, id := range w.v.order[child.lo:child.hi] {
		w.out.Set(id)
	}
	if child.hi > child.lo {
		w.maxDist = max(w.maxDist, d.dist)
	}
}
