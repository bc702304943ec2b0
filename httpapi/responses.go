package httpapi

import (
	"bytes"
	"encoding/json"
	"strings"

	"cohort/httpapi/chattemplate"
	"cohort/httpapi/toolcall"
)

// responsesRequest is POST /v1/responses (OpenAI's Responses API, without
// the stored state: nothing is kept after the response).
type responsesRequest struct {
	Model              string                  `json:"model"`
	Input              json.RawMessage         `json:"input"`
	Instructions       *string                 `json:"instructions"`
	Tools              json.RawMessage         `json:"tools"`
	ToolChoice         json.RawMessage         `json:"tool_choice"`
	ParallelToolCalls  *bool                   `json:"parallel_tool_calls"`
	MaxOutputTokens    *int64                  `json:"max_output_tokens"`
	Temperature        *float64                `json:"temperature"`
	TopP               *float64                `json:"top_p"`
	Stream             *bool                   `json:"stream"`
	StreamOptions      *responsesStreamOptions `json:"stream_options"`
	Store              *bool                   `json:"store"` // accepted; nothing is stored
	PreviousResponseID *string                 `json:"previous_response_id"`
	Reasoning          *responsesReasoning     `json:"reasoning"`
	Text               *responsesText          `json:"text"`
	Metadata           map[string]string       `json:"metadata"`
	User               *string                 `json:"user"` // accepted, ignored
	Truncation         *string                 `json:"truncation"`
	Include            []string                `json:"include"` // accepted, ignored
	TopLogprobs        *int64                  `json:"top_logprobs"`
	Background         *bool                   `json:"background"`
	Conversation       json.RawMessage         `json:"conversation"`
	Prompt             json.RawMessage         `json:"prompt"`
	MaxToolCalls       *int64                  `json:"max_tool_calls"`

	ServiceTier          *string `json:"service_tier"`           // ignored
	PromptCacheKey       *string `json:"prompt_cache_key"`       // ignored
	PromptCacheRetention *string `json:"prompt_cache_retention"` // ignored
	SafetyIdentifier     *string `json:"safety_identifier"`      // ignored

	// vLLM's sampling extensions, as on chat.
	TopK                   *int64          `json:"top_k"`
	MinP                   *float64        `json:"min_p"`
	RepetitionPenalty      *float64        `json:"repetition_penalty"`
	FrequencyPenalty       *float64        `json:"frequency_penalty"`
	PresencePenalty        *float64        `json:"presence_penalty"`
	Seed                   *int64          `json:"seed"`
	Stop                   json.RawMessage `json:"stop"`
	StopTokenIDs           []int64         `json:"stop_token_ids"`
	IgnoreEOS              *bool           `json:"ignore_eos"`
	MinTokens              *int64          `json:"min_tokens"`
	SkipSpecialTokens      *bool           `json:"skip_special_tokens"`
	IncludeStopStrInOutput *bool           `json:"include_stop_str_in_output"`
	ChatTemplateKwargs     map[string]any  `json:"chat_template_kwargs"`
}

type responsesStreamOptions struct {
	IncludeObfuscation *bool `json:"include_obfuscation"` // accepted, ignored (nothing is obfuscated)
}

// responsesReasoning is the reasoning config: accepted and echoed; the
// model reasons as its template and chat_template_kwargs say.
type responsesReasoning struct {
	Effort          *string `json:"effort"`
	Summary         *string `json:"summary"`
	GenerateSummary *string `json:"generate_summary"` // deprecated spelling of summary
}

// responsesText is the text config.
type responsesText struct {
	Format    json.RawMessage `json:"format"`
	Verbosity *string         `json:"verbosity"` // accepted, ignored
}

// responsesSetup is what a response echoes of its request.
type responsesSetup struct {
	echo []byte // the response object's request fields, as JSON members after a comma
}

// common maps the request's sampling fields onto chat's, for sampling.
func (r *responsesRequest) common() commonFields {
	return commonFields{Model: r.Model, Temperature: r.Temperature, TopP: r.TopP, Stream: r.Stream, User: r.User,
		TopK: r.TopK, MinP: r.MinP, RepetitionPenalty: r.RepetitionPenalty, FrequencyPenalty: r.FrequencyPenalty,
		PresencePenalty: r.PresencePenalty, Seed: r.Seed, Stop: r.Stop, StopTokenIDs: r.StopTokenIDs,
		IgnoreEOS: r.IgnoreEOS, MinTokens: r.MinTokens, SkipSpecialTokens: r.SkipSpecialTokens,
		IncludeStopStrInOutput: r.IncludeStopStrInOutput}
}

func (s *Server) handleResponses(c *call) reply {
	return s.generate(c, s.bounded(s.responsesJob))
}

// responsesJob validates a Responses request and renders its input as a
// chat conversation: the job runs like a chat completion.
func (s *Server) responsesJob(body []byte) (*job, *apiError) {
	var r responsesRequest
	if aerr := s.decodeFor(body, &r, &r.Model); aerr != nil {
		return nil, aerr
	}
	r.Model = s.opts.ModelName // echoed when the request leaves it out
	if aerr := r.unsupported(); aerr != nil {
		return nil, aerr
	}
	j := &job{chat: true}
	c := r.common()
	if r.StreamOptions != nil {
		c.StreamOptions = &streamOptions{IncludeObfuscation: r.StreamOptions.IncludeObfuscation}
	}
	if aerr := s.sampling(&c, j); aerr != nil {
		return nil, aerr
	}
	if aerr := responsesTextFormat(r.Text, j); aerr != nil {
		return nil, aerr
	}
	tools, aerr := responsesToolSetup(r.Tools, r.ToolChoice, r.ParallelToolCalls)
	if aerr != nil {
		return nil, aerr
	}
	j.tools = tools
	msgs, aerr := responsesInput(r.Input, r.Instructions)
	if aerr != nil {
		return nil, aerr
	}
	var defs []any
	if tools != nil {
		defs = tools.defs
	}
	text, aerr := s.renderMessages(msgs, defs, true, r.ChatTemplateKwargs, "input")
	if aerr != nil {
		return nil, aerr
	}
	if aerr := s.chatPrompt(j, text, r.ChatTemplateKwargs, "input"); aerr != nil {
		return nil, aerr
	}
	if aerr := s.limits(j, r.MaxOutputTokens, "max_output_tokens", "input"); aerr != nil {
		return nil, aerr
	}
	j.resp = &responsesSetup{echo: r.appendEcho(nil, j)}
	return j, nil
}

// unsupported refuses what needs stored state or is not implemented.
func (r *responsesRequest) unsupported() *apiError {
	switch {
	case r.PreviousResponseID != nil && *r.PreviousResponseID != "":
		e := badRequest("previous_response_id", "previous_response_id is not supported: this server stores no responses; "+
			"send the whole conversation in input (earlier output items included)")
		e.code = "unsupported_parameter"
		return e
	case !isNull(r.Conversation):
		e := badRequest("conversation", "conversation is not supported: this server stores no conversations; send the whole conversation in input")
		e.code = "unsupported_parameter"
		return e
	case r.Background != nil && *r.Background:
		e := badRequest("background", "background responses are not supported: this server stores no responses")
		e.code = "unsupported_parameter"
		return e
	case !isNull(r.Prompt):
		return notSupported("prompt")
	case r.MaxToolCalls != nil:
		return notSupported("max_tool_calls")
	case r.TopLogprobs != nil && *r.TopLogprobs != 0:
		return notSupported("top_logprobs")
	case r.Truncation != nil && *r.Truncation != "disabled":
		return badRequest("truncation", "truncation %q is not supported (only \"disabled\": a conversation over the context is refused)", *r.Truncation)
	}
	return nil
}

// responsesTextFormat checks text.format. Only plain text is supported for
// now; structured outputs (json_schema, json_object) are where j would get
// its constraint once the chat path has them.
func responsesTextFormat(t *responsesText, j *job) *apiError {
	if t == nil || isNull(t.Format) {
		return nil
	}
	var f struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(t.Format, &f); err != nil {
		return badRequest("text.format", "text.format must be an object with a type")
	}
	switch f.Type {
	case "text":
		return nil
	case "json_schema", "json_object":
		e := badRequest("text.format", "text.format %q is not supported yet: structured outputs on /v1/responses are not supported; use {\"type\": \"text\"}", f.Type)
		e.code = "unsupported_parameter"
		return e
	}
	return badRequest("text.format", "text.format.type %q must be text", f.Type)
}

// ---- tools ----

var responsesTools = toolShape{tool: responsesTool, named: responsesNamedChoice, nameField: ".name",
	namedForm: `{"type": "function", "name": ...}`}

// responsesToolSetup validates tools and tool_choice. tool_choice auto
// without tools is no tools (OpenAI's default choice is auto).
func responsesToolSetup(rawTools, rawChoice json.RawMessage, parallel *bool) (*toolSetup, *apiError) {
	if isNull(rawTools) {
		rawTools = json.RawMessage("[]")
	}
	return parseToolsAs(responsesTools, rawTools, rawChoice, parallel)
}

// responsesTool validates a Responses function tool, {"type": "function",
// "name", "description", "parameters", "strict"}, and gives the template
// chat's shape of it.
func responsesTool(raw json.RawMessage, param string) (any, toolcall.Tool, *apiError) {
	typ, aerr := objectType(raw, param, "a tool object")
	if aerr != nil {
		return nil, toolcall.Tool{}, aerr
	}
	if typ != "function" {
		return nil, toolcall.Tool{}, badRequest(param+".type", "%s.type %q is not supported (only function tools)", param, typ)
	}
	var spec struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description *string         `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      *bool           `json:"strict"`
	}
	if aerr := decodeStrict(raw, &spec, param, "a tool object"); aerr != nil {
		return nil, toolcall.Tool{}, aerr
	}
	tool, aerr := functionTool(spec.Name, spec.Parameters, param)
	if aerr != nil {
		return nil, toolcall.Tool{}, aerr
	}
	fn := map[string]any{"name": spec.Name}
	if spec.Description != nil {
		fn["description"] = *spec.Description
	}
	if !isNull(spec.Parameters) {
		var params any
		_ = json.Unmarshal(spec.Parameters, &params) // checked by functionTool
		fn["parameters"] = params
	}
	if spec.Strict != nil {
		fn["strict"] = *spec.Strict
	}
	return map[string]any{"type": "function", "function": fn}, tool, nil
}

// responsesNamedChoice reads {"type": "function", "name"}.
func responsesNamedChoice(raw json.RawMessage) (string, bool) {
	var obj struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if err := unmarshalStrict(raw, &obj); err != nil || obj.Type != "function" || obj.Name == "" {
		return "", false
	}
	return obj.Name, true
}

// ---- input ----

// responsesItem is one input item; which fields apply depends on its type.
type responsesItem struct {
	Type             string          `json:"type"`
	ID               *string         `json:"id"`     // accepted, ignored
	Status           *string         `json:"status"` // accepted, ignored
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	Phase            *string         `json:"phase"` // accepted, ignored
	CallID           string          `json:"call_id"`
	Name             string          `json:"name"`
	Arguments        json.RawMessage `json:"arguments"`
	Output           json.RawMessage `json:"output"`
	Summary          json.RawMessage `json:"summary"`           // reasoning: accepted, ignored
	EncryptedContent *string         `json:"encrypted_content"` // reasoning: accepted, ignored
}

// inputConv turns input items into chat messages: a function_call joins
// the assistant turn before it (or opens one), a reasoning item becomes
// the reasoning_content of the assistant turn that follows it.
type inputConv struct {
	msgs      []chattemplate.Message
	reasoning string // of the next assistant turn
	open      bool   // the last message is an assistant turn calls may join
}

// responsesInput reads input (a string or a list of items) after
// instructions (a system message) into a chat conversation.
func responsesInput(raw json.RawMessage, instructions *string) ([]chattemplate.Message, *apiError) {
	var conv inputConv
	if instructions != nil && *instructions != "" {
		conv.msgs = append(conv.msgs, chattemplate.Message{Role: "system", Content: *instructions})
	}
	if isNull(raw) {
		return nil, badRequest("input", "input is required")
	}
	raw = bytes.TrimSpace(raw)
	switch raw[0] {
	case '"':
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return nil, badRequest("input", "input: %v", err)
		}
		return append(conv.msgs, chattemplate.Message{Role: "user", Content: text}), nil
	case '[':
	default:
		return nil, badRequest("input", "input must be a string or a list of input items")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, badRequest("input", "input must be a string or a list of input items")
	}
	if len(items) == 0 {
		return nil, badRequest("input", "input must not be an empty list")
	}
	for i, it := range items {
		if aerr := conv.add(it, "input["+itoa(i)+"]"); aerr != nil {
			return nil, aerr
		}
	}
	return conv.msgs, nil
}

// add converts one input item.
func (c *inputConv) add(raw json.RawMessage, param string) *apiError {
	typ, aerr := objectType(raw, param, "an input item object")
	if aerr != nil {
		return aerr
	}
	switch typ {
	case "message", "", "function_call", "function_call_output", "reasoning":
	case "item_reference":
		return badRequest(param+".type", "%s: item_reference is not supported: this server stores no items; send the item itself", param)
	default:
		return badRequest(param+".type", "%s.type %q is not supported (message, function_call, function_call_output or reasoning)", param, typ)
	}
	var it responsesItem
	if aerr := decodeStrict(raw, &it, param, "an input item object"); aerr != nil {
		return aerr
	}
	switch typ {
	case "function_call":
		return c.functionCall(&it, param)
	case "function_call_output":
		return c.functionOutput(&it, param)
	case "reasoning":
		return c.reasoningItem(&it, param)
	}
	return c.message(&it, param)
}

// objectType reads the type of raw, which must be what (an object with a
// string type).
func objectType(raw json.RawMessage, param, what string) (string, *apiError) {
	var head struct {
		Type json.RawMessage `json:"type"`
	}
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' || json.Unmarshal(raw, &head) != nil {
		return "", badRequest(param, "%s must be %s", param, what)
	}
	var typ string
	if !isNull(head.Type) && json.Unmarshal(head.Type, &typ) != nil {
		return "", badRequest(param+".type", "%s.type must be a string", param)
	}
	return typ, nil
}

func (c *inputConv) message(it *responsesItem, param string) *apiError {
	role := it.Role
	switch role {
	case "user", "system", "assistant":
	case "developer":
		role = "system"
	case "":
		return badRequest(param+".role", "%s.role is required", param)
	default:
		return badRequest(param+".role", "%s.role %q must be user, system, developer or assistant", param, it.Role)
	}
	if it.CallID != "" || it.Name != "" || !isNull(it.Arguments) || !isNull(it.Output) {
		return badRequest(param, "%s is a message: call_id, name, arguments and output belong to function items", param)
	}
	text, aerr := responsesContent(it.Content, param+".content")
	if aerr != nil {
		return aerr
	}
	msg := chattemplate.Message{Role: role, Content: text}
	if role == "assistant" {
		msg.ReasoningContent, c.reasoning = c.reasoning, ""
	}
	c.msgs = append(c.msgs, msg)
	c.open = role == "assistant"
	return nil
}

func (c *inputConv) functionCall(it *responsesItem, param string) *apiError {
	switch {
	case it.CallID == "":
		return badRequest(param+".call_id", "%s.call_id is required", param)
	case it.Name == "":
		return badRequest(param+".name", "%s.name is required", param)
	}
	args, aerr := callArguments(it.Arguments, param+".arguments")
	if aerr != nil {
		return aerr
	}
	if !c.open {
		c.msgs = append(c.msgs, chattemplate.Message{Role: "assistant", ReasoningContent: c.reasoning})
		c.reasoning, c.open = "", true
	}
	last := &c.msgs[len(c.msgs)-1]
	last.ToolCalls = append(last.ToolCalls, chattemplate.ToolCall{ID: it.CallID, Name: it.Name, Arguments: args})
	return nil
}

func (c *inputConv) functionOutput(it *responsesItem, param string) *apiError {
	if it.CallID == "" {
		return badRequest(param+".call_id", "%s.call_id is required", param)
	}
	if isNull(it.Output) {
		return badRequest(param+".output", "%s.output is required", param)
	}
	text, aerr := responsesContent(it.Output, param+".output")
	if aerr != nil {
		return aerr
	}
	c.msgs = append(c.msgs, chattemplate.Message{Role: "tool", Content: text, ToolCallID: it.CallID})
	c.open = false
	return nil
}

// reasoningItem keeps a reasoning item's text (its reasoning_text content;
// a summary is not the reasoning and is left out) for the assistant turn
// that follows.
func (c *inputConv) reasoningItem(it *responsesItem, param string) *apiError {
	if isNull(it.Content) {
		return nil
	}
	text, aerr := responsesContent(it.Content, param+".content")
	if aerr != nil {
		return aerr
	}
	if c.reasoning != "" && text != "" {
		c.reasoning += "\n"
	}
	c.reasoning += text
	return nil
}

// responsesPart is one content part of an input item.
type responsesPart struct {
	Type        string          `json:"type"`
	Text        *string         `json:"text"`
	Refusal     *string         `json:"refusal"`
	Annotations json.RawMessage `json:"annotations"` // accepted, ignored
	Logprobs    json.RawMessage `json:"logprobs"`    // accepted, ignored
}

// responsesContent reads content: a string or a list of text parts
// (input_text, output_text, reasoning_text, refusal), joined with newlines
// as chat's text parts are.
func responsesContent(raw json.RawMessage, param string) (string, *apiError) {
	if isNull(raw) {
		return "", badRequest(param, "%s is required", param)
	}
	raw = bytes.TrimSpace(raw)
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", badRequest(param, "%s: %v", param, err)
		}
		return s, nil
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest(param, "%s must be a string or a list of content parts", param)
	}
	texts := make([]string, 0, len(parts))
	for i, p := range parts {
		text, aerr := responsesPartText(p, param+"["+itoa(i)+"]")
		if aerr != nil {
			return "", aerr
		}
		texts = append(texts, text)
	}
	return strings.Join(texts, "\n"), nil
}

func responsesPartText(raw json.RawMessage, param string) (string, *apiError) {
	typ, aerr := objectType(raw, param, "a content part object")
	if aerr != nil {
		return "", aerr
	}
	switch typ {
	case "input_text", "output_text", "reasoning_text", "summary_text", "refusal":
	case "":
		return "", badRequest(param+".type", "%s.type is required", param)
	default:
		return "", badRequest(param+".type", "content part type %q is not supported (only text: input_text or output_text)", typ)
	}
	var p responsesPart
	if aerr := decodeStrict(raw, &p, param, "a content part object"); aerr != nil {
		return "", aerr
	}
	if typ == "refusal" {
		if p.Refusal == nil {
			return "", badRequest(param+".refusal", "%s.refusal is required", param)
		}
		return *p.Refusal, nil
	}
	if p.Text == nil {
		return "", badRequest(param+".text", "%s.text is required", param)
	}
	return *p.Text, nil
}

// ---- the echoed request ----

// appendEcho writes the request fields a response object repeats.
func (r *responsesRequest) appendEcho(b []byte, j *job) []byte {
	b = append(b, `,"model":`...)
	b = appendString(b, r.Model)
	b = append(b, `,"instructions":`...)
	b = appendOptString(b, r.Instructions)
	b = append(b, `,"max_output_tokens":`...)
	if r.MaxOutputTokens != nil {
		b = appendInt(b, int(*r.MaxOutputTokens))
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"max_tool_calls":null,"parallel_tool_calls":`...)
	b = append(b, boolText(r.ParallelToolCalls == nil || *r.ParallelToolCalls)...)
	b = append(b, `,"previous_response_id":null,"reasoning":{"effort":`...)
	var effort, summary *string
	if r.Reasoning != nil {
		effort, summary = r.Reasoning.Effort, r.Reasoning.Summary
		if summary == nil {
			summary = r.Reasoning.GenerateSummary
		}
	}
	b = appendOptString(b, effort)
	b = append(b, `,"summary":`...)
	b = appendOptString(b, summary)
	b = append(b, `},"service_tier":"default","store":false,"temperature":`...)
	b = appendFloat(b, j.base.Params.Temperature)
	b = append(b, `,"text":{"format":{"type":"text"}},"tool_choice":`...)
	b = appendToolChoice(b, r.ToolChoice, j.tools)
	b = append(b, `,"tools":`...)
	b = appendCompact(b, r.Tools, "[]")
	b = append(b, `,"top_logprobs":0,"top_p":`...)
	b = appendFloat(b, j.base.Params.TopP)
	b = append(b, `,"truncation":"disabled","user":`...)
	b = appendOptString(b, r.User)
	b = append(b, `,"metadata":`...)
	m, _ := json.Marshal(r.Metadata) // a map of strings
	if r.Metadata == nil {
		m = []byte("{}")
	}
	return append(b, m...)
}

// appendToolChoice writes tool_choice as the request gave it, or its
// default (auto with tools, none without).
func appendToolChoice(b []byte, raw json.RawMessage, tools *toolSetup) []byte {
	if !isNull(raw) {
		return appendCompact(b, raw, "null")
	}
	if tools == nil {
		return append(b, `"none"`...)
	}
	return append(b, `"auto"`...)
}

// appendCompact writes the (valid) JSON raw without its spacing, or def
// when raw is absent.
func appendCompact(b []byte, raw json.RawMessage, def string) []byte {
	if isNull(raw) {
		return append(b, def...)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return append(b, def...)
	}
	return append(b, buf.Bytes()...)
}

func appendOptString(b []byte, s *string) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	return appendString(b, *s)
}

func boolText(v bool) string {
	if v {
		return "true"
	}
	return "false"
}
