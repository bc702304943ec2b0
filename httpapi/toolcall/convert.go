package toolcall

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
)

// Convert turns a parameter's raw text into JSON of the type its schema
// (one entry of parameters.properties, decoded into any) declares:
//
//   - "string" keeps the text as a JSON string;
//   - "integer" and "number" parse it (an integer-valued number such as
//     "3.0" also counts as an integer);
//   - "boolean" takes true or false in any case;
//   - "null" takes null (or None, as Python-minded models write it);
//   - "object" and "array" take JSON text of that kind.
//
// A list of types, or anyOf/oneOf alternatives, is tried in order with
// string last; an enum without a type picks the value whose text matches.
// Text that fits none of the types stays a string, as in vLLM, so the
// result is always valid JSON. A nil schema (a parameter the tool does not
// declare) keeps the text as a string.
func Convert(raw string, schema any) json.RawMessage {
	types := schemaTypes(schema, 0)
	trimmed := strings.TrimSpace(raw)
	stringOK := len(types) == 0
	for _, t := range types {
		if t == "string" {
			stringOK = true
			continue
		}
		if v, ok := convertAs(t, trimmed); ok {
			return v
		}
	}
	if m, ok := schema.(map[string]any); ok && !stringOK {
		if enum, ok := m["enum"].([]any); ok {
			for _, e := range enum {
				if b, err := json.Marshal(e); err == nil && (enumText(e) == trimmed || string(b) == trimmed) {
					return b
				}
			}
		}
	}
	b, _ := json.Marshal(raw)
	return b
}

func enumText(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// schemaTypes lists the JSON types a schema allows, in its order. It looks
// through anyOf and oneOf (to a small depth) and infers the type of a
// const or of an enum whose values share one.
func schemaTypes(schema any, depth int) []string {
	m, ok := schema.(map[string]any)
	if !ok || depth > 4 {
		return nil
	}
	switch t := m["type"].(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, x := range t {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	var out []string
	for _, key := range []string{"anyOf", "oneOf"} {
		if alts, ok := m[key].([]any); ok {
			for _, a := range alts {
				out = append(out, schemaTypes(a, depth+1)...)
			}
		}
	}
	if len(out) > 0 {
		return out
	}
	var vals []any
	if c, ok := m["const"]; ok {
		vals = []any{c}
	} else if e, ok := m["enum"].([]any); ok {
		vals = e
	}
	kinds := map[string]bool{}
	for _, v := range vals {
		kinds[jsonType(v)] = true
	}
	if len(kinds) == 1 {
		for k := range kinds {
			return []string{k}
		}
	}
	return nil
}

func jsonType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case float64:
		if x == math.Trunc(x) {
			return "integer"
		}
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	}
	return "object"
}

// convertAs converts s to JSON of type t, if it is one.
func convertAs(t, s string) (json.RawMessage, bool) {
	switch t {
	case "integer":
		if _, err := strconv.ParseInt(s, 10, 64); err == nil {
			return canonicalNumber(s)
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return json.RawMessage(strconv.FormatInt(int64(f), 10)), true
		}
	case "number":
		if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
			return canonicalNumber(s)
		}
	case "boolean":
		switch strings.ToLower(s) {
		case "true":
			return json.RawMessage("true"), true
		case "false":
			return json.RawMessage("false"), true
		}
	case "null":
		if s == "null" || s == "None" {
			return json.RawMessage("null"), true
		}
	case "object", "array":
		open := byte('{')
		if t == "array" {
			open = '['
		}
		if len(s) > 0 && s[0] == open && json.Valid([]byte(s)) {
			var buf bytes.Buffer
			if json.Compact(&buf, []byte(s)) == nil {
				return buf.Bytes(), true
			}
		}
	}
	return nil, false
}

// canonicalNumber returns s as a JSON number: Go accepts forms JSON does
// not ("+1", "01", "1.", ".5", "0x1p3"), which are re-encoded.
func canonicalNumber(s string) (json.RawMessage, bool) {
	if json.Valid([]byte(s)) && (s[0] == '-' || (s[0] >= '0' && s[0] <= '9')) {
		return json.RawMessage(s), true
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return json.RawMessage(strconv.FormatInt(i, 10)), true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return nil, false
	}
	return json.RawMessage(strconv.FormatFloat(f, 'g', -1, 64)), true
}
