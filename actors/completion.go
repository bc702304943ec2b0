package actors

import (
	"fmt"
	"slices"

	"cohort/model/grammar"
)

// completion is one request's output as the engine records it: its
// tokens, their count and its end (named for the usage's completion
// tokens; a group's "generation" is another thing). The scheduler keeps one
// for each live request and is its only writer, so each of those facts
// lives in one place: the ranks get the tokens as step inputs (and again
// for a replay), the planner is told of each sampled one (Update) and of
// the end (Finish), and the request actor is told each token with the
// count and the end (TokenGenerated) and renders the text.
type completion struct {
	tokens  []int32 // the prompt, then each generated token in order
	prompt  int     // how many of tokens are the prompt
	rule    finishRule
	matcher *grammar.Matcher // follows the output through its grammar (nil: not constrained)
}

// newCompletion starts r's record; eos lists the model's end ids.
func newCompletion(r *Request, eos []int32) *completion {
	g := &completion{tokens: slices.Clone(r.Prompt), prompt: len(r.Prompt), rule: newFinishRule(r, eos)}
	if r.Grammar != nil {
		g.matcher = r.Grammar.NewMatcher()
	}
	return g
}

// generated is how many tokens the request generated.
func (g *completion) generated() int { return len(g.tokens) - g.prompt }

// left is how many tokens the request may still generate.
func (g *completion) left() int { return g.rule.maxTokens - g.generated() }

// add records a sampled token and returns whether (and how) the request
// ends with it.
func (g *completion) add(tok int32) ending {
	g.tokens = append(g.tokens, tok)
	complete, err := g.advanceGrammar(tok)
	if err != nil {
		return ending{reason: "error", err: fmt.Errorf("%w: structured output: %v", ErrEngineFailure, err)}
	}
	return g.rule.after(tok, g.generated(), complete)
}

// advanceGrammar feeds a recorded token to the request's grammar and
// reports whether the output is complete (nothing may follow).
func (g *completion) advanceGrammar(tok int32) (complete bool, err error) {
	if g.matcher == nil {
		return false, nil
	}
	if err := g.matcher.Accept(tok); err != nil {
		return false, err
	}
	return g.matcher.Done(), nil
}

// finishRule holds a request's stop conditions on tokens. It is a pure
// value: the same token, count and grammar state give the same ending.
// (A stop string is a condition on text, which the request actor renders;
// it reports a match with FinishRequest.)
type finishRule struct {
	maxTokens int
	eos       []int32 // the model's end ids
	ignoreEOS bool    // an EOS token does not end the request (it still ends a complete grammar)
	stopIDs   []int32
}

func newFinishRule(r *Request, eos []int32) finishRule {
	return finishRule{maxTokens: r.MaxTokens, eos: eos, ignoreEOS: r.IgnoreEOS, stopIDs: r.StopTokenIDs}
}

// ending is how a request ends with a token; the zero value: it goes on.
type ending struct {
	reason    string // "stop", "length" or "error"; "": not ended
	stopToken bool   // the token is EOS or a stop token id: its text is not emitted
	err       error  // with "error": why
}

// after decides whether the request ends with tok, its generated-th token;
// complete reports that its grammar allows nothing more.
func (r finishRule) after(tok int32, generated int, complete bool) ending {
	isEOS := slices.Contains(r.eos, tok)
	switch {
	case isEOS && !r.ignoreEOS, slices.Contains(r.stopIDs, tok):
		return ending{reason: "stop", stopToken: true}
	case complete:
		return ending{reason: "stop", stopToken: isEOS}
	case generated >= r.maxTokens:
		return ending{reason: "length"}
	}
	return ending{}
}
