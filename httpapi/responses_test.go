package httpapi

import (
	"bufio"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"

	"cohort/actors"
	"cohort/httpapi/chattemplate"
	"cohort/internal/testmodels/modelgen"
)

// itemView is what a test compares of an output item: Text is a
// message's text, a reasoning item's text or a call's arguments.
type itemView struct {
	ID, Type, Status, Text, CallID, Name string
}

// viewItem decodes one output item's JSON.
func viewItem(t *testing.T, raw string) itemView {
	t.Helper()
	var it struct {
		ID, Type, Status, Role, Name, Arguments string
		CallID                                  string `json:"call_id"`
		Content                                 []struct{ Type, Text string }
		Summary                                 []json.RawMessage
	}
	if err := json.Unmarshal([]byte(raw), &it); err != nil {
		t.Fatalf("output item %s: %v", raw, err)
	}
	v := itemView{ID: it.ID, Type: it.Type, Status: it.Status, CallID: it.CallID, Name: it.Name}
	switch it.Type {
	case "function_call":
		v.Text = it.Arguments
	case "message", "reasoning":
		want := map[string]string{"message": "output_text", "reasoning": "reasoning_text"}[it.Type]
		if len(it.Content) != 1 || it.Content[0].Type != want || (it.Type == "message" && it.Role != "assistant") ||
			(it.Type == "reasoning" && (it.Summary == nil || len(it.Summary) != 0)) {
			t.Errorf("output item %s: want one %s part", raw, want)
		}
		for _, p := range it.Content {
			v.Text += p.Text
		}
	default:
		t.Errorf("output item of type %q", it.Type)
	}
	prefix := map[string]string{"message": "msg_", "reasoning": "rs_", "function_call": "fc_"}[it.Type]
	if !strings.HasPrefix(v.ID, prefix) || (it.Type == "function_call" && !strings.HasPrefix(v.CallID, "call_")) {
		t.Errorf("output item %s: ids", raw)
	}
	return v
}

func viewOutput(t *testing.T, res *responses.Response) []itemView {
	t.Helper()
	out := make([]itemView, len(res.Output))
	for i, it := range res.Output {
		out[i] = viewItem(t, it.RawJSON())
	}
	return out
}

// anonymous drops the ids, which differ between two responses.
func anonymous(items []itemView) []itemView {
	out := make([]itemView, len(items))
	for i, it := range items {
		it.ID, it.CallID = "", ""
		out[i] = it
	}
	return out
}

// streamResponse runs a streamed request and checks the event protocol:
// strictly increasing sequence numbers, created and in_progress first,
// each item added before its deltas, every done event carrying what its
// deltas spelled, and the terminal event last, its output the done items.
// It returns the terminal response and the event types.
func streamResponse(t *testing.T, c openai.Client, p responses.ResponseNewParams, opts ...option.RequestOption) (responses.Response, []string) {
	t.Helper()
	stream := c.Responses.NewStreaming(ctxT(t), p, opts...)
	var types []string
	var final responses.Response
	var done []itemView
	seq, terminal := int64(-1), ""
	text := map[string]*strings.Builder{} // by item id
	delta := func(id, d string) {
		b := text[id]
		if b == nil {
			t.Fatalf("delta for item %q before its output_item.added", id)
		}
		b.WriteString(d)
	}
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		if terminal != "" {
			t.Errorf("event %s after %s", ev.Type, terminal)
		}
		if ev.SequenceNumber <= seq {
			t.Errorf("sequence_number %d after %d", ev.SequenceNumber, seq)
		}
		seq = ev.SequenceNumber
		switch ev.Type {
		case "response.output_item.added":
			if int(ev.OutputIndex) != len(done) {
				t.Errorf("item added at output_index %d with %d items done", ev.OutputIndex, len(done))
			}
			text[ev.Item.ID] = &strings.Builder{}
		case "response.output_text.delta", "response.reasoning_text.delta", "response.function_call_arguments.delta":
			delta(ev.ItemID, ev.Delta)
		case "response.output_text.done", "response.reasoning_text.done":
			if ev.Text != text[ev.ItemID].String() {
				t.Errorf("%s text %q, deltas %q", ev.Type, ev.Text, text[ev.ItemID].String())
			}
		case "response.function_call_arguments.done":
			if ev.Arguments != text[ev.ItemID].String() {
				t.Errorf("arguments %q, deltas %q", ev.Arguments, text[ev.ItemID].String())
			}
		case "response.output_item.done":
			v := viewItem(t, ev.Item.RawJSON())
			if v.Text != text[v.ID].String() || int(ev.OutputIndex) != len(done) {
				t.Errorf("item done %+v at %d; deltas %q", v, ev.OutputIndex, text[v.ID].String())
			}
			done = append(done, v)
		case "response.completed", "response.incomplete", "response.failed":
			terminal, final = ev.Type, ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if terminal == "" || len(types) < 3 || types[0] != "response.created" || types[1] != "response.in_progress" {
		t.Fatalf("events %v", types)
	}
	if terminal != "response."+string(final.Status) {
		t.Errorf("%s carries status %q", terminal, final.Status)
	}
	if got := viewOutput(t, &final); !reflect.DeepEqual(got, done) {
		t.Errorf("final output %+v, done items %+v", got, done)
	}
	return final, types
}

func textInput(s string) responses.ResponseNewParamsInputUnion {
	return responses.ResponseNewParamsInputUnion{OfString: openai.String(s)}
}

func itemsInput(items ...responses.ResponseInputItemUnionParam) responses.ResponseNewParamsInputUnion {
	return responses.ResponseNewParamsInputUnion{OfInputItemList: items}
}

// TestResponsesOpenAIClient drives /v1/responses with the official client
// on the tiny random-weight model: every greedy answer equals what the
// engine (or the same conversation on chat) gives.
func TestResponsesOpenAIClient(t *testing.T) {
	r := startReal(t, 1)
	user := "Say something."
	want, _ := r.direct(t, actors.Request{Prompt: r.chatPrompt(t, chattemplate.Message{Role: "user", Content: user}),
		MaxTokens: 10, IgnoreEOS: true, SkipSpecialTokens: true})
	plain := responses.ResponseNewParams{Model: "tiny", Input: textInput(user), MaxOutputTokens: openai.Int(10),
		Temperature: openai.Float(0)}

	t.Run("string input, cut at max_output_tokens", func(t *testing.T) {
		res, err := r.client.Responses.New(ctxT(t), plain, ignoreEOS)
		if err != nil {
			t.Fatal(err)
		}
		if res.OutputText() != want || res.Status != responses.ResponseStatusIncomplete ||
			res.IncompleteDetails.Reason != "max_output_tokens" {
			t.Errorf("text %q status %q details %+v; want %q incomplete", res.OutputText(), res.Status, res.IncompleteDetails, want)
		}
		items := viewOutput(t, res)
		if len(items) != 1 || items[0].Type != "message" || items[0].Status != "incomplete" {
			t.Errorf("output %+v", items)
		}
		if !strings.HasPrefix(res.ID, "resp_") || res.Object != "response" || res.Model != "tiny" || res.CreatedAt == 0 {
			t.Errorf("id %q object %q model %q created_at %v", res.ID, res.Object, res.Model, res.CreatedAt)
		}
		u := res.Usage
		if u.InputTokens != int64(len(r.chatPrompt(t, chattemplate.Message{Role: "user", Content: user}))) ||
			u.OutputTokens != 10 || u.TotalTokens != u.InputTokens+10 || u.OutputTokensDetails.ReasoningTokens != 0 {
			t.Errorf("usage %+v", u)
		}
		if res.Temperature != 0 || res.TopP != 1 || res.MaxOutputTokens != 10 || res.JSON.ExtraFields["store"].Raw() != "false" {
			t.Errorf("echoed temperature %v top_p %v max_output_tokens %v", res.Temperature, res.TopP, res.MaxOutputTokens)
		}
	})

	t.Run("stop gives completed", func(t *testing.T) {
		runes := []rune(want)
		stop := string(runes[len(runes)/2:][:2])
		cut := want[:strings.Index(want, stop)]
		res, err := r.client.Responses.New(ctxT(t), plain, ignoreEOS, option.WithJSONSet("stop", []string{stop}))
		if err != nil {
			t.Fatal(err)
		}
		if res.OutputText() != cut || res.Status != responses.ResponseStatusCompleted || res.IncompleteDetails.Reason != "" {
			t.Errorf("text %q status %q; want %q completed (stop %q)", res.OutputText(), res.Status, cut, stop)
		}
		if items := viewOutput(t, res); len(items) != 1 || items[0].Status != "completed" {
			t.Errorf("output %+v", items)
		}
	})

	t.Run("stream", func(t *testing.T) {
		final, types := streamResponse(t, r.client, plain, ignoreEOS)
		if final.OutputText() != want || final.Status != responses.ResponseStatusIncomplete || final.Usage.OutputTokens != 10 {
			t.Errorf("streamed %q status %q usage %+v; want %q", final.OutputText(), final.Status, final.Usage, want)
		}
		wantTypes := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}
		if !reflect.DeepEqual(types[:4], wantTypes) || types[len(types)-1] != "response.incomplete" {
			t.Errorf("events %v", types)
		}
		if tail := types[len(types)-4 : len(types)-1]; !reflect.DeepEqual(tail, []string{"response.output_text.done",
			"response.content_part.done", "response.output_item.done"}) {
			t.Errorf("events end with %v", tail)
		}
	})

	t.Run("messages and instructions", func(t *testing.T) {
		// The same conversation on chat: instructions first, developer as
		// system, content parts joined.
		input := itemsInput(
			responses.ResponseInputItemParamOfMessage("Be terse.", responses.EasyInputMessageRoleDeveloper),
			responses.ResponseInputItemParamOfMessage(responses.ResponseInputMessageContentListParam{
				{OfInputText: &responses.ResponseInputTextParam{Text: "Hello"}},
				{OfInputText: &responses.ResponseInputTextParam{Text: "there"}}}, responses.EasyInputMessageRoleUser),
			responses.ResponseInputItemParamOfOutputMessage([]responses.ResponseOutputMessageContentUnionParam{
				{OfOutputText: &responses.ResponseOutputTextParam{Text: "Hi."}}}, "msg_1", responses.ResponseOutputMessageStatusCompleted),
			responses.ResponseInputItemParamOfMessage(user, responses.EasyInputMessageRoleUser))
		p := plain
		p.Input, p.Instructions = input, openai.String("You are Cohort.")
		res, err := r.client.Responses.New(ctxT(t), p, ignoreEOS)
		if err != nil {
			t.Fatal(err)
		}
		chat, err := r.client.Chat.Completions.New(ctxT(t), openai.ChatCompletionNewParams{Model: "tiny",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are Cohort."), openai.SystemMessage("Be terse."),
				openai.UserMessage("Hello\nthere"), openai.AssistantMessage("Hi."), openai.UserMessage(user)},
			MaxTokens: openai.Int(10), Temperature: openai.Float(0)}, ignoreEOS)
		if err != nil {
			t.Fatal(err)
		}
		if res.OutputText() != chat.Choices[0].Message.Content || res.Usage.InputTokens != chat.Usage.PromptTokens {
			t.Errorf("responses %q (%d input tokens), chat %q (%d)", res.OutputText(), res.Usage.InputTokens,
				chat.Choices[0].Message.Content, chat.Usage.PromptTokens)
		}
		if res.Instructions.OfString != "You are Cohort." {
			t.Errorf("instructions echoed as %+v", res.Instructions)
		}
	})

	weather := responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{Name: "get_weather",
		Description: openai.String("The weather of a city"), Strict: openai.Bool(false),
		Parameters: map[string]any{"type": "object", "properties": map[string]any{
			"city": map[string]any{"type": "string"}, "days": map[string]any{"type": "integer"}}}}}
	named := responses.ResponseNewParamsToolChoiceUnion{OfFunctionTool: &responses.ToolChoiceFunctionParam{Name: "get_weather"}}
	t.Run("named tool_choice and a second turn", func(t *testing.T) {
		// On random weights the call's arguments are whatever follows
		// the call the prompt opened; they are still a JSON object.
		p := plain
		p.MaxOutputTokens, p.Tools, p.ToolChoice = openai.Int(12), []responses.ToolUnionParam{weather}, named
		res, err := r.client.Responses.New(ctxT(t), p, ignoreEOS)
		if err != nil {
			t.Fatal(err)
		}
		items := viewOutput(t, res)
		if len(items) != 1 || items[0].Type != "function_call" || items[0].Name != "get_weather" {
			t.Fatalf("output %+v, want a get_weather call", items)
		}
		decodeArgs(t, items[0].Text)
		final, _ := streamResponse(t, r.client, p, ignoreEOS)
		if got := viewOutput(t, &final); !reflect.DeepEqual(anonymous(got), anonymous(items)) {
			t.Errorf("streamed output %+v, plain %+v", got, items)
		}
		// The second turn: the call and its output go back as input;
		// the answer is chat's for the same conversation.
		call := res.Output[0].AsFunctionCall()
		out := responses.ResponseInputItemParamOfFunctionCallOutput(`{"sky": "sunny"}`)
		out.OfFunctionCallOutput.CallID = openai.String(call.CallID)
		p2 := plain
		p2.Tools = p.Tools
		p2.Input = itemsInput(responses.ResponseInputItemParamOfMessage(user, responses.EasyInputMessageRoleUser),
			responses.ResponseInputItemParamOfFunctionCall(call.Arguments, call.CallID, call.Name), out)
		second, err := r.client.Responses.New(ctxT(t), p2, ignoreEOS)
		if err != nil {
			t.Fatal(err)
		}
		chatTool := openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "get_weather",
			Description: openai.String("The weather of a city"), Strict: openai.Bool(false),
			Parameters: openai.FunctionParameters(weather.OfFunction.Parameters)})
		chat, err := r.client.Chat.Completions.New(ctxT(t), openai.ChatCompletionNewParams{Model: "tiny",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(user),
				{OfAssistant: &openai.ChatCompletionAssistantMessageParam{ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{
					{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{ID: call.CallID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: call.Name, Arguments: call.Arguments}}}}}},
				openai.ToolMessage(`{"sky": "sunny"}`, call.CallID)},
			Tools: []openai.ChatCompletionToolUnionParam{chatTool}, MaxTokens: openai.Int(10), Temperature: openai.Float(0)}, ignoreEOS)
		if err != nil {
			t.Fatal(err)
		}
		if second.Usage.InputTokens != chat.Usage.PromptTokens || second.OutputText() != chat.Choices[0].Message.Content {
			t.Errorf("second turn %q (%d input tokens); chat %q (%d)", second.OutputText(), second.Usage.InputTokens,
				chat.Choices[0].Message.Content, chat.Usage.PromptTokens)
		}
	})
}

// respWeatherParams is weatherParams on /v1/responses: the same two tools
// in the Responses API's shape.
func respWeatherParams(input string, opts ...func(*responses.ResponseNewParams)) responses.ResponseNewParams {
	p := responses.ResponseNewParams{Model: "fake", Input: textInput(input), MaxOutputTokens: openai.Int(64),
		Tools: []responses.ToolUnionParam{
			{OfFunction: &responses.FunctionToolParam{Name: "get_weather", Description: openai.String("The weather of a city"),
				Parameters: map[string]any{"type": "object", "properties": map[string]any{
					"city": map[string]any{"type": "string"}, "days": map[string]any{"type": "integer"},
					"metric": map[string]any{"type": "boolean"}}, "required": []string{"city"}}}},
			{OfFunction: &responses.FunctionToolParam{Name: "get_time",
				Parameters: map[string]any{"type": "object", "properties": map[string]any{"zone": map[string]any{"type": "string"}}}}}}}
	for _, o := range opts {
		o(&p)
	}
	return p
}

// toolScript is the fake model's answer to a prompt rendered by the tiny
// template (for startToolServer).
func toolScript(prompt string) string {
	user := prompt[max(0, strings.LastIndex(prompt, "<|im_start|>user\n")):]
	switch {
	case strings.HasSuffix(prompt, "<function=get_weather>\n"): // named
		return "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n</function>\n</tool_call>"
	case strings.HasSuffix(prompt, "<function="): // required
		return "get_time>\n<parameter=zone>\nCET\n</parameter>\n</function>\n</tool_call>"
	case strings.Contains(prompt, "<tool_response>") && strings.HasSuffix(prompt, "<think>\n"):
		return "Done.\n</think>\n\nIt is sunny in Paris."
	case strings.Contains(prompt, "<tool_response>"):
		return "It is sunny in Paris."
	case strings.Contains(user, "both"):
		return parisCall + "\n" + strings.Replace(parisCall, "Paris", "Rome", 1)
	case strings.Contains(user, "think then call"):
		return "I should call it.\n</think>\n\n" + parisCall
	case strings.HasSuffix(prompt, "<think>\n"): // the template opened the block
		return "Two and two.\nMakes four.\n</think>\n\nIt is 4."
	case strings.Contains(user, "2+2"):
		return "<think>\nHmm.\n</think>\n\nIt is 4."
	}
	return "Let me look.\n\n" + parisCall
}

func callItem(name string, args map[string]any) itemView {
	b, _ := json.Marshal(args)
	return itemView{Type: "function_call", Status: "completed", Name: name, Text: string(b)}
}

// TestResponsesToolsAndReasoning: tool calls and reasoning become output
// items, the same plain and streamed, and the prompt is chat's for the
// same request.
func TestResponsesToolsAndReasoning(t *testing.T) {
	ts := startToolServer(t, toolScript)
	msg := func(text string) itemView { return itemView{Type: "message", Status: "completed", Text: text} }
	thought := func(text string) itemView { return itemView{Type: "reasoning", Status: "completed", Text: text} }
	paris := callItem("get_weather", parisArgs)
	thinking := option.WithJSONSet("chat_template_kwargs", map[string]any{"enable_thinking": true})
	tests := []struct {
		name   string
		params responses.ResponseNewParams
		opts   []option.RequestOption
		want   []itemView
		chat   *openai.ChatCompletionNewParams // the same request on chat, for the prompt
	}{
		{"auto", respWeatherParams("Weather in Paris?"), nil, []itemView{msg("Let me look.\n\n"), paris}, ptr(weatherParams())},
		{"required", respWeatherParams("Weather in Paris?", func(p *responses.ResponseNewParams) {
			p.ToolChoice = responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: param.NewOpt(responses.ToolChoiceOptionsRequired)}
		}), nil, []itemView{callItem("get_time", map[string]any{"zone": "CET"})}, ptr(weatherParams(func(p *openai.ChatCompletionNewParams) {
			p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}
		}))},
		{"named", respWeatherParams("Weather in Paris?", func(p *responses.ResponseNewParams) {
			p.ToolChoice = responses.ResponseNewParamsToolChoiceUnion{OfFunctionTool: &responses.ToolChoiceFunctionParam{Name: "get_weather"}}
		}), nil, []itemView{paris}, nil},
		{"none", respWeatherParams("Weather in Paris?", func(p *responses.ResponseNewParams) {
			p.ToolChoice = responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: param.NewOpt(responses.ToolChoiceOptionsNone)}
		}), nil, []itemView{msg("Let me look.\n\n" + parisCall)}, nil},
		{"parallel", respWeatherParams("Weather in both?"), nil,
			[]itemView{paris, callItem("get_weather", map[string]any{"city": "Rome", "days": 3.0, "metric": true})}, nil},
		{"parallel_tool_calls false", respWeatherParams("Weather in both?", func(p *responses.ResponseNewParams) {
			p.ParallelToolCalls = openai.Bool(false)
		}), nil, []itemView{paris}, nil},
		{"reasoning in the output", respWeatherParams("2+2?", func(p *responses.ResponseNewParams) { p.Tools = nil }), nil,
			[]itemView{thought("Hmm."), msg("It is 4.")}, nil},
		{"reasoning opened by the prompt", respWeatherParams("2+2?", func(p *responses.ResponseNewParams) { p.Tools = nil }),
			[]option.RequestOption{thinking}, []itemView{thought("Two and two.\nMakes four."), msg("It is 4.")}, nil},
		{"enable_thinking false", respWeatherParams("2+2?", func(p *responses.ResponseNewParams) { p.Tools = nil }),
			[]option.RequestOption{option.WithJSONSet("chat_template_kwargs", map[string]any{"enable_thinking": false})},
			[]itemView{msg("<think>\nHmm.\n</think>\n\nIt is 4.")}, nil},
		{"reasoning then a call", respWeatherParams("think then call"), []option.RequestOption{thinking},
			[]itemView{thought("I should call it."), paris}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := ts.client.Responses.New(ctxT(t), tt.params, tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			got := anonymous(viewOutput(t, res))
			for i := range got {
				if got[i].Type == "function_call" {
					got[i].Text = string(mustJSON(t, decodeArgs(t, got[i].Text)))
				}
			}
			if !reflect.DeepEqual(got, tt.want) || res.Status != responses.ResponseStatusCompleted {
				t.Errorf("status %q output\n%+v\nwant\n%+v", res.Status, got, tt.want)
			}
			if reasoning := res.Usage.OutputTokensDetails.ReasoningTokens; (tt.want[0].Type == "reasoning") != (reasoning > 0) {
				t.Errorf("reasoning_tokens %d", reasoning)
			}
			prompt := ts.lastPrompt()
			final, _ := streamResponse(t, ts.client, tt.params, tt.opts...)
			if streamed := anonymous(viewOutput(t, &final)); !reflect.DeepEqual(streamed, anonymous(viewOutput(t, res))) {
				t.Errorf("streamed output %+v, plain %+v", streamed, viewOutput(t, res))
			}
			if tt.chat == nil {
				return
			}
			if _, err := ts.client.Chat.Completions.New(ctxT(t), *tt.chat); err != nil {
				t.Fatal(err)
			}
			if chatPrompt := ts.lastPrompt(); chatPrompt != prompt {
				t.Errorf("responses prompt\n%q\nchat prompt\n%q", prompt, chatPrompt)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestResponsesTwoTurns: a response's output items, sent back as input
// with the call's output, render the conversation chat renders for the
// same turns (reasoning included).
func TestResponsesTwoTurns(t *testing.T) {
	ts := startToolServer(t, toolScript)
	thinking := option.WithJSONSet("chat_template_kwargs", map[string]any{"enable_thinking": true})
	for _, tt := range []struct {
		name, user string
		opts       []option.RequestOption
		assistant  string // the first turn as chat's assistant message
	}{
		{"message and call", "Weather in Paris?", nil,
			`{"role":"assistant","content":"Let me look.\n\n","tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"days\":3,\"metric\":true}"}}]}`},
		{"reasoning and call", "think then call", []option.RequestOption{thinking},
			`{"role":"assistant","content":null,"reasoning_content":"I should call it.","tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"days\":3,\"metric\":true}"}}]}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := respWeatherParams(tt.user)
			first, err := ts.client.Responses.New(ctxT(t), p, tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			input := []json.RawMessage{json.RawMessage(`{"role":"user","content":` + string(mustJSON(t, tt.user)) + `}`)}
			var callID string
			for _, it := range first.Output {
				input = append(input, json.RawMessage(it.RawJSON()))
				if it.Type == "function_call" {
					callID = it.AsFunctionCall().CallID
				}
			}
			input = append(input, mustJSON(t, map[string]any{"type": "function_call_output", "call_id": callID, "output": `{"sky": "sunny"}`}))
			second, err := ts.client.Responses.New(ctxT(t), respWeatherParams(""), append(tt.opts, option.WithJSONSet("input", input))...)
			if err != nil {
				t.Fatal(err)
			}
			if second.OutputText() != "It is sunny in Paris." || second.Status != responses.ResponseStatusCompleted {
				t.Errorf("second turn: %q %q", second.OutputText(), second.Status)
			}
			prompt := ts.lastPrompt()
			chat := `{"model":"fake","max_tokens":8,"messages":[{"role":"user","content":` + string(mustJSON(t, tt.user)) + `},` +
				strings.ReplaceAll(tt.assistant, `"c1"`, string(mustJSON(t, callID))) +
				`,{"role":"tool","content":"{\"sky\": \"sunny\"}","tool_call_id":` + string(mustJSON(t, callID)) + `}],"tools":` +
				string(mustJSON(t, weatherParams().Tools)) + `}`
			if _, err := ts.client.Chat.Completions.New(ctxT(t), openai.ChatCompletionNewParams{},
				append([]option.RequestOption{option.WithRequestBody("application/json", []byte(chat))}, tt.opts...)...); err != nil {
				t.Fatal(err)
			}
			if chatPrompt := ts.lastPrompt(); chatPrompt != prompt {
				t.Errorf("responses prompt\n%q\nchat prompt\n%q", prompt, chatPrompt)
			}
		})
	}
}

// TestResponsesBadInput: invalid requests get a 400 (404 for the model)
// naming the parameter.
func TestResponsesBadInput(t *testing.T) {
	url, _ := startFake(t, newFakeEngine(), func(o *Options) { o.ChatTemplate = modelgen.ChatTemplate })
	fn := `{"type":"function","name":"f","parameters":{"type":"object","properties":{}}}`
	tests := []struct {
		name, body    string
		status        int
		param, substr string
	}{
		{"unknown field", `{"input":"hi","bogus_knob":1}`, 400, "bogus_knob", "bogus_knob"},
		{"chat's messages", `{"messages":[{"role":"user","content":"hi"}]}`, 400, "messages", "unknown field"},
		{"unknown model", `{"model":"gpt-5","input":"hi"}`, 404, "model", "gpt-5"},
		{"previous_response_id", `{"input":"hi","previous_response_id":"resp_1"}`, 400, "previous_response_id", "stores no responses"},
		{"conversation", `{"input":"hi","conversation":"conv_1"}`, 400, "conversation", "stores no"},
		{"background", `{"input":"hi","background":true}`, 400, "background", "background"},
		{"no input", `{"model":"fake"}`, 400, "input", "required"},
		{"input a number", `{"input":5}`, 400, "input", "string or a list"},
		{"input an object", `{"input":{"role":"user","content":"hi"}}`, 400, "input", "string or a list"},
		{"input empty", `{"input":[]}`, 400, "input", "empty"},
		{"item not an object", `{"input":["hi"]}`, 400, "input[0]", "input item"},
		{"item type a number", `{"input":[{"type":1}]}`, 400, "input[0].type", "string"},
		{"unknown item type", `{"input":[{"type":"web_search_call","id":"ws_1"}]}`, 400, "input[0].type", "web_search_call"},
		{"item_reference", `{"input":[{"type":"item_reference","id":"msg_1"}]}`, 400, "input[0].type", "stores no items"},
		{"unknown item field", `{"input":[{"role":"user","content":"hi","colour":"red"}]}`, 400, "input[0].colour", "colour"},
		{"no role", `{"input":[{"type":"message","content":"hi"}]}`, 400, "input[0].role", "required"},
		{"tool role", `{"input":[{"role":"tool","content":"hi"}]}`, 400, "input[0].role", "tool"},
		{"no content", `{"input":[{"role":"user"}]}`, 400, "input[0].content", "required"},
		{"content a number", `{"input":[{"role":"user","content":3}]}`, 400, "input[0].content", "string or a list"},
		{"image part", `{"input":[{"role":"user","content":[{"type":"input_image","image_url":"http://x"}]}]}`, 400, "input[0].content[0].type", "input_image"},
		{"part without text", `{"input":[{"role":"user","content":[{"type":"input_text"}]}]}`, 400, "input[0].content[0].text", "required"},
		{"call without call_id", `{"input":[{"type":"function_call","name":"f","arguments":"{}"}]}`, 400, "input[0].call_id", "required"},
		{"call without name", `{"input":[{"type":"function_call","call_id":"c","arguments":"{}"}]}`, 400, "input[0].name", "required"},
		{"call arguments not JSON", `{"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"city=Paris"}]}`, 400, "input[0].arguments", "JSON"},
		{"output without output", `{"input":[{"type":"function_call_output","call_id":"c"}]}`, 400, "input[0].output", "required"},
		{"output without call_id", `{"input":[{"type":"function_call_output","output":"x"}]}`, 400, "input[0].call_id", "required"},
		{"message with call fields", `{"input":[{"role":"user","content":"x","call_id":"c"}]}`, 400, "input[0]", "function items"},
		{"unknown tool type", `{"input":"hi","tools":[{"type":"web_search"}]}`, 400, "tools[0].type", "web_search"},
		{"chat-shaped tool", `{"input":"hi","tools":[{"type":"function","function":{"name":"f"}}]}`, 400, "tools[0].function", "unknown field"},
		{"tool without name", `{"input":"hi","tools":[{"type":"function","parameters":{}}]}`, 400, "tools[0].name", "letters"},
		{"tool name twice", `{"input":"hi","tools":[` + fn + `,` + fn + `]}`, 400, "tools[1].name", "twice"},
		{"tool parameters not an object", `{"input":"hi","tools":[{"type":"function","name":"f","parameters":[1]}]}`, 400, "tools[0].parameters", "JSON Schema"},
		{"tool_choice names an unknown function", `{"input":"hi","tools":[` + fn + `],"tool_choice":{"type":"function","name":"g"}}`, 400, "tool_choice", "not in tools"},
		{"tool_choice chat-shaped", `{"input":"hi","tools":[` + fn + `],"tool_choice":{"type":"function","function":{"name":"f"}}}`, 400, "tool_choice", `"name"`},
		{"tool_choice hosted", `{"input":"hi","tools":[` + fn + `],"tool_choice":{"type":"file_search"}}`, 400, "tool_choice", "tool_choice"},
		{"tool_choice required without tools", `{"input":"hi","tool_choice":"required"}`, 400, "tool_choice", "at least one tool"},
		{"tool_choice unknown mode", `{"input":"hi","tool_choice":"sometimes"}`, 400, "tool_choice", "sometimes"},
		{"text.format json_schema", `{"input":"hi","text":{"format":{"type":"json_schema","name":"x","schema":{}}}}`, 400, "text.format", "structured outputs"},
		{"text.format json_object", `{"input":"hi","text":{"format":{"type":"json_object"}}}`, 400, "text.format", "structured outputs"},
		{"text.format unknown", `{"input":"hi","text":{"format":{"type":"yaml"}}}`, 400, "text.format", "yaml"},
		{"truncation auto", `{"input":"hi","truncation":"auto"}`, 400, "truncation", "auto"},
		{"max_output_tokens 0", `{"input":"hi","max_output_tokens":0}`, 400, "max_output_tokens", "at least 1"},
		{"max_output_tokens over the context", `{"input":"hi","max_output_tokens":100000}`, 400, "max_output_tokens", "context length"},
		{"temperature", `{"input":"hi","temperature":-1}`, 400, "temperature", "temperature"},
		{"temperature a string", `{"input":"hi","temperature":"hot"}`, 400, "temperature", "number"},
		{"stream_options without stream", `{"input":"hi","stream_options":{"include_obfuscation":false}}`, 400, "stream_options", "stream"},
		{"max_tool_calls", `{"input":"hi","max_tool_calls":2}`, 400, "max_tool_calls", "not supported"},
		{"top_logprobs", `{"input":"hi","top_logprobs":2}`, 400, "top_logprobs", "not supported"},
		{"prompt template", `{"input":"hi","prompt":{"id":"pmpt_1"}}`, 400, "prompt", "not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, body := do(t, "POST", url+"/v1/responses", tt.body)
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tt.status, body)
			}
			e := checkEnvelope(t, body)
			if deref(e.Error.Param) != tt.param || !strings.Contains(e.Error.Message, tt.substr) {
				t.Errorf("param %q message %q; want %q ~%q", deref(e.Error.Param), e.Error.Message, tt.param, tt.substr)
			}
		})
	}
}

// TestResponsesAccepted: the fields OpenAI's clients send that change
// nothing here are accepted.
func TestResponsesAccepted(t *testing.T) {
	url, _ := startFake(t, newFakeEngine(), func(o *Options) { o.ChatTemplate = modelgen.ChatTemplate })
	for _, body := range []string{
		`{"input":"hi","store":false,"metadata":{"k":"v"},"user":"u","truncation":"disabled","include":["reasoning.encrypted_content"],` +
			`"reasoning":{"effort":"low","summary":"auto"},"text":{"format":{"type":"text"},"verbosity":"low"},"service_tier":"auto",` +
			`"prompt_cache_key":"k","safety_identifier":"s","parallel_tool_calls":true,"tool_choice":"auto","top_logprobs":0,"background":false}`,
		`{"input":"hi","store":true,"tools":[],"tool_choice":"none","previous_response_id":null}`,
		`{"input":[{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"s"}],"encrypted_content":"e"},` +
			`{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"a","annotations":[],"logprobs":[]}]},` +
			`{"role":"user","content":[{"type":"input_text","text":"b"}]}]}`,
	} {
		res, out := do(t, "POST", url+"/v1/responses", body)
		if res.StatusCode != 200 {
			t.Errorf("%s: status %d %s", body, res.StatusCode, out)
			continue
		}
		var r struct {
			Status, Model string
			Store         bool
		}
		if err := json.Unmarshal(out, &r); err != nil || r.Status != "incomplete" || r.Store || r.Model != "fake" {
			t.Errorf("%s: %s", body, out)
		}
	}
}

// TestResponsesEngineFailure: an engine failure ends a stream with
// response.failed (never a hang) and a plain request with the error.
func TestResponsesEngineFailure(t *testing.T) {
	f := newFakeEngine()
	f.script = func(actors.Request) []actors.Event {
		evs := scriptText("Hello there", 4, "")
		return append(evs, actors.Event{Finish: "error", Err: errors.New("device lost")})
	}
	url, _ := startFake(t, f, func(o *Options) { o.ChatTemplate = modelgen.ChatTemplate })
	client := openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("unused"),
		option.WithMaxRetries(0), option.WithHTTPClient(testClient()))
	p := responses.ResponseNewParams{Model: "fake", Input: textInput("hi")}
	final, types := streamResponse(t, client, p)
	if final.Status != responses.ResponseStatusFailed || !strings.Contains(final.Error.Message, "device lost") ||
		types[len(types)-1] != "response.failed" {
		t.Errorf("status %q error %+v events %v", final.Status, final.Error, types)
	}
	if got := viewOutput(t, &final); len(got) != 1 || got[0].Text != "Hello there" || got[0].Status != "incomplete" {
		t.Errorf("output %+v", got)
	}
	_, err := client.Responses.New(ctxT(t), p)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 500 || !strings.Contains(apiErr.Message, "device lost") {
		t.Errorf("plain request: %v", err)
	}
}

// TestResponsesStreamConnection: a silent stream gets the keep-alive
// comments, and a client that leaves mid-stream cancels its engine request.
func TestResponsesStreamConnection(t *testing.T) {
	for _, tt := range []struct {
		name    string
		hang    bool // the engine emits nothing
		endless bool // it emits tokens forever
	}{{"keep-alive", true, false}, {"disconnect", false, true}} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeEngine()
			f.script = func(actors.Request) []actors.Event { return nil }
			f.hang, f.endless = tt.hang, tt.endless
			base, _ := startFake(t, f, func(o *Options) { o.KeepAlive = 20 * time.Millisecond })
			res := postStream(t, ctxT(t), base+"/v1/responses", `{"input":"hi","stream":true}`)
			sc := bufio.NewScanner(res.Body)
			want := "event: response.in_progress"
			if tt.hang {
				want = strings.TrimSuffix(keepAliveComment, "\n\n")
			}
			for sc.Scan() && sc.Text() != want {
			}
			if sc.Err() != nil || sc.Text() != want {
				t.Fatalf("no %q line: %v", want, sc.Err())
			}
			if tt.endless {
				res.Body.Close()
				cancelled := func() bool {
					f.mu.Lock()
					defer f.mu.Unlock()
					return f.streams[0].cancelCalled.Load()
				}
				waitFor(t, 20*time.Second, cancelled, "the engine request was not cancelled")
			}
		})
	}
}

func FuzzResponsesRequest(f *testing.F) {
	for _, s := range []string{
		``, `{}`, `null`, `[]`, `{"input":"hi"}`, `{"input":"hi","stream":true}`, `{"input":[]}`, `{"input":[1]}`,
		`{"input":[{"role":"user","content":"hi"}],"instructions":"be brief","max_output_tokens":3}`,
		`{"input":[{"role":"developer","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]},{"role":"user","content":"c"}]}`,
		`{"input":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"a","annotations":[]}]}]}`,
		`{"input":[{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"r"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{\"a\":1}"},{"type":"function_call_output","call_id":"c","output":"x"}],"tools":[{"type":"function","name":"f"}]}`,
		`{"input":"w","tools":[{"type":"function","name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"}}}}],"tool_choice":"required","stream":true}`,
		`{"input":"w","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"f"},"parallel_tool_calls":false}`,
		`{"input":"w","text":{"format":{"type":"json_schema","schema":{}}}}`, `{"input":"w","previous_response_id":"resp_1"}`,
		`{"input":"w","reasoning":{"effort":"high"},"chat_template_kwargs":{"enable_thinking":true},"stream":true}`,
		`{"input":[{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"x"}]}]}`,
		`{"input":"x","temperature":"hot"}`, "{\"input\":\"\xff\"}", `{"input":[{"role":"user","content":[{"type":"input_image"}]}]}`,
	} {
		f.Add([]byte(s))
	}
	s := fuzzServer(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzServe(t, s, "/v1/responses", body)
	})
}
