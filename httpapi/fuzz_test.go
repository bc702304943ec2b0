package httpapi

import (
	"bufio"
	"io"
	"net/http"
	"testing"

	"cohort/actors"
	"cohort/internal/testmodels/modelgen"
)

// fuzzServer serves requests in-process (no network) on a fake engine
// whose requests all end after one token.
func fuzzServer(t testing.TB) *Server {
	f := newFakeEngine()
	f.info.MaxModelLen = 256
	f.script = func(r actors.Request) []actors.Event {
		return []actors.Event{{Token: 97, Text: "a", HasToken: true, Logprob: -1, Top: topN(r.TopLogprobs),
			Finish: "length", Usage: actors.Usage{PromptTokens: len(r.Prompt), CompletionTokens: 1}}}
	}
	s, err := newServer(f, Options{ModelName: "fake", Tokenizer: synthTokenizer(t), ChatTemplate: modelgen.ChatTemplate})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fuzzServe checks the invariant: a request is answered 200, or rejected
// with a 4xx carrying the OpenAI envelope; never a 5xx or a panic.
func fuzzServe(t *testing.T, s *Server, path string, body []byte) {
	r := s.serve(&call{method: http.MethodPost, path: path, body: body})
	if r.status == http.StatusOK {
		if r.stream != nil {
			w := bufio.NewWriter(io.Discard)
			r.stream(w)
		}
		return
	}
	if r.status < 400 || r.status > 499 {
		t.Fatalf("status %d for %q: %s", r.status, body, r.body)
	}
	checkEnvelope(t, r.body)
}

var fuzzSeeds = []string{
	``, `{}`, `null`, `[]`, `"x"`, `{"prompt":"hi"}`, `{"prompt":["a","b"],"n":2}`, `{"prompt":[1,2,3]}`,
	`{"prompt":[[1],[2,3]],"logprobs":3}`, `{"prompt":"x","max_tokens":-1}`, `{"prompt":"x","max_tokens":1e99}`,
	`{"prompt":"x","stop":["a","b"],"stream":true,"stream_options":{"include_usage":true}}`,
	`{"prompt":"x","temperature":"hot"}`, `{"prompt":"x","echo":true,"stream":true}`, "{\"prompt\":\"\xff\"}",
	`{"messages":[{"role":"user","content":"hi"}]}`, `{"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"t"}]}],"stream":true,"logprobs":true,"top_logprobs":2}`,
	`{"messages":[{"role":"assistant","content":null}],"max_completion_tokens":3}`, `{"messages":[{"role":"tool","content":"x"}]}`,
	`{"messages":"hi"}`, `{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, `{"model":"other","prompt":"x"}`,
	`{"prompt":"x","seed":-5,"n":16}`, `{"prompt":"x","unknown":{}}`,
	`{"messages":[{"role":"user","content":"w"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"}}}}}],"tool_choice":"required","stream":true}`,
	`{"messages":[{"role":"user","content":"w"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"f"}},"parallel_tool_calls":false}`,
	`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","content":"r","tool_call_id":"1"}]}`,
	`{"messages":[{"role":"user","content":"w"}],"tools":[],"chat_template_kwargs":{"enable_thinking":true}}`,
}

func FuzzCompletionRequest(f *testing.F) {
	fuzzPaths(f, "/v1/completions", "/tokenize", "/detokenize")
}

func FuzzChatRequest(f *testing.F) {
	fuzzPaths(f, "/v1/chat/completions")
}

// fuzzPaths posts bodies grown from fuzzSeeds to each of paths.
func fuzzPaths(f *testing.F, paths ...string) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	s := fuzzServer(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, p := range paths {
			fuzzServe(t, s, p, body)
		}
	})
}
