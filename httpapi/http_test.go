package httpapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"cohort/actors"
	"cohort/actors/planner"
	"cohort/model/sample"
)

func do(t testing.TB, method, url, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := testClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, b
}

type envelope struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// checkEnvelope asserts an OpenAI error body and returns it.
func checkEnvelope(t testing.TB, body []byte) envelope {
	t.Helper()
	var raw map[string]map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatalf("error body %q is not an envelope: %v", body, err)
	}
	if len(raw) != 1 || len(raw["error"]) != 4 {
		t.Fatalf("error body %s: want exactly {\"error\":{message,type,param,code}}", body)
	}
	var e envelope
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatal(err)
	}
	if e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("error body %s lacks message or type", body)
	}
	return e
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// sseEvents splits an SSE body into its data payloads, checking the framing.
func sseEvents(t *testing.T, body []byte) []string {
	t.Helper()
	if !bytes.HasSuffix(body, []byte("data: [DONE]\n\n")) {
		t.Fatalf("stream does not end with data: [DONE]: %q", body)
	}
	parts := strings.Split(strings.TrimSuffix(string(body), "\n\n"), "\n\n")
	out := make([]string, len(parts))
	for i, p := range parts {
		d, ok := strings.CutPrefix(p, "data: ")
		if !ok || strings.Contains(d, "\n") {
			t.Fatalf("event %d is not one data line: %q", i, p)
		}
		out[i] = d
	}
	return out
}

type chunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Index        int             `json:"index"`
		Text         *string         `json:"text"`
		Delta        json.RawMessage `json:"delta"`
		Logprobs     json.RawMessage `json:"logprobs"`
		FinishReason *string         `json:"finish_reason"`
	} `json:"choices"`
	Usage json.RawMessage `json:"usage"`
}

func TestSSEFraming(t *testing.T) {
	f := newFakeEngine()
	url, s := startFake(t, f, nil)
	hi := len(s.tok.Encode("hi"))
	chatHi := len(s.tok.Encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"))
	usage := func(p, c int) string {
		return fmt.Sprintf(`usage={"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":0}}`, p, c, p+c)
	}
	tests := []struct {
		name, path, body string
		want             []string // per event: a compact description
	}{
		{"chat", "/v1/chat/completions",
			`{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"stream":true}`,
			[]string{`0 delta={"role":"assistant","content":""} fin=null`, `0 delta={"content":"a"} fin=null`,
				`0 delta={"content":"a"} fin=null`, `0 delta={} fin=length`, "[DONE]"}},
		{"chat usage", "/v1/chat/completions",
			`{"model":"fake","messages":[{"role":"user","content":"hi"}],"max_tokens":1,"stream":true,"stream_options":{"include_usage":true}}`,
			[]string{`0 delta={"role":"assistant","content":""} fin=null usage=null`, `0 delta={"content":"a"} fin=null usage=null`,
				`0 delta={} fin=length usage=null`, usage(chatHi, 1), "[DONE]"}},
		{"completion", "/v1/completions", `{"prompt":"hi","max_tokens":2,"stream":true}`,
			[]string{`0 text="a" fin=null`, `0 text="a" fin=null`, `0 text="" fin=length`, "[DONE]"}},
		{"completion n=2 echo usage", "/v1/completions",
			`{"prompt":"hi","max_tokens":1,"n":2,"echo":true,"stream":true,"stream_options":{"include_usage":true}}`,
			[]string{`0 text="hi" fin=null usage=null`, `1 text="hi" fin=null usage=null`, "*", "*", "*", "*",
				usage(hi, 2), "[DONE]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, body := do(t, http.MethodPost, url+tt.path, tt.body)
			if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
				t.Fatalf("status %d type %q: %s", res.StatusCode, res.Header.Get("Content-Type"), body)
			}
			events := sseEvents(t, body)
			var got []string
			id := ""
			for _, e := range events {
				if e == "[DONE]" {
					got = append(got, e)
					continue
				}
				var c chunk
				if err := json.Unmarshal([]byte(e), &c); err != nil {
					t.Fatalf("chunk %q: %v", e, err)
				}
				if id == "" {
					id = c.ID
				}
				if c.ID != id || c.Model != "fake" {
					t.Errorf("chunk id %q model %q, want %q fake", c.ID, c.Model, id)
				}
				if strings.Contains(tt.path, "chat") != (c.Object == "chat.completion.chunk") {
					t.Errorf("object %q", c.Object)
				}
				var desc string
				if len(c.Choices) == 0 {
					desc = "usage=" + string(c.Usage)
				} else {
					ch := c.Choices[0]
					fin := "null"
					if ch.FinishReason != nil {
						fin = *ch.FinishReason
					}
					if ch.Text != nil {
						desc = fmt.Sprintf("%d text=%q fin=%s", ch.Index, *ch.Text, fin)
					} else {
						desc = fmt.Sprintf("%d delta=%s fin=%s", ch.Index, ch.Delta, fin)
					}
					if c.Usage != nil {
						desc += " usage=" + string(c.Usage)
					}
				}
				got = append(got, desc)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			for i := range got {
				if tt.want[i] != "*" && got[i] != tt.want[i] {
					t.Errorf("event %d: %s, want %s", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestStreamEngineErrorEvent(t *testing.T) {
	f := newFakeEngine()
	f.script = func(r actors.Request) []actors.Event {
		return []actors.Event{{Token: 97, Text: "a", HasToken: true},
			{Finish: "error", Err: errors.New("actors: rank 1 failed: comm aborted")}}
	}
	url, _ := startFake(t, f, nil)
	_, body := do(t, http.MethodPost, url+"/v1/chat/completions",
		`{"messages":[{"role":"user","content":"hi"}],"stream":true}`)
	events := sseEvents(t, body)
	if len(events) != 4 {
		t.Fatalf("events %q", events)
	}
	e := checkEnvelope(t, []byte(events[2]))
	if e.Error.Type != "server_error" || !strings.Contains(e.Error.Message, "rank 1 failed") {
		t.Errorf("error event %s", events[2])
	}

	// Non-stream: the same failure is a 500 envelope; a planner rejection a 400.
	res, body := do(t, http.MethodPost, url+"/v1/completions", `{"prompt":"hi"}`)
	if res.StatusCode != 500 {
		t.Errorf("status %d: %s", res.StatusCode, body)
	}
	checkEnvelope(t, body)
	f.set(func(f *fakeEngine) {
		f.script = func(r actors.Request) []actors.Event {
			return []actors.Event{{Finish: "error", Err: &planner.Rejection{Reason: planner.ReasonCapacity, Msg: "does not fit"}}}
		}
	})
	res, body = do(t, http.MethodPost, url+"/v1/completions", `{"prompt":"hi"}`)
	if res.StatusCode != 400 || !strings.Contains(string(body), "does not fit") {
		t.Errorf("status %d: %s", res.StatusCode, body)
	}
	f.set(func(f *fakeEngine) {
		f.script = func(r actors.Request) []actors.Event {
			return []actors.Event{{Finish: "error", Err: fmt.Errorf("%w: group rebuilding", actors.ErrNotReady)}}
		}
	})
	res, body = do(t, http.MethodPost, url+"/v1/completions", `{"prompt":"hi"}`)
	if res.StatusCode != 503 || res.Header.Get("Retry-After") == "" {
		t.Errorf("status %d retry-after %q: %s", res.StatusCode, res.Header.Get("Retry-After"), body)
	}
}

func TestStatusCodes(t *testing.T) {
	f := newFakeEngine()
	url, _ := startFake(t, f, func(o *Options) { o.MaxBodyBytes = 4096 })
	completion := `{"prompt":"hi","max_tokens":1}`

	t.Run("413", func(t *testing.T) {
		big := `{"prompt":"` + strings.Repeat("x", 8000) + `"}`
		res, body := do(t, http.MethodPost, url+"/v1/completions", big)
		if res.StatusCode != 413 {
			t.Fatalf("status %d: %s", res.StatusCode, body)
		}
		if e := checkEnvelope(t, body); deref(e.Error.Code) != "request_too_large" {
			t.Errorf("code %v", e.Error.Code)
		}
	})
	t.Run("413 default limit", func(t *testing.T) {
		url, _ := startFake(t, newFakeEngine(), nil)
		big := `{"prompt":"` + strings.Repeat("x", 1<<20) + `"}`
		res, body := do(t, http.MethodPost, url+"/v1/completions", big)
		if res.StatusCode != 413 {
			t.Fatalf("status %d: %.200s", res.StatusCode, body)
		}
		checkEnvelope(t, body)
	})
	t.Run("429", func(t *testing.T) {
		f.set(func(f *fakeEngine) {
			f.submitErr = fmt.Errorf("%w: 64 requests pending (limit 64)", actors.ErrOverloaded)
		})
		defer f.set(func(f *fakeEngine) { f.submitErr = nil })
		res, body := do(t, http.MethodPost, url+"/v1/completions", completion)
		if res.StatusCode != 429 || res.Header.Get("Retry-After") != "1" {
			t.Fatalf("status %d retry-after %q: %s", res.StatusCode, res.Header.Get("Retry-After"), body)
		}
		checkEnvelope(t, body)
		_, m := do(t, http.MethodGet, url+"/metrics", "")
		if !strings.Contains(string(m), `cohort:requests_rejected_total{model_name="fake",reason="overloaded"} 1`) {
			t.Errorf("metrics lack the rejection:\n%s", m)
		}
	})
	t.Run("503", func(t *testing.T) {
		f.setNotReady("rank 1 failed; rebuilding")
		defer f.setNotReady("")
		for _, path := range []string{"/ready", "/v1/completions", "/v1/chat/completions"} {
			method := http.MethodPost
			if path == "/ready" {
				method = http.MethodGet
			}
			res, body := do(t, method, url+path, completion)
			if res.StatusCode != 503 || res.Header.Get("Retry-After") == "" {
				t.Fatalf("%s: status %d retry-after %q", path, res.StatusCode, res.Header.Get("Retry-After"))
			}
			if e := checkEnvelope(t, body); !strings.Contains(e.Error.Message, "rank 1 failed") {
				t.Errorf("%s: message %q lacks the reason", path, e.Error.Message)
			}
		}
		if res, body := do(t, http.MethodGet, url+"/health", ""); res.StatusCode != 200 {
			t.Errorf("/health %d %s while not ready", res.StatusCode, body)
		}
	})
	t.Run("ready and health", func(t *testing.T) {
		for _, path := range []string{"/ready", "/health"} {
			if res, body := do(t, http.MethodGet, url+path, ""); res.StatusCode != 200 {
				t.Errorf("%s: %d %s", path, res.StatusCode, body)
			}
		}
	})
	t.Run("404 and 405", func(t *testing.T) {
		res, body := do(t, http.MethodGet, url+"/v1/nope", "")
		if res.StatusCode != 404 || deref(checkEnvelope(t, body).Error.Code) != "unknown_url" {
			t.Errorf("unknown route: %d %s", res.StatusCode, body)
		}
		res, body = do(t, http.MethodGet, url+"/v1/completions", "")
		if res.StatusCode != 405 || res.Header.Get("Allow") != "POST" {
			t.Errorf("GET completions: %d %s", res.StatusCode, body)
		}
		checkEnvelope(t, body)
		res, body = do(t, http.MethodPost, url+"/v1/completions", `{"model":"other","prompt":"x"}`)
		if e := checkEnvelope(t, body); res.StatusCode != 404 || deref(e.Error.Code) != "model_not_found" || deref(e.Error.Param) != "model" {
			t.Errorf("unknown model: %d %s", res.StatusCode, body)
		}
		res, body = do(t, http.MethodGet, url+"/v1/models/other", "")
		if res.StatusCode != 404 {
			t.Errorf("unknown model id: %d %s", res.StatusCode, body)
		}
	})
}

func TestModelsAndMetrics(t *testing.T) {
	f := newFakeEngine()
	url, s := startFake(t, f, nil)
	_, body := do(t, http.MethodGet, url+"/v1/models", "")
	var models struct {
		Object string `json:"object"`
		Data   []struct {
			ID          string `json:"id"`
			Object      string `json:"object"`
			MaxModelLen int    `json:"max_model_len"`
			KVPages     int    `json:"kv_pages"`
			PageSize    int    `json:"page_size"`
			Slots       int    `json:"slots"`
			TP          int    `json:"tp"`
			Scratch     int64  `json:"scratch_bytes"`
			StepTokens  int    `json:"max_step_tokens"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &models); err != nil {
		t.Fatal(err)
	}
	if len(models.Data) != 1 {
		t.Fatalf("models %s", body)
	}
	m := models.Data[0]
	if models.Object != "list" || m.ID != "fake" || m.Object != "model" || m.MaxModelLen != 1024 || m.KVPages != 100 ||
		m.PageSize != 16 || m.Slots != 8 || m.TP != 1 || m.Scratch != 6<<20 || m.StepTokens != 2111 {
		t.Errorf("models %s", body)
	}

	do(t, http.MethodPost, url+"/v1/completions", `{"prompt":"hi","max_tokens":3}`)
	res, body := do(t, http.MethodGet, url+"/metrics", "")
	if !strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Errorf("content type %q", res.Header.Get("Content-Type"))
	}
	for _, want := range []string{
		`vllm:num_requests_running{model_name="fake"} 3`,
		`vllm:num_requests_waiting{model_name="fake"} 2`,
		`vllm:kv_cache_usage_perc{model_name="fake"} 0.25`,
		`vllm:num_preemptions_total{model_name="fake"} 7`,
		`vllm:request_success_total{finished_reason="length",model_name="fake"} 1`,
		`vllm:generation_tokens_total{model_name="fake"} 3`,
		fmt.Sprintf(`vllm:prompt_tokens_total{model_name="fake"} %d`, len(s.tok.Encode("hi"))),
		`cohort:ready{model_name="fake"} 1`,
		`vllm:e2e_request_latency_seconds_count{model_name="fake"} 1`,
	} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestMetricsNegotiation: /metrics answers each scraper in the format its
// Accept header asks for, with that format's Content-Type.
func TestMetricsNegotiation(t *testing.T) {
	url, _ := startFake(t, newFakeEngine(), nil)
	tests := []struct {
		accept, contentType, line, end string
	}{
		{"", "text/plain; version=0.0.4; charset=utf-8", `cohort:ready{model_name="fake"} 1`, ""},
		{"text/plain", "text/plain; version=0.0.4; charset=utf-8", `cohort:ready{model_name="fake"} 1`, ""},
		{"application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
			"application/openmetrics-text; version=1.0.0; charset=utf-8", `cohort:ready{model_name="fake"} 1.0`, "# EOF\n"},
	}
	for _, tt := range tests {
		req, err := http.NewRequest(http.MethodGet, url+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		if tt.accept != "" {
			req.Header.Set("Accept", tt.accept)
		}
		res, err := testClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != tt.contentType {
			t.Errorf("Accept %q: status %d, Content-Type %q, want %q", tt.accept, res.StatusCode, res.Header.Get("Content-Type"), tt.contentType)
		}
		if !strings.Contains(string(body), tt.line+"\n") || !strings.HasSuffix(string(body), tt.end) {
			t.Errorf("Accept %q: body lacks %q or does not end in %q", tt.accept, tt.line, tt.end)
		}
	}
}

func TestTokenize(t *testing.T) {
	f := newFakeEngine()
	url, s := startFake(t, f, nil)
	tok := s.tok
	ids := tok.Encode("Hello world")
	rendered := "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
	tests := []struct {
		name, path, body string
		status           int
		want             string
	}{
		{"prompt", "/tokenize", `{"prompt":"Hello world"}`, 200,
			fmt.Sprintf(`{"tokens":%s,"count":%d,"max_model_len":1024}`, jsonInts(ids), len(ids))},
		{"messages", "/tokenize", `{"model":"fake","messages":[{"role":"user","content":"Hi"}]}`, 200,
			fmt.Sprintf(`{"tokens":%s,"count":%d,"max_model_len":1024}`, jsonInts(tok.Encode(rendered)), len(tok.Encode(rendered)))},
		{"detokenize", "/detokenize", `{"tokens":` + jsonInts(ids) + `}`, 200, `{"prompt":"Hello world"}`},
		{"both", "/tokenize", `{"prompt":"a","messages":[{"role":"user","content":"Hi"}]}`, 400, ""},
		{"neither", "/tokenize", `{}`, 400, ""},
		{"bad token", "/detokenize", `{"tokens":[1,99999]}`, 400, ""},
		{"negative token", "/detokenize", `{"tokens":[-1]}`, 400, ""},
		{"wrong model", "/detokenize", `{"model":"x","tokens":[1]}`, 404, ""},
		{"unknown field", "/tokenize", `{"prompt":"a","extra":1}`, 400, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, body := do(t, http.MethodPost, url+tt.path, tt.body)
			if res.StatusCode != tt.status {
				t.Fatalf("status %d: %s", res.StatusCode, body)
			}
			if tt.status != 200 {
				checkEnvelope(t, body)
				return
			}
			if string(body) != tt.want {
				t.Errorf("body %s, want %s", body, tt.want)
			}
		})
	}
}

func jsonInts(ids []int32) string {
	b, _ := json.Marshal(ids)
	return string(b)
}

// TestTranslation checks the engine requests a body turns into.
func TestTranslation(t *testing.T) {
	tok := synthTokenizer(t)
	hi := tok.Encode("hi")
	tests := []struct {
		name, path, body string
		check            func(t *testing.T, reqs []actors.Request)
	}{
		{"defaults", "/v1/completions", `{"prompt":"hi"}`, func(t *testing.T, reqs []actors.Request) {
			r := reqs[0]
			if len(reqs) != 1 || !slices.Equal(r.Prompt, hi) || r.MaxTokens != 1024-len(hi) {
				t.Errorf("request %+v", r)
			}
			if p := r.Params; p.Temperature != 1 || p.TopP != 1 || p.RepetitionPenalty != 1 || p.TopK != 0 {
				t.Errorf("params %+v", p)
			}
			if !r.SkipSpecialTokens || r.IncludeStopStr {
				t.Errorf("skip_special_tokens %v include_stop_str_in_output %v, want vLLM's defaults true, false",
					r.SkipSpecialTokens, r.IncludeStopStr)
			}
		}},
		{"output flags", "/v1/completions", `{"prompt":"hi","skip_special_tokens":false,"include_stop_str_in_output":true,
			"spaces_between_special_tokens":false}`, func(t *testing.T, reqs []actors.Request) {
			if r := reqs[0]; r.SkipSpecialTokens || !r.IncludeStopStr {
				t.Errorf("request %+v", r)
			}
		}},
		{"sampling", "/v1/completions", `{"prompt":"hi","max_tokens":5,"temperature":0.5,"top_p":0.9,"top_k":40,"min_p":0.1,
			"seed":7,"presence_penalty":0.5,"frequency_penalty":-0.5,"repetition_penalty":1.2,"stop":"x",
			"stop_token_ids":[3,4],"ignore_eos":true,"logprobs":2,"user":"u","best_of":1,
			"logit_bias":{"300":-100,"7":2.5,"12":100},"min_tokens":3}`, func(t *testing.T, reqs []actors.Request) {
			r := reqs[0]
			want := sample.Params{Temperature: 0.5, TopP: 0.9, TopK: 40, MinP: 0.1, Seed: 7, PresencePenalty: 0.5,
				FrequencyPenalty: -0.5, RepetitionPenalty: 1.2, MinTokens: 3,
				StopIDs:   []int32{3, 4}, // the checked form bans the stop ids until min_tokens (the fake has no EOS)
				LogitBias: []sample.TokenBias{{ID: 7, Bias: 2.5}, {ID: 12, Bias: 100}, {ID: 300, Bias: -100}}}
			if !reflect.DeepEqual(r.Params, want) || r.MaxTokens != 5 || !slices.Equal(r.Stop, []string{"x"}) ||
				!slices.Equal(r.StopTokenIDs, []int32{3, 4}) || !r.IgnoreEOS || r.TopLogprobs != 2 {
				t.Errorf("request %+v", r)
			}
		}},
		{"n seeds", "/v1/completions", `{"prompt":["hi","hi there"],"n":3,"seed":10,"max_tokens":2}`, func(t *testing.T, reqs []actors.Request) {
			if len(reqs) != 6 {
				t.Fatalf("%d requests", len(reqs))
			}
			for i, r := range reqs {
				if r.Params.Seed != uint64(10+i%3) {
					t.Errorf("request %d seed %d", i, r.Params.Seed)
				}
			}
			if !slices.Equal(reqs[3].Prompt, tok.Encode("hi there")) {
				t.Errorf("second prompt %v", reqs[3].Prompt)
			}
		}},
		{"unseeded n differ", "/v1/completions", `{"prompt":"hi","n":2,"max_tokens":1}`, func(t *testing.T, reqs []actors.Request) {
			if reqs[0].Params.Seed == reqs[1].Params.Seed {
				t.Errorf("unseeded choices share seed %d", reqs[0].Params.Seed)
			}
		}},
		{"token prompts", "/v1/completions", `{"prompt":[[1,2],[3]],"max_tokens":1}`, func(t *testing.T, reqs []actors.Request) {
			if len(reqs) != 2 || !slices.Equal(reqs[0].Prompt, []int32{1, 2}) || !slices.Equal(reqs[1].Prompt, []int32{3}) {
				t.Errorf("requests %+v", reqs)
			}
		}},
		{"chat", "/v1/chat/completions", `{"messages":[{"role":"developer","content":"S"},
			{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
			{"role":"assistant","content":null},{"role":"user","content":"c","name":"bob"}],
			"max_completion_tokens":7,"max_tokens":99,"stop":["u","v"],"logprobs":true,"top_logprobs":4,
			"tool_choice":"none","response_format":{"type":"text"},"store":false,"metadata":{"k":"v"},"parallel_tool_calls":true}`,
			func(t *testing.T, reqs []actors.Request) {
				want := "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\na\nb<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n" +
					"<|im_start|>user\nc<|im_end|>\n<|im_start|>assistant\n"
				r := reqs[0]
				if got := tok.Decode(r.Prompt); got != want {
					t.Errorf("prompt %q, want %q", got, want)
				}
				if r.MaxTokens != 7 || r.TopLogprobs != 4 || !slices.Equal(r.Stop, []string{"u", "v"}) {
					t.Errorf("request %+v", r)
				}
			}},
		{"chat template kwargs", "/v1/chat/completions",
			`{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"enable_thinking":false},"max_tokens":1}`,
			func(t *testing.T, reqs []actors.Request) {
				if len(reqs) != 1 {
					t.Errorf("requests %+v", reqs)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeEngine()
			url, _ := startFake(t, f, nil)
			res, body := do(t, http.MethodPost, url+tt.path, tt.body)
			if res.StatusCode != 200 {
				t.Fatalf("status %d: %s", res.StatusCode, body)
			}
			tt.check(t, f.requests())
		})
	}
}

// TestSamplingDefaults: generation_config.json's defaults (Options.Sampling)
// fill the fields a request leaves unset, and a request's own values win.
func TestSamplingDefaults(t *testing.T) {
	temp, topP, minP, rep, topK := 0.6, 0.95, 0.05, 1.1, 20
	defaults := SamplingDefaults{Temperature: &temp, TopP: &topP, TopK: &topK, MinP: &minP, RepetitionPenalty: &rep}
	tests := []struct {
		name, body string
		want       sample.Params
	}{
		{"unset", `{"prompt":"hi","max_tokens":1}`,
			sample.Params{Temperature: 0.6, TopP: 0.95, TopK: 20, MinP: 0.05, RepetitionPenalty: 1.1}},
		{"overridden", `{"prompt":"hi","max_tokens":1,"temperature":0,"top_p":1,"top_k":-1,"min_p":0,"repetition_penalty":1}`,
			sample.Params{Temperature: 0, TopP: 1, TopK: -1, MinP: 0, RepetitionPenalty: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeEngine()
			url, _ := startFake(t, f, func(o *Options) { o.Sampling = defaults })
			if res, body := do(t, http.MethodPost, url+"/v1/completions", tt.body); res.StatusCode != 200 {
				t.Fatalf("status %d: %s", res.StatusCode, body)
			}
			got := f.requests()[0].Params
			got.Seed = 0 // random for unseeded sampling
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("params %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestSamplingDefaultsValidated: out-of-range defaults (a bad
// generation_config.json) fail New instead of failing every request.
func TestSamplingDefaultsValidated(t *testing.T) {
	hot, topK := 500.0, -3
	for _, d := range []SamplingDefaults{{Temperature: &hot}, {TopK: &topK}} {
		_, err := newServer(newFakeEngine(), Options{ModelName: "fake", Tokenizer: synthTokenizer(t), Sampling: d})
		if err == nil || !strings.Contains(err.Error(), "default") {
			t.Errorf("defaults %s: err %v", d, err)
		}
	}
}

// TestValidation: every bad request is a 4xx with the envelope naming the
// parameter; none reaches the engine.
func TestValidation(t *testing.T) {
	f := newFakeEngine()
	f.info.MaxModelLen = 64
	url, _ := startFake(t, f, nil)
	long := strings.Repeat("word ", 100)
	tests := []struct {
		name, path, body string
		status           int
		param, code      string
	}{
		{"empty body", "/v1/completions", ``, 400, "", ""},
		{"not json", "/v1/completions", `hello`, 400, "", ""},
		{"truncated", "/v1/completions", `{"prompt":"a"`, 400, "", ""},
		{"array body", "/v1/completions", `[1]`, 400, "", ""},
		{"trailing data", "/v1/completions", `{"prompt":"a"} {}`, 400, "", ""},
		{"invalid utf8", "/v1/completions", "{\"prompt\":\"a\xff\"}", 400, "", ""},
		{"unknown field", "/v1/completions", `{"prompt":"a","frobnicate":true}`, 400, "frobnicate", ""},
		{"nested unknown field", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a","extra":1}]}`, 400, "extra", ""},
		{"missing prompt", "/v1/completions", `{}`, 400, "prompt", ""},
		{"empty prompt", "/v1/completions", `{"prompt":""}`, 400, "prompt", ""},
		{"empty prompt list", "/v1/completions", `{"prompt":[]}`, 400, "prompt", ""},
		{"mixed prompt list", "/v1/completions", `{"prompt":["a",1]}`, 400, "prompt", ""},
		{"prompt object", "/v1/completions", `{"prompt":{"a":1}}`, 400, "prompt", ""},
		{"token out of vocab", "/v1/completions", `{"prompt":[1,512]}`, 400, "prompt", ""},
		{"negative token", "/v1/completions", `{"prompt":[-1]}`, 400, "prompt", ""},
		{"float token", "/v1/completions", `{"prompt":[1.5]}`, 400, "prompt", ""},
		{"prompt too long", "/v1/completions", `{"prompt":"` + long + `"}`, 400, "prompt", "context_length_exceeded"},
		{"negative max_tokens", "/v1/completions", `{"prompt":"a","max_tokens":-1}`, 400, "max_tokens", ""},
		{"zero max_tokens", "/v1/completions", `{"prompt":"a","max_tokens":0}`, 400, "max_tokens", ""},
		{"huge max_tokens", "/v1/completions", `{"prompt":"a","max_tokens":1000000000000}`, 400, "max_tokens", "context_length_exceeded"},
		{"overflowing max_tokens", "/v1/completions", `{"prompt":"a","max_tokens":1e40}`, 400, "max_tokens", ""},
		{"max_tokens past context", "/v1/completions", `{"prompt":"a","max_tokens":64}`, 400, "max_tokens", "context_length_exceeded"},
		{"string max_tokens", "/v1/completions", `{"prompt":"a","max_tokens":"5"}`, 400, "max_tokens", ""},
		{"temperature", "/v1/completions", `{"prompt":"a","temperature":-0.1}`, 400, "temperature", ""},
		{"top_p zero", "/v1/completions", `{"prompt":"a","top_p":0}`, 400, "top_p", ""},
		{"top_k", "/v1/completions", `{"prompt":"a","top_k":-2}`, 400, "top_k", ""},
		{"min_p", "/v1/completions", `{"prompt":"a","min_p":2}`, 400, "min_p", ""},
		{"presence_penalty", "/v1/completions", `{"prompt":"a","presence_penalty":3}`, 400, "presence_penalty", ""},
		{"frequency_penalty", "/v1/completions", `{"prompt":"a","frequency_penalty":-3}`, 400, "frequency_penalty", ""},
		{"repetition_penalty", "/v1/completions", `{"prompt":"a","repetition_penalty":0}`, 400, "repetition_penalty", ""},
		{"n zero", "/v1/completions", `{"prompt":"a","n":0}`, 400, "n", ""},
		{"n too big", "/v1/completions", `{"prompt":"a","n":17}`, 400, "n", ""},
		{"logprobs", "/v1/completions", `{"prompt":"a","logprobs":21}`, 400, "logprobs", ""},
		{"stop empty", "/v1/completions", `{"prompt":"a","stop":""}`, 400, "stop", ""},
		{"stop type", "/v1/completions", `{"prompt":"a","stop":5}`, 400, "stop", ""},
		{"too many stops", "/v1/completions", `{"prompt":"a","stop":["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17"]}`, 400, "stop", ""},
		{"stop_token_ids", "/v1/completions", `{"prompt":"a","stop_token_ids":[600]}`, 400, "stop_token_ids", ""},
		{"stream_options without stream", "/v1/completions", `{"prompt":"a","stream_options":{"include_usage":true}}`, 400, "stream_options", ""},
		{"max_tokens 0 without echo", "/v1/completions", `{"prompt":"a","max_tokens":0}`, 400, "max_tokens", ""},
		{"logit_bias key", "/v1/completions", `{"prompt":"a","logit_bias":{"x":1}}`, 400, "logit_bias", ""},
		{"logit_bias vocabulary", "/v1/completions", `{"prompt":"a","logit_bias":{"512":1}}`, 400, "logit_bias", ""},
		{"logit_bias negative id", "/v1/completions", `{"prompt":"a","logit_bias":{"-1":1}}`, 400, "logit_bias", ""},
		{"logit_bias range", "/v1/completions", `{"prompt":"a","logit_bias":{"5":101}}`, 400, "logit_bias", ""},
		{"logit_bias type", "/v1/completions", `{"prompt":"a","logit_bias":{"5":"big"}}`, 400, "logit_bias", ""},
		{"logit_bias twice", "/v1/completions", `{"prompt":"a","logit_bias":{"5":1,"05":2}}`, 400, "logit_bias", ""},
		{"logit_bias plus sign", "/v1/completions", `{"prompt":"a","logit_bias":{"+5":1}}`, 400, "logit_bias", ""},
		{"logit_bias space", "/v1/completions", `{"prompt":"a","logit_bias":{" 5":1}}`, 400, "logit_bias", ""},
		{"logit_bias empty key", "/v1/completions", `{"prompt":"a","logit_bias":{"":1}}`, 400, "logit_bias", ""},
		{"skip_special_tokens type", "/v1/completions", `{"prompt":"a","skip_special_tokens":"no"}`, 400, "skip_special_tokens", ""},
		{"suffix", "/v1/completions", `{"prompt":"a","suffix":"z"}`, 400, "suffix", "unsupported_parameter"},
		{"best_of", "/v1/completions", `{"prompt":"a","best_of":3}`, 400, "best_of", ""},
		{"min_tokens negative", "/v1/completions", `{"prompt":"a","min_tokens":-1}`, 400, "min_tokens", ""},
		{"min_tokens above max_tokens", "/v1/completions", `{"prompt":"a","min_tokens":9,"max_tokens":8}`, 400, "min_tokens", ""},
		{"wrong model", "/v1/completions", `{"model":"gpt","prompt":"a"}`, 404, "model", "model_not_found"},
		{"no messages", "/v1/chat/completions", `{"messages":[]}`, 400, "messages", ""},
		{"missing messages", "/v1/chat/completions", `{}`, 400, "messages", ""},
		{"bad role", "/v1/chat/completions", `{"messages":[{"role":"robot","content":"a"}]}`, 400, "messages[0].role", ""},
		{"tool message without tool_call_id", "/v1/chat/completions", `{"messages":[{"role":"tool","content":"a"}]}`, 400, "messages[0].tool_call_id", ""},
		{"function role", "/v1/chat/completions", `{"messages":[{"role":"function","content":"a","name":"f"}]}`, 400, "messages[0].role", ""},
		{"tool_call_id on a user message", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a","tool_call_id":"x"}]}`, 400, "messages[0].tool_call_id", ""},
		{"tool message without content", "/v1/chat/completions", `{"messages":[{"role":"tool","tool_call_id":"x"}]}`, 400, "messages[0].content", ""},
		{"tool_calls on a user message", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a","tool_calls":[]}]}`, 400, "messages[0].tool_calls", ""},
		{"reasoning_content on a user message", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a","reasoning_content":"r"}]}`, 400, "messages[0].reasoning_content", ""},
		{"tool call arguments not JSON", "/v1/chat/completions", `{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{oops"}}]}]}`, 400, "messages[0].tool_calls[0].function.arguments", ""},
		{"tool call arguments an array", "/v1/chat/completions", `{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"[1]"}}]}]}`, 400, "messages[0].tool_calls[0].function.arguments", ""},
		{"tool call type", "/v1/chat/completions", `{"messages":[{"role":"assistant","tool_calls":[{"id":"1","type":"custom","function":{"name":"f"}}]}]}`, 400, "messages[0].tool_calls[0].type", ""},
		{"tools not a list", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"tools":{"type":"function"}}`, 400, "tools", ""},
		{"tool type", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"tools":[{"type":"web_search"}]}`, 400, "tools[0].type", ""},
		{"tool without function", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function"}]}`, 400, "tools[0].function", ""},
		{"tool name", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":"a b"}}]}`, 400, "tools[0].function.name", ""},
		{"tool name empty", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":""}}]}`, 400, "tools[0].function.name", ""},
		{"tool names twice", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}]}`, 400, "tools[1].function.name", ""},
		{"tool unknown field", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":"f"},"extra":1}]}`, 400, "tools[0].extra", ""},
		{"tool parameters not an object", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":"f","parameters":[1]}}]}`, 400, "tools[0].function.parameters", ""},
		{"tool properties not an object", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":3}}}]}`, 400, "tools[0].function.parameters", ""},
		{"tool_choice unknown", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"any"}`, 400, "tool_choice", ""},
		{"tool_choice names a missing tool", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`, 400, "tool_choice", ""},
		{"tool_choice object type", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"allowed_tools"}}`, 400, "tool_choice", ""},
		{"tool_choice required without tools", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"tools":[],"tool_choice":"required"}`, 400, "tool_choice", ""},
		{"tool_choice auto without tools", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"tool_choice":"auto"}`, 400, "tool_choice", ""},
		{"functions", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"functions":[]}`, 400, "functions", "unsupported_parameter"},
		{"null user content", "/v1/chat/completions", `{"messages":[{"role":"user","content":null}]}`, 400, "messages[0].content", ""},
		{"image part", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, "messages[0].content[0].type", ""},
		{"part without text", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"text"}]}]}`, 400, "messages[0].content[0].text", ""},
		{"content number", "/v1/chat/completions", `{"messages":[{"role":"user","content":5}]}`, 400, "messages[0].content", ""},
		{"tool_calls without a function", "/v1/chat/completions", `{"messages":[{"role":"assistant","content":"a","tool_calls":[{"id":"1"}]}]}`, 400, "messages[0].tool_calls[0].function.name", ""},
		{"response_format type", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"response_format":{"type":"xml"}}`, 400, "response_format.type", ""},
		{"json_schema without schema", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"response_format":{"type":"json_schema","json_schema":{"name":"x"}}}`, 400, "response_format.json_schema.schema", ""},
		{"structured_outputs two", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"structured_outputs":{"regex":"a","choice":["a"]}}`, 400, "structured_outputs", ""},
		{"structured_outputs unknown", "/v1/completions", `{"prompt":"a","structured_outputs":{"regexp":"a"}}`, 400, "structured_outputs", ""},
		{"structured_outputs and response_format", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"structured_outputs":{"regex":"a"},"response_format":{"type":"json_object"}}`, 400, "structured_outputs", ""},
		{"structural_tag", "/v1/completions", `{"prompt":"a","structured_outputs":{"structural_tag":{}}}`, 400, "structured_outputs.structural_tag", "unsupported_parameter"},
		{"top_logprobs without logprobs", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"top_logprobs":2}`, 400, "top_logprobs", ""},
		{"top_logprobs range", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"logprobs":true,"top_logprobs":21}`, 400, "top_logprobs", ""},
		{"max_completion_tokens", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"max_completion_tokens":-5}`, 400, "max_completion_tokens", ""},
		{"chat too long", "/v1/chat/completions", `{"messages":[{"role":"user","content":"` + long + `"}]}`, 400, "messages", "context_length_exceeded"},
		{"reserved kwarg", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"chat_template_kwargs":{"messages":1}}`, 400, "messages", ""},
		{"audio modality", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"modalities":["audio"]}`, 400, "modalities", ""},
		{"type error nested", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"stream_options":{"include_usage":"yes"}}`, 400, "stream_options.include_usage", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, body := do(t, http.MethodPost, url+tt.path, tt.body)
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tt.status, body)
			}
			e := checkEnvelope(t, body)
			if deref(e.Error.Param) != tt.param || deref(e.Error.Code) != tt.code {
				t.Errorf("param %q code %q, want %q %q: %s", deref(e.Error.Param), deref(e.Error.Code), tt.param, tt.code, body)
			}
		})
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("%d invalid requests reached the engine", n)
	}
}

// TestClientDisconnectCancels: a client dropping a stream makes the edge
// cancel every engine stream of the request, within a bounded time.
func TestClientDisconnectCancels(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			f := newFakeEngine()
			f.endless = true
			f.script = func(actors.Request) []actors.Event { return nil }
			f.submits = make(chan *fakeStream, n)
			url, _ := startFake(t, f, nil)
			conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			body := fmt.Sprintf(`{"messages":[{"role":"user","content":"hi"}],"stream":true,"n":%d}`, n)
			fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			br := bufio.NewReader(conn)
			status, err := br.ReadString('\n')
			if err != nil || !strings.Contains(status, "200") {
				t.Fatalf("status line %q, %v", status, err)
			}
			if _, err := io.ReadFull(br, make([]byte, 4096)); err != nil { // the stream is flowing
				t.Fatal(err)
			}
			conn.Close()
			deadline := time.After(20 * time.Second)
			for i := 0; i < n; i++ {
				var s *fakeStream
				select {
				case s = <-f.submits:
				case <-deadline:
					t.Fatal("streams were not submitted")
				}
				select {
				case <-s.cancelled:
				case <-deadline:
					t.Fatalf("stream %d was not cancelled after the client left", i)
				}
			}
			// Recorded before the cancel, under vLLM's label.
			_, metricsBody := do(t, http.MethodGet, url+"/metrics", "")
			want := fmt.Sprintf(`vllm:request_success_total{finished_reason="abort",model_name="fake"} %d`, n)
			if !strings.Contains(string(metricsBody), want+"\n") {
				t.Errorf("metrics lack %q", want)
			}
		})
	}
}

// TestShutdownEndsStreams: a forced shutdown ends a hanging stream with an
// error event and cancels its engine request.
func TestShutdownEndsStreams(t *testing.T) {
	f := newFakeEngine()
	f.hang = true
	f.script = func(actors.Request) []actors.Event { return nil }
	f.submits = make(chan *fakeStream, 1)
	s, err := newServer(f, Options{ModelName: "fake", Tokenizer: synthTokenizer(t)})
	if err != nil {
		t.Fatal(err)
	}
	ln, served := serveLoopback(t, s)
	bodyc := make(chan []byte, 1)
	go func() {
		res, err := testClient().Post("http://"+ln.Addr().String()+"/v1/completions", "application/json",
			strings.NewReader(`{"prompt":"hi","stream":true}`))
		if err != nil {
			bodyc <- []byte(err.Error())
			return
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		bodyc <- b
	}()
	st := <-f.submits
	ctx, cancel := contextWithCancelled()
	defer cancel()
	if err := s.Shutdown(ctx); err == nil {
		t.Fatal("shutdown with an expired context and a stream in flight returned nil")
	}
	body := <-bodyc
	if !strings.Contains(string(body), `"error"`) || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
		t.Errorf("stream body %q", body)
	}
	<-st.cancelled
	ctx2, cancel2 := contextWithTimeout(10 * time.Second)
	defer cancel2()
	if err := s.Shutdown(ctx2); err != nil {
		t.Errorf("second shutdown: %v", err)
	}
	if err := <-served; err != nil {
		t.Errorf("serve: %v", err)
	}
}
