package grammar

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// UnsupportedError names a JSON Schema keyword the compiler refuses
// rather than ignore (output would not be guaranteed to validate).
type UnsupportedError struct {
	Keyword string
	Others  []string // further unsupported keywords of the same schema object
	Path    string   // a JSON pointer into the schema
	Detail  string
}

func (e *UnsupportedError) Error() string {
	names := strconv.Quote(e.Keyword)
	for _, k := range e.Others {
		names += ", " + strconv.Quote(k)
	}
	word := "keyword"
	if len(e.Others) > 0 {
		word = "keywords"
	}
	s := fmt.Sprintf("grammar: JSON Schema %s %s (at %s) not supported", word, names, e.Path)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Keyword tables. Annotations and unknown keywords are ignored, as a
// validator ignores them; the unsupported ones are refused.
var (
	supportedKeywords = set("type", "enum", "const", "properties", "required", "additionalProperties",
		"items", "prefixItems", "minItems", "maxItems", "minLength", "maxLength", "pattern", "format",
		"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "anyOf", "allOf", "$ref",
		"$defs", "definitions")
	unsupportedKeywords = set("oneOf", "not", "if", "then", "else", "patternProperties", "propertyNames",
		"dependentRequired", "dependentSchemas", "dependencies", "contains", "minContains", "maxContains",
		"uniqueItems", "minProperties", "maxProperties", "multipleOf", "unevaluatedProperties",
		"unevaluatedItems", "$dynamicRef", "$recursiveRef", "additionalItems")
	formats = map[string]string{
		"date":      `^` + dateRx + `$`,
		"time":      `^` + timeRx + `$`,
		"date-time": `^` + dateRx + `T` + timeRx + `$`,
		"uuid":      `^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`,
		"ipv4":      `^((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$`,
		"email":     `^[a-z0-9]{1,20}(\.[a-z0-9]{1,20}){0,2}@` + hostRx + `$`,
		"uri":       `^https?://` + hostRx + `(/[a-zA-Z0-9_\-]{1,20}){0,4}$`,
	}
)

const (
	dateRx = `\d{4}-(0[1-9]|1[0-2])-(0[1-9]|1\d|2[0-8])` // days to 28: valid in every month
	timeRx = `([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?(Z|[+\-]([01]\d|2[0-3]):[0-5]\d)`
	hostRx = `[a-z0-9]{1,20}(\.[a-z0-9]{1,20}){0,2}\.[a-z]{2,6}`
)

func set(keys ...string) map[string]bool {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return m
}

// Integer magnitudes are bounded so that every generated number is exact
// in a float64 (what most JSON parsers decode into).
const maxSafe = 999_999_999_999_999

// jsonCompiler compiles JSON Schemas (and regular expressions over raw
// text, when raw) into a Builder.
type jsonCompiler struct {
	b      *Builder
	root   any
	raw    bool // characters are raw UTF-8, not JSON-escaped (Regex)
	refs   map[string]Sym
	chars  map[string]Sym
	strs   map[string]Sym
	anyVal Sym
	hasAny bool
	ws     Sym
}

func newJSONCompiler() *jsonCompiler {
	c := &jsonCompiler{b: NewBuilder(), refs: map[string]Sym{}, chars: map[string]Sym{}, strs: map[string]Sym{}}
	c.ws = c.b.Opt(c.b.Byte(' '))
	return c
}

// JSONSchema compiles a JSON Schema (draft 2020-12, the subset the README
// lists) into a grammar of the compact JSON documents that validate.
func JSONSchema(schema []byte, v *Vocab) (*Grammar, error) {
	root, err := decodeOrdered(schema)
	if err != nil {
		return nil, fmt.Errorf("grammar: the schema is not valid JSON: %w", err)
	}
	c := newJSONCompiler()
	c.root = root
	s, err := c.schema(root, "#")
	if err != nil {
		return nil, err
	}
	return c.b.Build(s, v)
}

// JSONObject returns the grammar of any JSON object (json_object mode).
func JSONObject(v *Vocab) (*Grammar, error) {
	c := newJSONCompiler()
	return c.b.Build(c.object(c.any(), nil, nil), v)
}

// schema compiles one schema at path.
func (c *jsonCompiler) schema(s any, path string) (Sym, error) {
	switch t := s.(type) {
	case bool:
		if !t {
			return 0, fmt.Errorf("grammar: the schema at %s is false: nothing validates", path)
		}
		return c.any(), nil
	case *object:
		return c.objectSchema(t, path)
	}
	return 0, fmt.Errorf("grammar: the schema at %s must be an object or a boolean", path)
}

func (c *jsonCompiler) objectSchema(o *object, path string) (Sym, error) {
	if err := c.b.Err(); err != nil {
		return 0, err
	}
	assertions := 0
	var unsupported []string
	for _, k := range o.keys {
		if unsupportedKeywords[k] && !(k == "uniqueItems" && o.vals[k] == false) {
			unsupported = append(unsupported, k)
		}
		if supportedKeywords[k] && k != "$defs" && k != "definitions" {
			assertions++
		}
	}
	if len(unsupported) > 0 {
		return 0, &UnsupportedError{Keyword: unsupported[0], Others: unsupported[1:], Path: path}
	}
	if ref, ok := o.get("$ref"); ok {
		if assertions > 1 {
			return 0, &UnsupportedError{Keyword: "$ref", Path: path, Detail: "keywords beside $ref"}
		}
		return c.ref(ref, path)
	}
	if all, ok := o.get("allOf"); ok {
		list, isList := all.([]any)
		if !isList || len(list) != 1 || assertions > 1 {
			return 0, &UnsupportedError{Keyword: "allOf", Path: path, Detail: "only allOf with one schema and nothing beside it"}
		}
		return c.schema(list[0], path+"/allOf/0")
	}
	if anyOf, ok := o.get("anyOf"); ok {
		if assertions > 1 {
			return 0, &UnsupportedError{Keyword: "anyOf", Path: path, Detail: "keywords beside anyOf"}
		}
		return c.anyOf(anyOf, path)
	}
	if e, ok := o.get("const"); ok {
		return c.enum([]any{e}, o, path)
	}
	if e, ok := o.get("enum"); ok {
		list, isList := e.([]any)
		if !isList || len(list) == 0 {
			return 0, fmt.Errorf("grammar: enum at %s must be a non-empty list", path)
		}
		return c.enum(list, o, path)
	}
	types, err := schemaTypes(o, path)
	if err != nil {
		return 0, err
	}
	var alts []Sym
	for _, t := range types {
		s, err := c.typed(t, o, path)
		if err != nil {
			return 0, err
		}
		alts = append(alts, s)
	}
	return c.b.Or(alts...), nil
}

// schemaTypes returns the types a schema allows: its type keyword, or the
// types its keywords imply, or every type.
func schemaTypes(o *object, path string) ([]string, error) {
	if t, ok := o.get("type"); ok {
		switch v := t.(type) {
		case string:
			return []string{v}, nil
		case []any:
			var out []string
			for _, e := range v {
				s, ok := e.(string)
				if !ok {
					return nil, fmt.Errorf("grammar: type at %s must list strings", path)
				}
				if !slices.Contains(out, s) {
					out = append(out, s)
				}
			}
			if len(out) == 0 {
				return nil, fmt.Errorf("grammar: type at %s is an empty list", path)
			}
			return out, nil
		}
		return nil, fmt.Errorf("grammar: type at %s must be a string or a list", path)
	}
	var out []string
	has := func(keys ...string) bool {
		for _, k := range keys {
			if _, ok := o.get(k); ok {
				return true
			}
		}
		return false
	}
	if has("properties", "required", "additionalProperties") {
		out = append(out, "object")
	}
	if has("items", "prefixItems", "minItems", "maxItems") {
		out = append(out, "array")
	}
	if has("minLength", "maxLength", "pattern", "format") {
		out = append(out, "string")
	}
	if has("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum") {
		out = append(out, "number")
	}
	if len(out) == 0 {
		return []string{"object", "array", "string", "number", "boolean", "null"}, nil
	}
	return out, nil
}

func (c *jsonCompiler) typed(t string, o *object, path string) (Sym, error) {
	switch t {
	case "null":
		return c.b.Lit("null"), nil
	case "boolean":
		return c.b.Or(c.b.Lit("true"), c.b.Lit("false")), nil
	case "integer", "number":
		return c.number(o, t == "integer", path)
	case "string":
		return c.str(o, path)
	case "object":
		return c.objectType(o, path)
	case "array":
		return c.array(o, path)
	}
	return 0, fmt.Errorf("grammar: unknown type %q at %s", t, path)
}

func (c *jsonCompiler) anyOf(v any, path string) (Sym, error) {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return 0, fmt.Errorf("grammar: anyOf at %s must be a non-empty list", path)
	}
	alts := make([]Sym, len(list))
	for i, s := range list {
		var err error
		if alts[i], err = c.schema(s, path+"/anyOf/"+strconv.Itoa(i)); err != nil {
			return 0, err
		}
	}
	return c.b.Or(alts...), nil
}

// ref compiles a local reference once; recursion refers to its rule.
func (c *jsonCompiler) ref(v any, path string) (Sym, error) {
	ref, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("grammar: $ref at %s must be a string", path)
	}
	if r, ok := c.refs[ref]; ok {
		return r, nil
	}
	if ref != "#" && !strings.HasPrefix(ref, "#/") {
		return 0, &UnsupportedError{Keyword: "$ref", Path: path, Detail: fmt.Sprintf("only local references (#/...) are resolved, not %q", ref)}
	}
	target := c.root
	for _, part := range strings.Split(strings.TrimPrefix(ref, "#"), "/")[1:] {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		switch t := target.(type) {
		case *object:
			var ok bool
			if target, ok = t.get(part); !ok {
				return 0, fmt.Errorf("grammar: $ref %q at %s: no %q", ref, path, part)
			}
		case []any:
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(t) {
				return 0, fmt.Errorf("grammar: $ref %q at %s: bad index %q", ref, path, part)
			}
			target = t[i]
		default:
			return 0, fmt.Errorf("grammar: $ref %q at %s does not resolve", ref, path)
		}
	}
	r := c.b.Rule()
	c.refs[ref] = r
	body, err := c.schema(target, ref)
	if err != nil {
		return 0, err
	}
	c.b.Add(r, body)
	return r, nil
}

// enum matches the listed values (those of the schema's types, if given).
func (c *jsonCompiler) enum(list []any, o *object, path string) (Sym, error) {
	var types []string
	if _, ok := o.get("type"); ok {
		var err error
		if types, err = schemaTypes(o, path); err != nil {
			return 0, err
		}
	}
	var alts []Sym
	for _, v := range list {
		if types != nil && !slices.ContainsFunc(types, func(t string) bool { return hasType(v, t) }) {
			continue
		}
		var sb strings.Builder
		encodeCompact(&sb, v)
		alts = append(alts, c.b.Lit(sb.String()))
	}
	if len(alts) == 0 {
		return 0, fmt.Errorf("grammar: no enum value at %s has the schema's type", path)
	}
	return c.b.Or(alts...), nil
}

// hasType reports whether the decoded value v is of JSON Schema type t.
func hasType(v any, t string) bool {
	switch x := v.(type) {
	case nil:
		return t == "null"
	case bool:
		return t == "boolean"
	case string:
		return t == "string"
	case []any:
		return t == "array"
	case *object:
		return t == "object"
	case json.Number:
		if t == "number" {
			return true
		}
		f, err := x.Float64()
		return t == "integer" && err == nil && f == math.Trunc(f)
	}
	return false
}

// any returns the rule matching any JSON value.
func (c *jsonCompiler) any() Sym {
	if c.hasAny {
		return c.anyVal
	}
	c.hasAny = true
	v := c.b.Rule()
	c.anyVal = v
	str, _ := c.plainString()
	num, _ := c.numberRange(-maxSafe, maxSafe, -maxSafe+1, maxSafe-1)
	arr := c.b.Seq(c.b.Byte('['), c.b.Opt(c.b.Seq(v, c.b.Star(c.b.Seq(c.b.Byte(','), c.ws, v)))), c.b.Byte(']'))
	for _, alt := range []Sym{c.object(v, nil, nil), arr, str, num, c.b.Lit("true"), c.b.Lit("false"), c.b.Lit("null")} {
		c.b.Add(v, alt)
	}
	return v
}

func (c *jsonCompiler) plainString() (Sym, error) { return c.stringOf(nil, 0, -1, "") }

// str compiles a string schema: length bounds, and a pattern or a format.
func (c *jsonCompiler) str(o *object, path string) (Sym, error) {
	minL, maxL, err := countBounds(o, "minLength", "maxLength", path)
	if err != nil {
		return 0, err
	}
	if maxL >= 0 && minL > maxL {
		return 0, fmt.Errorf("grammar: minLength %d above maxLength %d at %s", minL, maxL, path)
	}
	pat, hasPat := o.get("pattern")
	f, hasFormat := o.get("format")
	var src string
	switch {
	case hasPat && hasFormat:
		return 0, &UnsupportedError{Keyword: "format", Path: path, Detail: "pattern and format together"}
	case hasPat:
		s, ok := pat.(string)
		if !ok {
			return 0, fmt.Errorf("grammar: pattern at %s must be a string", path)
		}
		src = s
	case hasFormat:
		name, _ := f.(string)
		if src = formats[name]; src == "" {
			return 0, &UnsupportedError{Keyword: "format", Path: path, Detail: fmt.Sprintf("format %q (supported: date, time, date-time, uuid, ipv4, email, uri)", name)}
		}
	}
	var r *rx
	if src != "" {
		if r, err = parseRegex(src, true); err != nil {
			return 0, &UnsupportedError{Keyword: "pattern", Path: path, Detail: err.Error()}
		}
	}
	return c.stringOf(r, minL, maxL, src)
}

// stringOf returns the quoted string whose value matches r (nil: any) with
// a length in [minL, maxL], memoized.
func (c *jsonCompiler) stringOf(r *rx, minL, maxL int, src string) (Sym, error) {
	key := fmt.Sprintf("%t,%d,%d,%s", c.raw, minL, maxL, src)
	if s, ok := c.strs[key]; ok {
		return s, nil
	}
	if r == nil {
		r = star(anyChar)
	}
	body, err := c.stringBody(r, minL, maxL)
	if err != nil {
		return 0, err
	}
	s := c.b.Seq(c.b.Byte('"'), body, c.b.Byte('"'))
	c.strs[key] = s
	return s, nil
}

// countBounds reads a pair of count keywords (minLength and maxLength,
// minItems and maxItems): lo is 0 and hi -1 (no bound) when absent.
func countBounds(o *object, minKey, maxKey, path string) (lo, hi int, err error) {
	if lo, err = intKeyword(o, minKey, 0, path); err != nil {
		return 0, 0, err
	}
	if hi, err = intKeyword(o, maxKey, -1, path); err != nil {
		return 0, 0, err
	}
	return lo, hi, nil
}

// listKeyword reads keyword k, which must be a list (nil when absent).
func listKeyword(o *object, k, path string) ([]any, error) {
	v, ok := o.get(k)
	if !ok {
		return nil, nil
	}
	list, isList := v.([]any)
	if !isList {
		return nil, fmt.Errorf("grammar: %s at %s must be a list", k, path)
	}
	return list, nil
}

// intKeyword reads a non-negative integer keyword (def when absent).
func intKeyword(o *object, k string, def int, path string) (int, error) {
	v, ok := o.get(k)
	if !ok {
		return def, nil
	}
	n, isNum := v.(json.Number)
	i, err := strconv.Atoi(string(n))
	if !isNum || err != nil || i < 0 {
		return 0, fmt.Errorf("grammar: %s at %s must be a non-negative integer", k, path)
	}
	if i > maxRepeat {
		return 0, &UnsupportedError{Keyword: k, Path: path, Detail: fmt.Sprintf("values above %d", maxRepeat)}
	}
	return i, nil
}
