package httpapi

import (
	"cohort/internal/testmodels/archtest"
	"cohort/internal/testmodels/servetest"
	"cohort/model/sample"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"cohort/actors"
	"cohort/httpapi/chattemplate"
	_ "cohort/model/qwen35"
	"cohort/model/tokenizer"
)

// realServer is the tiny generated model on the real actors engine behind
// a real listener.
type realServer struct {
	url    string
	eng    *actors.Engine
	tok    *tokenizer.Tokenizer
	tmpl   *chattemplate.Template
	client openai.Client
}

func startReal(t testing.TB, tp int) *realServer {
	t.Helper()
	return startRealEdited(t, tp, nil)
}

// startRealEdited is startReal on a tiny checkpoint that edit changes
// (its directory) before it is opened.
func startRealEdited(t testing.TB, tp int, edit func(dir string)) *realServer {
	t.Helper()
	dir := archtest.WritePreset(t, "tiny")
	if edit != nil {
		edit(dir)
	}
	ck, tok := servetest.Open(t, dir)
	cfg := actors.Config{Checkpoint: ck, Tokenizer: tok, TP: tp, NewBackend: servetest.CPUBackends(1),
		Capacity: servetest.Capacity, MaxPrefillTokens: 256, MaxRows: 64}
	eng, err := actors.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	tc, err := chattemplate.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(eng, Options{ModelName: "tiny", Tokenizer: tok, ChatTemplate: tc.Template, BOS: tc.BOS, EOS: tc.EOS})
	if err != nil {
		t.Fatal(err)
	}
	url := serveOn(t, s) // registered after eng.Close: shuts down first
	tmpl, err := chattemplate.New(tc.Template, tc.BOS, tc.EOS)
	if err != nil {
		t.Fatal(err)
	}
	client := openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("unused"),
		option.WithMaxRetries(0), option.WithHTTPClient(testClient()))
	return &realServer{url: url, eng: eng, tok: tok, tmpl: tmpl, client: client}
}

// direct runs a request on the engine itself: the reference for what the
// HTTP edge must return (set SkipSpecialTokens, the API's default, to
// compare text).
func (r *realServer) direct(t *testing.T, req actors.Request) (string, actors.Event) {
	t.Helper()
	st, err := r.eng.Submit(req)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var text strings.Builder
	for {
		ev, err := st.Recv(ctx)
		if err == io.EOF {
			t.Fatal("stream ended without a final event")
		}
		if err != nil {
			t.Fatal(err)
		}
		text.WriteString(ev.Text)
		if ev.Finish != "" {
			return text.String(), ev
		}
	}
}

func (r *realServer) chatPrompt(t *testing.T, msgs ...chattemplate.Message) []int32 {
	t.Helper()
	text, err := r.tmpl.Render(msgs, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r.tok.Encode(text)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

var ignoreEOS = option.WithJSONSet("ignore_eos", true)

// TestOpenAIClient drives the server with the official client: every
// greedy answer equals what the engine gives for the same tokens.
func TestOpenAIClient(t *testing.T) {
	r := startReal(t, 1)
	prompt := "Hello, Cohort"
	want, _ := r.direct(t, actors.Request{Prompt: r.tok.Encode(prompt), MaxTokens: 12, IgnoreEOS: true, SkipSpecialTokens: true})
	// Logprobs name every token, special ones included.
	wantTokens, _ := r.direct(t, actors.Request{Prompt: r.tok.Encode(prompt), MaxTokens: 12, IgnoreEOS: true})
	sys := "You are terse."
	user := "Say something."
	chatIDs := r.chatPrompt(t, chattemplate.Message{Role: "system", Content: sys}, chattemplate.Message{Role: "user", Content: user})
	wantChat, _ := r.direct(t, actors.Request{Prompt: chatIDs, MaxTokens: 10, IgnoreEOS: true, SkipSpecialTokens: true})
	chatParams := openai.ChatCompletionNewParams{
		Model:       "tiny",
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(sys), openai.UserMessage(user)},
		MaxTokens:   openai.Int(10),
		Temperature: openai.Float(0),
	}

	t.Run("completion", func(t *testing.T) {
		res, err := r.client.Completions.New(ctxT(t), openai.CompletionNewParams{
			Model:       "tiny",
			Prompt:      openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
			MaxTokens:   openai.Int(12),
			Temperature: openai.Float(0),
		}, ignoreEOS)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Choices) != 1 || res.Choices[0].Text != want || res.Choices[0].FinishReason != "length" {
			t.Fatalf("choices %+v, want text %q finish length", res.Choices, want)
		}
		if res.Object != "text_completion" || res.Model != "tiny" || !strings.HasPrefix(res.ID, "cmpl-") {
			t.Errorf("object %q model %q id %q", res.Object, res.Model, res.ID)
		}
		u := res.Usage
		if u.PromptTokens != int64(len(r.tok.Encode(prompt))) || u.CompletionTokens != 12 || u.TotalTokens != u.PromptTokens+12 {
			t.Errorf("usage %+v", u)
		}
	})

	t.Run("completion echo", func(t *testing.T) {
		res, err := r.client.Completions.New(ctxT(t), openai.CompletionNewParams{
			Model: "tiny", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
			MaxTokens: openai.Int(12), Temperature: openai.Float(0), Echo: openai.Bool(true),
		}, ignoreEOS)
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Choices[0].Text; got != prompt+want {
			t.Errorf("echo text %q, want %q", got, prompt+want)
		}
	})

	t.Run("chat", func(t *testing.T) {
		res, err := r.client.Chat.Completions.New(ctxT(t), chatParams, ignoreEOS)
		if err != nil {
			t.Fatal(err)
		}
		c := res.Choices[0]
		if c.Message.Content != wantChat || c.Message.Role != "assistant" || c.FinishReason != "length" {
			t.Fatalf("choice %+v, want content %q", c, wantChat)
		}
		if res.Usage.PromptTokens != int64(len(chatIDs)) || res.Usage.CompletionTokens != 10 {
			t.Errorf("usage %+v, prompt %d tokens", res.Usage, len(chatIDs))
		}
		if res.Object != "chat.completion" || !strings.HasPrefix(res.ID, "chatcmpl-") {
			t.Errorf("object %q id %q", res.Object, res.ID)
		}
	})

	t.Run("chat stream", func(t *testing.T) {
		p := chatParams
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		stream := r.client.Chat.Completions.NewStreaming(ctxT(t), p, ignoreEOS)
		var acc openai.ChatCompletionAccumulator
		chunks := 0
		for stream.Next() {
			acc.AddChunk(stream.Current())
			chunks++
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if got := acc.Choices[0].Message.Content; got != wantChat {
			t.Errorf("streamed %q, want %q", got, wantChat)
		}
		if acc.Choices[0].FinishReason != "length" || acc.Usage.CompletionTokens != 10 {
			t.Errorf("finish %q usage %+v", acc.Choices[0].FinishReason, acc.Usage)
		}
		if chunks < 3 {
			t.Errorf("%d chunks", chunks)
		}
	})

	t.Run("completion stream", func(t *testing.T) {
		stream := r.client.Completions.NewStreaming(ctxT(t), openai.CompletionNewParams{
			Model: "tiny", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
			MaxTokens: openai.Int(12), Temperature: openai.Float(0),
		}, ignoreEOS)
		var text strings.Builder
		finish := ""
		for stream.Next() {
			for _, c := range stream.Current().Choices {
				text.WriteString(c.Text)
				if c.FinishReason != "" {
					finish = string(c.FinishReason)
				}
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if text.String() != want || finish != "length" {
			t.Errorf("streamed %q finish %q, want %q length", text.String(), finish, want)
		}
	})

	t.Run("token prompt", func(t *testing.T) {
		ids := r.tok.Encode(prompt)
		toks := make([]int64, len(ids))
		for i, id := range ids {
			toks[i] = int64(id)
		}
		res, err := r.client.Completions.New(ctxT(t), openai.CompletionNewParams{
			Model: "tiny", Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: toks},
			MaxTokens: openai.Int(12), Temperature: openai.Float(0),
		}, ignoreEOS)
		if err != nil {
			t.Fatal(err)
		}
		if res.Choices[0].Text != want {
			t.Errorf("text %q, want %q", res.Choices[0].Text, want)
		}
	})

	t.Run("logprobs", func(t *testing.T) {
		res, err := r.client.Completions.New(ctxT(t), openai.CompletionNewParams{
			Model: "tiny", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
			MaxTokens: openai.Int(6), Temperature: openai.Float(0), Logprobs: openai.Int(3),
		}, ignoreEOS)
		if err != nil {
			t.Fatal(err)
		}
		lp := res.Choices[0].Logprobs
		if len(lp.Tokens) != 6 || len(lp.TokenLogprobs) != 6 || len(lp.TopLogprobs) != 6 || len(lp.TextOffset) != 6 {
			t.Fatalf("logprobs %+v", lp)
		}
		if joined := strings.Join(lp.Tokens, ""); !strings.HasPrefix(wantTokens, joined) {
			t.Errorf("tokens %q do not spell the text %q", lp.Tokens, wantTokens)
		}
		for i, top := range lp.TopLogprobs {
			if lp.TokenLogprobs[i] > 0 || len(top) < 1 || len(top) > 4 {
				t.Errorf("token %d: logprob %g, top %v", i, lp.TokenLogprobs[i], top)
			}
			// Greedy: the chosen token is the most likely one.
			for _, v := range top {
				if v > lp.TokenLogprobs[i]+1e-9 {
					t.Errorf("token %d: an alternative (%g) beats the greedy choice (%g)", i, v, lp.TokenLogprobs[i])
				}
			}
		}
		if lp.TextOffset[0] != 0 {
			t.Errorf("text_offset %v", lp.TextOffset)
		}

		chat, err := r.client.Chat.Completions.New(ctxT(t), openai.ChatCompletionNewParams{
			Model: "tiny", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(user)},
			MaxTokens: openai.Int(5), Temperature: openai.Float(0), Logprobs: openai.Bool(true), TopLogprobs: openai.Int(3),
		}, ignoreEOS)
		if err != nil {
			t.Fatal(err)
		}
		content := chat.Choices[0].Logprobs.Content
		if len(content) != 5 {
			t.Fatalf("chat logprobs: %d entries, want 5", len(content))
		}
		for i, c := range content {
			if len(c.TopLogprobs) != 3 || c.Logprob > 0 || string(bytesOf(c.Bytes)) != c.Token {
				t.Errorf("entry %d: %+v", i, c)
			}
		}
	})

	t.Run("stop", func(t *testing.T) {
		// Stop at a string from the middle of the greedy output.
		stop := want[len(want)/2:][:2]
		cut := want[:strings.Index(want, stop)]
		res, err := r.client.Completions.New(ctxT(t), openai.CompletionNewParams{
			Model: "tiny", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
			MaxTokens: openai.Int(12), Temperature: openai.Float(0),
			Stop: openai.CompletionNewParamsStopUnion{OfStringArray: []string{"\x00never", stop}},
		}, ignoreEOS)
		if err != nil {
			t.Fatal(err)
		}
		if c := res.Choices[0]; c.Text != cut || c.FinishReason != "stop" {
			t.Errorf("text %q finish %q, want %q stop (stop string %q)", c.Text, c.FinishReason, cut, stop)
		}
	})

	t.Run("n and seed", func(t *testing.T) {
		params := openai.CompletionNewParams{
			Model: "tiny", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
			MaxTokens: openai.Int(16), Temperature: openai.Float(1), N: openai.Int(3), Seed: openai.Int(42),
		}
		texts := func() []string {
			res, err := r.client.Completions.New(ctxT(t), params, ignoreEOS)
			if err != nil {
				t.Fatal(err)
			}
			out := make([]string, len(res.Choices))
			for i, c := range res.Choices {
				if c.Index != int64(i) {
					t.Errorf("choice %d has index %d", i, c.Index)
				}
				out[i] = c.Text
			}
			if want := int64(16 * len(res.Choices)); res.Usage.CompletionTokens != want {
				t.Errorf("usage %+v, want %d completion tokens", res.Usage, want)
			}
			return out
		}
		a, b := texts(), texts()
		if len(a) != 3 || strings.Join(a, "|") != strings.Join(b, "|") {
			t.Fatalf("same seed, different texts:\n%q\n%q", a, b)
		}
		if a[0] == a[1] && a[1] == a[2] {
			t.Errorf("seeds 42, 43, 44 gave three identical texts %q", a[0])
		}
		// Choice i uses seed+i: choice 1 of seed 42 is choice 0 of seed 43.
		params.N, params.Seed = openai.Int(1), openai.Int(43)
		if c := texts(); c[0] != a[1] {
			t.Errorf("seed 43 gave %q, want choice 1 of seed 42 %q", c[0], a[1])
		}
	})

	t.Run("logit bias", func(t *testing.T) {
		// +100 on one token makes greedy decoding pick it every time; the
		// engine run with the same bias directly gives the same text.
		forced := r.tok.Encode("!")[0]
		bias := []sample.TokenBias{{ID: forced, Bias: 100}}
		want, _ := r.direct(t, actors.Request{Prompt: chatIDs, MaxTokens: 10, IgnoreEOS: true, SkipSpecialTokens: true, Params: sample.Params{LogitBias: bias}})
		params := chatParams
		params.LogitBias = map[string]int64{strconv.Itoa(int(forced)): 100}
		res, err := r.client.Chat.Completions.New(ctxT(t), params, ignoreEOS)
		if err != nil {
			t.Fatal(err)
		}
		got := res.Choices[0].Message.Content
		if got != want || got == wantChat || got != strings.Repeat(r.tok.Decode([]int32{forced}), 10) {
			t.Errorf("biased text %q; engine gave %q, unbiased %q", got, want, wantChat)
		}
	})

	t.Run("errors", func(t *testing.T) {
		tests := []struct {
			name          string
			params        openai.ChatCompletionNewParams
			opts          []option.RequestOption
			status        int
			param, code   string
			messageSubstr string
		}{
			{"unknown model", openai.ChatCompletionNewParams{Model: "gpt-4", Messages: chatParams.Messages},
				nil, 404, "model", "model_not_found", "gpt-4"},
			{"bad temperature", openai.ChatCompletionNewParams{Model: "tiny", Messages: chatParams.Messages, Temperature: openai.Float(-1)},
				nil, 400, "temperature", "", "temperature"},
			{"huge max_tokens", openai.ChatCompletionNewParams{Model: "tiny", Messages: chatParams.Messages, MaxTokens: openai.Int(1 << 40)},
				nil, 400, "max_tokens", "context_length_exceeded", "context length"},
			{"unknown field", openai.ChatCompletionNewParams{Model: "tiny", Messages: chatParams.Messages},
				[]option.RequestOption{option.WithJSONSet("bogus_knob", 1)}, 400, "bogus_knob", "", "bogus_knob"},
			{"logit_bias outside the vocabulary", openai.ChatCompletionNewParams{Model: "tiny", Messages: chatParams.Messages, LogitBias: map[string]int64{"99999999": 5}},
				nil, 400, "logit_bias", "", "outside the vocabulary"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				_, err := r.client.Chat.Completions.New(ctxT(t), tt.params, tt.opts...)
				var apiErr *openai.Error
				if !errors.As(err, &apiErr) {
					t.Fatalf("err %v, want *openai.Error", err)
				}
				if apiErr.StatusCode != tt.status || apiErr.Param != tt.param || apiErr.Code != tt.code ||
					!strings.Contains(apiErr.Message, tt.messageSubstr) {
					t.Errorf("status %d param %q code %q message %q; want %d %q %q ~%q", apiErr.StatusCode,
						apiErr.Param, apiErr.Code, apiErr.Message, tt.status, tt.param, tt.code, tt.messageSubstr)
				}
				if apiErr.Type == "" {
					t.Error("no error type")
				}
			})
		}
	})

	t.Run("models", func(t *testing.T) {
		page, err := r.client.Models.List(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Data) != 1 || page.Data[0].ID != "tiny" {
			t.Fatalf("models %+v", page.Data)
		}
		if got := page.Data[0].JSON.ExtraFields["max_model_len"].Raw(); got != "1024" {
			t.Errorf("max_model_len %q", got)
		}
		m, err := r.client.Models.Get(ctxT(t), "tiny")
		if err != nil || m.ID != "tiny" {
			t.Errorf("get: %+v, %v", m, err)
		}
	})
}

func bytesOf(b []int64) []byte {
	out := make([]byte, len(b))
	for i, v := range b {
		out[i] = byte(v)
	}
	return out
}

// TestOpenAIClientTP2 runs completions and a chat stream on two CPU ranks.
func TestOpenAIClientTP2(t *testing.T) {
	r := startReal(t, 2)
	prompt := "Tensor parallel"
	want, _ := r.direct(t, actors.Request{Prompt: r.tok.Encode(prompt), MaxTokens: 8, IgnoreEOS: true, SkipSpecialTokens: true})
	res, err := r.client.Completions.New(ctxT(t), openai.CompletionNewParams{
		Model: "tiny", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
		MaxTokens: openai.Int(8), Temperature: openai.Float(0),
	}, ignoreEOS)
	if err != nil {
		t.Fatal(err)
	}
	if res.Choices[0].Text != want || res.Usage.CompletionTokens != 8 {
		t.Errorf("text %q usage %+v, want %q", res.Choices[0].Text, res.Usage, want)
	}
	stream := r.client.Chat.Completions.NewStreaming(ctxT(t), openai.ChatCompletionNewParams{
		Model: "tiny", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		MaxTokens: openai.Int(6), Temperature: openai.Float(0), N: openai.Int(2),
	}, ignoreEOS)
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Choices) != 2 || acc.Choices[0].Message.Content != acc.Choices[1].Message.Content {
		t.Errorf("greedy n=2 choices differ: %+v", acc.Choices)
	}
	if info := r.eng.Info(); info.TP != 2 {
		t.Errorf("info %+v", info)
	}
}

// TestDisconnectAbortsRealEngine: a client that drops a long stream frees
// the engine (Pending returns to 0) well before the request would end.
func TestDisconnectAbortsRealEngine(t *testing.T) {
	r := startReal(t, 1)
	body := `{"model":"tiny","prompt":"Hello","max_tokens":1000,"ignore_eos":true,"stream":true}`
	req, err := http.NewRequest(http.MethodPost, r.url+"/v1/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	res, err := testClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if _, err := io.ReadAtLeast(res.Body, buf, 1); err != nil {
		t.Fatal(err)
	}
	if r.eng.Pending() != 1 {
		t.Fatalf("pending %d during the stream, want 1", r.eng.Pending())
	}
	res.Body.Close() // drops the connection mid-stream
	waitFor(t, 20*time.Second, func() bool { return r.eng.Pending() == 0 }, "the engine request was not aborted")
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, cond func() bool, msg string) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatal(msg)
		case <-tick.C:
		}
	}
}
