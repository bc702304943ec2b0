package httpapi

import (
	"encoding/json"
	"errors"

	"cohort/model/grammar"
)

// structuredOutputs is vLLM's structured_outputs: exactly one of json,
// regex, choice, grammar or json_object.
type structuredOutputs struct {
	JSON       json.RawMessage `json:"json"`
	Regex      *string         `json:"regex"`
	Choice     []string        `json:"choice"`
	Grammar    *string         `json:"grammar"`
	JSONObject *bool           `json:"json_object"`
	// Accepted; Cohort's output already has no free whitespace and no
	// undeclared properties, and never falls back to another backend.
	DisableFallback             *bool `json:"disable_fallback"`
	DisableAnyWhitespace        *bool `json:"disable_any_whitespace"`
	DisableAdditionalProperties *bool `json:"disable_additional_properties"`
	// Refused (not implemented).
	WhitespacePattern *string         `json:"whitespace_pattern"`
	StructuralTag     json.RawMessage `json:"structural_tag"`
}

// responseFormat is OpenAI's response_format.
type responseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Schema      json.RawMessage `json:"schema"`
		Strict      *bool           `json:"strict"` // accepted: output always validates
	} `json:"json_schema"`
}

// constraint is a parsed output constraint: which compiler, over what.
type constraint struct {
	kind  string // "json", "json_object", "regex", "choice", "grammar"
	src   string
	param string // the request field it came from, for errors
	list  []string
}

// parseResponseFormat reads response_format (nil: plain text).
func parseResponseFormat(raw json.RawMessage) (*constraint, *apiError) {
	rf, aerr := decodeOptional[responseFormat](raw, "response_format")
	if rf == nil || aerr != nil {
		return nil, aerr
	}
	switch rf.Type {
	case "text":
		return nil, nil
	case "json_object":
		return &constraint{kind: "json_object", param: "response_format"}, nil
	case "json_schema":
		if rf.JSONSchema == nil || isNull(rf.JSONSchema.Schema) {
			return nil, badRequest("response_format.json_schema.schema", "response_format json_schema needs json_schema.schema")
		}
		return &constraint{kind: "json", src: string(rf.JSONSchema.Schema), param: "response_format.json_schema.schema"}, nil
	}
	return nil, badRequest("response_format.type", "response_format.type %q is not one of text, json_object, json_schema", rf.Type)
}

// parseStructuredOutputs reads vLLM's structured_outputs (nil: none).
func parseStructuredOutputs(raw json.RawMessage) (*constraint, *apiError) {
	so, aerr := decodeOptional[structuredOutputs](raw, "structured_outputs")
	if so == nil || aerr != nil {
		return nil, aerr
	}
	switch {
	case so.WhitespacePattern != nil:
		return nil, notSupported("structured_outputs.whitespace_pattern")
	case !isNull(so.StructuralTag):
		return nil, notSupported("structured_outputs.structural_tag")
	}
	var found []*constraint
	if !isNull(so.JSON) {
		c := &constraint{kind: "json", src: string(so.JSON), param: "structured_outputs.json"}
		var s string
		if json.Unmarshal(so.JSON, &s) == nil { // a schema sent as a string, as vLLM allows
			c.src = s
		}
		found = append(found, c)
	}
	if so.Regex != nil {
		found = append(found, &constraint{kind: "regex", src: *so.Regex, param: "structured_outputs.regex"})
	}
	if so.Choice != nil {
		found = append(found, &constraint{kind: "choice", list: so.Choice, param: "structured_outputs.choice"})
	}
	if so.Grammar != nil {
		found = append(found, &constraint{kind: "grammar", src: *so.Grammar, param: "structured_outputs.grammar"})
	}
	if so.JSONObject != nil && *so.JSONObject {
		found = append(found, &constraint{kind: "json_object", param: "structured_outputs.json_object"})
	}
	if len(found) != 1 {
		return nil, badRequest("structured_outputs", "structured_outputs needs exactly one of json, regex, choice, grammar or json_object (got %d)", len(found))
	}
	return found[0], nil
}

// oneConstraint merges response_format and structured_outputs: at most one.
func oneConstraint(a, b *constraint) (*constraint, *apiError) {
	if a != nil && b != nil {
		return nil, badRequest("structured_outputs", "response_format and structured_outputs cannot both constrain the output")
	}
	if a != nil {
		return a, nil
	}
	return b, nil
}

// compileConstraint compiles c for the engine's vocabulary, through its
// cache (requests with the same constraint share one grammar).
func (s *Server) compileConstraint(c *constraint) (*grammar.Grammar, *apiError) {
	if s.grammars == nil {
		return nil, badRequest(c.param, "structured outputs are not available on this engine")
	}
	cache, err := s.grammars()
	if err != nil {
		return nil, badRequest(c.param, "structured outputs are not available: %v", err)
	}
	key := c.src
	if c.kind == "choice" {
		b, _ := json.Marshal(c.list)
		key = string(b)
	}
	g, err := cache.Get(c.kind, key, func(v *grammar.Vocab) (*grammar.Grammar, error) {
		switch c.kind {
		case "json":
			return grammar.JSONSchema([]byte(c.src), v)
		case "json_object":
			return grammar.JSONObject(v)
		case "regex":
			return grammar.Regex(c.src, v)
		case "choice":
			return grammar.Choice(c.list, v)
		}
		return grammar.EBNF(c.src, v)
	})
	if err != nil {
		var unsup *grammar.UnsupportedError
		if errors.As(err, &unsup) {
			e := badRequest(c.param, "%s: %v", c.param, err)
			e.code = "unsupported_schema_keyword"
			return nil, e
		}
		return nil, badRequest(c.param, "%s: %v", c.param, err)
	}
	return g, nil
}
