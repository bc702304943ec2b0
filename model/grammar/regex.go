package grammar

import (
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"
)

// runeRange is an inclusive range of code points.
type runeRange struct{ lo, hi rune }

// charClass is a set of code points as sorted, disjoint ranges.
type charClass []runeRange

// normalize sorts and merges the ranges.
func (c charClass) normalize() charClass {
	slices.SortFunc(c, func(a, b runeRange) int { return int(a.lo - b.lo) })
	var out charClass
	for _, r := range c {
		if n := len(out); n > 0 && r.lo <= out[n-1].hi+1 {
			out[n-1].hi = max(out[n-1].hi, r.hi)
			continue
		}
		out = append(out, r)
	}
	return out
}

// negate returns every valid code point not in c (surrogates excluded).
func (c charClass) negate() charClass {
	var out charClass
	next := rune(0)
	for _, r := range c.normalize() {
		if r.lo > next {
			out = append(out, runeRange{next, r.lo - 1})
		}
		next = r.hi + 1
	}
	if next <= utf8.MaxRune {
		out = append(out, runeRange{next, utf8.MaxRune})
	}
	return out
}

var (
	anyChar   = charClass{{0, utf8.MaxRune}}
	digitCls  = charClass{{'0', '9'}}
	wordCls   = charClass{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}
	spaceCls  = charClass{{'\t', '\n'}, {'\f', '\r'}, {' ', ' '}}
	dotCls    = charClass{{0, '\n' - 1}, {'\n' + 1, utf8.MaxRune}}
	hexDigits = charClass{{'0', '9'}, {'A', 'F'}, {'a', 'f'}}
)

// rx is a parsed regular expression.
type rx struct {
	op      rxOp
	cls     charClass // rxClass
	subs    []*rx     // rxConcat, rxAlt, rxRepeat (one)
	min, mx int       // rxRepeat; mx < 0: unbounded
}

type rxOp uint8

const (
	rxClass rxOp = iota
	rxConcat
	rxAlt
	rxRepeat
)

// maxRepeat bounds a counted repetition.
const maxRepeat = 1000

// parseRegex parses the subset of ECMA-262 that JSON Schema patterns use:
// literals, escapes, classes, groups, alternation and quantifiers. ^ and $
// are allowed only at the very start and end. With search, a side without
// its anchor matches anything there (a JSON Schema pattern matches anywhere
// in the string); without, the pattern matches the whole text either way.
func parseRegex(pat string, search bool) (*rx, error) {
	p := &rxParser{src: []rune(pat)}
	anchoredStart := len(p.src) > 0 && p.src[0] == '^'
	if anchoredStart {
		p.pos++
	}
	end := len(p.src)
	escapes := 0 // backslashes just before the last rune: an odd count escapes it
	for i := end - 2; i >= p.pos && p.src[i] == '\\'; i-- {
		escapes++
	}
	anchoredEnd := end > p.pos && p.src[end-1] == '$' && escapes%2 == 0
	if anchoredEnd {
		p.src = p.src[:end-1]
	}
	r, err := p.alt()
	if err != nil {
		return nil, err
	}
	if p.pos < len(p.src) {
		return nil, p.errorf("unexpected %q", p.src[p.pos])
	}
	seq := []*rx{r}
	if search && !anchoredStart {
		seq = append([]*rx{star(anyChar)}, seq...)
	}
	if search && !anchoredEnd {
		seq = append(seq, star(anyChar))
	}
	return &rx{op: rxConcat, subs: seq}, nil
}

func star(c charClass) *rx {
	return &rx{op: rxRepeat, subs: []*rx{{op: rxClass, cls: c}}, min: 0, mx: -1}
}

type rxParser struct {
	src []rune
	pos int
}

func (p *rxParser) errorf(format string, args ...any) error {
	return fmt.Errorf("grammar: pattern %q at %d: %s", string(p.src), p.pos, fmt.Sprintf(format, args...))
}

func (p *rxParser) more() bool { return p.pos < len(p.src) }

func (p *rxParser) alt() (*rx, error) {
	var alts []*rx
	for {
		c, err := p.concat()
		if err != nil {
			return nil, err
		}
		alts = append(alts, c)
		if !p.more() || p.src[p.pos] != '|' {
			break
		}
		p.pos++
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return &rx{op: rxAlt, subs: alts}, nil
}

func (p *rxParser) concat() (*rx, error) {
	var seq []*rx
	for p.more() && p.src[p.pos] != '|' && p.src[p.pos] != ')' {
		atom, err := p.atom()
		if err != nil {
			return nil, err
		}
		atom, err = p.quantifier(atom)
		if err != nil {
			return nil, err
		}
		seq = append(seq, atom)
	}
	return &rx{op: rxConcat, subs: seq}, nil
}

func (p *rxParser) atom() (*rx, error) {
	c := p.src[p.pos]
	p.pos++
	switch c {
	case '(':
		if p.pos+1 < len(p.src) && p.src[p.pos] == '?' {
			if p.src[p.pos+1] != ':' {
				return nil, p.errorf("only (?: ) groups are supported (no lookaround or named groups)")
			}
			p.pos += 2
		}
		r, err := p.alt()
		if err != nil {
			return nil, err
		}
		if !p.more() || p.src[p.pos] != ')' {
			return nil, p.errorf("missing )")
		}
		p.pos++
		return r, nil
	case '[':
		cls, err := p.class()
		return &rx{op: rxClass, cls: cls}, err
	case '.':
		return &rx{op: rxClass, cls: dotCls}, nil
	case '\\':
		cls, err := p.escape(false)
		return &rx{op: rxClass, cls: cls}, err
	case '^', '$':
		return nil, p.errorf("anchors are supported only at the start and end of the pattern")
	case '*', '+', '?', '{':
		return nil, p.errorf("nothing to repeat before %q", c)
	}
	return &rx{op: rxClass, cls: charClass{{c, c}}}, nil
}

func (p *rxParser) quantifier(atom *rx) (*rx, error) {
	for p.more() {
		lo, hi := 0, -1
		switch p.src[p.pos] {
		case '*':
		case '+':
			lo = 1
		case '?':
			hi = 1
		case '{':
			var ok bool
			if lo, hi, ok = p.counts(); !ok {
				return atom, nil // a literal {, as ECMA-262 allows
			}
			p.pos--
		default:
			return atom, nil
		}
		p.pos++
		if p.more() && p.src[p.pos] == '?' { // lazy: the same language
			p.pos++
		}
		if hi >= 0 && lo > hi {
			return nil, p.errorf("repeat {%d,%d} has min above max", lo, hi)
		}
		if lo > maxRepeat || hi > maxRepeat {
			return nil, p.errorf("repeat count above %d", maxRepeat)
		}
		atom = &rx{op: rxRepeat, subs: []*rx{atom}, min: lo, mx: hi}
	}
	return atom, nil
}

// counts reads {m}, {m,} or {m,n} at p.pos, leaving p.pos after the }.
func (p *rxParser) counts() (lo, hi int, ok bool) {
	end := slices.Index(p.src[p.pos:], '}')
	if end < 0 {
		return 0, 0, false
	}
	body := string(p.src[p.pos+1 : p.pos+end])
	lo, hi = -1, -1
	var err error
	switch i := indexRune(body, ','); {
	case i < 0:
		lo, err = strconv.Atoi(body)
		hi = lo
	case i == len(body)-1:
		lo, err = strconv.Atoi(body[:i])
	default:
		lo, err = strconv.Atoi(body[:i])
		if err == nil {
			hi, err = strconv.Atoi(body[i+1:])
		}
	}
	if err != nil || lo < 0 {
		return 0, 0, false
	}
	p.pos += end + 1
	return lo, hi, true
}

func indexRune(s string, r rune) int {
	for i, c := range s {
		if c == r {
			return i
		}
	}
	return -1
}

// class reads a bracket expression after its [.
func (p *rxParser) class() (charClass, error) {
	neg := p.more() && p.src[p.pos] == '^'
	if neg {
		p.pos++
	}
	var cls charClass
	first := true
	for {
		if !p.more() {
			return nil, p.errorf("missing ]")
		}
		c := p.src[p.pos]
		if c == ']' && !first {
			p.pos++
			break
		}
		first = false
		p.pos++
		var lo charClass
		if c == '\\' {
			e, err := p.escape(true)
			if err != nil {
				return nil, err
			}
			lo = e
		} else {
			lo = charClass{{c, c}}
		}
		if len(lo) == 1 && lo[0].lo == lo[0].hi && p.pos+1 < len(p.src) && p.src[p.pos] == '-' && p.src[p.pos+1] != ']' {
			p.pos++
			h := p.src[p.pos]
			p.pos++
			if h == '\\' {
				e, err := p.escape(true)
				if err != nil || len(e) != 1 || e[0].lo != e[0].hi {
					return nil, p.errorf("bad range end")
				}
				h = e[0].lo
			}
			if h < lo[0].lo {
				return nil, p.errorf("range %q-%q is reversed", lo[0].lo, h)
			}
			lo = charClass{{lo[0].lo, h}}
		}
		cls = append(cls, lo...)
	}
	cls = cls.normalize()
	if neg {
		cls = cls.negate()
	}
	return cls, nil
}

// escape reads an escape after its backslash.
func (p *rxParser) escape(inClass bool) (charClass, error) {
	if !p.more() {
		return nil, p.errorf("trailing backslash")
	}
	c := p.src[p.pos]
	p.pos++
	one := func(r rune) charClass { return charClass{{r, r}} }
	switch c {
	case 'd':
		return digitCls, nil
	case 'D':
		return digitCls.negate(), nil
	case 'w':
		return wordCls, nil
	case 'W':
		return wordCls.negate(), nil
	case 's':
		return spaceCls, nil
	case 'S':
		return spaceCls.negate(), nil
	case 'n':
		return one('\n'), nil
	case 't':
		return one('\t'), nil
	case 'r':
		return one('\r'), nil
	case 'f':
		return one('\f'), nil
	case 'v':
		return one('\v'), nil
	case '0':
		return one(0), nil
	case 'x', 'u':
		n := 2
		if c == 'u' {
			n = 4
		}
		if p.pos+n > len(p.src) {
			return nil, p.errorf("short \\%c escape", c)
		}
		v, err := strconv.ParseUint(string(p.src[p.pos:p.pos+n]), 16, 32)
		if err != nil {
			return nil, p.errorf("bad \\%c escape", c)
		}
		p.pos += n
		return one(rune(v)), nil
	case 'b':
		if inClass {
			return one('\b'), nil
		}
		return nil, p.errorf("word boundaries (\\b) are not supported")
	case 'B', 'p', 'P', 'k':
		return nil, p.errorf("\\%c is not supported", c)
	}
	if c >= '1' && c <= '9' {
		return nil, p.errorf("backreferences are not supported")
	}
	if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
		return nil, p.errorf("unknown escape \\%c", c)
	}
	return one(c), nil
}
