package httpapi

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"cohort/actors"
	"cohort/httpapi/chattemplate"
	"cohort/model/sample"
)

// Limits on request parameters.
const (
	maxN            = 16  // choices per prompt
	maxChoices      = 256 // choices per request (prompts × n)
	maxStops        = 16  // stop strings (OpenAI allows 4, vLLM more)
	maxStopTokenIDs = 64
	maxTopLogprobs  = actors.MaxTopLogprobs
)

// streamOptions is OpenAI's stream_options.
type streamOptions struct {
	IncludeUsage       bool  `json:"include_usage"`
	IncludeObfuscation *bool `json:"include_obfuscation"` // accepted, ignored (nothing is obfuscated)
}

// commonFields are the parameters completions and chat share (OpenAI's,
// plus vLLM's sampling extensions).
type commonFields struct {
	Model            string             `json:"model"`
	FrequencyPenalty *float64           `json:"frequency_penalty"`
	PresencePenalty  *float64           `json:"presence_penalty"`
	LogitBias        map[string]float64 `json:"logit_bias"`
	MaxTokens        *int64             `json:"max_tokens"`
	N                *int64             `json:"n"`
	Seed             *int64             `json:"seed"`
	Stop             json.RawMessage    `json:"stop"`
	Stream           *bool              `json:"stream"`
	StreamOptions    *streamOptions     `json:"stream_options"`
	Temperature      *float64           `json:"temperature"`
	TopP             *float64           `json:"top_p"`
	User             *string            `json:"user"` // accepted, ignored

	// vLLM extensions.
	TopK              *int64   `json:"top_k"`
	MinP              *float64 `json:"min_p"`
	RepetitionPenalty *float64 `json:"repetition_penalty"`
	StopTokenIDs      []int64  `json:"stop_token_ids"`
	IgnoreEOS         *bool    `json:"ignore_eos"`
	MinTokens         *int64   `json:"min_tokens"`

	SkipSpecialTokens          *bool `json:"skip_special_tokens"`
	IncludeStopStrInOutput     *bool `json:"include_stop_str_in_output"`
	SpacesBetweenSpecialTokens *bool `json:"spaces_between_special_tokens"` // accepted; see the README

	// vLLM's constrained decoding (chat also takes OpenAI's response_format).
	StructuredOutputs json.RawMessage `json:"structured_outputs"`
}

// SamplingDefaults are the values unset sampling fields of a request take
// instead of OpenAI's defaults (temperature 1, top_p 1, top-k and min-p
// off, repetition penalty 1). A nil field keeps OpenAI's default.
type SamplingDefaults struct {
	Temperature       *float64
	TopP              *float64
	TopK              *int
	MinP              *float64
	RepetitionPenalty *float64
}

// String lists the defaults that are set, as name=value pairs.
func (d SamplingDefaults) String() string {
	var parts []string
	add := func(name string, v *float64) {
		if v != nil {
			parts = append(parts, name+"="+strconv.FormatFloat(*v, 'g', -1, 64))
		}
	}
	add("temperature", d.Temperature)
	add("top_p", d.TopP)
	if d.TopK != nil {
		parts = append(parts, "top_k="+strconv.Itoa(*d.TopK))
	}
	add("min_p", d.MinP)
	add("repetition_penalty", d.RepetitionPenalty)
	return strings.Join(parts, " ")
}

// validate checks the defaults against the same bounds as requests.
func (d SamplingDefaults) validate() error {
	p := d.params()
	switch {
	case !(p.Temperature >= 0 && p.Temperature <= 100):
		return fmt.Errorf("httpapi: default temperature %g is outside [0, 100]", p.Temperature)
	case !(p.TopP > 0 && p.TopP <= 1):
		return fmt.Errorf("httpapi: default top_p %g is outside (0, 1]", p.TopP)
	case p.TopK < -1:
		return fmt.Errorf("httpapi: default top_k %d must be -1, 0 or positive", p.TopK)
	case !(p.MinP >= 0 && p.MinP <= 1):
		return fmt.Errorf("httpapi: default min_p %g is outside [0, 1]", p.MinP)
	case !(p.RepetitionPenalty > 0 && p.RepetitionPenalty <= 10):
		return fmt.Errorf("httpapi: default repetition_penalty %g is outside (0, 10]", p.RepetitionPenalty)
	}
	return nil
}

// params returns the sampling parameters a request starts from.
func (d SamplingDefaults) params() sample.Params {
	p := sample.Params{Temperature: 1, TopP: 1, RepetitionPenalty: 1}
	if d.Temperature != nil {
		p.Temperature = *d.Temperature
	}
	if d.TopP != nil {
		p.TopP = *d.TopP
	}
	if d.TopK != nil {
		p.TopK = *d.TopK
	}
	if d.MinP != nil {
		p.MinP = *d.MinP
	}
	if d.RepetitionPenalty != nil {
		p.RepetitionPenalty = *d.RepetitionPenalty
	}
	return p
}

// completionRequest is POST /v1/completions.
type completionRequest struct {
	commonFields
	Prompt   json.RawMessage `json:"prompt"`
	BestOf   *int64          `json:"best_of"`
	Echo     *bool           `json:"echo"`
	Logprobs *int64          `json:"logprobs"`
	Suffix   *string         `json:"suffix"`
}

// chatRequest is POST /v1/chat/completions.
type chatRequest struct {
	commonFields
	Messages             []chatMessage     `json:"messages"`
	Logprobs             *bool             `json:"logprobs"`
	TopLogprobs          *int64            `json:"top_logprobs"`
	MaxCompletionTokens  *int64            `json:"max_completion_tokens"`
	Tools                json.RawMessage   `json:"tools"`
	ToolChoice           json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls    *bool             `json:"parallel_tool_calls"`
	ResponseFormat       json.RawMessage   `json:"response_format"`
	Functions            json.RawMessage   `json:"functions"`
	FunctionCall         json.RawMessage   `json:"function_call"`
	Audio                json.RawMessage   `json:"audio"`
	Modalities           []string          `json:"modalities"`
	Prediction           json.RawMessage   `json:"prediction"`
	WebSearchOptions     json.RawMessage   `json:"web_search_options"`
	Metadata             map[string]string `json:"metadata"`               // ignored
	Store                *bool             `json:"store"`                  // ignored
	ServiceTier          *string           `json:"service_tier"`           // ignored
	ReasoningEffort      *string           `json:"reasoning_effort"`       // ignored
	PromptCacheKey       *string           `json:"prompt_cache_key"`       // ignored
	PromptCacheRetention *string           `json:"prompt_cache_retention"` // ignored
	SafetyIdentifier     *string           `json:"safety_identifier"`      // ignored
	Verbosity            *string           `json:"verbosity"`              // ignored

	// vLLM extension: extra chat-template variables (e.g. enable_thinking).
	ChatTemplateKwargs map[string]any `json:"chat_template_kwargs"`
}

// chatMessage is one entry of messages.
type chatMessage struct {
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	Name      *string         `json:"name"`    // accepted, ignored
	Refusal   *string         `json:"refusal"` // accepted, ignored
	ToolCalls json.RawMessage `json:"tool_calls"`
	// ReasoningContent is an assistant turn's reasoning (vLLM's field), for
	// templates that render it.
	ReasoningContent *string         `json:"reasoning_content"`
	ToolCallID       *string         `json:"tool_call_id"`
	FunctionCall     json.RawMessage `json:"function_call"`
	Audio            json.RawMessage `json:"audio"`
}

// tokenizeRequest is POST /tokenize.
type tokenizeRequest struct {
	Model               string         `json:"model"`
	Prompt              *string        `json:"prompt"`
	Messages            []chatMessage  `json:"messages"`
	AddGenerationPrompt *bool          `json:"add_generation_prompt"`
	ChatTemplateKwargs  map[string]any `json:"chat_template_kwargs"`
	AddSpecialTokens    *bool          `json:"add_special_tokens"` // accepted: Qwen adds none
}

// detokenizeRequest is POST /detokenize.
type detokenizeRequest struct {
	Model  string  `json:"model"`
	Tokens []int64 `json:"tokens"`
}

// job is a validated generation request: what to submit and how to answer.
type job struct {
	chat      bool
	prompts   [][]int32
	texts     []string // prompt texts, for echo
	n         int
	base      actors.Request // Params, Stop, StopTokenIDs, IgnoreEOS, TopLogprobs; Prompt and MaxTokens per prompt
	maxTokens []int          // per prompt
	userMax   int            // max_tokens as requested (0: default)
	seeded    bool
	stream    bool
	usage     bool // stream_options.include_usage
	logprobs  bool
	echo      bool
	echoOnly  bool            // echo with max_tokens 0: the prompt alone, no completion
	tools     *toolSetup      // chat with tools (nil: none)
	reasoning bool            // chat: split the think block off the output
	thinkOpen bool            // the prompt ends inside a think block
	resp      *responsesSetup // /v1/responses (nil: chat or completions)
	// toolGrammar marks base.Grammar as a forced call's: when max_tokens
	// leaves no room for a complete call it is dropped (the prompt still
	// forces the call), where a requested constraint is refused instead.
	toolGrammar bool
}

func (j *job) choices() int { return len(j.prompts) * j.n }

// decodeJSON decodes body into v strictly: valid UTF-8, one JSON object,
// no unknown fields. Errors name the offending field.
func decodeJSON(body []byte, v any) *apiError {
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("", "the request body is empty; expected a JSON object")
	}
	if !utf8.Valid(body) {
		return badRequest("", "the request body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("", "unexpected data after the JSON object")
	}
	return nil
}

func jsonError(err error) *apiError {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return badRequest("", "invalid JSON at byte %d: %v", syn.Offset, err)
	case errors.As(err, &typ):
		typ.Field = strings.TrimPrefix(typ.Field, "commonFields.")
		if typ.Field == "" {
			return badRequest("", "the request body must be a JSON object, not %s", typ.Value)
		}
		return badRequest(typ.Field, "%s: expected %s, got %s", typ.Field, jsonKind(typ.Type.String()), typ.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("", "the JSON body is truncated")
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		name = strings.Trim(name, `"`)
		return badRequest(name, "unknown field %q", name)
	}
	return badRequest("", "invalid JSON: %s", strings.TrimPrefix(msg, "json: "))
}

// jsonKind turns a Go type name into a JSON-ish description.
func jsonKind(goType string) string {
	t := strings.TrimLeft(goType, "*")
	switch {
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case t == "bool":
		return "a boolean"
	case t == "string":
		return "a string"
	case strings.HasPrefix(t, "[]"):
		return "an array"
	case strings.HasPrefix(t, "map"), strings.HasPrefix(t, "httpapi."), strings.HasPrefix(t, "struct"):
		return "an object"
	}
	return t
}

func isNull(raw json.RawMessage) bool {
	s := bytes.TrimSpace(raw)
	return len(s) == 0 || string(s) == "null"
}

// sampling validates the shared fields into j.base and j's options.
func (s *Server) sampling(c *commonFields, j *job) *apiError {
	p := s.opts.Sampling.params()
	if c.Temperature != nil {
		p.Temperature = *c.Temperature
	}
	// The ranges are the engine's checker's (actors.Checker, through
	// sample.Params.Validate), which every choice passes on its way in
	// (generation.submit); the edge checks only what the API refuses
	// although the sampler reads it as "off" (top_p and repetition_penalty
	// 0) and what must fit the Go types.
	if c.TopP != nil {
		if v := *c.TopP; !(v > 0 && v <= 1) {
			return badRequest("top_p", "top_p %g must be in (0, 1]", v)
		}
		p.TopP = *c.TopP
	}
	if c.TopK != nil {
		if v := *c.TopK; v < -1 || v > math.MaxInt32 {
			return badRequest("top_k", "top_k %d must be -1 or 0 (off) or a positive count", v)
		}
		p.TopK = int(*c.TopK)
	}
	if c.MinP != nil {
		p.MinP = *c.MinP
	}
	if c.PresencePenalty != nil {
		p.PresencePenalty = *c.PresencePenalty
	}
	if c.FrequencyPenalty != nil {
		p.FrequencyPenalty = *c.FrequencyPenalty
	}
	if c.RepetitionPenalty != nil {
		if v := *c.RepetitionPenalty; !(v > 0 && v <= 10) {
			return badRequest("repetition_penalty", "repetition_penalty %g must be in (0, 10]", v)
		}
		p.RepetitionPenalty = *c.RepetitionPenalty
	}
	if c.Seed != nil {
		p.Seed = uint64(*c.Seed)
		j.seeded = true
	}
	if c.MinTokens != nil {
		if v := *c.MinTokens; v < 0 || v > math.MaxInt32 {
			return badRequest("min_tokens", "min_tokens %d must not be negative", v)
		}
		p.MinTokens = int(*c.MinTokens)
	}
	bias, aerr := parseLogitBias(c.LogitBias, s.vocab())
	if aerr != nil {
		return aerr
	}
	p.LogitBias = bias
	j.base.Params = p

	j.n = 1
	if c.N != nil {
		if v := *c.N; v < 1 || v > maxN {
			return badRequest("n", "n %d must be in [1, %d]", v, maxN)
		}
		j.n = int(*c.N)
	}
	stops, aerr := parseStop(c.Stop)
	if aerr != nil {
		return aerr
	}
	j.base.Stop = stops
	if len(c.StopTokenIDs) > maxStopTokenIDs {
		return badRequest("stop_token_ids", "at most %d stop_token_ids are allowed", maxStopTokenIDs)
	}
	for i, id := range c.StopTokenIDs {
		if id != int64(int32(id)) { // the vocabulary's range: the engine's checker
			return badRequest("stop_token_ids", "stop_token_ids[%d] = %d is outside the vocabulary [0, %d)", i, id, s.vocab())
		}
		j.base.StopTokenIDs = append(j.base.StopTokenIDs, int32(id))
	}
	if c.IgnoreEOS != nil {
		j.base.IgnoreEOS = *c.IgnoreEOS
	}
	j.base.SkipSpecialTokens = c.SkipSpecialTokens == nil || *c.SkipSpecialTokens
	j.base.IncludeStopStr = c.IncludeStopStrInOutput != nil && *c.IncludeStopStrInOutput
	if c.Stream != nil {
		j.stream = *c.Stream
	}
	if c.StreamOptions != nil {
		if !j.stream {
			return badRequest("stream_options", "stream_options is only allowed when stream is true")
		}
		j.usage = c.StreamOptions.IncludeUsage
	}
	return nil
}

// parseStop reads stop: null, a string, or a list of strings.
func parseStop(raw json.RawMessage) ([]string, *apiError) {
	if isNull(raw) {
		return nil, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		if one == "" {
			return nil, badRequest("stop", "stop strings must not be empty")
		}
		return []string{one}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, badRequest("stop", "stop must be a string or a list of strings")
	}
	if len(list) > maxStops {
		return nil, badRequest("stop", "at most %d stop strings are allowed, got %d", maxStops, len(list))
	}
	for i, s := range list {
		if s == "" {
			return nil, badRequest("stop", "stop[%d] is empty; stop strings must not be empty", i)
		}
	}
	return list, nil
}

// limits sets the per-prompt max_tokens: the requested value (checked
// against the context), or by default the rest of the context capped at
// Options.DefaultMaxTokens.
func (s *Server) limits(j *job, requested *int64, param, promptParam string) *apiError {
	maxLen := s.eng.Info().MaxModelLen
	if requested != nil {
		if *requested == 0 && j.echo {
			// Scoring a prompt (echo with max_tokens 0, as evaluation
			// harnesses send): the engine makes one token that the
			// response leaves out.
			j.echoOnly = true
			one := int64(1)
			requested = &one
		}
		if *requested < 1 {
			return badRequest(param, "%s %d must be at least 1 (0 only with echo)", param, *requested)
		}
		if *requested > int64(maxLen) {
			return contextTooLong(param, "%s %d exceeds the model's maximum context length of %d tokens", param, *requested, maxLen)
		}
		j.userMax = int(*requested)
	}
	j.maxTokens = make([]int, len(j.prompts))
	for i, p := range j.prompts {
		if len(p) >= maxLen {
			return contextTooLong(promptParam, "this model's maximum context length is %d tokens, "+
				"but the prompt has %d tokens (leaving no room for output)", maxLen, len(p))
		}
		room := maxLen - len(p)
		if j.userMax == 0 {
			j.maxTokens[i] = min(room, s.defaultMax)
			continue
		}
		if j.userMax > room {
			return contextTooLong(param, "this model's maximum context length is %d tokens; "+
				"you requested %d tokens (%d in the prompt, %d for the completion)", maxLen, len(p)+j.userMax, len(p), j.userMax)
		}
		j.maxTokens[i] = j.userMax
	}
	for _, m := range j.maxTokens {
		if g := j.base.Grammar; j.toolGrammar && g != nil && g.MinLen() > m {
			j.base.Grammar = nil
		}
	}
	return nil // min_tokens against max_tokens: the engine's checker
}

// completionJob validates a completions request.
func (s *Server) completionJob(body []byte) (*job, *apiError) {
	var r completionRequest
	if aerr := decodeJSON(body, &r); aerr != nil {
		return nil, aerr
	}
	if aerr := s.checkModel(r.Model); aerr != nil {
		return nil, aerr
	}
	j := &job{}
	if aerr := s.sampling(&r.commonFields, j); aerr != nil {
		return nil, aerr
	}
	if r.Suffix != nil && *r.Suffix != "" {
		return nil, notSupported("suffix")
	}
	if r.BestOf != nil && *r.BestOf != int64(j.n) {
		return nil, badRequest("best_of", "best_of must equal n (%d): ranking candidates is not supported", j.n)
	}
	if r.Echo != nil {
		j.echo = *r.Echo
	}
	if r.Logprobs != nil {
		if v := *r.Logprobs; v < 0 || v > maxTopLogprobs {
			return nil, badRequest("logprobs", "logprobs %d must be in [0, %d]", v, maxTopLogprobs)
		}
		j.logprobs = true
		j.base.Logprobs = true
		j.base.TopLogprobs = int(*r.Logprobs)
		j.base.PromptLogprobs = j.echo // echoed prompt tokens get logprobs too
	}
	con, aerr := parseStructuredOutputs(r.StructuredOutputs)
	if aerr != nil {
		return nil, aerr
	}
	if con != nil {
		if j.base.Grammar, aerr = s.compileConstraint(con); aerr != nil {
			return nil, aerr
		}
	}
	if aerr := s.parsePrompt(r.Prompt, j); aerr != nil {
		return nil, aerr
	}
	if j.choices() > maxChoices {
		return nil, badRequest("n", "%d prompts × n %d = %d choices exceeds the limit of %d", len(j.prompts), j.n, j.choices(), maxChoices)
	}
	if aerr := s.limits(j, r.MaxTokens, "max_tokens", "prompt"); aerr != nil {
		return nil, aerr
	}
	return j, nil
}

// parsePrompt reads prompt: a string, a list of strings, a list of token
// ids, or a list of token-id lists.
func (s *Server) parsePrompt(raw json.RawMessage, j *job) *apiError {
	if isNull(raw) {
		return badRequest("prompt", "prompt is required")
	}
	raw = bytes.TrimSpace(raw)
	switch raw[0] {
	case '"':
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return badRequest("prompt", "prompt: %v", err)
		}
		return s.addTextPrompt(j, text, "prompt")
	case '[':
	default:
		return badRequest("prompt", "prompt must be a string, a list of strings, a list of token ids or a list of token-id lists")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return badRequest("prompt", "prompt: %v", err)
	}
	if len(items) == 0 {
		return badRequest("prompt", "prompt is an empty list")
	}
	first := bytes.TrimSpace(items[0])
	switch {
	case len(first) > 0 && first[0] == '"':
		if len(items) > maxChoices {
			return badRequest("prompt", "at most %d prompts are allowed", maxChoices)
		}
		for i, it := range items {
			var text string
			if err := json.Unmarshal(it, &text); err != nil {
				return badRequest("prompt", "prompt[%d] must be a string like prompt[0]", i)
			}
			if aerr := s.addTextPrompt(j, text, "prompt"); aerr != nil {
				return aerr
			}
		}
	case len(first) > 0 && first[0] == '[':
		if len(items) > maxChoices {
			return badRequest("prompt", "at most %d prompts are allowed", maxChoices)
		}
		for i, it := range items {
			var ids []int64
			if err := json.Unmarshal(it, &ids); err != nil {
				return badRequest("prompt", "prompt[%d] must be a list of token ids like prompt[0]", i)
			}
			if aerr := s.addTokenPrompt(j, ids); aerr != nil {
				return aerr
			}
		}
	default:
		var ids []int64
		if err := json.Unmarshal(raw, &ids); err != nil {
			return badRequest("prompt", "a prompt list must hold only strings, only token ids or only token-id lists")
		}
		return s.addTokenPrompt(j, ids)
	}
	return nil
}

func (s *Server) addTextPrompt(j *job, text, param string) *apiError {
	ids := s.tok.Encode(text)
	if len(ids) == 0 {
		return badRequest(param, "the prompt is empty")
	}
	j.prompts = append(j.prompts, ids)
	j.texts = append(j.texts, text)
	return nil
}

func (s *Server) addTokenPrompt(j *job, ids []int64) *apiError {
	if len(ids) == 0 {
		return badRequest("prompt", "a token-id prompt is empty")
	}
	out := make([]int32, len(ids))
	for i, id := range ids {
		if id != int64(int32(id)) { // the vocabulary's range: the engine's checker
			return badRequest("prompt", "prompt token %d at position %d is outside the vocabulary [0, %d)", id, i, s.vocab())
		}
		out[i] = int32(id)
	}
	j.prompts = append(j.prompts, out)
	j.texts = append(j.texts, "") // decoded only if echo needs it
	return nil
}

// chatJob validates a chat completions request and renders its prompt.
func (s *Server) chatJob(body []byte) (*job, *apiError) {
	var r chatRequest
	if aerr := decodeJSON(body, &r); aerr != nil {
		return nil, aerr
	}
	if aerr := s.checkModel(r.Model); aerr != nil {
		return nil, aerr
	}
	j := &job{chat: true}
	if aerr := s.sampling(&r.commonFields, j); aerr != nil {
		return nil, aerr
	}
	tools, aerr := parseTools(r.Tools, r.ToolChoice, r.ParallelToolCalls)
	if aerr != nil {
		return nil, aerr
	}
	j.tools = tools
	switch {
	case !isNull(r.Functions):
		return nil, notSupported("functions")
	case !isNull(r.FunctionCall):
		return nil, notSupported("function_call")
	case !isNull(r.Audio):
		return nil, notSupported("audio")
	case !isNull(r.Prediction):
		return nil, notSupported("prediction")
	case !isNull(r.WebSearchOptions):
		return nil, notSupported("web_search_options")
	}
	for _, m := range r.Modalities {
		if m != "text" {
			return nil, badRequest("modalities", "only the text modality is supported, not %q", m)
		}
	}
	rf, aerr := parseResponseFormat(r.ResponseFormat)
	if aerr != nil {
		return nil, aerr
	}
	so, aerr := parseStructuredOutputs(r.StructuredOutputs)
	if aerr != nil {
		return nil, aerr
	}
	con, aerr := oneConstraint(rf, so)
	if aerr != nil {
		return nil, aerr
	}
	if con != nil && tools.forced() {
		return nil, badRequest(con.param, "a forced tool call (tool_choice required or named) cannot also have a constrained answer")
	}
	if r.Logprobs != nil {
		j.logprobs = *r.Logprobs
		j.base.Logprobs = *r.Logprobs
	}
	if r.TopLogprobs != nil {
		if v := *r.TopLogprobs; v < 0 || v > maxTopLogprobs {
			return nil, badRequest("top_logprobs", "top_logprobs %d must be in [0, %d]", v, maxTopLogprobs)
		}
		if !j.logprobs && *r.TopLogprobs > 0 {
			return nil, badRequest("top_logprobs", "top_logprobs requires logprobs to be true")
		}
		j.base.TopLogprobs = int(*r.TopLogprobs)
	}
	var defs []any
	if tools != nil {
		defs = tools.defs
	}
	text, aerr := s.renderChatTools(r.Messages, defs, true, r.ChatTemplateKwargs)
	if aerr != nil {
		return nil, aerr
	}
	if con != nil {
		if j.base.Grammar, aerr = s.compileConstraint(con); aerr != nil {
			return nil, aerr
		}
	}
	if aerr := s.chatPrompt(j, text, r.ChatTemplateKwargs, "messages"); aerr != nil {
		return nil, aerr
	}
	requested := r.MaxCompletionTokens
	param := "max_completion_tokens"
	if requested == nil {
		requested, param = r.MaxTokens, "max_tokens"
	}
	if aerr := s.limits(j, requested, param, "messages"); aerr != nil {
		return nil, aerr
	}
	return j, nil
}

// chatPrompt tokenizes the rendered conversation text of a chat job (its
// tools and grammar set) as its prompt. Reasoning is split off when the
// template thinks (it writes <think>) and enable_thinking is not false,
// unless the answer starts at once: a forced tool call or a constrained
// answer (j.base.Grammar).
func (s *Server) chatPrompt(j *job, text string, kwargs map[string]any, param string) *apiError {
	forced, constrained := j.tools.forced(), j.base.Grammar != nil
	j.reasoning = strings.Contains(s.opts.ChatTemplate, "<think>") && kwargs["enable_thinking"] != false &&
		!forced && !constrained
	j.thinkOpen = openThink(text)
	if (forced || constrained) && j.thinkOpen {
		// A think block the template left open is closed: the answer comes
		// after the reasoning (here there is none).
		text += "\n</think>\n\n"
		j.thinkOpen = false
	}
	if forced {
		// tool_choice required or named: the prompt opens the call, and
		// its grammar keeps it valid.
		text += j.tools.callPrefix()
		j.base.Grammar, j.toolGrammar = j.tools.grammar(s), true
	}
	return s.addTextPrompt(j, text, param)
}

// renderChat validates messages and renders them with the chat template.
func (s *Server) renderChat(msgs []chatMessage, addGenerationPrompt bool, kwargs map[string]any) (string, *apiError) {
	return s.renderChatTools(msgs, nil, addGenerationPrompt, kwargs)
}

// renderChatTools is renderChat with the request's tools (decoded JSON)
// for the template.
func (s *Server) renderChatTools(msgs []chatMessage, tools []any, addGenerationPrompt bool, kwargs map[string]any) (string, *apiError) {
	if s.tmpl == nil {
		return "", badRequest("messages", "this model has no chat template; use /v1/completions")
	}
	if len(msgs) == 0 {
		return "", badRequest("messages", "messages must not be empty")
	}
	out := make([]chattemplate.Message, len(msgs))
	for i, m := range msgs {
		param := "messages[" + itoa(i) + "]"
		role := m.Role
		switch role {
		case "system", "user", "assistant", "tool":
		case "developer":
			role = "system"
		case "function":
			return "", badRequest(param+".role", "function messages (the deprecated functions API) are not supported; use tool messages")
		case "":
			return "", badRequest(param+".role", "%s.role is required", param)
		default:
			return "", badRequest(param+".role", "unknown role %q (want system, developer, user, assistant or tool)", m.Role)
		}
		msg := chattemplate.Message{Role: role}
		if !isNull(m.ToolCalls) {
			if role != "assistant" {
				return "", badRequest(param+".tool_calls", "only assistant messages have tool_calls")
			}
			calls, aerr := parseToolCalls(m.ToolCalls, param+".tool_calls")
			if aerr != nil {
				return "", aerr
			}
			msg.ToolCalls = calls
		}
		switch {
		case role == "tool" && (m.ToolCallID == nil || *m.ToolCallID == ""):
			return "", badRequest(param+".tool_call_id", "%s.tool_call_id is required for tool messages", param)
		case role != "tool" && m.ToolCallID != nil:
			return "", badRequest(param+".tool_call_id", "only tool messages have a tool_call_id")
		case role == "tool":
			msg.ToolCallID = *m.ToolCallID
		}
		if m.ReasoningContent != nil {
			if role != "assistant" {
				return "", badRequest(param+".reasoning_content", "only assistant messages have reasoning_content")
			}
			msg.ReasoningContent = *m.ReasoningContent
		}
		if !isNull(m.FunctionCall) {
			return "", notSupported(param + ".function_call")
		}
		if !isNull(m.Audio) {
			return "", notSupported(param + ".audio")
		}
		content, aerr := messageContent(m.Content, role, param+".content")
		if aerr != nil {
			return "", aerr
		}
		msg.Content = content
		out[i] = msg
	}
	return s.renderMessages(out, tools, addGenerationPrompt, kwargs, "messages")
}

// renderMessages renders a validated conversation with the chat template;
// param names the request field it came from.
func (s *Server) renderMessages(msgs []chattemplate.Message, tools []any, addGenerationPrompt bool, kwargs map[string]any, param string) (string, *apiError) {
	if s.tmpl == nil {
		return "", badRequest(param, "this model has no chat template; use /v1/completions")
	}
	text, err := s.tmpl.RenderTools(msgs, tools, addGenerationPrompt, kwargs)
	if err != nil {
		return "", badRequest(param, "the chat template rejected the conversation: %v", err)
	}
	return text, nil
}

// messageContent reads content: a string, null (assistant only) or a list
// of text parts (joined with newlines, as vLLM does).
func messageContent(raw json.RawMessage, role, param string) (string, *apiError) {
	if isNull(raw) {
		if role == "assistant" {
			return "", nil
		}
		return "", badRequest(param, "%s is required for %s messages", param, role)
	}
	raw = bytes.TrimSpace(raw)
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", badRequest(param, "%s: %v", param, err)
		}
		return s, nil
	case '[':
	default:
		return "", badRequest(param, "%s must be a string or a list of content parts", param)
	}
	var parts []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest(param, "%s must be a string or a list of content parts", param)
	}
	texts := make([]string, 0, len(parts))
	for i, p := range parts {
		pp := param + "[" + itoa(i) + "]"
		var typ string
		if err := json.Unmarshal(p["type"], &typ); err != nil {
			return "", badRequest(pp+".type", "%s.type must be a string", pp)
		}
		if typ != "text" {
			return "", badRequest(pp+".type", "content part type %q is not supported (only text)", typ)
		}
		for k := range p {
			if k != "type" && k != "text" {
				return "", badRequest(pp+"."+k, "unknown field %q in a text content part", k)
			}
		}
		var text string
		if err := json.Unmarshal(p["text"], &text); err != nil {
			return "", badRequest(pp+".text", "%s.text must be a string", pp)
		}
		texts = append(texts, text)
	}
	return strings.Join(texts, "\n"), nil
}

func (s *Server) checkModel(model string) *apiError {
	if model != "" && model != s.opts.ModelName {
		return modelNotFound(model)
	}
	return nil
}

// parseLogitBias turns OpenAI's logit_bias (token id as a string → bias in
// [-100, 100]) into entries sorted by id.
func parseLogitBias(m map[string]float64, vocab int) ([]sample.TokenBias, *apiError) {
	if len(m) == 0 {
		return nil, nil
	}
	out := make([]sample.TokenBias, 0, len(m))
	for k, v := range m {
		id, err := strconv.ParseInt(k, 10, 32)
		if err != nil || strings.TrimLeft(k, "0123456789") != "" { // no sign, as for the other keys
			if strings.HasPrefix(k, "-") && err == nil {
				return nil, badRequest("logit_bias", "logit_bias token %d is outside the vocabulary [0, %d)", id, vocab)
			}
			return nil, badRequest("logit_bias", "logit_bias key %q is not a token id (want decimal digits, such as \"42\")", k)
		}
		// The id's range (the vocabulary) and the bias's are the engine's
		// checker's.
		out = append(out, sample.TokenBias{ID: int32(id), Bias: v})
	}
	slices.SortFunc(out, func(a, b sample.TokenBias) int { return cmp.Compare(a.ID, b.ID) })
	for i := 1; i < len(out); i++ {
		if out[i].ID == out[i-1].ID { // "7" and "07" name one token
			return nil, badRequest("logit_bias", "logit_bias names token %d twice", out[i].ID)
		}
	}
	return out, nil
}
