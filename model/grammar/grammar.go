// Package grammar constrains generation to a formal language. A grammar
// over bytes (compiled from a JSON Schema, a regular expression, a list of
// choices or an EBNF grammar) is matched token by token, and each step's
// mask says which vocabulary tokens may come next.
//
// The matcher is a set of parse stacks over the grammar's rules, advanced
// one byte at a time. Its states are interned into a lazily built automaton
// shared by every request of the grammar, so a state's transitions and its
// token mask are computed once. A mask walks the vocabulary's byte trie from
// the state and skips, in one range, any subtree whose bytes all loop back
// to the state (the inside of a string, for example).
//
// Every state also knows the fewest bytes that complete the grammar from
// it. A mask asked with a token budget allows only tokens after which the
// rest still fits, so a request always ends with output the grammar
// accepts, whatever the model prefers (single-byte tokens make the bound
// reachable).
package grammar

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Grammar is a compiled grammar bound to a vocabulary. It is safe for
// concurrent use; its automaton grows as matchers explore it.
type Grammar struct {
	rules   [][][]Sym
	classes []ByteSet
	minLen  []int
	suffix  [][][]int32 // suffix[r][a][p]: fewest bytes that alt a of rule r derives from position p
	vocab   *Vocab

	mu      sync.Mutex
	frames  map[frameKey]*frame
	states  map[string]*dstate
	nextID  uint64
	initial *dstate
	masks   int   // masks cached on states (bounded by maxMasks)
	err     error // set when a state needed more parse stacks than maxThreads
}

// Build finishes the grammar with start as its start rule, for vocab (nil:
// matching bytes only, no masks).
func (b *Builder) Build(start Sym, vocab *Vocab) (*Grammar, error) {
	if err := b.Err(); err != nil {
		return nil, err
	}
	if start.terminal() {
		start = b.Seq(start, b.empty)
	}
	root := b.Rule() // the start rule, its own frame at the bottom of every stack
	b.Add(root, start)
	minLen, err := analyze(b.rules, root)
	if err != nil {
		return nil, err
	}
	g := &Grammar{rules: b.rules, classes: b.classes, minLen: minLen, vocab: vocab}
	g.suffix = make([][][]int32, len(g.rules))
	for r, alts := range g.rules {
		g.suffix[r] = make([][]int32, len(alts))
		for a, seq := range alts {
			suf := make([]int32, len(seq)+1)
			for p := len(seq) - 1; p >= 0; p-- {
				suf[p] = suf[p+1] + int32(g.symLen(seq[p]))
			}
			g.suffix[r][a] = suf
		}
	}
	g.reset()
	var seeds []*frame
	for a := range g.rules[root] {
		seeds = append(seeds, g.frame(int32(root), int32(a), 0, nil))
	}
	g.initial = g.intern(g.closure(seeds))
	return g, nil
}

func (g *Grammar) symLen(s Sym) int {
	if s.terminal() {
		return 1
	}
	return g.minLen[s]
}

// maxStates bounds the interned automaton (a stepped state holds a 2 KiB
// transition table: 8 MiB a grammar at most); past it the tables start
// over (matchers keep their states, which stay valid).
const maxStates = 1 << 12

func (g *Grammar) reset() {
	g.frames = map[frameKey]*frame{}
	g.states = map[string]*dstate{}
	g.masks = 0
}

// frame is one entry of a parse stack: alternative alt of rule, matched up
// to pos, and the frame to continue with once it completes (nil: the end
// of the input). Frames are interned, so equal stacks are one pointer.
type frame struct {
	id            uint64
	rule, alt, at int32
	up            *frame
	dist          int32 // fewest bytes that complete this stack
}

type frameKey struct {
	rule, alt, at int32
	up            *frame
}

// frame returns the interned frame, continuing straight to up when the
// position is the end of the alternative (so right recursion, which is how
// repetition is written, does not grow the stack).
func (g *Grammar) frame(rule, alt, at int32, up *frame) *frame {
	if int(at) == len(g.rules[rule][alt]) {
		return up
	}
	k := frameKey{rule, alt, at, up}
	if f, ok := g.frames[k]; ok {
		return f
	}
	g.nextID++
	f := &frame{id: g.nextID, rule: rule, alt: alt, at: at, up: up, dist: g.suffix[rule][alt][at]}
	if up != nil {
		f.dist += up.dist
	}
	g.frames[k] = f
	return f
}

func (g *Grammar) sym(f *frame) Sym { return g.rules[f.rule][f.alt][f.at] }

// maxThreads bounds the parse stacks of one state (an ambiguous grammar
// could otherwise make them grow without end).
const maxThreads = 2048

// errAmbiguous is the error of a grammar whose states need too many stacks.
var errAmbiguous = errors.New("grammar: too ambiguous (too many parse stacks)")

// closure expands the seed stacks until each waits on a terminal; a nil
// stack (or one completing to nil) means the input may end here.
func (g *Grammar) closure(seeds []*frame) (waiting []*frame, accept bool) {
	work := slices.Clone(seeds)
	seen := make(map[*frame]bool, len(seeds)*2)
	for len(work) > 0 {
		f := work[len(work)-1]
		work = work[:len(work)-1]
		if f == nil {
			accept = true
			continue
		}
		if seen[f] {
			continue
		}
		seen[f] = true
		s := g.sym(f)
		if s.terminal() {
			waiting = append(waiting, f)
			if len(waiting) > maxThreads {
				g.err = errAmbiguous
				return nil, false
			}
			continue
		}
		cont := g.frame(f.rule, f.alt, f.at+1, f.up)
		for a := range g.rules[s] {
			work = append(work, g.frame(int32(s), int32(a), 0, cont))
		}
	}
	return waiting, accept
}

// dstate is an interned matcher state: the stacks waiting on a terminal,
// whether the input may end here, and what was computed from it.
type dstate struct {
	threads []*frame
	accept  bool
	dist    int           // fewest bytes to an accepting state (0 when accept)
	next    *[256]*dstate // by byte, allocated at the first step from the state
	loop    *ByteSet      // bytes that lead back to this state (nil: not computed)
	mask    *maskEntry
}

// dead is the state with no way forward.
var dead = &dstate{}

func (d *dstate) done() bool { return len(d.threads) == 0 }

func (g *Grammar) intern(threads []*frame, accept bool) *dstate {
	if len(threads) == 0 && !accept {
		return dead
	}
	slices.SortFunc(threads, func(a, b *frame) int { return int(a.id) - int(b.id) })
	var sb strings.Builder
	if accept {
		sb.WriteByte('!')
	}
	for _, f := range threads {
		sb.WriteString(strconv.FormatUint(f.id, 36))
		sb.WriteByte(',')
	}
	key := sb.String()
	if d, ok := g.states[key]; ok {
		return d
	}
	if len(g.states) >= maxStates {
		g.reset()
	}
	d := &dstate{threads: threads, accept: accept}
	if !accept {
		d.dist = inf
		for _, f := range threads {
			d.dist = min(d.dist, int(f.dist))
		}
	}
	g.states[key] = d
	return d
}

// step returns the state after byte c (dead if c cannot come next). The
// caller holds g.mu.
func (g *Grammar) step(d *dstate, c byte) *dstate {
	if d == dead {
		return dead
	}
	if d.next == nil {
		d.next = new([256]*dstate)
	} else if n := d.next[c]; n != nil {
		return n
	}
	var seeds []*frame
	for _, f := range d.threads {
		if g.classes[g.sym(f).class()].Has(c) {
			seeds = append(seeds, g.frame(f.rule, f.alt, f.at+1, f.up))
		}
	}
	n := dead
	if len(seeds) > 0 {
		n = g.intern(g.closure(seeds))
	}
	d.next[c] = n
	return n
}

// loopSet returns the bytes after which d is d again.
func (g *Grammar) loopSet(d *dstate) *ByteSet {
	if d.loop == nil {
		var s ByteSet
		for c := 0; c < 256; c++ {
			if g.step(d, byte(c)) == d {
				s.Add(byte(c))
			}
		}
		d.loop = &s
	}
	return d.loop
}

// MinLen returns the fewest bytes a complete match has.
func (g *Grammar) MinLen() int { return g.initial.dist }

// Matches reports whether s is a complete match (a test helper and a check
// for callers that hold text, not tokens).
func (g *Grammar) Matches(s string) bool {
	m := g.NewMatcher()
	if err := m.AcceptBytes([]byte(s)); err != nil {
		return false
	}
	return m.Accepting()
}

// Matcher follows one generation through a grammar. It is not safe for
// concurrent use; matchers of one grammar may run concurrently.
type Matcher struct {
	g     *Grammar
	d     *dstate
	ended bool // a stop token was accepted
}

// NewMatcher returns a matcher at the start of the grammar.
func (g *Grammar) NewMatcher() *Matcher { return &Matcher{g: g, d: g.initial} }

// AcceptBytes advances the matcher over p, or returns an error (and stays
// where it was) if p cannot come next.
func (m *Matcher) AcceptBytes(p []byte) error {
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	d := m.d
	for i, c := range p {
		d = m.g.step(d, c)
		if d == dead {
			if m.g.err != nil {
				return m.g.err
			}
			return fmt.Errorf("grammar: byte %q at offset %d of %q cannot come next", c, i, p)
		}
	}
	m.d = d
	return nil
}

// Accept advances the matcher over a token. A stop token is accepted only
// where the grammar may end, and ends the match.
func (m *Matcher) Accept(tok int32) error {
	if m.ended {
		return errors.New("grammar: token after the end")
	}
	v := m.g.vocab
	if v.isStop(tok) {
		if !m.d.accept {
			return fmt.Errorf("grammar: stop token %d before the grammar is complete", tok)
		}
		m.ended = true
		return nil
	}
	b := v.bytes(tok)
	if b == nil {
		return fmt.Errorf("grammar: token %d has no bytes to match (a special token)", tok)
	}
	return m.AcceptBytes(b)
}

// Accepting reports whether the text so far is a complete match.
func (m *Matcher) Accepting() bool { return m.d.accept }

// Done reports whether nothing may follow: the match is complete and no
// byte can extend it (or a stop token ended it).
func (m *Matcher) Done() bool { return m.ended || m.d.done() }

// Vocab returns the vocabulary the grammar masks (nil if none).
func (g *Grammar) Vocab() *Vocab { return g.vocab }
