package grammar

import (
	"fmt"
	"slices"
)

// Vocab is a tokenizer's vocabulary as bytes, arranged for masks: a byte
// trie in depth-first order, so each subtree's tokens are one range of
// order. It is built once per tokenizer and shared by its grammars.
type Vocab struct {
	size   int
	tokens [][]byte // by id; nil for ids that never match (special tokens, gaps)
	stops  []int32  // end-of-sequence ids: allowed where the grammar may end
	nodes  []tnode  // nodes[0] is the root
	edges  []tedge
	order  []int32 // token ids in trie order
	below  []ByteSet
}

// tnode is a trie node: the token ending here (or -1), its children
// (edges[first:first+count], by byte), the range of order its subtree
// covers, and the index of its subtree's byte set in below (-1: not kept).
type tnode struct {
	tok          int32
	first, count int32
	lo, hi       int32
	below        int32
}

type tedge struct {
	c    byte
	node int32
}

// belowDepth is how deep subtree byte sets are kept: the skip they allow
// pays where subtrees are large.
const belowDepth = 4

// NewVocab builds a vocabulary of size ids. bytesOf returns a token's
// bytes, or false for a token that never matches a grammar; stops are the
// end-of-sequence ids.
func NewVocab(size int, bytesOf func(id int32) ([]byte, bool), stops []int32) (*Vocab, error) {
	if size <= 0 {
		return nil, fmt.Errorf("grammar: vocabulary size %d", size)
	}
	v := &Vocab{size: size, tokens: make([][]byte, size), stops: slices.Clone(stops)}
	for id := range int32(size) {
		if b, ok := bytesOf(id); ok && len(b) > 0 && !v.isStop(id) {
			v.tokens[id] = b
		}
	}
	v.buildTrie()
	return v, nil
}

// Size returns the number of ids.
func (v *Vocab) Size() int { return v.size }

func (v *Vocab) isStop(id int32) bool { return slices.Contains(v.stops, id) }

func (v *Vocab) bytes(id int32) []byte {
	if id < 0 || int(id) >= v.size {
		return nil
	}
	return v.tokens[id]
}

// buildTrie inserts every token into a pointer trie, then flattens it in
// depth-first order.
func (v *Vocab) buildTrie() {
	type pnode struct {
		tok  int32
		kids map[byte]*pnode
	}
	root := &pnode{tok: -1}
	for id, b := range v.tokens {
		if b == nil {
			continue
		}
		n := root
		for _, c := range b {
			if n.kids == nil {
				n.kids = map[byte]*pnode{}
			}
			k := n.kids[c]
			if k == nil {
				k = &pnode{tok: -1}
				n.kids[c] = k
			}
			n = k
		}
		n.tok = int32(id)
	}
	var flatten func(p *pnode, at int32, depth int) ByteSet
	flatten = func(p *pnode, at int32, depth int) ByteSet {
		n := &v.nodes[at]
		n.tok, n.lo, n.below = p.tok, int32(len(v.order)), -1
		if p.tok >= 0 {
			v.order = append(v.order, p.tok)
		}
		keys := make([]byte, 0, len(p.kids))
		for c := range p.kids {
			keys = append(keys, c)
		}
		slices.Sort(keys)
		first, base := int32(len(v.edges)), int32(len(v.nodes))
		for i, c := range keys {
			v.edges = append(v.edges, tedge{c: c, node: base + int32(i)})
			v.nodes = append(v.nodes, tnode{})
		}
		var set ByteSet // the bytes below this node
		for i, c := range keys {
			sub := flatten(p.kids[c], base+int32(i), depth+1)
			sub.Add(c)
			for w := range set {
				set[w] |= sub[w]
			}
		}
		n = &v.nodes[at] // flatten may have grown nodes
		n.first, n.count, n.hi = first, int32(len(keys)), int32(len(v.order))
		if depth <= belowDepth && depth > 0 {
			n.below = int32(len(v.below))
			v.below = append(v.below, set)
		}
		return set
	}
	v.nodes = append(v.nodes, tnode{})
	flatten(root, 0, 0)
}
