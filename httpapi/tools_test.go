package httpapi

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"cohort/actors"
	"cohort/internal/testmodels/modelgen"
)

// scriptText is a script that emits text in pieces of n bytes, the last
// with finish.
func scriptText(text string, n int, finish string) []actors.Event {
	var evs []actors.Event
	for i := 0; i < len(text); i += n {
		evs = append(evs, actors.Event{Token: 97, HasToken: true, Text: text[i:min(i+n, len(text))]})
	}
	if len(evs) == 0 {
		evs = append(evs, actors.Event{Token: 97, HasToken: true})
	}
	evs[len(evs)-1].Finish = finish
	evs[len(evs)-1].Usage.CompletionTokens = len(evs)
	return evs
}

// toolServer is a fake engine behind the tiny model's chat template (which
// renders tools), driven by the openai-go client. reply gives the model's
// text for a prompt (decoded).
type toolServer struct {
	client  openai.Client
	mu      sync.Mutex
	prompts []string
}

func startToolServer(t *testing.T, reply func(prompt string) string) *toolServer {
	t.Helper()
	ts := &toolServer{}
	f := newFakeEngine()
	tok := synthTokenizer(t)
	f.script = func(r actors.Request) []actors.Event {
		prompt := tok.Decode(r.Prompt)
		ts.mu.Lock()
		ts.prompts = append(ts.prompts, prompt)
		ts.mu.Unlock()
		return scriptText(reply(prompt), 5, "stop")
	}
	url, _ := startFake(t, f, func(o *Options) { o.ChatTemplate = modelgen.ChatTemplate })
	ts.client = openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("unused"),
		option.WithMaxRetries(0), option.WithHTTPClient(testClient()))
	return ts
}

func (ts *toolServer) lastPrompt() string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.prompts[len(ts.prompts)-1]
}

var weatherTool = openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
	Name:        "get_weather",
	Description: openai.String("The weather of a city"),
	Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{
		"city": map[string]any{"type": "string"}, "days": map[string]any{"type": "integer"},
		"metric": map[string]any{"type": "boolean"}}, "required": []string{"city"}},
})

var timeTool = openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
	Name:       "get_time",
	Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"zone": map[string]any{"type": "string"}}},
})

const parisCall = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n" +
	"<parameter=metric>\ntrue\n</parameter>\n</function>\n</tool_call>"

var parisArgs = map[string]any{"city": "Paris", "days": 3.0, "metric": true}

func weatherParams(opts ...func(*openai.ChatCompletionNewParams)) openai.ChatCompletionNewParams {
	p := openai.ChatCompletionNewParams{Model: "fake", MaxTokens: openai.Int(64),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Paris?")},
		Tools:    []openai.ChatCompletionToolUnionParam{weatherTool, timeTool}}
	for _, o := range opts {
		o(&p)
	}
	return p
}

func decodeArgs(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("arguments %q are not a JSON object: %v", s, err)
	}
	return m
}

// streamChat runs a streamed chat and returns the accumulated completion
// after checking the tool-call delta protocol: a call's first delta has
// its id, type and name (and empty arguments), later ones only argument
// fragments.
func streamChat(t *testing.T, c openai.Client, p openai.ChatCompletionNewParams, opts ...option.RequestOption) openai.ChatCompletion {
	t.Helper()
	stream := c.Chat.Completions.NewStreaming(ctxT(t), p, opts...)
	var acc openai.ChatCompletionAccumulator
	started := map[int64]bool{}
	for stream.Next() {
		chunk := stream.Current()
		acc.AddChunk(chunk)
		for _, ch := range chunk.Choices {
			for _, tc := range ch.Delta.ToolCalls {
				if !started[tc.Index] {
					started[tc.Index] = true
					if tc.ID == "" || tc.Function.Name == "" || tc.Type != "function" || tc.Function.Arguments != "" {
						t.Errorf("first delta of call %d: %+v, want id, type and name only", tc.Index, tc)
					}
					continue
				}
				if tc.ID != "" || tc.Function.Name != "" {
					t.Errorf("later delta of call %d repeats id or name: %+v", tc.Index, tc)
				}
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	return acc.ChatCompletion
}

func TestToolCallsOpenAIClient(t *testing.T) {
	ts := startToolServer(t, func(prompt string) string {
		switch {
		case strings.HasSuffix(prompt, "<function=get_weather>\n"): // named
			return "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n</function>\n</tool_call>"
		case strings.HasSuffix(prompt, "<function="): // required
			return "get_time>\n<parameter=zone>\nCET\n</parameter>\n</function>\n</tool_call>"
		case strings.Contains(prompt, "both"):
			return parisCall + "\n" + strings.Replace(parisCall, "Paris", "Rome", 1)
		case strings.Contains(prompt, "<tool_response>"):
			return "It is sunny in Paris."
		}
		return "Let me look.\n\n" + parisCall
	})

	for _, stream := range []bool{false, true} {
		run := func(t *testing.T, p openai.ChatCompletionNewParams, opts ...option.RequestOption) openai.ChatCompletion {
			if stream {
				return streamChat(t, ts.client, p, opts...)
			}
			res, err := ts.client.Chat.Completions.New(ctxT(t), p, opts...)
			if err != nil {
				t.Fatal(err)
			}
			return *res
		}
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			t.Run("auto", func(t *testing.T) {
				res := run(t, weatherParams())
				c := res.Choices[0]
				if c.FinishReason != "tool_calls" || c.Message.Content != "Let me look.\n\n" || len(c.Message.ToolCalls) != 1 {
					t.Fatalf("choice %+v", c)
				}
				tc := c.Message.ToolCalls[0]
				if !strings.HasPrefix(tc.ID, "call_") || tc.Function.Name != "get_weather" ||
					!reflect.DeepEqual(decodeArgs(t, tc.Function.Arguments), parisArgs) {
					t.Errorf("tool call %+v", tc)
				}
				prompt := ts.lastPrompt()
				if !strings.Contains(prompt, "<tools>\n{") || !strings.Contains(prompt, `"name": "get_weather"`) {
					t.Errorf("the prompt does not list the tools:\n%s", prompt)
				}
			})
			t.Run("required", func(t *testing.T) {
				res := run(t, weatherParams(func(p *openai.ChatCompletionNewParams) {
					p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}
				}))
				c := res.Choices[0]
				if c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 || c.Message.ToolCalls[0].Function.Name != "get_time" ||
					!reflect.DeepEqual(decodeArgs(t, c.Message.ToolCalls[0].Function.Arguments), map[string]any{"zone": "CET"}) {
					t.Errorf("choice %+v", c)
				}
			})
			t.Run("named", func(t *testing.T) {
				res := run(t, weatherParams(func(p *openai.ChatCompletionNewParams) {
					p.ToolChoice = openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"})
				}))
				c := res.Choices[0]
				if c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 || c.Message.ToolCalls[0].Function.Name != "get_weather" ||
					!reflect.DeepEqual(decodeArgs(t, c.Message.ToolCalls[0].Function.Arguments), parisArgs) {
					t.Errorf("choice %+v", c)
				}
			})
			t.Run("none", func(t *testing.T) {
				res := run(t, weatherParams(func(p *openai.ChatCompletionNewParams) {
					p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")}
				}))
				c := res.Choices[0]
				if c.FinishReason != "stop" || len(c.Message.ToolCalls) != 0 || c.Message.Content != "Let me look.\n\n"+parisCall {
					t.Errorf("choice %+v", c)
				}
			})
			t.Run("parallel", func(t *testing.T) {
				both := func(p *openai.ChatCompletionNewParams) {
					p.Messages = []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in both?")}
				}
				res := run(t, weatherParams(both))
				calls := res.Choices[0].Message.ToolCalls
				if len(calls) != 2 || decodeArgs(t, calls[0].Function.Arguments)["city"] != "Paris" ||
					decodeArgs(t, calls[1].Function.Arguments)["city"] != "Rome" || calls[0].ID == calls[1].ID {
					t.Fatalf("calls %+v", calls)
				}
				res = run(t, weatherParams(both, func(p *openai.ChatCompletionNewParams) { p.ParallelToolCalls = openai.Bool(false) }))
				if calls := res.Choices[0].Message.ToolCalls; len(calls) != 1 || decodeArgs(t, calls[0].Function.Arguments)["city"] != "Paris" {
					t.Errorf("parallel_tool_calls false: calls %+v", calls)
				}
			})
			t.Run("two turns", func(t *testing.T) {
				first := run(t, weatherParams())
				msg := first.Choices[0].Message
				p := weatherParams()
				p.Messages = append(p.Messages, msg.ToParam(),
					openai.ToolMessage(`{"sky": "sunny"}`, msg.ToolCalls[0].ID))
				res := run(t, p)
				if c := res.Choices[0]; c.FinishReason != "stop" || c.Message.Content != "It is sunny in Paris." || len(c.Message.ToolCalls) != 0 {
					t.Errorf("second turn: %+v", c)
				}
				prompt := ts.lastPrompt()
				// Arguments reach the template decoded: a boolean renders
				// through |string as Python's True, as with HF.
				wantTurns := "<|im_start|>assistant\nLet me look.\n\n\n<tool_call>\n<function=get_weather>\n" +
					"<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=metric>\nTrue\n</parameter>\n" +
					"</function>\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n{\"sky\": \"sunny\"}\n</tool_response><|im_end|>\n" +
					"<|im_start|>assistant\n"
				if !strings.HasSuffix(prompt, wantTurns) {
					t.Errorf("the history renders as\n%q\nwant it to end with\n%q", prompt, wantTurns)
				}
			})
		})
	}
}

// TestToolsEmptyList: "tools": [] is a request without tools (as vLLM
// takes it), with or without tool_choice none or auto.
func TestToolsEmptyList(t *testing.T) {
	f := newFakeEngine()
	url, _ := startFake(t, f, func(o *Options) { o.ChatTemplate = modelgen.ChatTemplate })
	for _, extra := range []string{``, `,"tool_choice":"none"`, `,"tool_choice":"auto"`} {
		body := `{"messages":[{"role":"user","content":"a"}],"max_tokens":2,"tools":[]` + extra + `}`
		if res, out := do(t, "POST", url+"/v1/chat/completions", body); res.StatusCode != 200 {
			t.Errorf("%s: status %d %s", body, res.StatusCode, out)
		}
	}
}

// TestToolChoiceNamedRealEngine: on the tiny random-weight model, a named
// tool_choice always yields a call of that function whose arguments are a
// JSON object, whatever the model writes after the prompt opened the
// call; plain and streamed agree.
func TestToolChoiceNamedRealEngine(t *testing.T) {
	r := startReal(t, 1)
	p := weatherParams(func(p *openai.ChatCompletionNewParams) {
		p.Model, p.MaxTokens, p.Temperature = "tiny", openai.Int(12), openai.Float(0)
		p.ToolChoice = openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"})
	})
	res, err := r.client.Chat.Completions.New(ctxT(t), p, ignoreEOS)
	if err != nil {
		t.Fatal(err)
	}
	c := res.Choices[0]
	if c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 || c.Message.ToolCalls[0].Function.Name != "get_weather" {
		t.Fatalf("choice %+v", c)
	}
	decodeArgs(t, c.Message.ToolCalls[0].Function.Arguments)
	streamed := streamChat(t, r.client, p, ignoreEOS)
	sc := streamed.Choices[0]
	if sc.FinishReason != "tool_calls" || len(sc.Message.ToolCalls) != 1 ||
		sc.Message.ToolCalls[0].Function.Arguments != c.Message.ToolCalls[0].Function.Arguments || sc.Message.Content != c.Message.Content {
		t.Errorf("streamed %+v, plain %+v", sc, c)
	}
}
