package actors

import (
	"errors"
	"fmt"

	"cohort/model/grammar"
	"cohort/model/sample"
)

// Checked is a request an engine's Checker accepted, in the form the
// engine runs it. Only Checker.Check makes one (its field is unexported),
// so Engine.SubmitChecked trusts it and checks nothing again: a request is
// validated once, where it enters (the HTTP edge, or Engine.Submit).
type Checked struct{ req *Request }

// Request returns a copy of the checked request, for reading.
func (c Checked) Request() Request {
	if c.req == nil {
		return Request{}
	}
	return *c.req
}

// RequestError is a request the checker refused. Param names the OpenAI
// parameter at fault ("" when none), so the edge answers 400 with it; it
// matches ErrInvalidRequest with errors.Is.
type RequestError struct {
	Param string
	Msg   string // what is wrong, starting with the parameter's name
}

func (e *RequestError) Error() string { return ErrInvalidRequest.Error() + ": " + e.Msg }

// Is makes errors.Is(err, ErrInvalidRequest) true for a RequestError.
func (e *RequestError) Is(target error) bool { return target == ErrInvalidRequest }

// Checker validates requests for one engine: its vocabulary, its EOS ids
// and its grammar cache. It is the one place a request's ranges are
// checked (a sampling parameter's in sample.Params.Validate, which it
// calls).
type Checker struct {
	vocab    int
	eos      []int32
	grammars func() (*grammar.Cache, error) // nil: no constrained decoding
}

// NewChecker returns the checker of an engine with info's vocabulary, the
// EOS ids eos and the grammar cache grammars returns (nil: none). An
// engine makes its own (Engine.Check); a stand-in for an engine in tests
// makes one here.
func NewChecker(info Info, eos []int32, grammars func() (*grammar.Cache, error)) *Checker {
	return &Checker{vocab: info.VocabSize, eos: eos, grammars: grammars}
}

// Check validates r into the engine's trusted form, or returns a
// *RequestError. The checked request's sampling bans its stop ids (EOS
// unless IgnoreEOS, and StopTokenIDs) until MinTokens.
func (c *Checker) Check(r Request) (Checked, error) {
	if err := c.check(&r); err != nil {
		return Checked{}, err
	}
	if r.Params.MinTokens > 0 {
		r.Params.StopIDs = c.stopIDs(&r)
	}
	return Checked{req: &r}, nil
}

func (c *Checker) check(r *Request) error {
	if err := c.lengths(r); err != nil {
		return err
	}
	if err := c.vocabulary(r); err != nil {
		return err
	}
	if err := r.Params.Validate(); err != nil {
		var pe *sample.ParamError
		if errors.As(err, &pe) {
			return &RequestError{Param: pe.Param, Msg: pe.Msg}
		}
		return refuse("", "%v", err)
	}
	return c.grammar(r)
}

// lengths checks the prompt, max_tokens, min_tokens and top_logprobs.
func (c *Checker) lengths(r *Request) error {
	switch {
	case len(r.Prompt) == 0:
		return refuse("prompt", "the prompt is empty")
	case r.MaxTokens < 1:
		return refuse("max_tokens", "max_tokens %d must be at least 1", r.MaxTokens)
	case r.Params.MinTokens > r.MaxTokens:
		return refuse("min_tokens", "min_tokens %d exceeds the %d tokens this request may generate", r.Params.MinTokens, r.MaxTokens)
	case r.TopLogprobs < 0 || r.TopLogprobs > MaxTopLogprobs:
		return refuse("top_logprobs", "top_logprobs %d must be in [0, %d]", r.TopLogprobs, MaxTopLogprobs)
	}
	return nil
}

// vocabulary checks that every token id the request names is the model's.
func (c *Checker) vocabulary(r *Request) error {
	for i, id := range r.Prompt {
		if !c.inVocab(id) {
			return refuse("prompt", "prompt token %d at position %d is outside the vocabulary [0, %d)", id, i, c.vocab)
		}
	}
	for i, id := range r.StopTokenIDs {
		if !c.inVocab(id) {
			return refuse("stop_token_ids", "stop_token_ids[%d] = %d is outside the vocabulary [0, %d)", i, id, c.vocab)
		}
	}
	for _, b := range r.Params.LogitBias { // Params.Validate checks that they ascend
		if !c.inVocab(b.ID) {
			return refuse("logit_bias", "logit_bias token %d is outside the vocabulary [0, %d)", b.ID, c.vocab)
		}
	}
	return nil
}

func (c *Checker) inVocab(id int32) bool { return id >= 0 && int(id) < c.vocab }

// grammar checks that a constrained request's grammar is the engine's and
// fits its max_tokens.
func (c *Checker) grammar(r *Request) error {
	g := r.Grammar
	if g == nil {
		return nil
	}
	var cache *grammar.Cache
	if c.grammars != nil {
		cache, _ = c.grammars()
	}
	if cache == nil || g.Vocab() != cache.Vocab() {
		return refuse("", "the grammar was not compiled for this engine's vocabulary")
	}
	if n := g.MinLen(); n > r.MaxTokens {
		return refuse("max_tokens", "max_tokens %d is too small for the structured output, which needs at least %d tokens", r.MaxTokens, n)
	}
	return nil
}

// stopIDs lists the token ids that end r (the model's EOS ids unless
// ignore_eos, and its stop_token_ids): min_tokens bans them from the first
// draws.
func (c *Checker) stopIDs(r *Request) []int32 {
	var ids []int32
	if !r.IgnoreEOS {
		ids = append(ids, c.eos...)
	}
	return append(ids, r.StopTokenIDs...)
}

func refuse(param, format string, args ...any) error {
	return &RequestError{Param: param, Msg: fmt.Sprintf(format, args...)}
}
