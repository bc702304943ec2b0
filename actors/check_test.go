package actors

import (
	"errors"
	"slices"
	"testing"

	"cohort/model/sample"
)

// TestCheckNamesTheParameter: each refusal is a *RequestError naming the
// OpenAI parameter at fault, and matches ErrInvalidRequest.
func TestCheckNamesTheParameter(t *testing.T) {
	c := NewChecker(Info{VocabSize: 100}, []int32{2}, nil)
	ok := Request{Prompt: []int32{1, 2}, MaxTokens: 4}
	with := func(change func(*Request)) Request {
		r := ok
		change(&r)
		return r
	}
	for _, tc := range []struct {
		name  string
		r     Request
		param string
	}{
		{"empty prompt", with(func(r *Request) { r.Prompt = nil }), "prompt"},
		{"prompt token outside", with(func(r *Request) { r.Prompt = []int32{1, 100} }), "prompt"},
		{"negative prompt token", with(func(r *Request) { r.Prompt = []int32{-1} }), "prompt"},
		{"max_tokens", with(func(r *Request) { r.MaxTokens = 0 }), "max_tokens"},
		{"min_tokens above max_tokens", with(func(r *Request) { r.Params.MinTokens = 5 }), "min_tokens"},
		{"top_logprobs", with(func(r *Request) { r.TopLogprobs = MaxTopLogprobs + 1 }), "top_logprobs"},
		{"stop id outside", with(func(r *Request) { r.StopTokenIDs = []int32{100} }), "stop_token_ids"},
		{"logit_bias outside", with(func(r *Request) { r.Params.LogitBias = []sample.TokenBias{{ID: 100, Bias: 1}} }), "logit_bias"},
		{"temperature", with(func(r *Request) { r.Params.Temperature = -1 }), "temperature"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Check(tc.r)
			var re *RequestError
			if !errors.As(err, &re) || re.Param != tc.param || !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("Check = %v, want a RequestError for %q", err, tc.param)
			}
		})
	}
	checked, err := c.Check(with(func(r *Request) { r.Params.MinTokens = 2; r.StopTokenIDs = []int32{7} }))
	if err != nil {
		t.Fatal(err)
	}
	if got := checked.Request().Params.StopIDs; !slices.Equal(got, []int32{2, 7}) {
		t.Errorf("min_tokens bans %v, want EOS and the stop id [2 7]", got)
	}
}
