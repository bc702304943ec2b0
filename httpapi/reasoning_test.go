package httpapi

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// reasoningOf reads vLLM's reasoning_content extension field ("" when
// absent or null).
func reasoningOf(t *testing.T, fields map[string]interface{ Raw() string }) string {
	t.Helper()
	f, ok := fields["reasoning_content"]
	if !ok || f.Raw() == "null" || f.Raw() == "" {
		return ""
	}
	var s string
	if err := json.Unmarshal([]byte(f.Raw()), &s); err != nil {
		t.Fatalf("reasoning_content %s: %v", f.Raw(), err)
	}
	return s
}

func extra[T interface{ Raw() string }](m map[string]T) map[string]interface{ Raw() string } {
	out := make(map[string]interface{ Raw() string }, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func TestReasoningOpenAIClient(t *testing.T) {
	const call = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"
	ts := startToolServer(t, func(prompt string) string {
		user := prompt[strings.LastIndex(prompt, "<|im_start|>user\n"):]
		switch {
		case strings.Contains(user, "tool please"):
			return "I should call it.\n</think>\n\n" + call
		case strings.Contains(user, "tool inside"):
			return "maybe " + call + "?\n</think>\n\nNo call."
		case strings.HasSuffix(prompt, "<think>\n"): // the template opened the block
			return "Two and two.\nMakes four.\n</think>\n\nIt is 4."
		}
		return "<think>\nHmm.\n</think>\n\nIt is 4."
	})
	kwargs := func(v bool) option.RequestOption {
		return option.WithJSONSet("chat_template_kwargs", map[string]any{"enable_thinking": v})
	}
	tests := []struct {
		name               string
		user               string
		tools              bool
		opts               []option.RequestOption
		reasoning, content string
		calls              int
	}{
		{"prompt opens the block", "2+2?", false, []option.RequestOption{kwargs(true)}, "Two and two.\nMakes four.", "It is 4.", 0},
		{"output opens the block", "2+2?", false, nil, "Hmm.", "It is 4.", 0},
		{"enable_thinking false: all content", "2+2?", false, []option.RequestOption{kwargs(false)}, "", "<think>\nHmm.\n</think>\n\nIt is 4.", 0},
		{"tool call after reasoning", "tool please", true, []option.RequestOption{kwargs(true)}, "I should call it.", "", 1},
		{"a call inside reasoning is reasoning", "tool inside", true, []option.RequestOption{kwargs(true)}, "maybe " + call + "?", "No call.", 0},
	}
	for _, tt := range tests {
		p := openai.ChatCompletionNewParams{Model: "fake", MaxTokens: openai.Int(64),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(tt.user)}}
		if tt.tools {
			p.Tools = []openai.ChatCompletionToolUnionParam{weatherTool}
		}
		t.Run(tt.name, func(t *testing.T) {
			res, err := ts.client.Chat.Completions.New(ctxT(t), p, tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			c := res.Choices[0]
			if r := reasoningOf(t, extra(c.Message.JSON.ExtraFields)); r != tt.reasoning || c.Message.Content != tt.content ||
				len(c.Message.ToolCalls) != tt.calls {
				t.Errorf("reasoning %q content %q calls %d; want %q %q %d", r, c.Message.Content, len(c.Message.ToolCalls),
					tt.reasoning, tt.content, tt.calls)
			}

			stream := ts.client.Chat.Completions.NewStreaming(ctxT(t), p, tt.opts...)
			var reasoning, content strings.Builder
			calls := 0
			for stream.Next() {
				for _, ch := range stream.Current().Choices {
					r := reasoningOf(t, extra(ch.Delta.JSON.ExtraFields))
					if r != "" && (content.Len() > 0 || calls > 0) {
						t.Errorf("reasoning delta %q after the content began", r)
					}
					reasoning.WriteString(r)
					content.WriteString(ch.Delta.Content)
					for _, tc := range ch.Delta.ToolCalls {
						if tc.ID != "" {
							calls++
						}
					}
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if reasoning.String() != tt.reasoning || content.String() != tt.content || calls != tt.calls {
				t.Errorf("streamed: reasoning %q content %q calls %d; want %q %q %d", reasoning.String(), content.String(), calls,
					tt.reasoning, tt.content, tt.calls)
			}
		})
	}
}

// TestReasoningHistory: an assistant turn's reasoning_content reaches the
// template, which writes it back as the think block it came from.
func TestReasoningHistory(t *testing.T) {
	ts := startToolServer(t, func(string) string { return "ok" })
	f := ts // the prompt is recorded by the fake engine
	body := `{"messages":[{"role":"user","content":"2+2?"},{"role":"assistant","content":"It is 4.","reasoning_content":"Two and two."},` +
		`{"role":"user","content":"3+3?"}],"max_tokens":2}`
	res, err := ts.client.Chat.Completions.New(ctxT(t), openai.ChatCompletionNewParams{}, option.WithRequestBody("application/json", []byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	if res.Choices[0].Message.Content != "ok" {
		t.Errorf("content %q", res.Choices[0].Message.Content)
	}
	want := "<|im_start|>assistant\n<think>\nTwo and two.\n</think>\n\nIt is 4.<|im_end|>\n"
	if p := f.lastPrompt(); !strings.Contains(p, want) {
		t.Errorf("prompt %q lacks %q", p, want)
	}
}
