package grammar

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// EBNF compiles a grammar in the GBNF notation (llama.cpp's, which
// xgrammar and vLLM's structured_outputs.grammar accept): rules
// `name ::= expression`, the start rule `root`, and in expressions
// "literals", [classes], rule names, ( groups ), | and the postfix
// * + ? {m} {m,} {m,n}. # starts a comment.
func EBNF(src string, v *Vocab) (*Grammar, error) {
	p := &ebnfParser{src: src, c: newJSONCompiler(), rules: map[string]Sym{}, defined: map[string]bool{}}
	p.c.raw = true
	for p.skip(); p.pos < len(p.src); p.skip() {
		if err := p.rule(); err != nil {
			return nil, err
		}
	}
	for name := range p.rules {
		if !p.defined[name] {
			return nil, fmt.Errorf("grammar: rule %q is used but not defined", name)
		}
	}
	root, ok := p.rules["root"]
	if !ok {
		return nil, fmt.Errorf("grammar: no root rule")
	}
	return p.c.b.Build(root, v)
}

type ebnfParser struct {
	src     string
	pos     int
	c       *jsonCompiler
	rules   map[string]Sym
	defined map[string]bool
}

func (p *ebnfParser) errorf(format string, args ...any) error {
	line := strings.Count(p.src[:p.pos], "\n") + 1
	return fmt.Errorf("grammar: line %d: %s", line, fmt.Sprintf(format, args...))
}

// skip passes spaces, newlines and comments.
func (p *ebnfParser) skip() {
	for p.pos < len(p.src) {
		switch c := p.src[p.pos]; {
		case c == '#':
			for p.pos < len(p.src) && p.src[p.pos] != '\n' {
				p.pos++
			}
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			p.pos++
		default:
			return
		}
	}
}

// atRuleStart reports whether a new rule (name ::=) starts at p.pos.
func (p *ebnfParser) atRuleStart() bool {
	save := p.pos
	defer func() { p.pos = save }()
	name := p.name()
	p.skip()
	return name != "" && strings.HasPrefix(p.src[p.pos:], "::=")
}

func (p *ebnfParser) name() string {
	start := p.pos
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		if c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			p.pos++
			continue
		}
		break
	}
	return p.src[start:p.pos]
}

func (p *ebnfParser) ref(name string) Sym {
	if r, ok := p.rules[name]; ok {
		return r
	}
	r := p.c.b.Rule()
	p.rules[name] = r
	return r
}

func (p *ebnfParser) rule() error {
	name := p.name()
	if name == "" {
		return p.errorf("expected a rule name")
	}
	p.skip()
	if !strings.HasPrefix(p.src[p.pos:], "::=") {
		return p.errorf("expected ::= after %q", name)
	}
	p.pos += 3
	if p.defined[name] {
		return p.errorf("rule %q is defined twice", name)
	}
	p.defined[name] = true
	body, err := p.alternatives(0)
	if err != nil {
		return err
	}
	p.c.b.Add(p.ref(name), body)
	return p.c.b.Err()
}

// maxNesting bounds group nesting.
const maxNesting = 64

func (p *ebnfParser) alternatives(depth int) (Sym, error) {
	if depth > maxNesting {
		return 0, p.errorf("groups nested deeper than %d", maxNesting)
	}
	var alts []Sym
	for {
		seq, err := p.sequence(depth)
		if err != nil {
			return 0, err
		}
		alts = append(alts, seq)
		p.skip()
		if p.pos >= len(p.src) || p.src[p.pos] != '|' {
			return p.c.b.Or(alts...), nil
		}
		p.pos++
	}
}

func (p *ebnfParser) sequence(depth int) (Sym, error) {
	var seq []Sym
	for {
		p.skip()
		if p.pos >= len(p.src) || p.src[p.pos] == '|' || p.src[p.pos] == ')' || p.atRuleStart() {
			return p.c.b.Seq(seq...), nil
		}
		item, err := p.item(depth)
		if err != nil {
			return 0, err
		}
		item, err = p.postfix(item)
		if err != nil {
			return 0, err
		}
		seq = append(seq, item)
	}
}

func (p *ebnfParser) item(depth int) (Sym, error) {
	switch c := p.src[p.pos]; {
	case c == '"':
		return p.literal()
	case c == '[':
		end := p.classEnd()
		if end < 0 {
			return 0, p.errorf("missing ]")
		}
		rp := &rxParser{src: []rune(p.src[p.pos+1 : end+1])}
		cls, err := rp.class()
		if err != nil {
			return 0, p.errorf("%v", err)
		}
		p.pos = end + 1
		return p.c.charSym(cls), nil
	case c == '(':
		p.pos++
		s, err := p.alternatives(depth + 1)
		if err != nil {
			return 0, err
		}
		p.skip()
		if p.pos >= len(p.src) || p.src[p.pos] != ')' {
			return 0, p.errorf("missing )")
		}
		p.pos++
		return s, nil
	case c == '.':
		p.pos++
		return p.c.charSym(anyChar), nil
	}
	if name := p.name(); name != "" {
		return p.ref(name), nil
	}
	r, _ := utf8.DecodeRuneInString(p.src[p.pos:])
	return 0, p.errorf("unexpected %q", r)
}

// classEnd returns the index of the ] closing the class at p.pos.
func (p *ebnfParser) classEnd() int {
	for i := p.pos + 1; i < len(p.src); i++ {
		switch p.src[i] {
		case '\\':
			i++
		case ']':
			if i > p.pos+1 && !(i == p.pos+2 && p.src[p.pos+1] == '^') {
				return i
			}
		}
	}
	return -1
}

func (p *ebnfParser) literal() (Sym, error) {
	end := p.pos + 1
	for end < len(p.src) && p.src[end] != '"' {
		if p.src[end] == '\\' {
			end++
		}
		end++
	}
	if end >= len(p.src) {
		return 0, p.errorf("unterminated string")
	}
	s, err := strconv.Unquote(p.src[p.pos : end+1])
	if err != nil {
		return 0, p.errorf("bad string %s: %v", p.src[p.pos:end+1], err)
	}
	p.pos = end + 1
	if s == "" {
		return p.c.b.Empty(), nil
	}
	return p.c.b.Lit(s), nil
}

func (p *ebnfParser) postfix(item Sym) (Sym, error) {
	for p.pos < len(p.src) {
		switch p.src[p.pos] {
		case '*':
			item = p.c.b.Star(item)
		case '+':
			item = p.c.b.Plus(item)
		case '?':
			item = p.c.b.Opt(item)
		case '{':
			rp := &rxParser{src: []rune(p.src[p.pos:])}
			lo, hi, ok := rp.counts()
			if !ok || hi >= 0 && lo > hi || lo > maxRepeat || hi > maxRepeat {
				return 0, p.errorf("bad repeat count")
			}
			p.pos += len(string(rp.src[:rp.pos])) - 1
			item = p.c.b.Repeat(item, lo, hi)
		default:
			return item, nil
		}
		p.pos++
	}
	return item, nil
}
