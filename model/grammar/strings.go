package grammar

import (
	"fmt"
	"unicode/utf8"
)

// nfa is a Thompson automaton over code points.
type nfa struct {
	states []nstate
	start  int
	final  int
}

type nstate struct {
	eps   []int
	trans []ntrans
}

type ntrans struct {
	cls charClass
	to  int
}

func (n *nfa) add() int { n.states = append(n.states, nstate{}); return len(n.states) - 1 }

// maxNFA bounds the automaton one pattern may make.
const maxNFA = 20_000

// build adds r between new states and returns them.
func (n *nfa) build(r *rx) (in, out int, err error) {
	if len(n.states) > maxNFA {
		return 0, 0, fmt.Errorf("%w: the pattern's automaton has more than %d states", ErrTooLarge, maxNFA)
	}
	in, out = n.add(), n.add()
	switch r.op {
	case rxClass:
		n.states[in].trans = append(n.states[in].trans, ntrans{r.cls, out})
	case rxConcat:
		at := in
		for _, s := range r.subs {
			i, o, err := n.build(s)
			if err != nil {
				return 0, 0, err
			}
			n.states[at].eps = append(n.states[at].eps, i)
			at = o
		}
		n.states[at].eps = append(n.states[at].eps, out)
	case rxAlt:
		for _, s := range r.subs {
			i, o, err := n.build(s)
			if err != nil {
				return 0, 0, err
			}
			n.states[in].eps = append(n.states[in].eps, i)
			n.states[o].eps = append(n.states[o].eps, out)
		}
	case rxRepeat:
		at := in
		for range r.min {
			i, o, err := n.build(r.subs[0])
			if err != nil {
				return 0, 0, err
			}
			n.states[at].eps = append(n.states[at].eps, i)
			at = o
		}
		if r.mx < 0 {
			i, o, err := n.build(r.subs[0])
			if err != nil {
				return 0, 0, err
			}
			n.states[at].eps = append(n.states[at].eps, i, out)
			n.states[o].eps = append(n.states[o].eps, i, out)
			return in, out, nil
		}
		for range r.mx - r.min {
			i, o, err := n.build(r.subs[0])
			if err != nil {
				return 0, 0, err
			}
			n.states[at].eps = append(n.states[at].eps, i, out)
			at = o
		}
		n.states[at].eps = append(n.states[at].eps, out)
	}
	return in, out, nil
}

// efState is a state of the epsilon-free automaton: its transitions and
// whether it accepts.
type efState struct {
	trans  []ntrans
	accept bool
}

// epsFree removes epsilon moves: each state keeps the transitions of its
// epsilon closure. Only states reachable by a transition survive,
// renumbered from 0 (the start).
func (n *nfa) epsFree() []efState {
	closure := func(q int) []int {
		seen := map[int]bool{q: true}
		work, out := []int{q}, []int{}
		for len(work) > 0 {
			s := work[len(work)-1]
			work = work[:len(work)-1]
			out = append(out, s)
			for _, e := range n.states[s].eps {
				if !seen[e] {
					seen[e] = true
					work = append(work, e)
				}
			}
		}
		return out
	}
	index := map[int]int{n.start: 0}
	order := []int{n.start}
	var out []efState
	for i := 0; i < len(order); i++ {
		var st efState
		for _, s := range closure(order[i]) {
			if s == n.final {
				st.accept = true
			}
			for _, t := range n.states[s].trans {
				j, ok := index[t.to]
				if !ok {
					j = len(order)
					index[t.to] = j
					order = append(order, t.to)
				}
				st.trans = append(st.trans, ntrans{t.cls, j})
			}
		}
		out = append(out, st)
	}
	return out
}

// stringBody compiles the characters of a JSON string whose decoded value
// matches r and has between minLen and maxLen code points (maxLen < 0: no
// bound), written JSON-escaped.
func (c *jsonCompiler) stringBody(r *rx, minLen, maxLen int) (Sym, error) {
	n := &nfa{}
	in, out, err := n.build(r)
	if err != nil {
		return 0, err
	}
	n.start, n.final = in, out
	states := n.epsFree()
	counts := maxLen + 1 // count k in [0, maxLen]
	if maxLen < 0 {
		counts = minLen + 1 // k saturates at minLen
	}
	if len(states)*counts > maxRules/4 {
		return 0, fmt.Errorf("%w: pattern and length bounds need %d states", ErrTooLarge, len(states)*counts)
	}
	rules := make([]Sym, len(states)*counts)
	for i := range rules {
		rules[i] = c.b.Rule()
	}
	for q, st := range states {
		for k := range counts {
			r := rules[q*counts+k]
			if st.accept && k >= minLen {
				c.b.Add(r)
			}
			nk := k + 1
			if maxLen < 0 {
				nk = min(nk, minLen)
			} else if nk > maxLen {
				continue
			}
			for _, t := range st.trans {
				c.b.Add(r, c.charSym(t.cls), rules[t.to*counts+nk])
			}
		}
	}
	return rules[0], c.b.Err()
}

// charSym returns a symbol matching one JSON-escaped character of cls:
// printable ASCII as itself (but " and \ escaped), control characters as
// escapes, and other code points as their UTF-8 bytes.
func (c *jsonCompiler) charSym(cls charClass) Sym {
	key := fmt.Sprint(c.raw, cls)
	if s, ok := c.chars[key]; ok {
		return s
	}
	var ascii ByteSet
	var alts []Sym
	controls := 0
	for _, r := range cls {
		if c.raw {
			if r.lo <= 0x7f {
				ascii.AddRange(byte(r.lo), byte(min(r.hi, 0x7f)))
			}
			continue
		}
		for x := r.lo; x <= min(r.hi, 0x7f); x++ {
			switch {
			case x == '"':
				alts = append(alts, c.b.Lit(`\"`))
			case x == '\\':
				alts = append(alts, c.b.Lit(`\\`))
			case x < 0x20:
				controls++
			default:
				ascii.Add(byte(x))
			}
		}
	}
	if controls == 0x20 {
		alts = append(alts, c.b.Seq(c.b.Lit(`\u00`), c.b.Range('0', '1'), c.hexLower()))
	} else {
		for _, r := range cls {
			for x := r.lo; x <= min(r.hi, 0x1f); x++ {
				alts = append(alts, c.b.Lit(fmt.Sprintf(`\u%04x`, x)))
			}
		}
	}
	if !ascii.Empty() {
		alts = append(alts, c.b.Class(ascii))
	}
	for _, r := range cls {
		lo := max(r.lo, 0x80)
		for _, part := range []runeRange{{lo, min(r.hi, 0xd7ff)}, {max(lo, 0xe000), r.hi}} {
			utf8Seqs(part.lo, part.hi, func(seq [][2]byte) {
				syms := make([]Sym, len(seq))
				for i, br := range seq {
					syms[i] = c.b.Range(br[0], br[1])
				}
				alts = append(alts, c.b.Seq(syms...))
			})
		}
	}
	s := c.b.Or(alts...)
	if len(alts) == 0 {
		s = c.b.Rule() // matches nothing: the analysis drops it
	}
	c.chars[key] = s
	return s
}

func (c *jsonCompiler) hexLower() Sym {
	var s ByteSet
	s.AddRange('0', '9')
	s.AddRange('a', 'f')
	return c.b.Class(s)
}

// utf8Seqs calls emit with byte-range sequences whose union is exactly the
// UTF-8 encodings of the code points in [lo, hi] (no surrogates in it).
func utf8Seqs(lo, hi rune, emit func([][2]byte)) {
	if lo > hi {
		return
	}
	for _, edge := range []rune{0x7f, 0x7ff, 0xffff} {
		if lo <= edge && edge < hi {
			utf8Seqs(lo, edge, emit)
			utf8Seqs(edge+1, hi, emit)
			return
		}
	}
	if hi < 0x80 {
		emit([][2]byte{{byte(lo), byte(hi)}})
		return
	}
	n := utf8.RuneLen(lo)
	for i := 1; i < n; i++ {
		m := rune(1)<<(6*i) - 1
		if lo&^m != hi&^m {
			if lo&m != 0 {
				utf8Seqs(lo, lo|m, emit)
				utf8Seqs((lo|m)+1, hi, emit)
				return
			}
			if hi&m != m {
				utf8Seqs(lo, (hi&^m)-1, emit)
				utf8Seqs(hi&^m, hi, emit)
				return
			}
		}
	}
	a, b := utf8.AppendRune(nil, lo), utf8.AppendRune(nil, hi)
	seq := make([][2]byte, len(a))
	for i := range a {
		seq[i] = [2]byte{a[i], b[i]}
	}
	emit(seq)
}
