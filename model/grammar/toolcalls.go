package grammar

import (
	"errors"
	"fmt"
)

// Tool is a function a tool-call grammar may call: its name and its
// parameters' JSON Schema (an object schema; nil: no parameters).
type Tool struct {
	Name       string
	Parameters []byte
}

// QwenToolCalls compiles the grammar of tool calls in Qwen3.5's XML form
// (what vLLM's qwen3_coder parser reads), for a prompt that already ends
// with the opening "<tool_call>\n<function=" (or, when named is set, with
// "<tool_call>\n<function=NAME>\n"):
//
//	NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function>\n</tool_call>
//
// Parameters come in the schema's order, the required ones always. A
// string parameter's value is raw text without "<"; any other value is
// compact JSON valid for its schema. With parallel, further calls may
// follow, each opened by "\n<tool_call>\n<function=".
func QwenToolCalls(tools []Tool, named string, parallel bool, v *Vocab) (*Grammar, error) {
	if len(tools) == 0 {
		return nil, errors.New("grammar: no tools")
	}
	c := newJSONCompiler()
	var calls []Sym // by tool: "NAME>\n" PARAMS "</function>\n</tool_call>"
	var first Sym
	found := false
	for _, t := range tools {
		params, err := c.toolParams(t)
		if err != nil {
			return nil, err
		}
		tail := c.b.Seq(params, c.b.Lit("</function>\n</tool_call>"))
		calls = append(calls, c.b.Seq(c.b.Lit(t.Name+">\n"), tail))
		if t.Name == named {
			first, found = tail, true
		}
	}
	call := c.b.Or(calls...)
	if named != "" {
		if !found {
			return nil, fmt.Errorf("grammar: no tool named %q", named)
		}
		return c.b.Build(first, v)
	}
	if !parallel {
		return c.b.Build(call, v)
	}
	more := c.b.Star(c.b.Seq(c.b.Lit("\n<tool_call>\n<function="), call))
	return c.b.Build(c.b.Seq(call, more), v)
}

// toolParams compiles one tool's parameters in declaration order.
func (c *jsonCompiler) toolParams(t Tool) (Sym, error) {
	if len(t.Parameters) == 0 {
		return c.b.Empty(), nil
	}
	root, err := decodeOrdered(t.Parameters)
	if err != nil {
		return 0, fmt.Errorf("grammar: tool %s: parameters: %w", t.Name, err)
	}
	c.root, c.refs = root, map[string]Sym{} // each tool's $refs resolve in its own schema
	o, ok := root.(*object)
	if !ok {
		return 0, fmt.Errorf("grammar: tool %s: parameters must be an object schema", t.Name)
	}
	required := map[string]bool{}
	if r, ok := o.get("required"); ok {
		list, _ := r.([]any)
		for _, k := range list {
			if s, ok := k.(string); ok {
				required[s] = true
			}
		}
	}
	props, _ := o.get("properties")
	po, _ := props.(*object)
	if po == nil {
		return c.b.Empty(), nil
	}
	next := c.b.Empty()
	for i := len(po.keys) - 1; i >= 0; i-- {
		k := po.keys[i]
		value, err := c.paramValue(po.vals[k], "#/properties/"+k)
		if err != nil {
			return 0, fmt.Errorf("grammar: tool %s: %w", t.Name, err)
		}
		p := c.b.Seq(c.b.Lit("<parameter="+k+">\n"), value, c.b.Lit("\n</parameter>\n"))
		r := c.b.Rule()
		c.b.Add(r, p, next)
		if !required[k] {
			c.b.Add(r, next)
		}
		next = r
	}
	return next, nil
}

// paramValue is a parameter's text: raw text for a plain string schema,
// compact JSON otherwise.
func (c *jsonCompiler) paramValue(s any, path string) (Sym, error) {
	if o, ok := s.(*object); ok && len(o.keys) > 0 {
		if t, _ := o.get("type"); t == "string" {
			if _, hasEnum := o.get("enum"); !hasEnum {
				minL, _ := intKeyword(o, "minLength", 0, path)
				maxL, _ := intKeyword(o, "maxLength", -1, path)
				c.raw = true
				defer func() { c.raw = false }()
				body, err := c.stringBody(&rx{op: rxRepeat, subs: []*rx{{op: rxClass, cls: charClass{{'<', '<'}}.negate()}}, mx: -1}, max(minL, 1), maxL)
				return body, err
			}
		}
	}
	return c.schema(s, path)
}
