package grammar

import (
	"errors"
	"fmt"
	"math"
)

// Sym is a grammar symbol: a rule (a nonterminal) when non-negative, a
// byte class (a terminal) when negative.
type Sym int32

func (s Sym) terminal() bool { return s < 0 }
func (s Sym) class() int     { return int(-s - 1) }

// ByteSet is a set of bytes.
type ByteSet [4]uint64

// Add adds b.
func (s *ByteSet) Add(b byte) { s[b>>6] |= 1 << (b & 63) }

// AddRange adds every byte in [lo, hi].
func (s *ByteSet) AddRange(lo, hi byte) {
	for c := int(lo); c <= int(hi); c++ {
		s.Add(byte(c))
	}
}

// Has reports whether b is in the set.
func (s *ByteSet) Has(b byte) bool { return s[b>>6]&(1<<(b&63)) != 0 }

// Empty reports whether the set has no byte.
func (s *ByteSet) Empty() bool { return s[0]|s[1]|s[2]|s[3] == 0 }

// subsetOf reports whether every byte of s is in t.
func (s *ByteSet) subsetOf(t *ByteSet) bool {
	return s[0]&^t[0]|s[1]&^t[1]|s[2]&^t[2]|s[3]&^t[3] == 0
}

// Builder assembles a grammar over bytes: rules with alternatives, each a
// sequence of symbols. The compilers (JSON Schema, regular expressions,
// choices, EBNF) write into one.
type Builder struct {
	rules    [][][]Sym
	classes  []ByteSet
	classIdx map[ByteSet]Sym
	lits     map[string]Sym
	empty    Sym
	limit    int // the most rules the grammar may have
}

// maxRules bounds a grammar's size (a request's schema cannot make the
// server build an unbounded one).
const maxRules = 200_000

// ErrTooLarge is returned when a grammar would exceed maxRules.
var ErrTooLarge = errors.New("grammar: too large")

// NewBuilder returns an empty builder.
func NewBuilder() *Builder {
	b := &Builder{classIdx: map[ByteSet]Sym{}, lits: map[string]Sym{}, limit: maxRules}
	b.empty = b.Rule()
	b.Add(b.empty)
	return b
}

// Class returns the terminal matching one byte of set.
func (b *Builder) Class(set ByteSet) Sym {
	if s, ok := b.classIdx[set]; ok {
		return s
	}
	b.classes = append(b.classes, set)
	s := Sym(-len(b.classes))
	b.classIdx[set] = s
	return s
}

// Byte returns the terminal matching c.
func (b *Builder) Byte(c byte) Sym {
	var s ByteSet
	s.Add(c)
	return b.Class(s)
}

// Range returns the terminal matching one byte in [lo, hi].
func (b *Builder) Range(lo, hi byte) Sym {
	var s ByteSet
	s.AddRange(lo, hi)
	return b.Class(s)
}

// Rule returns a new rule with no alternatives yet.
func (b *Builder) Rule() Sym {
	b.rules = append(b.rules, nil)
	return Sym(len(b.rules) - 1)
}

// Add appends an alternative to rule r.
func (b *Builder) Add(r Sym, seq ...Sym) {
	b.rules[r] = append(b.rules[r], append([]Sym(nil), seq...))
}

// Empty returns the rule matching the empty string.
func (b *Builder) Empty() Sym { return b.empty }

// Seq returns a symbol matching the symbols in order.
func (b *Builder) Seq(seq ...Sym) Sym {
	switch len(seq) {
	case 0:
		return b.empty
	case 1:
		return seq[0]
	}
	r := b.Rule()
	b.Add(r, seq...)
	return r
}

// Or returns a rule matching any one of alts.
func (b *Builder) Or(alts ...Sym) Sym {
	if len(alts) == 1 {
		return alts[0]
	}
	r := b.Rule()
	for _, a := range alts {
		b.Add(r, a)
	}
	return r
}

// Lit returns a symbol matching the bytes of s.
func (b *Builder) Lit(s string) Sym {
	if r, ok := b.lits[s]; ok {
		return r
	}
	seq := make([]Sym, len(s))
	for i := 0; i < len(s); i++ {
		seq[i] = b.Byte(s[i])
	}
	r := b.Seq(seq...)
	b.lits[s] = r
	return r
}

// Opt returns a rule matching s or nothing.
func (b *Builder) Opt(s Sym) Sym {
	r := b.Rule()
	b.Add(r, s)
	b.Add(r)
	return r
}

// Star returns a rule matching zero or more s.
func (b *Builder) Star(s Sym) Sym {
	r := b.Rule()
	b.Add(r, s, r)
	b.Add(r)
	return r
}

// Plus returns a rule matching one or more s.
func (b *Builder) Plus(s Sym) Sym { return b.Seq(s, b.Star(s)) }

// Repeat returns a rule matching between lo and hi copies of s (hi < 0:
// no upper bound).
func (b *Builder) Repeat(s Sym, lo, hi int) Sym {
	seq := make([]Sym, 0, lo+1)
	for range lo {
		seq = append(seq, s)
	}
	switch {
	case hi < 0:
		seq = append(seq, b.Star(s))
	case hi > lo:
		tail := b.empty
		for range hi - lo {
			t := b.Rule()
			b.Add(t, s, tail)
			b.Add(t)
			tail = t
		}
		seq = append(seq, tail)
	}
	return b.Seq(seq...)
}

// Err reports whether the builder grew past its size limit.
func (b *Builder) Err() error {
	if len(b.rules) > b.limit {
		return fmt.Errorf("%w: more than %d rules", ErrTooLarge, b.limit)
	}
	return nil
}

// inf is the length of what an unproductive rule derives.
const inf = math.MaxInt32 / 4

// analyze computes each rule's shortest derivation (inf: none), drops the
// alternatives that cannot derive a finite string, and rejects left
// recursion (a rule reaching itself before consuming a byte), which the
// matcher could not expand.
func analyze(rules [][][]Sym, start Sym) ([]int, error) {
	minLen := make([]int, len(rules))
	for i := range minLen {
		minLen[i] = inf
	}
	seqLen := func(seq []Sym) int {
		n := 0
		for _, s := range seq {
			if s.terminal() {
				n++
			} else {
				n += minLen[s]
			}
			if n >= inf {
				return inf
			}
		}
		return n
	}
	for changed := true; changed; {
		changed = false
		for r, alts := range rules {
			for _, a := range alts {
				if n := seqLen(a); n < minLen[r] {
					minLen[r], changed = n, true
				}
			}
		}
	}
	if minLen[start] >= inf {
		return nil, errors.New("grammar: the start rule derives no finite string")
	}
	for r, alts := range rules {
		kept := alts[:0]
		for _, a := range alts {
			if seqLen(a) < inf {
				kept = append(kept, a)
			}
		}
		rules[r] = kept
	}
	if err := checkLeftRecursion(rules, minLen); err != nil {
		return nil, err
	}
	return minLen, nil
}

// checkLeftRecursion finds a cycle in the "calls before consuming" graph.
func checkLeftRecursion(rules [][][]Sym, minLen []int) error {
	const (
		unseen = iota
		active
		done
	)
	mark := make([]uint8, len(rules))
	var visit func(r Sym) error
	visit = func(r Sym) error {
		switch mark[r] {
		case active:
			return fmt.Errorf("grammar: rule %d is left-recursive", r)
		case done:
			return nil
		}
		mark[r] = active
		for _, a := range rules[r] {
			for _, s := range a {
				if s.terminal() {
					break
				}
				if err := visit(s); err != nil {
					return err
				}
				if minLen[s] > 0 {
					break
				}
			}
		}
		mark[r] = done
		return nil
	}
	for r := range rules {
		if err := visit(Sym(r)); err != nil {
			return err
		}
	}
	return nil
}
