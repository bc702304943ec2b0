package httpapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"cohort/actors"
)

// completionLogprobs is the legacy completions logprobs object; nulls stay
// visible as nil pointers.
type completionLogprobs struct {
	Tokens        []string              `json:"tokens"`
	TokenLogprobs []*float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]*float64 `json:"top_logprobs"`
	TextOffset    []int                 `json:"text_offset"`
}

type completionBody struct {
	Choices []struct {
		Text     string              `json:"text"`
		Logprobs *completionLogprobs `json:"logprobs"`
	} `json:"choices"`
}

// TestEchoLogprobs: a completion with echo and logprobs returns the prompt
// tokens first, the first with null logprob and alternatives, the others
// with the logprobs the engine scores for them, then the generated tokens;
// streamed, the prompt and its logprobs come as the first chunk.
func TestEchoLogprobs(t *testing.T) {
	r := startReal(t, 1)
	prompt := "Echo me, Cohort"
	ids := r.tok.Encode(prompt)
	ref, first := r.directFirst(t, actors.Request{Prompt: ids, MaxTokens: 4, IgnoreEOS: true, PromptLogprobs: true, TopLogprobs: 2})
	body := `{"model":"tiny","prompt":` + quote(prompt) + `,"max_tokens":4,"temperature":0,"ignore_eos":true,"echo":true,"logprobs":2`

	var res completionBody
	r.post(t, "/v1/completions", body+"}", &res)
	lp := res.Choices[0].Logprobs
	if res.Choices[0].Text != prompt+ref || lp == nil {
		t.Fatalf("text %q logprobs %v, want %q", res.Choices[0].Text, lp, prompt+ref)
	}
	checkPromptLogprobs(t, lp, ids, first, 4)

	// Streamed: the first chunk holds the prompt and its logprobs.
	resp := r.postRaw(t, "/v1/completions", body+`,"stream":true}`)
	sc := bufio.NewScanner(bytes.NewReader(resp))
	sc.Buffer(nil, 1<<20)
	var chunks []completionBody
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var c completionBody
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("chunk %q: %v", line, err)
		}
		chunks = append(chunks, c)
	}
	if len(chunks) == 0 || chunks[0].Choices[0].Text != prompt || chunks[0].Choices[0].Logprobs == nil {
		t.Fatalf("first chunk %+v, want the prompt with logprobs", chunks)
	}
	checkPromptLogprobs(t, chunks[0].Choices[0].Logprobs, ids, first, 0)

	// max_tokens 0 scores the prompt alone (what evaluation harnesses send).
	score := `{"model":"tiny","prompt":` + quote(prompt) + `,"max_tokens":0,"echo":true,"logprobs":1`
	var scored struct {
		completionBody
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	r.post(t, "/v1/completions", score+"}", &scored)
	if c := scored.Choices[0]; c.Text != prompt || c.Logprobs == nil || scored.Usage.CompletionTokens != 0 {
		t.Fatalf("max_tokens 0: text %q, logprobs %v, %d completion tokens; want the prompt alone", c.Text, c.Logprobs, scored.Usage.CompletionTokens)
	}
	checkPromptLogprobs(t, scored.Choices[0].Logprobs, ids, first, 0)
	texts := ""
	for _, line := range strings.Split(string(r.postRaw(t, "/v1/completions", score+`,"stream":true}`)), "\n") {
		if l, ok := strings.CutPrefix(line, "data: "); ok && l != "[DONE]" {
			var c completionBody
			if err := json.Unmarshal([]byte(l), &c); err != nil {
				t.Fatal(err)
			}
			if len(c.Choices) > 0 {
				texts += c.Choices[0].Text
			}
		}
	}
	if texts != prompt {
		t.Errorf("streamed max_tokens 0 text %q, want the prompt %q", texts, prompt)
	}
}

func checkPromptLogprobs(t *testing.T, lp *completionLogprobs, ids []int32, first actors.Event, generated int) {
	t.Helper()
	n := len(ids) + generated
	if len(lp.Tokens) != n || len(lp.TokenLogprobs) != n || len(lp.TopLogprobs) != n || len(lp.TextOffset) != n {
		t.Fatalf("%d tokens, %d logprobs, %d tops, %d offsets; want %d each", len(lp.Tokens), len(lp.TokenLogprobs),
			len(lp.TopLogprobs), len(lp.TextOffset), n)
	}
	if lp.TokenLogprobs[0] != nil || lp.TopLogprobs[0] != nil {
		t.Errorf("first prompt token: logprob %v top %v, want null", lp.TokenLogprobs[0], lp.TopLogprobs[0])
	}
	for i := 1; i < len(ids); i++ {
		want := first.PromptLogprobs[i-1].Token.Logprob
		if got := lp.TokenLogprobs[i]; got == nil || math.Abs(*got-want) > 1e-9 {
			t.Errorf("prompt token %d: logprob %v, engine %g", i, got, want)
		}
		if len(lp.TopLogprobs[i]) == 0 {
			t.Errorf("prompt token %d: no alternatives", i)
		}
	}
	for i := 1; i < n; i++ {
		if lp.TextOffset[i] < lp.TextOffset[i-1] {
			t.Errorf("text_offset %v is not monotonic", lp.TextOffset)
			break
		}
	}
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

// directFirst runs a request on the engine and returns its text and its
// first event.
func (r *realServer) directFirst(t *testing.T, req actors.Request) (string, actors.Event) {
	t.Helper()
	st, err := r.eng.Submit(req)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	var first actors.Event
	for i := 0; ; i++ {
		ev, err := st.Recv(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = ev
		}
		text.WriteString(ev.Text)
		if ev.Finish != "" {
			return text.String(), first
		}
	}
}

func (r *realServer) postRaw(t *testing.T, path, body string) []byte {
	t.Helper()
	resp, err := testClient().Post(r.url+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s: %d %s", path, resp.StatusCode, buf.String())
	}
	return buf.Bytes()
}

func (r *realServer) post(t *testing.T, path, body string, out any) {
	t.Helper()
	if err := json.Unmarshal(r.postRaw(t, path, body), out); err != nil {
		t.Fatal(err)
	}
}
