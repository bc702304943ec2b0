package grammar

// The schema corpus under testdata/: schemas/ holds JSON Schemas of
// real-world shapes, each with example instances, in the subset the
// constrained decoder supports; unsupported/ holds schemas that each use one
// keyword outside that subset. This file loads the corpus (grammartest.Corpus,
// grammartest.UnsupportedCorpus, validator are the helpers the decoder's tests use) and
// checks the corpus itself: that every schema compiles and every example
// validates under santhosh-tekuri/jsonschema (draft 2020-12, format
// assertions on), that examples are compact and list properties in the
// schema's declaration order, that schemas/ stays inside the supported
// subset, and that the corpus keeps its size and spread.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"cohort/model/grammar/grammartest"
)

// ---- ordered JSON ----

// corpusCompact writes v compactly, keys in their stored order, strings
// escaped as encoding/json does without HTML escaping.
func corpusCompact(buf *bytes.Buffer, v any) {
	var sb strings.Builder
	encodeCompactWith(&sb, v, corpusWriteString)
	buf.WriteString(sb.String())
}

func corpusWriteString(sb *strings.Builder, s string) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	sb.Write(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}

// ---- schema walking ----

// The supported subset: keyword -> its kind.
const (
	kwAnnotation = iota // ignored; its value is not a schema
	kwPlain             // a constraint whose value is not a schema
	kwSchema            // value is a schema
	kwSchemaList        // value is a list of schemas
	kwSchemaMap         // value is an object of schemas
)

var corpusSupported = map[string]int{
	"type": kwPlain, "enum": kwPlain, "const": kwPlain,
	"properties": kwSchemaMap, "required": kwPlain, "additionalProperties": kwSchema,
	"items": kwSchema, "prefixItems": kwSchemaList, "minItems": kwPlain, "maxItems": kwPlain,
	"minLength": kwPlain, "maxLength": kwPlain, "pattern": kwPlain, "format": kwPlain,
	"minimum": kwPlain, "maximum": kwPlain, "exclusiveMinimum": kwPlain, "exclusiveMaximum": kwPlain,
	"anyOf": kwSchemaList, "allOf": kwSchemaList, "$ref": kwPlain,
	"$defs": kwSchemaMap, "definitions": kwSchemaMap,
	"title": kwAnnotation, "description": kwAnnotation, "default": kwAnnotation,
	"examples": kwAnnotation, "$schema": kwAnnotation, "$id": kwAnnotation,
	"$comment": kwAnnotation, "deprecated": kwAnnotation, "readOnly": kwAnnotation,
	"writeOnly": kwAnnotation,
}

// corpusUnsupported are the keywords outside the subset, with the kind of
// their value so that the walk can descend through them.
var corpusUnsupported = map[string]int{
	"oneOf": kwSchemaList, "not": kwSchema, "if": kwSchema, "then": kwSchema, "else": kwSchema,
	"patternProperties": kwSchemaMap, "propertyNames": kwSchema,
	"dependentRequired": kwPlain, "dependentSchemas": kwSchemaMap, "dependencies": kwPlain,
	"contains": kwSchema, "minContains": kwPlain, "maxContains": kwPlain, "uniqueItems": kwPlain,
	"minProperties": kwPlain, "maxProperties": kwPlain, "multipleOf": kwPlain,
	"unevaluatedProperties": kwSchema, "unevaluatedItems": kwSchema,
	"$dynamicRef": kwPlain, "$dynamicAnchor": kwPlain,
}

// companions: keywords an unsupported file may use besides its keyword,
// because the keyword means nothing without them.
var companions = map[string][]string{
	"if":          {"then", "else"},
	"minContains": {"contains"},
	"maxContains": {"contains"},
	"$dynamicRef": {"$dynamicAnchor"},
}

var supportedFormats = map[string]bool{
	"date": true, "time": true, "date-time": true, "uuid": true, "ipv4": true, "email": true, "uri": true,
}

var jsonTypes = map[string]bool{
	"string": true, "integer": true, "number": true, "boolean": true, "null": true, "object": true, "array": true,
}

var localRef = regexp.MustCompile(`^#(?:/(?:\$defs|definitions)/[A-Za-z0-9_.-]+)?$`)

// visit calls f on every subschema of s (s included), with its JSON pointer.
// It descends through supported keywords, and through unsupported ones
// when also is set.
func visit(s any, ptr string, also bool, f func(s *object, ptr string)) {
	o, ok := s.(*object)
	if !ok {
		return
	}
	f(o, ptr)
	for _, k := range o.keys {
		kind, ok := corpusSupported[k]
		if !ok && also {
			kind, ok = corpusUnsupported[k]
		}
		if !ok {
			continue
		}
		v := o.vals[k]
		p := ptr + "/" + escapePtr(k)
		switch kind {
		case kwSchema:
			visit(v, p, also, f)
		case kwSchemaList:
			if arr, ok := v.([]any); ok {
				for i, e := range arr {
					visit(e, p+"/"+strconv.Itoa(i), also, f)
				}
			}
		case kwSchemaMap:
			if m, ok := v.(*object); ok {
				for _, name := range m.keys {
					visit(m.vals[name], p+"/"+escapePtr(name), also, f)
				}
			}
		}
	}
}

func escapePtr(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

func typesOf(s *object) map[string]bool {
	out := map[string]bool{}
	switch t := s.vals["type"].(type) {
	case string:
		out[t] = true
	case []any:
		for _, e := range t {
			if n, ok := e.(string); ok {
				out[n] = true
			}
		}
	}
	return out
}

func num(v any) (*big.Rat, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return nil, false
	}
	r, ok := new(big.Rat).SetString(string(n))
	return r, ok
}

func nonNegInt(v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	return i, err == nil && i >= 0
}

// checkSupported reports every way the schema strays from the supported
// subset.
func checkSupported(root any) []string {
	var errs []string
	bad := func(ptr, format string, args ...any) {
		errs = append(errs, fmt.Sprintf("%s: %s", "#"+ptr, fmt.Sprintf(format, args...)))
	}
	if o, ok := root.(*object); !ok {
		return []string{"top-level schema is not an object"}
	} else if len(o.keys) == 0 {
		return []string{"top-level schema is the empty schema {}"}
	}
	visit(root, "", false, func(s *object, ptr string) {
		for _, k := range s.keys {
			if _, ok := corpusSupported[k]; !ok {
				bad(ptr, "keyword %q is outside the supported subset", k)
			}
		}
		types := typesOf(s)
		if t, ok := s.vals["type"]; ok {
			var names []any
			switch t := t.(type) {
			case string:
				names = []any{t}
			case []any:
				names = t
			}
			if len(names) == 0 {
				bad(ptr, "type is neither a name nor a non-empty list")
			}
			for _, n := range names {
				if s, ok := n.(string); !ok || !jsonTypes[s] {
					bad(ptr, "type %v is not a JSON type", n)
				}
			}
		}
		if e, ok := s.vals["enum"]; ok {
			if arr, ok := e.([]any); !ok || len(arr) == 0 {
				bad(ptr, "enum is not a non-empty list")
			}
		}
		if r, ok := s.vals["required"]; ok {
			arr, _ := r.([]any)
			props, _ := s.vals["properties"].(*object)
			for _, n := range arr {
				if name, ok := n.(string); !ok {
					bad(ptr, "required lists a non-string")
				} else if _, ok := props.get(name); !ok {
					bad(ptr, "required property %q is not declared in properties", name)
				}
			}
		}
		if a, ok := s.vals["additionalProperties"]; ok {
			if _, isBool := a.(bool); !isBool {
				if _, isObj := a.(*object); !isObj {
					bad(ptr, "additionalProperties is neither a boolean nor a schema")
				}
			}
		}
		if it, ok := s.vals["items"]; ok {
			switch it := it.(type) {
			case bool:
				if it {
					bad(ptr, "items: true (leave it out)")
				}
				if _, ok := s.vals["prefixItems"]; !ok {
					bad(ptr, "items: false without prefixItems")
				}
			case *object:
			default:
				bad(ptr, "items is not a schema (the list form is prefixItems)")
			}
		}
		limits := map[string]int64{"minItems": 5, "maxItems": 20, "minLength": 20, "maxLength": 200}
		for k, limit := range limits {
			if v, ok := s.vals[k]; ok {
				n, ok := nonNegInt(v)
				if !ok || n > limit {
					bad(ptr, "%s must be an integer in [0, %d], is %v", k, limit, v)
				}
			}
		}
		for _, pair := range [][2]string{{"minItems", "maxItems"}, {"minLength", "maxLength"}} {
			lo, ok1 := nonNegInt(s.vals[pair[0]])
			hi, ok2 := nonNegInt(s.vals[pair[1]])
			if ok1 && ok2 && lo > hi {
				bad(ptr, "%s > %s", pair[0], pair[1])
			}
		}
		if p, ok := s.vals["pattern"]; ok {
			if ps, ok := p.(string); !ok {
				bad(ptr, "pattern is not a string")
			} else if err := checkPattern(ps); err != nil {
				bad(ptr, "pattern %q: %v", ps, err)
			}
		}
		if f, ok := s.vals["format"]; ok {
			if fs, ok := f.(string); !ok || !supportedFormats[fs] {
				bad(ptr, "format %v is not one of the supported formats", f)
			}
		}
		for _, k := range []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} {
			if v, ok := s.vals[k]; ok {
				if _, ok := num(v); !ok {
					bad(ptr, "%s is not a number", k)
				}
			}
		}
		if err := checkNumericRange(s, types); err != "" {
			bad(ptr, "%s", err)
		}
		for _, k := range []string{"anyOf", "allOf"} {
			if v, ok := s.vals[k]; ok {
				arr, _ := v.([]any)
				if len(arr) == 0 {
					bad(ptr, "%s is not a non-empty list", k)
				}
				if k == "allOf" && len(arr) != 1 {
					bad(ptr, "allOf with %d subschemas (only one is supported)", len(arr))
				}
			}
		}
		if r, ok := s.vals["$ref"]; ok {
			rs, _ := r.(string)
			if !localRef.MatchString(rs) {
				bad(ptr, "$ref %v is not #, #/$defs/NAME or #/definitions/NAME", r)
			} else if _, ok := resolveRef(root, rs); !ok {
				bad(ptr, "$ref %q does not resolve", rs)
			}
		}
	})
	return errs
}

// checkNumericRange: bounds are ordered, an integer fits, and for numbers
// an integer lies strictly inside a two-sided range.
func checkNumericRange(s *object, types map[string]bool) string {
	lo, loOK := num(s.vals["minimum"])
	hi, hiOK := num(s.vals["maximum"])
	xlo, xloOK := num(s.vals["exclusiveMinimum"])
	xhi, xhiOK := num(s.vals["exclusiveMaximum"])
	if !(loOK || xloOK) || !(hiOK || xhiOK) {
		return ""
	}
	// The tightest lower bound: an exclusive bound wins a tie.
	low, lowX := lo, false
	if xloOK && (!loOK || xlo.Cmp(lo) >= 0) {
		low, lowX = xlo, true
	}
	high, highX := hi, false
	if xhiOK && (!hiOK || xhi.Cmp(hi) <= 0) {
		high, highX = xhi, true
	}
	// Smallest integer allowed above low, largest below high.
	first := ceilRat(low)
	if lowX && new(big.Rat).SetInt(first).Cmp(low) == 0 {
		first.Add(first, big.NewInt(1))
	}
	last := floorRat(high)
	if highX && new(big.Rat).SetInt(last).Cmp(high) == 0 {
		last.Sub(last, big.NewInt(1))
	}
	if types["number"] {
		// An integer strictly inside (low, high).
		f, l := floorRat(low), ceilRat(high)
		f.Add(f, big.NewInt(1))
		l.Sub(l, big.NewInt(1))
		if f.Cmp(l) > 0 {
			return fmt.Sprintf("number range (%s, %s) has no integer strictly inside", low.RatString(), high.RatString())
		}
	} else if first.Cmp(last) > 0 {
		return fmt.Sprintf("range [%s, %s] holds no integer", low.RatString(), high.RatString())
	}
	return ""
}

func floorRat(r *big.Rat) *big.Int {
	q := new(big.Int)
	m := new(big.Int)
	q.DivMod(r.Num(), r.Denom(), m) // Euclidean: floor for positive denominators
	return q
}

func ceilRat(r *big.Rat) *big.Int {
	q := floorRat(r)
	if !r.IsInt() {
		q.Add(q, big.NewInt(1))
	}
	return q
}

// checkPattern accepts the regex subset the decoder supports: literals,
// escapes, classes (negated too), groups ( ) and (?: ), alternation,
// quantifiers * + ? {m} {m,} {m,n}, and ^ / $ only at the very start / end.
func checkPattern(p string) error {
	if _, err := regexp.Compile(p); err != nil {
		return err
	}
	allowedEscapes := "dDwWsStnrfv.-\\/^$|?*+()[]{}"
	depth := 0
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch c {
		case '\\':
			if i+1 >= len(p) || !strings.ContainsRune(allowedEscapes, rune(p[i+1])) {
				return fmt.Errorf("escape at %d is not supported", i)
			}
			i++
		case '^':
			if i != 0 {
				return fmt.Errorf("^ not at the start")
			}
		case '$':
			if i != len(p)-1 {
				return fmt.Errorf("$ not at the end")
			}
		case '(':
			depth++
			if strings.HasPrefix(p[i:], "(?") && !strings.HasPrefix(p[i:], "(?:") {
				return fmt.Errorf("group flags or named groups are not supported")
			}
		case ')':
			depth--
		case '[':
			j := i + 1
			if j < len(p) && p[j] == '^' {
				j++
			}
			if j < len(p) && p[j] == ']' {
				j++
			}
			for ; j < len(p) && p[j] != ']'; j++ {
				if p[j] == '\\' {
					if j+1 >= len(p) || !strings.ContainsRune(allowedEscapes, rune(p[j+1])) {
						return fmt.Errorf("escape at %d in a class is not supported", j)
					}
					j++
				} else if p[j] == '[' {
					return fmt.Errorf("nested class or POSIX class at %d", j)
				}
			}
			i = j
		case '?', '*', '+', '}':
			if i+1 < len(p) && p[i+1] == '?' {
				return fmt.Errorf("lazy quantifier at %d", i)
			}
			if i+1 < len(p) && p[i+1] == '+' && c != '?' {
				return fmt.Errorf("possessive quantifier at %d", i)
			}
		case '{':
			j := strings.IndexByte(p[i:], '}')
			if j < 0 || !regexp.MustCompile(`^\{\d+(?:,\d*)?\}$`).MatchString(p[i:i+j+1]) {
				return fmt.Errorf("{ at %d is not a {m}, {m,} or {m,n} quantifier", i)
			}
			i += j - 1 // leave '}' for the lazy check
		}
	}
	if depth != 0 {
		return fmt.Errorf("unbalanced parentheses")
	}
	return nil
}

// resolveRef resolves "#", "#/$defs/X" or "#/definitions/X" in root.
func resolveRef(root any, ref string) (any, bool) {
	if ref == "#" {
		return root, true
	}
	parts := strings.Split(strings.TrimPrefix(ref, "#/"), "/")
	if len(parts) != 2 {
		return nil, false
	}
	o, _ := root.(*object)
	defs, ok := o.get(parts[0])
	if !ok {
		return nil, false
	}
	d, _ := defs.(*object)
	return d.get(parts[1])
}

// ---- features, for the spread ----

type features struct {
	nestedDepth                                 int
	arrays, enums, anyOf, bounds, patternFormat bool
	ref, recursive, strict                      bool
}

func schemaFeatures(root any) features {
	var f features
	visit(root, "", false, func(s *object, ptr string) {
		has := func(keys ...string) bool {
			return slices.ContainsFunc(keys, func(k string) bool { _, ok := s.vals[k]; return ok })
		}
		f.arrays = f.arrays || typesOf(s)["array"] || has("items", "prefixItems")
		f.enums = f.enums || has("enum", "const")
		f.anyOf = f.anyOf || has("anyOf")
		f.bounds = f.bounds || has("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
		f.patternFormat = f.patternFormat || has("pattern", "format")
		f.ref = f.ref || has("$ref")
	})
	f.nestedDepth = objectDepth(root, root, map[string]bool{})
	f.recursive = hasRefCycle(root)
	f.strict = isStrict(root)
	return f
}

func isObjectSchema(s *object) bool {
	_, props := s.vals["properties"]
	return props || typesOf(s)["object"]
}

// objectDepth: how many object schemas nest inside one another, following
// each $ref once along a path.
func objectDepth(root, s any, onPath map[string]bool) int {
	o, ok := s.(*object)
	if !ok {
		return 0
	}
	if r, ok := o.vals["$ref"].(string); ok && !onPath[r] {
		if t, ok := resolveRef(root, r); ok {
			onPath[r] = true
			d := objectDepth(root, t, onPath)
			delete(onPath, r)
			return d
		}
	}
	best := 0
	child := func(v any) {
		if d := objectDepth(root, v, onPath); d > best {
			best = d
		}
	}
	if props, ok := o.vals["properties"].(*object); ok {
		for _, k := range props.keys {
			child(props.vals[k])
		}
	}
	for _, k := range []string{"additionalProperties", "items"} {
		child(o.vals[k])
	}
	for _, k := range []string{"prefixItems", "anyOf", "allOf"} {
		if arr, ok := o.vals[k].([]any); ok {
			for _, e := range arr {
				child(e)
			}
		}
	}
	if isObjectSchema(o) {
		best++
	}
	return best
}

// hasRefCycle: some $ref target reaches itself through $refs.
func hasRefCycle(root any) bool {
	// Nodes: "#" and each "#/$defs/X" / "#/definitions/X"; edges: the refs
	// inside a node, not counting nested definitions.
	edges := map[string][]string{}
	collect := func(name string, s any) {
		var walk func(v any)
		walk = func(v any) {
			o, ok := v.(*object)
			if !ok {
				return
			}
			if r, ok := o.vals["$ref"].(string); ok {
				edges[name] = append(edges[name], r)
			}
			for _, k := range o.keys {
				switch corpusSupported[k] {
				case kwSchema:
					walk(o.vals[k])
				case kwSchemaList:
					if arr, ok := o.vals[k].([]any); ok {
						for _, e := range arr {
							walk(e)
						}
					}
				case kwSchemaMap:
					if k == "$defs" || k == "definitions" {
						continue
					}
					if m, ok := o.vals[k].(*object); ok {
						for _, n := range m.keys {
							walk(m.vals[n])
						}
					}
				}
			}
		}
		walk(s)
	}
	collect("#", root)
	ro, _ := root.(*object)
	for _, defsKey := range []string{"$defs", "definitions"} {
		if defs, ok := ro.get(defsKey); ok {
			if d, ok := defs.(*object); ok {
				for _, n := range d.keys {
					collect("#/"+defsKey+"/"+n, d.vals[n])
				}
			}
		}
	}
	for start := range edges {
		seen := map[string]bool{}
		stack := append([]string(nil), edges[start]...)
		for len(stack) > 0 {
			n := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if n == start {
				return true
			}
			if !seen[n] {
				seen[n] = true
				stack = append(stack, edges[n]...)
			}
		}
	}
	return false
}

// isStrict: OpenAI strict mode: the top level is an object, and every
// object schema declares properties, requires all of them and sets
// additionalProperties: false.
func isStrict(root any) bool {
	ro, _ := root.(*object)
	if ro == nil || !typesOf(ro)["object"] {
		return false
	}
	ok := true
	visit(root, "", false, func(s *object, ptr string) {
		if !isObjectSchema(s) {
			return
		}
		props, _ := s.vals["properties"].(*object)
		if props == nil || s.vals["additionalProperties"] != false {
			ok = false
			return
		}
		req, _ := s.vals["required"].([]any)
		if len(req) != len(props.keys) {
			ok = false
		}
	})
	return ok
}

// ---- order check ----

// orderChecker checks that an instance lists each object's properties in the
// order its schema declares them, with no undeclared properties (except
// under an additionalProperties schema, after the declared ones).
type orderChecker struct {
	root any
	c    *jsonschema.Compiler
	subs map[string]*jsonschema.Schema
}

func (oc *orderChecker) validates(ptr string, inst any) bool {
	sch, ok := oc.subs[ptr]
	if !ok {
		var err error
		sch, err = oc.c.Compile(grammartest.SchemaURL + "#" + ptr)
		if err != nil {
			panic(fmt.Sprintf("compile %s: %v", ptr, err))
		}
		oc.subs[ptr] = sch
	}
	var buf bytes.Buffer
	corpusCompact(&buf, inst)
	return grammartest.Validate(sch, buf.Bytes()) == nil
}

func (oc *orderChecker) check(s any, ptr string, inst any, where string, depth int) error {
	if depth > 200 {
		return fmt.Errorf("%s: $ref chain too deep", where)
	}
	o, ok := s.(*object)
	if !ok {
		return nil
	}
	if r, ok := o.vals["$ref"].(string); ok {
		t, _ := resolveRef(oc.root, r)
		if err := oc.check(t, strings.TrimPrefix(r, "#"), inst, where, depth+1); err != nil {
			return err
		}
	}
	if arr, ok := o.vals["allOf"].([]any); ok {
		for i, e := range arr {
			if err := oc.check(e, fmt.Sprintf("%s/allOf/%d", ptr, i), inst, where, depth+1); err != nil {
				return err
			}
		}
	}
	if arr, ok := o.vals["anyOf"].([]any); ok {
		var firstErr error
		matched := false
		for i, e := range arr {
			p := fmt.Sprintf("%s/anyOf/%d", ptr, i)
			if !oc.validates(p, inst) {
				continue
			}
			err := oc.check(e, p, inst, where, depth+1)
			if err == nil {
				matched = true
				break
			}
			if firstErr == nil {
				firstErr = err
			}
		}
		if !matched {
			if firstErr == nil {
				firstErr = fmt.Errorf("%s: matches no anyOf branch", where)
			}
			return firstErr
		}
	}
	switch inst := inst.(type) {
	case *object:
		props, _ := o.vals["properties"].(*object)
		addl, _ := o.vals["additionalProperties"].(*object)
		last := -1
		for _, k := range inst.keys {
			idx := -1
			if props != nil {
				for i, pk := range props.keys {
					if pk == k {
						idx = i
					}
				}
			}
			var sub any
			var subPtr string
			if idx >= 0 {
				sub, subPtr = props.vals[k], ptr+"/properties/"+escapePtr(k)
			} else if addl != nil {
				idx = math.MaxInt
				sub, subPtr = addl, ptr+"/additionalProperties"
			} else if isObjectSchema(o) {
				return fmt.Errorf("%s: property %q is not declared by the schema", where, k)
			} else {
				continue // this subschema does not constrain objects
			}
			if idx < last {
				return fmt.Errorf("%s: property %q is out of the schema's declaration order", where, k)
			}
			last = idx
			if err := oc.check(sub, subPtr, inst.vals[k], where+"/"+k, depth+1); err != nil {
				return err
			}
		}
	case []any:
		prefix, _ := o.vals["prefixItems"].([]any)
		items := o.vals["items"]
		for i, e := range inst {
			var sub any
			var subPtr string
			if i < len(prefix) {
				sub, subPtr = prefix[i], fmt.Sprintf("%s/prefixItems/%d", ptr, i)
			} else {
				sub, subPtr = items, ptr+"/items"
			}
			if err := oc.check(sub, subPtr, e, fmt.Sprintf("%s/%d", where, i), depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// ---- tests ----

func TestCorpusSchemas(t *testing.T) {
	corpus := grammartest.Corpus(t)
	var counts struct {
		nested, arrays, enums, anyOf, bounds, patternFormat, ref, recursive, strict int
	}
	for _, cs := range corpus {
		t.Run(cs.Name, func(t *testing.T) {
			root, err := decodeOrdered(cs.Schema)
			if err != nil {
				t.Fatalf("schema: %v", err)
			}
			for _, e := range checkSupported(root) {
				t.Errorf("unsupported: %s", e)
			}
			c, sch, err := grammartest.Compile(cs.Schema)
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			if n := len(cs.Valid); n < 2 || n > 4 {
				t.Errorf("%d valid instances, want 2–4", n)
			}
			oc := &orderChecker{root: root, c: c, subs: map[string]*jsonschema.Schema{}}
			seen := map[string]bool{}
			for i, raw := range cs.Valid {
				if seen[string(raw)] {
					t.Errorf("valid[%d] repeats an earlier instance", i)
				}
				seen[string(raw)] = true
				if err := grammartest.Validate(sch, raw); err != nil {
					t.Errorf("valid[%d] %s does not validate: %v", i, raw, err)
					continue
				}
				inst, err := decodeOrdered(raw)
				if err != nil {
					t.Errorf("valid[%d]: %v", i, err)
					continue
				}
				var buf bytes.Buffer
				corpusCompact(&buf, inst)
				if !bytes.Equal(buf.Bytes(), raw) {
					t.Errorf("valid[%d] is not compact JSON:\n got %s\nwant %s", i, raw, buf.Bytes())
				}
				if err := oc.check(root, "", inst, "valid["+strconv.Itoa(i)+"]", 0); err != nil {
					t.Errorf("%v", err)
				}
			}
		})
		root, err := decodeOrdered(cs.Schema)
		if err != nil {
			continue
		}
		f := schemaFeatures(root)
		for _, c := range []struct {
			on bool
			n  *int
		}{
			{f.nestedDepth >= 3, &counts.nested}, {f.arrays, &counts.arrays}, {f.enums, &counts.enums},
			{f.anyOf, &counts.anyOf}, {f.bounds, &counts.bounds}, {f.patternFormat, &counts.patternFormat},
			{f.ref, &counts.ref}, {f.recursive, &counts.recursive}, {f.strict, &counts.strict},
		} {
			if c.on {
				*c.n++
			}
		}
	}
	t.Logf("%d schemas: nested(3+ levels) %d, arrays %d, enum/const %d, anyOf %d, numeric bounds %d, pattern/format %d, $ref %d (recursive %d), OpenAI-strict %d",
		len(corpus), counts.nested, counts.arrays, counts.enums, counts.anyOf, counts.bounds,
		counts.patternFormat, counts.ref, counts.recursive, counts.strict)
	if len(corpus) < 220 {
		t.Errorf("%d schemas, want at least 220", len(corpus))
	}
	for _, c := range []struct {
		what      string
		got, want int
	}{
		{"nested objects 3+ levels", counts.nested, 40},
		{"arrays", counts.arrays, 40},
		{"enum/const", counts.enums, 40},
		{"anyOf", counts.anyOf, 30},
		{"numeric bounds", counts.bounds, 30},
		{"pattern/format", counts.patternFormat, 40},
		{"$ref", counts.ref, 25},
		{"recursive $ref", counts.recursive, 8},
		{"OpenAI-strict", counts.strict, 20},
	} {
		if c.got < c.want {
			t.Errorf("%s: %d schemas, want at least %d", c.what, c.got, c.want)
		}
	}
}

// The tiny schemas the brief asks for are there.
func TestCorpusHasTinySchemas(t *testing.T) {
	want := []string{`{"type":"string"}`, `{"type":"integer","minimum":-5,"maximum":5}`, `{"enum":["a","b"]}`}
	have := map[string]bool{}
	for _, cs := range grammartest.Corpus(t) {
		var buf bytes.Buffer
		if err := json.Compact(&buf, cs.Schema); err == nil {
			have[buf.String()] = true
		}
	}
	for _, w := range want {
		if !have[w] {
			t.Errorf("no schema %s", w)
		}
	}
}

func TestCorpusUnsupported(t *testing.T) {
	files := grammartest.UnsupportedCorpus(t)
	if len(files) < 25 {
		t.Errorf("%d unsupported schemas, want at least 25", len(files))
	}
	covered := map[string]bool{}
	for _, u := range files {
		t.Run(u.Name, func(t *testing.T) {
			root, err := decodeOrdered(u.Schema)
			if err != nil {
				t.Fatalf("schema: %v", err)
			}
			found := unsupportedUses(root)
			if !found[u.Keyword] {
				t.Fatalf("keyword %q does not occur (found %v)", u.Keyword, keysOf(found))
			}
			allowed := map[string]bool{u.Keyword: true}
			for _, c := range companions[u.Keyword] {
				allowed[c] = true
			}
			for k := range found {
				if !allowed[k] {
					t.Errorf("uses %q besides its keyword %q", k, u.Keyword)
				}
			}
			if u.Keyword == "$ref" {
				return // a remote reference: it need only be JSON
			}
			if _, _, err := grammartest.Compile(u.Schema); err != nil {
				t.Errorf("compile: %v", err)
			}
		})
		covered[u.Keyword] = true
	}
	for _, k := range []string{"oneOf", "not", "if", "allOf", "patternProperties", "propertyNames",
		"dependentRequired", "dependentSchemas", "dependencies", "contains", "minContains",
		"maxContains", "uniqueItems", "minProperties", "maxProperties", "multipleOf",
		"unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "format", "$ref"} {
		if !covered[k] {
			t.Errorf("no unsupported schema covers %q", k)
		}
	}
}

// unsupportedUses lists the unsupported keywords a schema uses: keywords
// outside the subset, allOf with 2+ subschemas, uniqueItems: true, a format
// outside the supported list, a $ref that is not local. Unknown keywords
// are reported under their own name too.
func unsupportedUses(root any) map[string]bool {
	found := map[string]bool{}
	visit(root, "", true, func(s *object, ptr string) {
		for _, k := range s.keys {
			v := s.vals[k]
			if _, ok := corpusUnsupported[k]; ok {
				if k != "uniqueItems" || v == true {
					found[k] = true
				}
				continue
			}
			if _, ok := corpusSupported[k]; !ok {
				found[k] = true // neither list knows it
				continue
			}
			switch k {
			case "allOf":
				if arr, ok := v.([]any); ok && len(arr) >= 2 {
					found[k] = true
				}
			case "format":
				if fs, ok := v.(string); !ok || !supportedFormats[fs] {
					found[k] = true
				}
			case "$ref":
				if rs, ok := v.(string); !ok || !localRef.MatchString(rs) {
					found[k] = true
				}
			}
		}
	})
	return found
}

func keysOf(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
