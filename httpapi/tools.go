package httpapi

import (
	"bytes"
	"encoding/json"
	"strings"

	"cohort/httpapi/chattemplate"
	"cohort/httpapi/toolcall"
	"cohort/model/grammar"
)

// maxTools is OpenAI's limit on tools per request.
const maxTools = 128

// toolSetup is how a chat request uses tools.
type toolSetup struct {
	defs   []any           // the tools as decoded JSON, for the chat template
	tools  []toolcall.Tool // what the parser needs of them
	choice string          // "none", "auto", "required" or "function" (named)
	named  string          // the function tool_choice names
	single bool            // parallel_tool_calls false
}

// parse reports whether the output is parsed for tool calls.
func (t *toolSetup) parse() bool { return t != nil && t.choice != "none" }

// forced reports whether the prompt opens the call (tool_choice required or
// a named function).
func (t *toolSetup) forced() bool {
	return t != nil && (t.choice == "required" || t.choice == "function")
}

// callPrefix is the text appended to the prompt to open a forced call, in
// Qwen3.5's format: the call marker and, for a named function, its name.
func (t *toolSetup) callPrefix() string {
	if t.choice == "function" {
		return "<tool_call>\n<function=" + t.named + ">\n"
	}
	return "<tool_call>\n<function="
}

// parser returns a parser for one choice's output.
func (t *toolSetup) parser() *toolcall.Parser {
	p := toolcall.NewParser(t.tools, t.single)
	switch t.choice {
	case "function":
		p.StartInCall(t.named)
	case "required":
		p.StartInCall("")
	}
	return p
}

// validToolName is OpenAI's rule for function names: 1–64 of a-z, A-Z,
// 0-9, underscore and dash. It also keeps names safe inside
// <function=NAME>.
func validToolName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// toolShape is how an API spells its function tools and a named
// tool_choice: chat nests the function ({"type": "function", "function":
// {...}}), the Responses API does not.
type toolShape struct {
	// tool validates one tools entry: the definition the template gets and
	// what the parser needs.
	tool func(raw json.RawMessage, param string) (any, toolcall.Tool, *apiError)
	// named reads a tool_choice object naming a function.
	named     func(raw json.RawMessage) (string, bool)
	nameField string // the name's path in a tools entry
	namedForm string // a named tool_choice, for error messages
}

var chatTools = toolShape{tool: parseTool, named: chatNamedChoice, nameField: ".function.name",
	namedForm: `{"type": "function", "function": {"name": ...}}`}

// parseTools validates tools, tool_choice and parallel_tool_calls. It
// returns nil when the request has no tools and tool_choice is absent or
// "none" (an empty tools list counts as none, as vLLM takes it).
func parseTools(rawTools, rawChoice json.RawMessage, parallel *bool) (*toolSetup, *apiError) {
	return parseToolsAs(chatTools, rawTools, rawChoice, parallel)
}

// parseToolsAs is parseTools for the tools of one shape.
func parseToolsAs(shape toolShape, rawTools, rawChoice json.RawMessage, parallel *bool) (*toolSetup, *apiError) {
	t := &toolSetup{single: parallel != nil && !*parallel}
	if aerr := t.parseList(shape, rawTools); aerr != nil {
		return nil, aerr
	}
	t.choice = "none"
	if len(t.tools) > 0 {
		t.choice = "auto"
	}
	if !isNull(rawChoice) {
		var s string
		if err := json.Unmarshal(rawChoice, &s); err == nil {
			switch s {
			case "none", "auto", "required":
				t.choice = s
			default:
				return nil, badRequest("tool_choice", "tool_choice %q must be none, auto, required or a function object", s)
			}
		} else {
			name, ok := shape.named(rawChoice)
			if !ok {
				return nil, badRequest("tool_choice", "tool_choice must be none, auto, required or %s", shape.namedForm)
			}
			t.choice, t.named = "function", name
		}
	}
	switch {
	case t.choice == "required" && len(t.tools) == 0:
		return nil, badRequest("tool_choice", "tool_choice required needs at least one tool in tools")
	case t.choice == "auto" && isNull(rawTools):
		return nil, badRequest("tool_choice", "tool_choice auto needs tools")
	case t.choice == "function":
		found := false
		for _, tool := range t.tools {
			found = found || tool.Name == t.named
		}
		if !found {
			return nil, badRequest("tool_choice", "tool_choice names function %q, which is not in tools", t.named)
		}
	}
	if len(t.tools) == 0 {
		return nil, nil
	}
	return t, nil
}

// parseList reads the tools list into t.
func (t *toolSetup) parseList(shape toolShape, rawTools json.RawMessage) *apiError {
	if isNull(rawTools) {
		return nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(rawTools, &list); err != nil {
		return badRequest("tools", "tools must be a list of tool objects")
	}
	if len(list) > maxTools {
		return badRequest("tools", "at most %d tools are allowed, got %d", maxTools, len(list))
	}
	seen := map[string]bool{}
	for i, raw := range list {
		param := "tools[" + itoa(i) + "]"
		def, tool, aerr := shape.tool(raw, param)
		if aerr != nil {
			return aerr
		}
		if seen[tool.Name] {
			return badRequest(param+shape.nameField, "tool name %q is used twice", tool.Name)
		}
		seen[tool.Name] = true
		t.defs = append(t.defs, def)
		t.tools = append(t.tools, tool)
	}
	return nil
}

// chatNamedChoice reads chat's {"type": "function", "function": {"name"}}.
func chatNamedChoice(raw json.RawMessage) (string, bool) {
	var obj struct {
		Type     string `json:"type"`
		Function *struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := unmarshalStrict(raw, &obj); err != nil || obj.Type != "function" || obj.Function == nil {
		return "", false
	}
	return obj.Function.Name, true
}

// parseTool validates one tools entry: {"type": "function", "function":
// {"name", "description", "parameters", "strict"}}.
func parseTool(raw json.RawMessage, param string) (any, toolcall.Tool, *apiError) {
	var spec struct {
		Type     string `json:"type"`
		Function *struct {
			Name        string          `json:"name"`
			Description *string         `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
			Strict      *bool           `json:"strict"`
		} `json:"function"`
	}
	if aerr := decodeStrict(raw, &spec, param, "a tool object"); aerr != nil {
		return nil, toolcall.Tool{}, aerr
	}
	if spec.Type != "function" {
		return nil, toolcall.Tool{}, badRequest(param+".type", "%s.type %q is not supported (only function tools)", param, spec.Type)
	}
	if spec.Function == nil {
		return nil, toolcall.Tool{}, badRequest(param+".function", "%s.function is required", param)
	}
	tool, aerr := functionTool(spec.Function.Name, spec.Function.Parameters, param+".function")
	if aerr != nil {
		return nil, toolcall.Tool{}, aerr
	}
	var def any
	if err := json.Unmarshal(raw, &def); err != nil { // already decoded once: cannot fail
		return nil, toolcall.Tool{}, badRequest(param, "%s: %v", param, err)
	}
	return def, tool, nil
}

// functionTool validates a function's name and parameters (a JSON Schema
// object) at param, the path of the function's fields.
func functionTool(name string, parameters json.RawMessage, param string) (toolcall.Tool, *apiError) {
	if !validToolName(name) {
		return toolcall.Tool{}, badRequest(param+".name",
			"%s.name %q must be 1 to 64 letters, digits, underscores or dashes", param, name)
	}
	tool := toolcall.Tool{Name: name}
	if isNull(parameters) {
		return tool, nil
	}
	var schema map[string]any
	if err := json.Unmarshal(parameters, &schema); err != nil {
		return toolcall.Tool{}, badRequest(param+".parameters", "%s.parameters must be a JSON Schema object", param)
	}
	tool.Schema = parameters
	if props, ok := schema["properties"]; ok {
		m, ok := props.(map[string]any)
		if !ok {
			return toolcall.Tool{}, badRequest(param+".parameters",
				"%s.parameters.properties must be an object", param)
		}
		tool.Properties = m
	}
	return tool, nil
}

// toolCallParam is one entry of an assistant message's tool_calls.
type toolCallParam struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function *struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// parseToolCalls validates an assistant message's tool_calls. Arguments
// are OpenAI's JSON text of an object (an object itself is taken too);
// the template gets them decoded.
func parseToolCalls(raw json.RawMessage, param string) ([]chattemplate.ToolCall, *apiError) {
	if isNull(raw) {
		return nil, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, badRequest(param, "%s must be a list of tool calls", param)
	}
	out := make([]chattemplate.ToolCall, 0, len(list))
	for i, item := range list {
		p := param + "[" + itoa(i) + "]"
		var tc toolCallParam
		dec := json.NewDecoder(bytes.NewReader(item))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&tc); err != nil {
			return nil, badRequest(p, "%s must be {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}: %v",
				p, strings.TrimPrefix(err.Error(), "json: "))
		}
		if tc.Type != "" && tc.Type != "function" {
			return nil, badRequest(p+".type", "%s.type %q is not supported (only function)", p, tc.Type)
		}
		if tc.Function == nil || tc.Function.Name == "" {
			return nil, badRequest(p+".function.name", "%s.function.name is required", p)
		}
		args, aerr := callArguments(tc.Function.Arguments, p+".function.arguments")
		if aerr != nil {
			return nil, aerr
		}
		out = append(out, chattemplate.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: args})
	}
	return out, nil
}

func callArguments(raw json.RawMessage, param string) (map[string]any, *apiError) {
	if isNull(raw) {
		return map[string]any{}, nil
	}
	var text string
	if err := json.Unmarshal(raw, &text); err == nil {
		if strings.TrimSpace(text) == "" {
			return map[string]any{}, nil
		}
		raw = json.RawMessage(text)
	}
	var args map[string]any
	if err := json.Unmarshal(raw, &args); err != nil || args == nil {
		return nil, badRequest(param, "%s must be the JSON text of an object", param)
	}
	return args, nil
}

// openThink reports whether a rendered prompt ends inside a think block
// (Qwen's templates open one in the generation prompt when thinking is on),
// so the model's output starts in its reasoning.
func openThink(prompt string) bool {
	open := strings.LastIndex(prompt, "<think>")
	return open >= 0 && !strings.Contains(prompt[open:], "</think>")
}

// grammar returns the grammar a forced call follows (tool_choice required
// or named): the call in Qwen3.5's format, each parameter valid for its
// schema. It is nil when a tool's schema uses what grammars do not
// compile; the call is then forced by the prompt alone.
func (t *toolSetup) grammar(s *Server) *grammar.Grammar {
	if !t.forced() || s.grammars == nil {
		return nil
	}
	cache, err := s.grammars()
	if err != nil {
		return nil
	}
	specs := make([]grammar.Tool, len(t.tools))
	for i, tool := range t.tools {
		specs[i] = grammar.Tool{Name: tool.Name, Parameters: tool.Schema}
	}
	key, _ := json.Marshal(struct {
		Tools  []grammar.Tool
		Named  string
		Single bool
	}{specs, t.named, t.single})
	g, err := cache.Get("qwen-tools", string(key), func(v *grammar.Vocab) (*grammar.Grammar, error) {
		return grammar.QwenToolCalls(specs, t.named, !t.single, v)
	})
	if err != nil {
		return nil
	}
	return g
}
