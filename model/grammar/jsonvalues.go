package grammar

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// number compiles an integer or number schema with its bounds. Numbers
// are written as an integer, or an integer part and up to six fraction
// digits; the fraction is offered only where it cannot cross a bound, so
// every value written is inside.
func (c *jsonCompiler) number(o *object, integer bool, path string) (Sym, error) {
	lower, upper := math.Inf(-1), math.Inf(1)
	for _, k := range []string{"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"} {
		v, ok := o.get(k)
		if !ok {
			continue
		}
		n, isNum := v.(json.Number)
		f, err := n.Float64()
		if !isNum || err != nil {
			return 0, fmt.Errorf("grammar: %s at %s must be a number", k, path)
		}
		switch k {
		case "minimum":
			lower = max(lower, math.Ceil(f))
		case "exclusiveMinimum":
			lower = max(lower, math.Floor(f)+1)
		case "maximum":
			upper = min(upper, math.Floor(f))
		case "exclusiveMaximum":
			upper = min(upper, math.Ceil(f)-1)
		}
	}
	a := int64(max(lower, -maxSafe))
	b := int64(min(upper, maxSafe))
	if a > b {
		return 0, fmt.Errorf("grammar: no integer lies within the bounds at %s", path)
	}
	if integer {
		return c.intRange(a, b), nil
	}
	return c.numberRange(a, b, a+1, b-1)
}

// numberRange matches the integers in [a, b] and the numbers with an
// integer part in [fa, fb] and a fraction.
func (c *jsonCompiler) numberRange(a, b, fa, fb int64) (Sym, error) {
	whole := c.intRange(a, b)
	if fa > fb {
		return whole, nil
	}
	digit := c.b.Range('0', '9')
	frac := c.b.Seq(c.intRange(fa, fb), c.b.Byte('.'), c.b.Repeat(digit, 1, 6))
	return c.b.Or(whole, frac), nil
}

// intRange matches the integers in [a, b], without leading zeros or -0.
func (c *jsonCompiler) intRange(a, b int64) Sym {
	switch {
	case a >= 0:
		return c.natRange(uint64(a), uint64(b))
	case b < 0:
		return c.b.Seq(c.b.Byte('-'), c.natRange(uint64(-b), uint64(-a)))
	}
	return c.b.Or(c.b.Seq(c.b.Byte('-'), c.natRange(1, uint64(-a))), c.natRange(0, uint64(b)))
}

// natRange matches the naturals in [a, b], one alternative per digit count.
func (c *jsonCompiler) natRange(a, b uint64) Sym {
	var alts []Sym
	for n := len(strconv.FormatUint(a, 10)); n <= len(strconv.FormatUint(b, 10)); n++ {
		lo, hi := pow10(n-1), pow10(n)-1
		if n == 1 {
			lo = 0
		}
		lo, hi = max(lo, a), min(hi, b)
		if lo <= hi {
			alts = append(alts, c.digitRange(strconv.FormatUint(lo, 10), strconv.FormatUint(hi, 10)))
		}
	}
	return c.b.Or(alts...)
}

func pow10(n int) uint64 {
	p := uint64(1)
	for range n {
		p *= 10
	}
	return p
}

// digitRange matches the digit strings of len(x) between x and y.
func (c *jsonCompiler) digitRange(x, y string) Sym {
	if x == y {
		return c.b.Lit(x)
	}
	n := len(x)
	digit := c.b.Range('0', '9')
	if strings.Trim(x[1:], "0") == "" && strings.Trim(y[1:], "9") == "" {
		return c.b.Seq(c.b.Range(x[0], y[0]), c.b.Repeat(digit, n-1, n-1))
	}
	if x[0] == y[0] {
		return c.b.Seq(c.b.Byte(x[0]), c.digitRange(x[1:], y[1:]))
	}
	alts := []Sym{c.b.Seq(c.b.Byte(x[0]), c.digitRange(x[1:], strings.Repeat("9", n-1)))}
	if y[0]-x[0] > 1 {
		alts = append(alts, c.b.Seq(c.b.Range(x[0]+1, y[0]-1), c.b.Repeat(digit, n-1, n-1)))
	}
	alts = append(alts, c.b.Seq(c.b.Byte(y[0]), c.digitRange(strings.Repeat("0", n-1), y[1:])))
	return c.b.Or(alts...)
}

// member is one property an object schema may write.
type member struct {
	key      string
	value    Sym
	required bool
}

// objectType compiles an object schema. Declared properties are written
// in declaration order (the required ones always); properties it does not
// declare are written only when it declares none.
func (c *jsonCompiler) objectType(o *object, path string) (Sym, error) {
	var props *object
	if p, ok := o.get("properties"); ok {
		if props, ok = p.(*object); !ok {
			return 0, fmt.Errorf("grammar: properties at %s must be an object", path)
		}
	}
	required := map[string]bool{}
	var reqOrder []string
	list, err := listKeyword(o, "required", path)
	if err != nil {
		return 0, err
	}
	for _, k := range list {
		s, ok := k.(string)
		if !ok {
			return 0, fmt.Errorf("grammar: required at %s must list strings", path)
		}
		if !required[s] {
			required[s] = true
			reqOrder = append(reqOrder, s)
		}
	}
	addl, hasAddl := o.get("additionalProperties")
	closed := hasAddl && addl == false
	extra := c.any()
	if hasAddl && addl != true && !closed {
		var err error
		if extra, err = c.schema(addl, path+"/additionalProperties"); err != nil {
			return 0, err
		}
	}
	var members []member
	declared := map[string]bool{}
	if props != nil {
		for _, k := range props.keys {
			v, err := c.schema(props.vals[k], path+"/properties/"+k)
			if err != nil {
				return 0, err
			}
			declared[k] = true
			members = append(members, member{k, v, required[k]})
		}
	}
	for _, k := range reqOrder {
		if declared[k] {
			continue
		}
		if closed {
			return 0, fmt.Errorf("grammar: required property %q at %s is not declared and additionalProperties is false", k, path)
		}
		members = append(members, member{k, extra, true})
	}
	var free *Sym
	if len(declared) == 0 && !closed {
		free = &extra
	}
	return c.object(extra, members, free), c.b.Err()
}

// object writes members in order, then (when free is set) any further
// properties with values of *free.
func (c *jsonCompiler) object(value Sym, members []member, free *Sym) Sym {
	if members == nil && free == nil {
		free = &value
	}
	comma := c.b.Seq(c.b.Byte(','), c.ws)
	emptyF, emptyT := c.b.Empty(), c.b.Empty()
	if free != nil {
		str, _ := c.plainString()
		m := c.b.Seq(str, c.b.Byte(':'), c.ws, *free)
		emptyT = c.b.Star(c.b.Seq(comma, m))
		emptyF = c.b.Opt(c.b.Seq(m, emptyT))
	}
	nextF, nextT := emptyF, emptyT // the rest after member i, none or some written before
	for i := len(members) - 1; i >= 0; i-- {
		m := members[i]
		var sb strings.Builder
		writeString(&sb, m.key)
		sb.WriteByte(':')
		body := c.b.Seq(c.b.Lit(sb.String()), c.ws, m.value)
		f, t := c.b.Rule(), c.b.Rule()
		c.b.Add(f, body, nextT)
		c.b.Add(t, comma, body, nextT)
		if !m.required {
			c.b.Add(f, nextF)
			c.b.Add(t, nextT)
		}
		nextF, nextT = f, t
	}
	return c.b.Seq(c.b.Byte('{'), nextF, c.b.Byte('}'))
}

// array compiles an array schema: prefixItems by position, items for the
// rest, and the count bounds.
func (c *jsonCompiler) array(o *object, path string) (Sym, error) {
	list, err := listKeyword(o, "prefixItems", path)
	if err != nil {
		return 0, err
	}
	var prefix []Sym
	for i, s := range list {
		sym, err := c.schema(s, path+"/prefixItems/"+strconv.Itoa(i))
		if err != nil {
			return 0, err
		}
		prefix = append(prefix, sym)
	}
	item := c.any()
	itemsV, hasItems := o.get("items")
	itemsFalse := hasItems && itemsV == false
	if hasItems && !itemsFalse && itemsV != true {
		var err error
		if item, err = c.schema(itemsV, path+"/items"); err != nil {
			return 0, err
		}
	}
	minI, maxI, err := countBounds(o, "minItems", "maxItems", path)
	if err != nil {
		return 0, err
	}
	if itemsFalse && (maxI < 0 || maxI > len(prefix)) {
		maxI = len(prefix)
	}
	if maxI >= 0 && minI > maxI {
		return 0, fmt.Errorf("grammar: minItems %d above what maxItems and items allow (%d) at %s", minI, maxI, path)
	}
	elem := func(i int) Sym {
		if i < len(prefix) {
			return prefix[i]
		}
		return item
	}
	n0 := max(len(prefix), minI)
	if maxI >= 0 {
		n0 = min(n0, maxI)
	}
	more := -1
	if maxI >= 0 {
		more = maxI - n0
	}
	comma := c.b.Seq(c.b.Byte(','), c.ws)
	var next Sym
	switch {
	case n0 > 0:
		next = c.b.Repeat(c.b.Seq(comma, item), 0, more)
	case more == 0:
		next = c.b.Empty()
	default:
		rest := -1
		if more > 0 {
			rest = more - 1
		}
		next = c.b.Opt(c.b.Seq(item, c.b.Repeat(c.b.Seq(comma, item), 0, rest)))
	}
	for i := n0 - 1; i >= 0; i-- {
		r := c.b.Rule()
		if i > 0 {
			c.b.Add(r, comma, elem(i), next)
		} else {
			c.b.Add(r, elem(i), next)
		}
		if i >= minI {
			c.b.Add(r)
		}
		next = r
	}
	return c.b.Seq(c.b.Byte('['), next, c.b.Byte(']')), c.b.Err()
}
