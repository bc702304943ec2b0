package httpapi

import (
	"bytes"
	"encoding/json"
	"strings"
)

// unmarshalStrict decodes the first JSON value of data into v, refusing
// fields that v does not have.
func unmarshalStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// decodeOptional decodes the optional request field param (nil when absent
// or null) into a new T, refusing unknown fields.
func decodeOptional[T any](raw json.RawMessage, param string) (*T, *apiError) {
	if isNull(raw) {
		return nil, nil
	}
	v := new(T)
	if err := unmarshalStrict(raw, v); err != nil {
		return nil, badRequest(param, "%s: %v", param, err)
	}
	return v, nil
}

// decodeStrict decodes raw, the request field param that must be what (an
// object), into v, naming an unknown field in the error.
func decodeStrict(raw json.RawMessage, v any, param, what string) *apiError {
	if err := unmarshalStrict(raw, v); err != nil {
		if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			name = strings.Trim(name, `"`)
			return badRequest(param+"."+name, "unknown field %q in %s", name, param)
		}
		return badRequest(param, "%s must be %s: %v", param, what, strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

// decodeFor decodes body into v and checks the model it names (*model,
// v's model field).
func (s *Server) decodeFor(body []byte, v any, model *string) *apiError {
	if aerr := decodeJSON(body, v); aerr != nil {
		return aerr
	}
	return s.checkModel(*model)
}
