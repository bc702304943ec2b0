package httpapi

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// editJSON rewrites the JSON object in dir/name with change.
func editJSON(t testing.TB, dir, name string, change func(map[string]any)) {
	t.Helper()
	path := filepath.Join(dir, name)
	obj := map[string]any{}
	if data, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(data, &obj); err != nil {
			t.Fatal(err)
		}
	}
	change(obj)
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestChatStopsAtEveryDeclaredEOS is issue 14's acceptance test: a chat
// whose model emits <|im_end|> (forced with logit_bias) stops there with
// finish_reason "stop" and the token is not in the text, on checkpoints
// whose text_config lacks it (text_config declares only <|endoftext|>)
// and which declare <|im_end|> in exactly one other place. The control
// declares it nowhere: the same bias then runs to the length limit.
func TestChatStopsAtEveryDeclaredEOS(t *testing.T) {
	tok := synthTokenizer(t)
	endOfText, _ := tok.TokenID("<|endoftext|>")
	imEnd, _ := tok.TokenID("<|im_end|>")
	// undeclare leaves <|im_end|> in no EOS list of the tiny checkpoint.
	undeclare := func(t testing.TB, dir string) {
		editJSON(t, dir, "config.json", func(m map[string]any) {
			m["eos_token_id"] = endOfText
			m["text_config"].(map[string]any)["eos_token_id"] = endOfText
		})
		editJSON(t, dir, "tokenizer_config.json", func(m map[string]any) { m["eos_token"] = "<|endoftext|>" })
	}
	tests := []struct {
		name    string
		declare func(t testing.TB, dir string)
		stops   bool
	}{
		{"top-level config.json list", func(t testing.TB, dir string) {
			editJSON(t, dir, "config.json", func(m map[string]any) { m["eos_token_id"] = []int32{endOfText, imEnd} })
		}, true},
		{"top-level config.json int", func(t testing.TB, dir string) {
			editJSON(t, dir, "config.json", func(m map[string]any) { m["eos_token_id"] = imEnd })
		}, true},
		{"generation_config.json", func(t testing.TB, dir string) {
			editJSON(t, dir, "generation_config.json", func(m map[string]any) { m["eos_token_id"] = []int32{imEnd, endOfText} })
		}, true},
		{"tokenizer eos_token", func(t testing.TB, dir string) {
			editJSON(t, dir, "tokenizer_config.json", func(m map[string]any) { m["eos_token"] = "<|im_end|>" })
		}, true},
		{"declared nowhere (control)", func(testing.TB, string) {}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := startRealEdited(t, 1, func(dir string) {
				undeclare(t, dir)
				tt.declare(t, dir)
			})
			params := openai.ChatCompletionNewParams{Model: "tiny", MaxTokens: openai.Int(3),
				Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hi")},
				LogitBias: map[string]int64{strconv.Itoa(int(imEnd)): 100}}
			keep := option.WithJSONSet("skip_special_tokens", false) // the token's text would show if emitted
			res, err := r.client.Chat.Completions.New(ctxT(t), params, keep)
			if err != nil {
				t.Fatal(err)
			}
			c := res.Choices[0]
			if !tt.stops {
				if c.FinishReason != "length" || c.Message.Content != strings.Repeat("<|im_end|>", 3) {
					t.Fatalf("control: finish %q content %q; the bias does not force <|im_end|>", c.FinishReason, c.Message.Content)
				}
				return
			}
			if c.FinishReason != "stop" || c.Message.Content != "" || res.Usage.CompletionTokens != 1 {
				t.Errorf("finish %q content %q completion tokens %d; want stop, \"\", 1", c.FinishReason,
					c.Message.Content, res.Usage.CompletionTokens)
			}

			stream := r.client.Chat.Completions.NewStreaming(ctxT(t), params)
			var text strings.Builder
			finish := ""
			for stream.Next() {
				for _, ch := range stream.Current().Choices {
					text.WriteString(ch.Delta.Content)
					if ch.FinishReason != "" {
						finish = ch.FinishReason
					}
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if finish != "stop" || text.String() != "" {
				t.Errorf("streamed: finish %q text %q", finish, text.String())
			}

			// include_stop_str_in_output keeps the EOS token's text, and
			// skip_special_tokens (the default) then drops it again.
			for _, tc := range []struct {
				skip bool
				want string
			}{{false, "<|im_end|>"}, {true, ""}} {
				res, err := r.client.Chat.Completions.New(ctxT(t), params,
					option.WithJSONSet("include_stop_str_in_output", true), option.WithJSONSet("skip_special_tokens", tc.skip))
				if err != nil {
					t.Fatal(err)
				}
				if c := res.Choices[0]; c.FinishReason != "stop" || c.Message.Content != tc.want {
					t.Errorf("include_stop_str_in_output, skip_special_tokens %v: finish %q content %q, want stop %q",
						tc.skip, c.FinishReason, c.Message.Content, tc.want)
				}
			}
		})
	}
}
