package httpapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"cohort/actors"
)

// TestCachedTokensInUsage: the prompt tokens the prefix cache served reach
// usage.prompt_tokens_details.cached_tokens (chat and completions) and the
// Responses API's input_tokens_details, once per prompt however many
// choices share it.
func TestCachedTokensInUsage(t *testing.T) {
	f := newFakeEngine()
	f.script = func(r actors.Request) []actors.Event {
		evs := defaultScript(r)
		evs[len(evs)-1].Usage.CachedTokens = 32
		return evs
	}
	url, _ := startFake(t, f, nil)
	for _, c := range []struct {
		path, body string
		field      func(map[string]json.RawMessage) json.RawMessage
	}{
		{"/v1/completions", `{"model":"fake","prompt":"hello","max_tokens":2,"n":3}`, promptDetails},
		{"/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`, promptDetails},
		{"/v1/responses", `{"model":"fake","input":"hi","max_output_tokens":2}`, func(u map[string]json.RawMessage) json.RawMessage {
			return u["input_tokens_details"]
		}},
	} {
		res, body := do(t, http.MethodPost, url+c.path, c.body)
		var out struct {
			Usage map[string]json.RawMessage `json:"usage"`
		}
		if err := json.Unmarshal(body, &out); err != nil || res.StatusCode != 200 {
			t.Fatalf("%s: %d %s (%v)", c.path, res.StatusCode, body, err)
		}
		if got := string(c.field(out.Usage)); got != `{"cached_tokens":32}` {
			t.Errorf("%s: details %s, want cached_tokens 32", c.path, got)
		}
	}
}

func promptDetails(u map[string]json.RawMessage) json.RawMessage { return u["prompt_tokens_details"] }

// TestResetPrefixCache: POST /reset_prefix_cache empties the engine's
// cache; other methods are refused.
func TestResetPrefixCache(t *testing.T) {
	f := newFakeEngine()
	url, _ := startFake(t, f, nil)
	if res, body := do(t, http.MethodPost, url+"/reset_prefix_cache", ""); res.StatusCode != 200 || f.resets.Load() != 1 {
		t.Fatalf("POST: %d %s, %d resets", res.StatusCode, body, f.resets.Load())
	}
	if res, _ := do(t, http.MethodGet, url+"/reset_prefix_cache", ""); res.StatusCode != http.StatusMethodNotAllowed || f.resets.Load() != 1 {
		t.Fatalf("GET: %d, %d resets", res.StatusCode, f.resets.Load())
	}
}

// TestPrefixCacheMetrics: vLLM's prefix-cache counters come from the
// engine's statistics.
func TestPrefixCacheMetrics(t *testing.T) {
	url, _ := startFake(t, newFakeEngine(), nil)
	_, body := do(t, http.MethodGet, url+"/metrics", "")
	for _, line := range []string{`vllm:prefix_cache_queries_total{model_name="fake"} 900`, `vllm:prefix_cache_hits_total{model_name="fake"} 810`} {
		if !strings.Contains(string(body), line+"\n") {
			t.Errorf("metrics lack %q", line)
		}
	}
}

// TestChatTurnBoundaries: a chat request marks where each message after
// the first starts (the end of the system part and of every earlier turn),
// for the prefix cache's snapshots; a completion marks none.
func TestChatTurnBoundaries(t *testing.T) {
	f := newFakeEngine()
	url, s := startFake(t, f, nil)
	start, ok := s.tok.TokenID("<|im_start|>")
	if !ok {
		t.Skip("the test tokenizer has no <|im_start|>")
	}
	do(t, http.MethodPost, url+"/v1/chat/completions", `{"model":"fake","max_tokens":1,"messages":[
		{"role":"system","content":"be brief"},{"role":"user","content":"hi"},
		{"role":"assistant","content":"hello"},{"role":"user","content":"again"}]}`)
	do(t, http.MethodPost, url+"/v1/completions", `{"model":"fake","prompt":"hello","max_tokens":1}`)
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	var want []int
	for i, id := range reqs[0].Prompt {
		if id == start && i > 0 {
			want = append(want, i)
		}
	}
	if len(want) != 4 || !slices.Equal(reqs[0].Boundaries, want) {
		t.Errorf("chat boundaries %v, want the 4 later message starts %v", reqs[0].Boundaries, want)
	}
	if reqs[1].Boundaries != nil {
		t.Errorf("completion boundaries %v, want none", reqs[1].Boundaries)
	}
}
